"""What a thread says when the model's answer is not a plain, whole answer, or did not come.

A channel may be shared with another company: no URL, status body or exception name reaches the thread (the
details go to the log). Every sentence is true to what the server sent and names what to do, and a turn never
ends in silence: an empty answer, a refusal, a cut or filtered answer each get words of their own.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from bot.models.base import ModelError, ModelResponse

MODEL_UNREACHABLE = (
    "I couldn't reach the AI model just now — try again in a minute; details are in the bot's logs."
)
MODEL_REFUSED = "The AI model couldn't answer this request; details are in the bot's logs."
OUT_OF_CREDIT = (
    "The model account is out of credit (insufficient_quota) — add credit or change OPENAI_API_KEY."
)
STREAM_ERROR = (
    "The AI model stopped with an error before it finished its answer; details are in the bot's logs."
)
CUT_TOOL_CALL = (
    "The model's answer was cut off at its length limit while it was writing a tool call, so nothing was run."
)
FILTERED_TOOL_CALL = (
    "The model provider's content filter stopped the answer while the model was writing a tool call, "
    "so nothing was run."
)
CUT_NOTE = "_(The answer was cut off here: the model reached its length limit.)_"
FILTERED_NOTE = "_(The rest of the answer was withheld by the model provider's content filter.)_"
FILTERED_ALL = "The model provider's content filter withheld the answer."
CUT_ALL = "The model reached its length limit before it wrote an answer."
EMPTY = "The model finished without writing an answer."

log = logging.getLogger(__name__)


def logged_failure_words(exc: Exception, session_id: str) -> str:
    """Log a failed model call in full, and return the plain words for the thread."""
    if not isinstance(exc, ModelError):
        log.exception("model client failed in session %s", session_id)
    else:  # reason is already without secrets (the client redacts its key and the URL's credentials)
        log.warning("model call failed in session %s: %s", session_id, exc.reason)
    return failure_words(exc)


def failure_words(exc: Exception, now: datetime | None = None) -> str:
    """The thread's words for a model call that failed."""
    if not isinstance(exc, ModelError):
        return MODEL_REFUSED
    match exc.kind:
        case "quota":
            return OUT_OF_CREDIT
        case "rate_limited" if exc.retry_after is not None:
            return _wait_words(exc.retry_after, now or datetime.now(UTC))
        case "stream_error":
            return STREAM_ERROR
        case "cut":
            return CUT_TOOL_CALL
        case "filtered":
            return FILTERED_TOOL_CALL
    return MODEL_UNREACHABLE if exc.retryable else MODEL_REFUSED


def answer_words(response: ModelResponse) -> tuple[str | None, str | None]:
    """``(text to post, None)`` for an answer people should see, or ``(None, reason)`` when the turn is to fail
    with ``reason`` because nothing the model wrote can be shown. A step with tool calls posts its text, if any."""
    text = response.text or response.refusal  # a refusal is the model's own answer, in its own words
    if response.tool_calls:
        return text, None
    if text:
        if response.finish_reason == "length":
            return f"{text}\n\n{CUT_NOTE}", None
        if response.finish_reason == "content_filter":
            return f"{text}\n\n{FILTERED_NOTE}", None
        return text, None
    if response.finish_reason == "content_filter":
        return None, FILTERED_ALL
    if response.finish_reason == "length":
        return None, CUT_ALL
    return None, EMPTY


def _wait_words(seconds: float, now: datetime) -> str:
    until = (now + timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"The AI model's provider is limiting this bot's requests and asked it to wait {_duration(seconds)} "
        f"— try again after {until}."
    )


def _duration(seconds: float) -> str:
    if seconds >= 36 * 3600:
        return f"about {round(seconds / 86400)} days"
    if seconds >= 20 * 3600:
        return "about a day"
    if seconds >= 5400:
        return f"about {round(seconds / 3600)} hours"
    if seconds >= 90:
        return f"about {round(seconds / 60)} minutes"
    return f"{round(seconds)} seconds"
