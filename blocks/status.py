"""The turn's own lines in a thread: the working indicator while it runs, and the message when it fails.

The failure message may quote a model provider's error text, so it is held to the same rules as the
agent's replies (:mod:`blocks.messages`): nothing in it pings, links or hides.
"""

from __future__ import annotations

from typing import Literal

from slack_sdk.models.blocks import MarkdownTextObject, SectionBlock

from blocks.limits import escape_mrkdwn, one_line, truncate, truncate_mrkdwn
from blocks.messages import Message, reveal_hidden

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


def loading_messages(kind: StatusKind, tool_name: str | None = None) -> list[str]:
    """What Slack's live status rotates through while a turn runs (plain text: no emoji codes)."""
    if kind == "running_tool":
        name = truncate(one_line(tool_name or "a tool").replace("_", " "), 60)
        return [f"Running {name}…"]
    return [_STATUS[kind].split(" ", 1)[-1]]


# --- a failed turn ---------------------------------------------------------------------------

FAILURE_REASON_CHARS = 1000


def failure_message(reason: str) -> Message:
    """The thread message for a failed turn. ``reason`` may quote a model provider's error text, which
    nobody vetted: it is escaped (no mention, broadcast or link token survives), hidden characters are
    written out, and its section is ``verbatim`` so Slack links and mentions nothing in it either."""
    why = truncate_mrkdwn(escape_mrkdwn(one_line(reveal_hidden(reason))), FAILURE_REASON_CHARS)
    text = f":warning: {why or 'Something went wrong.'}\nSend your message again to retry."
    block = SectionBlock(block_id="turn-failed", text=MarkdownTextObject(text=text, verbatim=True))
    return {"text": text, "blocks": [block.to_dict()]}
