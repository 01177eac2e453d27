"""The small pieces every part of a request card is made of: mentions built from verified ids, dates
Slack localises, names as inline code, and the ``verbatim`` text objects and request-scoped section and
context blocks (block ids start with the request id, see :func:`blocks.actions.block_id`).

Every mrkdwn text object is ``verbatim`` so Slack adds no links or mentions of its own to words a model
or a tool wrote; the ``<…>`` tokens built here from verified ids still render.

The request-scoped blocks are Block Kit dicts (:mod:`blocks.elements` says why).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from slack_sdk.models.blocks import MarkdownTextObject

from blocks import actions as ids
from blocks.elements import verbatim_text
from blocks.limits import CONTEXT_TEXT, SECTION_TEXT, escape_mrkdwn, mrkdwn, one_line, truncate
from bot.principals import Principal
from bot.protocol import InputRequest

TOOL_NAME_CHARS = 100


def mention(principal: Principal | None) -> str:
    """``<@U123>`` for a Slack user principal, otherwise ``someone``."""
    user_id = principal.slack_user_id if principal is not None else None
    return user_mention(user_id) if user_id else "someone"


def user_mention(user_id: str | None) -> str:
    return f"<@{user_id}>" if user_id else "someone"


def slack_date(at: datetime) -> str:
    """A date Slack shows in each reader's own time zone, with a UTC fallback."""
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    fallback = aware.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(aware.timestamp())}^{{date_short_pretty}} at {{time}}|{fallback}>"


def inline_code(name: str) -> str:
    """A name shown as inline code (backticks inside it would end the span)."""
    return "`" + escape_mrkdwn(truncate(one_line(name).replace("`", "'"), TOOL_NAME_CHARS) or "?") + "`"


def tool_name_of(req: InputRequest) -> str:
    return req.action.tool_name if req.action is not None else "tool"


def verbatim(text: str) -> MarkdownTextObject:
    # verbatim: Slack must not turn words the model wrote ("@here", "stripe.com") into mentions or links;
    # the <…> tokens the card writes itself still render
    return MarkdownTextObject(text=text, verbatim=True)


def request_section(request_id: str, kind: str, text: str, n: int = 0) -> dict[str, Any]:
    return {"block_id": ids.block_id(request_id, kind, n), "text": verbatim_text(mrkdwn(text, SECTION_TEXT)),
            "type": "section"}


def fields_section(request_id: str, kind: str, texts: list[str], n: int = 0) -> dict[str, Any]:
    """A section of (at most ``SECTION_FIELDS``) mrkdwn fields, each already within ``FIELD_TEXT``."""
    return {"block_id": ids.block_id(request_id, kind, n), "fields": [verbatim_text(t) for t in texts],
            "type": "section"}


def request_context(request_id: str, kind: str, text: str) -> dict[str, Any]:
    return {"block_id": ids.block_id(request_id, kind), "elements": [verbatim_text(mrkdwn(text, CONTEXT_TEXT))],
            "type": "context"}
