"""A ChatModel over any OpenAI-compatible Chat Completions endpoint (OpenAI, vLLM, Ollama, LiteLLM…).

Retries transient failures (429, 5xx gateway errors, connection errors, timeouts) with exponential
backoff and jitter, honouring ``Retry-After``. Every error it raises is a ``ModelError`` whose reason
is safe to show to people: the API key never appears in a reason or a log line.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from bot.models.base import Message, ModelError, ModelResponse, TextCallback, ToolCall, ToolSpec, Usage

log = logging.getLogger(__name__)

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
_ERROR_TEXT_LIMIT = 300


class _RetryableFailure(Exception):
    """One attempt failed in a way worth another try."""

    def __init__(
        self, kind: str, detail: str = "", *, status: int | None = None, retry_after: float | None = None
    ):
        super().__init__(detail or kind)
        self.kind = kind  # "status" | "timeout" | "connection" | "truncated"
        self.detail = detail
        self.status = status
        self.retry_after = retry_after


class OpenAIChatModel:
    """``ChatModel`` speaking ``POST {base_url}/chat/completions``.

    ``timeout`` bounds connecting and each wait for bytes (so a long streamed answer is fine as long
    as it keeps flowing). ``max_retries`` is the number of extra attempts after the first one.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        max_backoff: float = 20.0,
        stream: bool = True,
        client: httpx.AsyncClient | None = None,
    ):
        self.name = model
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.backoff_base = backoff_base
        self.max_backoff = max_backoff
        self.stream = stream
        self._api_key = api_key or None
        self._owns_client = client is None
        self._client = client if client is not None else httpx.AsyncClient(timeout=httpx.Timeout(timeout))

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIChatModel(model={self.name!r}, base_url={_without_credentials(self.base_url)!r})"

    async def aclose(self) -> None:
        """Close the HTTP client (only if this object created it)."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> OpenAIChatModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- the ChatModel method -------------------------------------------------------------------

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec], *, on_text: TextCallback | None = None
    ) -> ModelResponse:
        body = self._request_body(messages, tools)
        attempts = self.max_retries + 1
        last_failure: _RetryableFailure | None = None
        for attempt in range(attempts):
            if attempt:
                delay = self._retry_delay(attempt, last_failure)
                log.warning(
                    "model endpoint attempt %d/%d failed (%s); retrying in %.2fs",
                    attempt,
                    attempts,
                    _describe(last_failure),
                    delay,
                )
                await asyncio.sleep(delay)
                if (restart := getattr(on_text, "restart", None)) is not None:
                    restart()  # what the broken attempt wrote is void: the text starts over
            try:
                return await self._attempt(body, on_text)
            except _RetryableFailure as failure:
                last_failure = failure
        assert last_failure is not None
        raise self._exhausted_error(last_failure, attempts)

    # -- one HTTP attempt -----------------------------------------------------------------------

    def _request_body(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.name, "messages": messages, "stream": self.stream}
        if tools:
            body["tools"] = [tool.to_openai() for tool in tools]
        if self.stream:
            # Without this, streamed answers carry no token counts and session budgets go blind.
            body["stream_options"] = {"include_usage": True}
        return body

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    async def _attempt(self, body: dict[str, Any], on_text: TextCallback | None) -> ModelResponse:
        url = f"{self.base_url}/chat/completions"
        stream = _StreamState()
        try:
            request = self._client.build_request(
                "POST", url, json=body, headers=self._headers(), timeout=httpx.Timeout(self.timeout)
            )
            response = await self._client.send(request, stream=True)
            try:
                if response.status_code >= 400:
                    await response.aread()
                    raise self._status_failure(response)
                if self.stream and _is_event_stream(response):
                    return await self._read_stream(response, stream, on_text)
                await response.aread()
                return self._parse_completion(response)
            finally:
                await response.aclose()
        except httpx.TimeoutException as exc:
            if stream.emitted_text:
                raise self._interrupted(exc) from exc
            raise _RetryableFailure("timeout", type(exc).__name__) from exc
        except httpx.TransportError as exc:
            if stream.emitted_text:
                raise self._interrupted(exc) from exc
            raise _RetryableFailure("connection", f"{type(exc).__name__}: {exc}") from exc

    def _interrupted(self, exc: Exception) -> ModelError:
        # Text already reached the person; a silent retry would show it twice.
        return ModelError(
            self._redact(
                f"model endpoint stream was interrupted after partial output ({type(exc).__name__})"
            ),
            retryable=True,
        )

    def _status_failure(self, response: httpx.Response) -> Exception:
        status = response.status_code
        message = self._redact(_error_message(response))
        if status in RETRYABLE_STATUSES:
            return _RetryableFailure(
                "status", message, status=status, retry_after=_retry_after_seconds(response.headers)
            )
        reason = f"model endpoint rejected the request ({status})"
        return ModelError(f"{reason}: {message}" if message else reason, status=status, retryable=False)

    def _exhausted_error(self, failure: _RetryableFailure, attempts: int) -> ModelError:
        where = _without_credentials(self.base_url)
        if failure.kind == "status":
            reason = f"model endpoint returned {failure.status} after {attempts} attempts"
            if failure.detail:
                reason += f": {failure.detail}"
        elif failure.kind == "timeout":
            reason = f"model endpoint timed out after {attempts} attempts ({self.timeout:g}s each) at {where}"
        elif failure.kind == "connection":
            reason = f"could not connect to the model endpoint at {where} after {attempts} attempts"
            reason += f" ({failure.detail})" if failure.detail else ""
        else:
            reason = f"model endpoint stream ended before the answer was complete, {attempts} attempts"
        return ModelError(self._redact(reason), status=failure.status, retryable=True)

    def _retry_delay(self, attempt: int, failure: _RetryableFailure | None) -> float:
        if failure is not None and failure.retry_after is not None:
            return min(max(failure.retry_after, 0.0), self.max_backoff)
        exponential = min(self.backoff_base * 2 ** (attempt - 1), self.max_backoff)
        # Jitter downwards so many clients hit by one outage do not come back in lockstep.
        return exponential * (1 - 0.25 * random.random())

    def _redact(self, text: str) -> str:
        if self._api_key and self._api_key in text:
            text = text.replace(self._api_key, "***")
        return text

    # -- parsing --------------------------------------------------------------------------------

    def _parse_completion(self, response: httpx.Response) -> ModelResponse:
        try:
            payload = response.json()
        except ValueError as exc:
            raise ModelError(
                "model endpoint returned a response that is not JSON", status=response.status_code
            ) from exc
        if not isinstance(payload, dict):
            raise ModelError("model endpoint returned an unexpected response", status=response.status_code)
        choices = payload.get("choices")
        if not choices:
            message = self._redact(_message_from_payload(payload))
            raise ModelError(
                f"model endpoint returned no choices: {message}"
                if message
                else "model endpoint returned no choices",
                status=response.status_code,
            )
        choice = choices[0]
        message = choice.get("message") or {}
        tool_calls = [
            ToolCall(
                id=raw.get("id") or _new_call_id(),
                name=(raw.get("function") or {}).get("name") or "",
                arguments=_arguments_text((raw.get("function") or {}).get("arguments")),
            )
            for raw in message.get("tool_calls") or []
        ]
        return ModelResponse(
            text=message.get("content") or None,
            tool_calls=tool_calls,
            usage=_usage(payload.get("usage")),
            finish_reason=choice.get("finish_reason"),
        )

    async def _read_stream(
        self, response: httpx.Response, state: _StreamState, on_text: TextCallback | None
    ) -> ModelResponse:
        async for data in _sse_data(response):
            if data.strip() == "[DONE]":
                state.done = True
                break
            try:
                chunk = json.loads(data)
            except ValueError as exc:
                raise ModelError("model endpoint sent a stream event that is not JSON") from exc
            await self._apply_chunk(chunk, state, on_text)
        if not (state.done or state.finish_reason):
            if state.emitted_text:
                raise ModelError("model endpoint stream ended before the answer was complete", retryable=True)
            raise _RetryableFailure("truncated")
        return state.response()

    async def _apply_chunk(self, chunk: Any, state: _StreamState, on_text: TextCallback | None) -> None:
        if not isinstance(chunk, dict):
            return
        if chunk.get("error"):
            message = self._redact(_message_from_payload(chunk))
            raise ModelError(f"model endpoint reported an error mid-stream: {message}")
        if chunk.get("usage"):
            state.usage = _usage(chunk["usage"])
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if content:
                state.text_parts.append(content)
                if on_text is not None:
                    # a callback that can be told the text starts over (``restart``) lets a broken
                    # stream be retried like any other failure
                    state.emitted_text = getattr(on_text, "restart", None) is None
                    await on_text(content)
            for position, raw in enumerate(delta.get("tool_calls") or []):
                state.add_tool_call_delta(raw, position)
            if choice.get("finish_reason"):
                state.finish_reason = choice["finish_reason"]


@dataclass
class _PartialToolCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _StreamState:
    text_parts: list[str] = field(default_factory=list)
    tool_calls: dict[int, _PartialToolCall] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    done: bool = False
    emitted_text: bool = False

    def add_tool_call_delta(self, raw: dict[str, Any], position: int) -> None:
        index = raw.get("index", position)
        partial = self.tool_calls.setdefault(index, _PartialToolCall())
        if raw.get("id") and not partial.id:
            partial.id = raw["id"]
        function = raw.get("function") or {}
        if function.get("name") and not partial.name:
            partial.name = function["name"]
        if function.get("arguments"):
            partial.arguments.append(_arguments_text(function["arguments"]))

    def response(self) -> ModelResponse:
        calls = [
            ToolCall(id=p.id or _new_call_id(), name=p.name, arguments="".join(p.arguments) or "{}")
            for _, p in sorted(self.tool_calls.items())
        ]
        return ModelResponse(
            text="".join(self.text_parts) or None,
            tool_calls=calls,
            usage=self.usage,
            finish_reason=self.finish_reason,
        )


def _describe(failure: _RetryableFailure | None) -> str:
    if failure is None:
        return "?"
    if failure.kind == "status":
        return f"status {failure.status}"
    return failure.kind


async def _sse_data(response: httpx.Response):
    """Yield the ``data`` of each server-sent event (multi-line data joined by newlines)."""
    lines: list[str] = []
    async for line in response.aiter_lines():
        if not line.strip():
            if lines:
                yield "\n".join(lines)
                lines = []
            continue
        if line.startswith("data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(" ") else value)
        # "event:", "id:", "retry:" and ":" comments carry nothing we use.
    if lines:
        yield "\n".join(lines)


def _is_event_stream(response: httpx.Response) -> bool:
    # Some servers ignore "stream": true and answer with plain JSON.
    return "application/json" not in response.headers.get("content-type", "")


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    return Usage(
        prompt_tokens=int(raw.get("prompt_tokens") or 0),
        completion_tokens=int(raw.get("completion_tokens") or 0),
    )


def _arguments_text(arguments: Any) -> str:
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments)  # a few servers send an object instead of JSON text


def _new_call_id() -> str:
    # The history needs ids to pair tool results with calls; some servers omit them.
    return f"call_{uuid.uuid4().hex[:24]}"


def _error_message(response: httpx.Response) -> str:
    try:
        payload = response.json()
    except ValueError:
        return response.text.strip()[:_ERROR_TEXT_LIMIT]
    return _message_from_payload(payload) or response.text.strip()[:_ERROR_TEXT_LIMIT]


def _message_from_payload(payload: Any) -> str:
    """The human message of an error body: OpenAI's ``error.message`` and the shapes other servers use."""
    if not isinstance(payload, dict):
        return ""
    error = payload.get("error")
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])[:_ERROR_TEXT_LIMIT]
    if isinstance(error, str):
        return error[:_ERROR_TEXT_LIMIT]  # Ollama
    for key in ("message", "detail"):  # vLLM, FastAPI-based servers
        if isinstance(payload.get(key), str):
            return payload[key][:_ERROR_TEXT_LIMIT]
    return ""


def _retry_after_seconds(headers: httpx.Headers) -> float | None:
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


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return url
