"""Agent replies: Markdown (what models write) → Slack mrkdwn, split into messages Slack accepts.

Slack's mrkdwn is not Markdown: bold is ``*x*``, italics ``_x_``, strike ``~x~``, links
``<url|text>``, no headings, no bullets, and ``& < >`` must be escaped everywhere (Slack stores
them escaped even inside code, so we do too). Code spans and fences keep their content verbatim
apart from that escaping. Broadcast mentions (``<!channel>``, ``<!here>``…) written by a model are
neutralised: a model must not be able to ping a whole channel.
"""

from __future__ import annotations

import re
from typing import Literal, TypedDict

from slack_sdk.models.blocks import MarkdownTextObject, SectionBlock

from blocks.limits import (
    ELLIPSIS,
    MESSAGE_BLOCKS,
    MESSAGE_BLOCKS_TEXT,
    MESSAGE_TEXT,
    SECTION_TEXT,
    escape_mrkdwn,
    one_line,
    truncate,
    truncate_mrkdwn,
)


class Message(TypedDict):
    """Keyword arguments for chat.postMessage / chat.update: fallback ``text`` and ``blocks``."""

    text: str
    blocks: list[dict]


# --- Markdown → mrkdwn ----------------------------------------------------------------------

_FENCE_RE = re.compile(r"^[ \t]*(```|~~~)")
_CODE_SPAN_RE = re.compile(r"(`+)(.+?)\1", re.S)
# Slack tokens a model may legitimately write: user/channel mentions, dates, links.
_SLACK_TOKEN_RE = re.compile(
    r"<(?:@[UW][A-Z0-9]+(?:\|[^<>]*)?|#C[A-Z0-9]+(?:\|[^<>]*)?|!date\^[^<>]+|(?:https?://|mailto:)[^<>\s]+)>"
)
_MD_LINK_RE = re.compile(
    r"!?\[([^\]\n]+)\]\(\s*<?([^()\s<>]+(?:\([^()\s]*\))?[^()\s<>]*)>?(?:\s+\"[^\"]*\")?\s*\)"
)
_BOLD_ITALIC_RE = re.compile(r"\*\*\*(?=\S)(.+?)(?<=\S)\*\*\*")
_BOLD_RE = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_STRIKE_RE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_ITALIC_STAR_RE = re.compile(r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])")
_HEADING_RE = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+(.*?)[ \t]*#*[ \t]*$")
_RULE_RE = re.compile(r"^[ \t]{0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_BULLET_RE = re.compile(r"^([ \t]*)[-*+][ \t]+(.*)$")
_TASK_RE = re.compile(r"^\[([ xX])\][ \t]+")
_QUOTE_RE = re.compile(r"^[ \t]*>[ \t]?(.*)$")

# Private-use characters stand in for protected pieces while the inline rules run.
_HOLD = "\ue000"
_BOLD = "\ue001"
_HOLD_RE = re.compile(_HOLD + r"(\d+)" + _HOLD)


def markdown_to_mrkdwn(md: str) -> str:
    """Convert the Markdown a model writes into Slack mrkdwn."""
    out: list[str] = []
    fence: str | None = None
    for line in md.replace("\r\n", "\n").split("\n"):
        opener = _FENCE_RE.match(line)
        if opener and fence is None and line.strip().count(opener.group(1)) >= 2:
            opener = None  # ```inline``` on one line is a code span, not a fence
        if fence is not None:
            if opener and opener.group(1) == fence and not line.strip()[3:].strip("`~"):
                fence = None
                out.append("```")
            else:
                out.append(escape_mrkdwn(line))
        elif opener:
            fence = opener.group(1)
            # Slack has no syntax highlighting: drop the info string ("```python"), keep the fence.
            out.append("```")
        else:
            out.append(_convert_line(line))
    if fence is not None:  # an unterminated fence would swallow the rest of the message in Slack
        out.append("```")
    return "\n".join(out)


def _convert_line(line: str) -> str:
    if _RULE_RE.match(line):
        return "──────────"
    heading = _HEADING_RE.match(line)
    if heading:
        text = _inline(heading.group(1)).replace("*", "").strip()
        return f"*{text}*" if text else ""
    quote = _QUOTE_RE.match(line)
    if quote:
        return "> " + _inline(quote.group(1))
    bullet = _BULLET_RE.match(line)
    if bullet:
        indent, body = bullet.groups()
        task = _TASK_RE.match(body)
        if task:
            body = ("☑ " if task.group(1).lower() == "x" else "☐ ") + body[task.end() :]
        level = len(indent.expandtabs(4)) // 2
        return "    " * level + ("•" if level == 0 else "◦") + " " + _inline(body)
    return _inline(line)


def _inline(text: str) -> str:
    held: list[str] = []

    def hold(piece: str) -> str:
        held.append(piece)
        return f"{_HOLD}{len(held) - 1}{_HOLD}"

    text = _CODE_SPAN_RE.sub(lambda m: hold(_code_span(m.group(1), m.group(2))), text)
    text = _SLACK_TOKEN_RE.sub(lambda m: hold(m.group(0)), text)
    text = _MD_LINK_RE.sub(lambda m: hold(_link(m.group(2), m.group(1))), text)
    text = escape_mrkdwn(text)
    text = _BOLD_ITALIC_RE.sub(lambda m: f"{_BOLD}_{m.group(1)}_{_BOLD}", text)
    text = _BOLD_RE.sub(lambda m: f"{_BOLD}{m.group(2)}{_BOLD}", text)
    text = _STRIKE_RE.sub(r"~\1~", text)
    text = _ITALIC_STAR_RE.sub(r"_\1_", text)
    text = text.replace(_BOLD, "*")
    while _HOLD_RE.search(text):  # a held link label may itself contain a held code span
        text = _HOLD_RE.sub(lambda m: held[int(m.group(1))], text)
    return text


def _code_span(ticks: str, code: str) -> str:
    # Slack knows `code` and ```code```; a Markdown ``span`` becomes a single-backtick span.
    fence = "```" if len(ticks) >= 3 else "`"
    return fence + escape_mrkdwn(code) + fence


def _link(url: str, label: str) -> str:
    label_text = _BOLD_RE.sub(r"\2", label).replace("`", "")
    label_text = escape_mrkdwn(label_text).replace("|", "¦")
    if not re.match(r"^(?:https?://|mailto:)", url, re.I):
        return f"{label_text} ({escape_mrkdwn(url)})"
    safe_url = url.replace("&", "&amp;").replace("<", "%3C").replace(">", "%3E").replace("|", "%7C")
    return f"<{safe_url}|{label_text}>"


# --- splitting ------------------------------------------------------------------------------

_OPEN = "```\n"
_CLOSE = "\n```"


def split_message(text: str, limit: int = SECTION_TEXT) -> list[str]:
    """Cut mrkdwn ``text`` into pieces of at most ``limit`` characters.

    Prefers paragraph, then line, then word boundaries. A cut inside a ``` block closes the fence
    at the end of the piece and reopens it at the start of the next, so each piece renders alone.
    """
    if limit < 32:
        raise ValueError("limit too small to split sensibly")
    pieces: list[str] = []
    rest = text.strip("\n")
    in_code = False
    while rest:
        prefix = _OPEN if in_code else ""
        whole = prefix + rest
        if len(whole) <= limit and whole.count("```") % 2 == 0:
            pieces.append(whole)
            break
        budget = limit - len(prefix) - len(_CLOSE)
        cut, skip = _best_cut(rest, budget)
        piece = prefix + rest[:cut]
        rest = rest[cut + skip :]
        in_code = piece.count("```") % 2 == 1
        opened_at_end = piece.rstrip().endswith("```") and piece.rstrip()[:-3].strip()
        if in_code and opened_at_end:  # cut right after an opening fence: move the fence on
            piece, rest, in_code = piece.rstrip()[:-3].rstrip(), "```\n" + rest, False
        if in_code:
            piece += _CLOSE
            if rest.startswith("```"):  # the block ended right at the cut: nothing to reopen
                rest = rest[3:].lstrip("\n")
                in_code = False
        else:
            rest = rest.lstrip("\n")
        if piece.strip() and piece.strip("`\n"):
            pieces.append(piece.rstrip() if not in_code else piece)
    return pieces


def _best_cut(text: str, budget: int) -> tuple[int, int]:
    """Where to cut ``text`` (at most ``budget`` characters kept) and how many separator characters
    to drop there."""
    if len(text) <= budget:
        return len(text), 0
    for separator in ("\n\n", "\n", " "):
        at = text.rfind(separator, 0, budget + len(separator))
        if at > 0:
            safe = _safe_cut(text, at)
            return (at, len(separator)) if safe == at else (safe, 0)
    return _safe_cut(text, budget), 0


def _safe_cut(text: str, at: int) -> int:
    """Move a cut left so it does not fall inside an ``&amp;`` entity or a ``<…>`` token
    (never to 0: an absurdly long token is cut rather than looping)."""
    head = text[:at]
    lt, gt = head.rfind("<"), head.rfind(">")
    if lt > gt and ">" in text[at:] and lt > 0:
        at, head = lt, head[:lt]
    amp = head.rfind("&", max(0, at - 7))
    if amp > 0 and ";" not in head[amp:] and re.match(r"&[a-z#0-9]*;", text[amp : amp + 8]):
        at = amp
    return at


def reply_messages(md_text: str) -> list[Message]:
    """An agent's Markdown reply as messages Slack accepts: one section per ≤3000-character piece, and
    per message at most 50 blocks whose texts add up to at most 12,000 characters.

    Empty or blank text gives no messages."""
    pieces = split_message(markdown_to_mrkdwn(md_text), SECTION_TEXT) if md_text.strip() else []
    messages: list[Message] = []
    for start, group in _message_groups(pieces):
        blocks = [
            SectionBlock(block_id=f"reply:{start + i}", text=MarkdownTextObject(text=piece)).to_dict()
            for i, piece in enumerate(group)
        ]
        messages.append({"text": truncate_mrkdwn("\n".join(group), MESSAGE_TEXT), "blocks": blocks})
    return messages


def _message_groups(pieces: list[str]) -> list[tuple[int, list[str]]]:
    """Consecutive pieces packed into messages (index of the first piece, the pieces)."""
    groups: list[tuple[int, list[str]]] = []
    start, group, size = 0, [], 0
    for index, piece in enumerate(pieces):
        if group and (len(group) == MESSAGE_BLOCKS or size + len(piece) > MESSAGE_BLOCKS_TEXT):
            groups.append((start, group))
            start, group, size = index, [], 0
        group.append(piece)
        size += len(piece)
    if group:
        groups.append((start, group))
    return groups


# --- working indicator ----------------------------------------------------------------------

StatusKind = Literal[
    "thinking", "running_tool", "waiting_approval", "waiting_answer", "done", "failed", "cancelled"
]

_STATUS = {
    "thinking": ":hourglass_flowing_sand: Thinking…",
    "waiting_approval": ":raised_hand: Waiting for approval…",
    "waiting_answer": ":raised_hand: Waiting for an answer…",
    "done": ":white_check_mark: Done",
    "failed": ":x: Something went wrong",
    "cancelled": ":heavy_minus_sign: Stopped",
}


def status_text(kind: StatusKind, tool_name: str | None = None) -> str:
    """The one-line working indicator shown while a turn runs."""
    if kind == "running_tool":
        if not tool_name:
            return ":gear: Running a tool…"
        name = truncate(one_line(tool_name).replace("`", "'"), 60)
        return f":gear: Running `{escape_mrkdwn(name)}`…"
    try:
        return _STATUS[kind]
    except KeyError:
        raise ValueError(f"unknown status kind {kind!r}") from None


__all__ = [
    "ELLIPSIS",
    "Message",
    "StatusKind",
    "markdown_to_mrkdwn",
    "reply_messages",
    "split_message",
    "status_text",
]
