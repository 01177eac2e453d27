"""How a tool's post (``ctx.workspace.post``) reads in the channel: as a message, not as markup.

What the model wrote may hold Slack's ``<…>`` tokens (``<@U1>``, ``<!channel>``, ``<#C1|name>``, links).
None of them may act (nobody is pinged by what a model typed), yet showing them literally reads as noise:
each becomes the plain text a person would have typed, a name where we know it. A last line says
who asked for the post and who approved it, as plain names too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from blocks.limits import MESSAGE_TEXT, escape_mrkdwn, truncate_mrkdwn

_TOKEN = re.compile(r"<([^<>\n]*)>")
UNKNOWN_PERSON = "someone"


def user_ids_in(text: str) -> list[str]:
    """The people ``<@U…>`` tokens name in ``text``, to look up before :func:`announcement_text`."""
    return list(dict.fromkeys(m.group(1)[1:].split("|")[0] for m in _TOKEN.finditer(text)
                              if m.group(1).startswith("@")))


def _readable(token: str, names: Mapping[str, str]) -> str:
    body, _, label = token.partition("|")
    if body.startswith("@"):  # a person: their name, never a mention
        return "@" + (names.get(body[1:]) or label.lstrip("@") or UNKNOWN_PERSON)
    if body.startswith("!"):  # <!channel>, <!here>, <!subteam^S1|@team>, <!date^…|fallback>
        special = body[1:].split("^")[0]
        if special in ("channel", "here", "everyone"):
            return "@" + special
        return label or special
    if body.startswith("#"):  # a channel: its name
        return "#" + (label or body[1:])
    return f"{label} ({body})" if label else body  # a link, shown as its address: Slack links plain URLs itself


def plain_words(text: str, names: Mapping[str, str]) -> str:
    """``text`` with every ``<…>`` token written out as plain words (``names``: user id → handle)."""
    return _TOKEN.sub(lambda m: _readable(m.group(1), names), text)


def _who(user_id: str | None, names: Mapping[str, str]) -> str:
    return "@" + names[user_id] if user_id and names.get(user_id) else UNKNOWN_PERSON


def announcement_text(text: str, names: Mapping[str, str], *, asked_by: str | None, approved_by: str | None) -> str:
    """The message a tool's post becomes: the text in plain words (escaped: nothing in it acts), then
    "Posted for @alice, approved by @bob" (user ids, named through ``names``)."""
    line = f"Posted for {_who(asked_by, names)}"
    if approved_by:
        line += f", approved by {_who(approved_by, names)}"
    body = escape_mrkdwn(plain_words(text, names))
    footer = "\n_" + escape_mrkdwn(line) + "_"
    return truncate_mrkdwn(body, MESSAGE_TEXT - len(footer)) + footer
