"""The agent's answers as Slack shows AI output: a ``markdown`` block and feedback buttons under it.

Slack renders standard Markdown in a ``markdown`` block (up to 12,000 characters for all of a message's
markdown blocks together), so an answer that fits is shown as the model wrote it, tables and all. A longer
one falls back to ``blocks.messages.reply_messages`` (mrkdwn sections over several messages). Every answer
ends with thumbs up/down (a ``context_actions`` block holding ``feedback_buttons``), whose clicks land in the
audit log. Pure functions: no I/O.
"""

from __future__ import annotations

from typing import Any, Literal

from blocks.limits import MESSAGE_BLOCKS, MESSAGE_TEXT, truncate_mrkdwn
from blocks.messages import Message, markdown_to_mrkdwn, no_pings, reply_messages

MARKDOWN_TEXT = 12_000  # markdown block / markdown_text: "cumulative limit … 12,000 characters"
FEEDBACK_TEXT = 100  # room kept for the feedback buttons: the whole message's texts count
FEEDBACK_ACTION = "answer_feedback"
POSITIVE, NEGATIVE = "positive", "negative"
Feedback = Literal["positive", "negative"]


def feedback_block(block_id: str = "answer-feedback") -> dict[str, Any]:
    """Thumbs up / thumbs down under an answer (Slack's feedback buttons)."""
    return {
        "type": "context_actions",
        "block_id": block_id,
        "elements": [
            {
                "type": "feedback_buttons",
                "action_id": FEEDBACK_ACTION,
                "positive_button": {
                    "text": {"type": "plain_text", "text": "Good answer"},
                    "value": POSITIVE,
                    "accessibility_label": "This answer was helpful",
                },
                "negative_button": {
                    "text": {"type": "plain_text", "text": "Bad answer"},
                    "value": NEGATIVE,
                    "accessibility_label": "This answer was not helpful",
                },
            }
        ],
    }


def fits_markdown(md_text: str) -> bool:
    return 0 < len(md_text) <= MARKDOWN_TEXT - FEEDBACK_TEXT  # the buttons' labels count too


def answer_messages(md_text: str) -> list[Message]:
    """An answer as the messages to post: one markdown block when it fits, else mrkdwn sections; the last
    message carries the feedback buttons. Blank text gives no messages."""
    if not md_text.strip():
        return []
    if fits_markdown(md_text):
        fallback = truncate_mrkdwn(markdown_to_mrkdwn(md_text), MESSAGE_TEXT)  # notifications, screen readers
        return [
            {
                "text": fallback,
                "blocks": [{"type": "markdown", "block_id": "answer", "text": no_pings(md_text)}, feedback_block()],
            }
        ]
    messages = reply_messages(md_text)
    last = messages[-1]
    if len(last["blocks"]) < MESSAGE_BLOCKS:
        messages[-1] = {**last, "blocks": [*last["blocks"], feedback_block()]}
    return messages


def feedback_value(action: dict[str, Any]) -> Feedback | None:
    """positive / negative from a ``feedback_buttons`` click (None for anything else)."""
    value = action.get("value")
    return value if value in (POSITIVE, NEGATIVE) else None
