"""What OpenAI-compatible servers send, read: server-sent events (and llama.cpp's ``error:`` lines), stream
chunks gathered into a ``ModelResponse``, error bodies and ``Retry-After``. Pure: no I/O, no secrets (the
client redacts what it logs)."""

from __future__ import annotations

import email.utils
import json
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.models.base import ModelError, ModelResponse, ToolCall, Usage

ERROR_TEXT_LIMIT = 300


@dataclass
class PartialToolCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    extra: dict[str, Any] | None = None


@dataclass
class StreamState:
    text_parts: list[str] = field(default_factory=list)
    refusal_parts: list[str] = field(default_factory=list)
    reasoning_parts: list[str] = field(default_factory=list)
    tool_calls: list[PartialToolCall] = field(default_factory=list)  # in the order they started
    receiving: dict[int | None, PartialToolCall] = field(default_factory=dict)  # by the index deltas name
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    done: bool = False
    emitted_text: bool = False

    def add_tool_call_delta(self, raw: dict[str, Any]) -> None:
        """One tool-call delta. A delta carrying an id the call at its index does not have starts a new call,
        whatever the index says: Ollama gives every call index 0, and before 0.4.7 no index at all."""
        index = raw.get("index") if isinstance(raw.get("index"), int) else None
        call_id = raw.get("id") if isinstance(raw.get("id"), str) else ""
        partial = self.receiving.get(index)
        if partial is None or (call_id and partial.id and partial.id != call_id):
            partial = self.receiving[index] = PartialToolCall()
            self.tool_calls.append(partial)
        if call_id and not partial.id:
            partial.id = call_id
        if isinstance(raw.get("extra_content"), dict):
            partial.extra = raw["extra_content"]
        function = raw.get("function") or {}
        if function.get("name") and not partial.name:
            partial.name = function["name"]
        if function.get("arguments"):
            partial.arguments.append(arguments_text(function["arguments"]))

    def response(self) -> ModelResponse:
        calls = distinct_ids([
            ToolCall(
                id=p.id or new_call_id(), name=p.name, arguments="".join(p.arguments) or "{}", extra=p.extra
            )
            for p in self.tool_calls
        ])
        return ModelResponse(
            text="".join(self.text_parts) or None,
            tool_calls=calls,
            usage=self.usage,
            finish_reason=self.finish_reason,
            refusal="".join(self.refusal_parts) or None,
            reasoning="".join(self.reasoning_parts) or None,
        )


def whole(response: ModelResponse) -> ModelResponse:
    """The response, unless it asks for tool calls that did not arrive whole: a call cut by the length limit or
    stopped by a content filter never runs (its arguments may be cut JSON, or not what the model meant)."""
    if response.tool_calls and response.finish_reason == "length":
        raise ModelError(
            "model endpoint cut the answer at its length limit (finish_reason length) while it was writing a "
            "tool call",
            kind="cut",
        )
    if response.tool_calls and response.finish_reason == "content_filter":
        raise ModelError(
            "model endpoint's content filter stopped the answer (finish_reason content_filter) in a tool call",
            kind="filtered",
        )
    return response


def text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class ErrorField:
    """An ``error:`` line: not a field SSE knows, but how llama.cpp's server reported a failure mid-stream
    until late 2025 (ggml-org/llama.cpp#16109)."""

    value: str


