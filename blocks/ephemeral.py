"""What one person sees privately after a click: why the response policy refused them, that someone
else already settled the card, that it is gone, or the result token they asked for."""

from __future__ import annotations

from datetime import datetime

from blocks.fields import form_field_titles
from blocks.limits import (
    SECTION_TEXT,
    escape_keeping_mentions,
    escape_mrkdwn,
    one_line,
    truncate,
    truncate_mrkdwn,
)
from blocks.outcomes import NO_LONGER_NEEDED
from blocks.text import inline_code, slack_date, tool_name_of, user_mention
from bot.protocol import InputRequest


def refused_text(reason: str | None) -> str:
    """What a clicker sees when the response policy refuses them."""
    why = one_line(reason or "")
    if not why:
        return ":no_entry: You can't answer this request."
    return truncate_mrkdwn(
        f":no_entry: You can't answer this request: {escape_keeping_mentions(why)}", SECTION_TEXT
    )


def already_settled_text(outcome_label: str, decided_by: str | None) -> str:
    """``Already approved by <@U7>.`` — for a click on a card someone else already settled."""
    label = one_line(outcome_label)
    if not label or label.lower() == NO_LONGER_NEEDED.lower():
        return "This request is no longer needed."
    text = f"Already {escape_mrkdwn(truncate(label, 100)).lower()}"
    return text + (f" by {user_mention(decided_by)}." if decided_by else ".")


def not_found_text() -> str:
    return "This request is no longer open."


def result_token_text(req: InputRequest, url: str, token: str, expires_at: datetime) -> str:
    """The private note with a result token: where to post, how, until when, and to keep it secret."""
    fields = ", ".join(inline_code(name) for name in form_field_titles(req)) or "the result's fields"
    return (f"To send the result of {inline_code(tool_name_of(req))} from another system, POST it as JSON "
            f"(fields: {fields}) until {slack_date(expires_at)}. Anyone with this token answers as you; "
            f"it works once.\n```curl -X POST {url} \\\n  -H 'Authorization: Bearer {token}' \\\n"
            f"  -H 'Content-Type: application/json' -d '{{…}}'```\n"
            f"If it leaks, revoke it: the same request with `-X DELETE`, or `/approvers revoke-tokens`.")
