"""Typed replies (DESIGN §8): which open request a follow-up message answers, and how.

A message answers the *first open request* (a session-limit prompt first, else the earliest
asked) when its trimmed text matches, case-insensitively, an option id, an option label or a
1-based option number in display order; otherwise a request that allows free text takes the
text itself. Anything else answers nothing and steers or queues instead. Forms ("user-input") are
never answered by typing: only by submitting them; nor is a delegation (its sub-agent answers it).

An approval can also be cancelled with a reason: ``cancel: <reason>`` (the cancel option's id or
label, a colon, the reason), which the model then reads as the canceller's own words.
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.principals import Principal
from bot.protocol import CANCEL, InputRequest, InputResponse


def first_open_input(requests: Sequence[InputRequest]) -> InputRequest | None:
    limits = [r for r in requests if r.kind == "session-limit"]
    if limits:
        return limits[0]
    ordered = sorted(requests, key=lambda r: r.created_at)
    return ordered[0] if ordered else None


def match_text(request: InputRequest, text: str, principal: Principal | None = None) -> InputResponse | None:
    trimmed = text.strip()
    if not trimmed or request.kind in ("user-input", "delegation"):
        return None  # a form is answered by submitting it, a delegation by its sub-agent: never by typing
    normalized = trimmed.lower()
    displayed = request.displayed_options()
    with_reason = _cancel_with_reason(request, trimmed, principal)
    if with_reason is not None:
        return with_reason
    for option in displayed:
        if option.id.lower() == normalized:
            return InputResponse(request_id=request.request_id, option_id=option.id, principal=principal)
    for option in displayed:
        if option.label.lower() == normalized:
            return InputResponse(request_id=request.request_id, option_id=option.id, principal=principal)
    if _option_number(normalized, len(displayed)):
        option = displayed[int(normalized) - 1]
        return InputResponse(request_id=request.request_id, option_id=option.id, principal=principal)
    if request.kind == "tool-approval" and is_bare_answer(trimmed):
        return None  # "approve" where no Approve is offered is no reply in the tool's place
    if request.allow_free_text or (request.kind == "question" and not request.options):
        return InputResponse(request_id=request.request_id, text=trimmed, principal=principal)
    return None


def _cancel_with_reason(request: InputRequest, text: str, principal: Principal | None) -> InputResponse | None:
    """``cancel: too much`` on an approval → Cancel, with the reason as the canceller's note."""
    cancel = request.option(CANCEL) if request.kind == "tool-approval" else None
    head, colon, reason = text.partition(":")
    if cancel is None or not colon or not reason.strip():
        return None
    if head.strip().lower() not in (cancel.id.lower(), cancel.label.lower()):
        return None
    return InputResponse(request_id=request.request_id, option_id=cancel.id, principal=principal,
                         note=reason.strip())


NOTHING_WAITING = "Nothing is waiting for an answer here."
# what people type to answer a card; typed when nothing waits, it is meant as an answer, not a request
ANSWER_WORDS = frozenset({"approve", "approved", "cancel", "deny", "reject", "continue", "stop"})


def is_bare_answer(text: str) -> bool:
    """``approve``, ``Cancel``, ``cancel: too much``: a reply that only makes sense as an answer to a card."""
    head, colon, rest = text.strip().lower().rstrip(".!").partition(":")
    if colon:
        return head.strip() == CANCEL and bool(rest.strip())
    return head.strip() in ANSWER_WORDS


def _option_number(text: str, count: int) -> bool:
    """A 1-based option number in plain ASCII digits ("²", "①" and 5,000-digit numbers are just text)."""
    return text.isascii() and text.isdigit() and len(text) <= 4 and 1 <= int(text) <= count


def strip_mention(text: str, bot_user_id: str | None) -> str:
    """Drop a leading ``<@BOT>`` so "@agent approve" answers like "approve"."""
    stripped = text.strip()
    if bot_user_id and stripped.startswith(f"<@{bot_user_id}>"):
        return stripped[len(bot_user_id) + 3 :].strip()
    return stripped