class EventStream:
    """The ``data`` of each server-sent event (multi-line data joined by newlines), from the body's bytes
    as they arrive: lines end in LF, CRLF or CR, and a line may span any number of reads. An ``error:`` line
    comes out as an ``ErrorField``. Not httpx-sse (installed with mcp): it reads httpx responses only, and,
    as the SSE spec says, drops a field it does not know, such as llama.cpp's ``error:``."""

    def __init__(self) -> None:
        self._partial = b""  # a line whose end has not arrived yet
        self._data: list[str] = []  # the data lines of the event being read

    def feed(self, received: bytes) -> list[str | ErrorField]:
        *lines, self._partial = (self._partial + received).split(b"\n")
        return self._events(lines)

    def end(self) -> list[str | ErrorField]:
        """The events still held when the body ends (its last line need not end in a newline)."""
        events = self._events([self._partial]) if self._partial else []
        self._partial = b""
        if self._data:
            events.append("\n".join(self._data))
            self._data = []
        return events

    def _events(self, lines: list[bytes]) -> list[str | ErrorField]:
        events: list[str | ErrorField] = []
        for raw in lines:
            # a CR left inside a line ended one (JSON escapes its own): bare-CR streams are split here
            for line in raw.rstrip(b"\r").split(b"\r") if b"\r" in raw else (raw,):
                if not line.strip():
                    if self._data:
                        events.append("\n".join(self._data))
                        self._data = []
                elif line.startswith(b"data:"):
                    value = line[6:] if line.startswith(b"data: ") else line[5:]
                    self._data.append(value.decode("utf-8", errors="replace"))
                elif line.startswith(b"error:"):
                    events.append(ErrorField(line[6:].strip().decode("utf-8", errors="replace")))
                # "event:", "id:", "retry:" and ":" comments carry nothing we use.
        return events


def is_event_stream(headers: Mapping[str, str]) -> bool:
    # Some servers ignore "stream": true and answer with plain JSON.
    return "application/json" not in headers.get("content-type", "")


def usage_of(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    return Usage(
        prompt_tokens=int(raw.get("prompt_tokens") or 0),
        completion_tokens=int(raw.get("completion_tokens") or 0),
    )


def arguments_text(arguments: Any) -> str:
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments)  # a few servers send an object instead of JSON text


def new_call_id() -> str:
    # The history needs ids to pair tool results with calls; some servers omit them.
    return f"call_{uuid.uuid4().hex[:24]}"


def distinct_ids(calls: list[ToolCall], taken: Iterable[str] = ()) -> list[ToolCall]:
    """``calls`` with a new id for each that repeats an earlier one's, or one of ``taken``: Xinference gives every
    call of an answer the completion's id (github.com/xorbitsai/inference/issues/4237), and a call's result, and
    the one run of it, are known by its id."""
    seen = set(taken)
    out = []
    for call in calls:
        if call.id in seen:
            call = call.model_copy(update={"id": new_call_id()})
        seen.add(call.id)
        out.append(call)
    return out


def error_message(raw: bytes, headers: Mapping[str, str]) -> str:
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = None
    return message_from_payload(payload) or body_text(raw, headers).strip()[:ERROR_TEXT_LIMIT]


def body_text(raw: bytes, headers: Mapping[str, str]) -> str:
    _, _, charset = headers.get("content-type", "").partition("charset=")
    try:
        return raw.decode(charset.split(";")[0].strip(" \"'") or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return raw.decode("utf-8", errors="replace")


def error_code(raw: bytes) -> str:
    """``error.code`` (else ``error.type``) of an OpenAI-shaped error body, or ""."""
    try:
        error = json.loads(raw).get("error")
    except (ValueError, AttributeError):
        return ""
    if not isinstance(error, dict):
        return ""
    return str(error.get("code") or error.get("type") or "")


def message_from_payload(payload: Any) -> str:
    """The human message of an error body: OpenAI's ``error.message`` and the shapes other servers use."""
    if isinstance(payload, list) and payload:  # Google's OpenAI-compatible endpoint: a list of one error
        payload = payload[0]
    if not isinstance(payload, dict):
        return ""
    error = payload.get("error")
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])[:ERROR_TEXT_LIMIT]
    if isinstance(error, str):
        return error[:ERROR_TEXT_LIMIT]  # Ollama
    for key in ("message", "detail"):  # vLLM, FastAPI-based servers
        if isinstance(payload.get(key), str):
            return payload[key][:ERROR_TEXT_LIMIT]
    return ""


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (OpenAI) or ``Retry-After`` (seconds or an HTTP date)."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        try:
            return max(float(milliseconds) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)
