"""A ChatModel over any OpenAI-compatible Chat Completions endpoint (OpenAI, vLLM, Ollama, LiteLLM…).

Retries transient failures (429, 5xx gateway errors, connection errors, timeouts) with exponential
backoff and jitter, honouring ``Retry-After``. Every error it raises is a ``ModelError`` whose reason
is safe to show to people: the API key never appears in a reason or a log line.

It speaks HTTP through aiohttp, which the app has imported already for Slack: a fraction of httpx's
CPU per request, and nothing more to import when a restarted process's first turn calls the model
(docs/PERFORMANCE.md).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

import aiohttp

from bot.models.base import (
    Message,
    ModelError,
    ModelResponse,
    RestartableText,
    TextCallback,
    ToolCall,
    ToolSpec,
)
from bot.models.providers import DEEPSEEK, GEMINI, provider_kind
from bot.models.transport import AiohttpTransport, Reply, Transport, TransportFailure
from bot.models.wire import (
    ErrorField,
    EventStream,
    StreamState,
    arguments_text,
    distinct_ids,
    error_code,
    error_message,
    is_event_stream,
    message_from_payload,
    new_call_id,
    retry_after_seconds,
    text_or_none,
    usage_of,
    whole,
)

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})


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
    ``client``: an ``aiohttp.ClientSession`` (or, as before the client moved to aiohttp, an
    ``httpx.AsyncClient``) to send through, left open by ``aclose``; without one the model opens its
    own session on first use, in the running loop, and ``aclose`` closes it.
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
        client: aiohttp.ClientSession | httpx.AsyncClient | None = None,
    ):
        self.name = model
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.backoff_base = backoff_base
        self.max_backoff = max_backoff
        self.stream = stream
        self._api_key = api_key or None
        self._given_client = client
        self._transport: Transport | None = None  # built on first use: a session belongs to a running loop
        # the same for every request: worked out once
        self._url = f"{_without_credentials(self.base_url)}/chat/completions"
        self._request_headers = self._headers()
        self.kind = provider_kind(self.base_url)
        # what this endpoint was found to want otherwise (a 400 naming it), kept for the process's life
        self._send_stream_options = True
        self._send_reasoning = self.kind == DEEPSEEK  # DeepSeek's thinking mode refuses a step without it
        self._send_extra = (
            self.kind == GEMINI
        )  # Gemini refuses a step whose calls lost their thought_signature

    @property
    def fallbacks(self) -> list[str]:
        """The adjustments in force for this endpoint, in words (for `python -m bot check` and the logs)."""
        said = []
        if self.stream and not self._send_stream_options:
            said.append("streams without stream_options (the endpoint refused it): no token counts")
        if self._send_reasoning:
            why = (
                "DeepSeek's thinking mode needs it" if self.kind == DEEPSEEK else "the endpoint asked for it"
            )
            said.append(f"sends each tool-call step's reasoning_content back ({why})")
        if self._send_extra:
            why = (
                "Gemini needs their thought_signature" if self.kind == GEMINI else "the endpoint asked for it"
            )
            said.append(f"sends each tool call's extra_content back ({why})")
        return said

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIChatModel(model={self.name!r}, base_url={_without_credentials(self.base_url)!r})"

    async def aclose(self) -> None:
        """Close the HTTP session (only if this object opened it)."""
        transport, self._transport = self._transport, None
        if transport is not None and self._given_client is None:
            await transport.aclose()

    async def __aenter__(self) -> OpenAIChatModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- the ChatModel method -------------------------------------------------------------------

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec], *, on_text: TextCallback | None = None
    ) -> ModelResponse:
        attempts = self.max_retries + 1
        last_failure: _RetryableFailure | None = None
        adjusted = 0
        attempt = 0
        while attempt < attempts:
            body = self._request_body(messages, tools)
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
                if isinstance(on_text, RestartableText):
                    on_text.restart()  # what the broken attempt wrote is void: the text starts over
            try:
                return await self._attempt(body, on_text)
            except _RetryableFailure as failure:
                last_failure = failure
                if failure.retry_after is not None and failure.retry_after > self.max_backoff:
                    raise self._wait_too_long(failure) from None  # retries within our budget cannot help
            except ModelError as error:
                if adjusted < 2 and self._adjust(error, messages):
                    adjusted += 1
                    continue  # at once: the endpoint said what it wants, and nothing was shown yet
                raise
            attempt += 1
        assert last_failure is not None
        raise self._exhausted_error(last_failure, attempts)

    # -- one HTTP attempt -----------------------------------------------------------------------

    def _request_body(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        if not (self._send_reasoning and self._send_extra):
            # kept in the history for a server that wants them back; others may refuse fields they do not know
            messages = [self._as_sent(m) for m in messages]
        body: dict[str, Any] = {"model": self.name, "messages": messages, "stream": self.stream}
        if tools:
            body["tools"] = [tool.to_openai() for tool in tools]
        if self.stream and self._send_stream_options:
            # Without this, streamed answers carry no token counts and session budgets go blind.
            body["stream_options"] = {"include_usage": True}
        return body

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        parts = urlsplit(self.base_url)
        if parts.username is not None:
            # credentials in the URL go out as Basic auth, over the key (as httpx, the earlier client, did)
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        return headers

    def _open_transport(self) -> Transport:
        client = self._given_client
        if client is None:
            self._transport = AiohttpTransport.opened(self.timeout, self._url)
        elif isinstance(client, aiohttp.ClientSession):
            self._transport = AiohttpTransport(client, self.timeout, proxy=None)  # its owner's settings
        else:
            from bot.models.httpx_transport import HttpxTransport

            self._transport = HttpxTransport(client, self.timeout)
        return self._transport

    async def _attempt(self, body: dict[str, Any], on_text: TextCallback | None) -> ModelResponse:
        stream = StreamState()
        # compact and UTF-8 as it is, like httpx's json=
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        transport = self._transport or self._open_transport()
        try:
            reply = await transport.post(self._url, data, self._request_headers)
            try:
                if reply.status >= 400:
                    raise self._status_failure(reply.status, reply.headers, await reply.read())
                if self.stream and is_event_stream(reply.headers):
                    return await self._read_stream(reply, stream, on_text)
                return self._parse_completion(reply.status, await reply.read())
            finally:
                await reply.release()
        except TransportFailure as failure:
            exc = failure.__cause__ or failure
            if stream.emitted_text:
                raise self._interrupted(exc) from exc
            if failure.kind == "timeout":
                raise _RetryableFailure("timeout", type(exc).__name__) from exc
            raise _RetryableFailure("connection", f"{type(exc).__name__}: {exc}") from exc

    def _interrupted(self, exc: Exception) -> ModelError:
        # Text already reached the person; a silent retry would show it twice.
        return ModelError(
            self._redact(
                f"model endpoint stream was interrupted after partial output ({type(exc).__name__})"
            ),
            retryable=True,
        )

    def _as_sent(self, message: Message) -> Message:
        if not self._send_reasoning and "reasoning_content" in message:
            message = {k: v for k, v in message.items() if k != "reasoning_content"}
        calls = message.get("tool_calls")
        if not self._send_extra and calls and any("extra_content" in c for c in calls):
            message = {
                **message,
                "tool_calls": [{k: v for k, v in c.items() if k != "extra_content"} for c in calls],
            }
        return message

    def _adjust(self, error: ModelError, messages: list[Message]) -> bool:
        """A 400 naming something this endpoint wants otherwise: change it for good, once. True = send again."""
        if error.status != 400:
            return False
        where = _without_credentials(self.base_url)
        if "stream_options" in error.reason and self.stream and self._send_stream_options:
            self._send_stream_options = False
            log.warning(
                "model endpoint %s refuses stream_options: streaming without it (no token counts)", where
            )
            return True
        asked_back = "reasoning_content" in error.reason and "back" in error.reason
        if asked_back and not self._send_reasoning and any("reasoning_content" in m for m in messages):
            self._send_reasoning = True
            log.warning("model endpoint %s wants reasoning_content sent back: sending it", where)
            return True
        has_extra = any("extra_content" in c for m in messages for c in m.get("tool_calls") or [])
        if "thought_signature" in error.reason and not self._send_extra and has_extra:
            self._send_extra = True
            log.warning("model endpoint %s wants each tool call's extra_content sent back: sending it", where)
            return True
        return False

    def _wait_too_long(self, failure: _RetryableFailure) -> ModelError:
        assert failure.retry_after is not None
        reason = (
            f"model endpoint returned {failure.status} and asked to wait {failure.retry_after:.0f}s, longer than "
            f"the {self.max_backoff:g}s the client waits between attempts"
        )
        reason += f": {failure.detail}" if failure.detail else ""
        return ModelError(
            self._redact(reason),
            status=failure.status,
            retryable=True,
            kind="rate_limited",
            retry_after=failure.retry_after,
        )

    def _status_failure(self, status: int, headers: Mapping[str, str], raw: bytes) -> Exception:
        message = self._redact(error_message(raw, headers))
        if status == 429 and error_code(raw) == "insufficient_quota":
            # a 429 that waiting does not cure: the account has no credit left
            return ModelError(
                f"model account is out of credit (429 insufficient_quota): {message}",
                status=status,
                kind="quota",
            )
        if status in RETRYABLE_STATUSES:
            return _RetryableFailure(
                "status", message, status=status, retry_after=retry_after_seconds(headers)
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

    def _parse_completion(self, status: int, raw: bytes) -> ModelResponse:
        try:
            payload = json.loads(raw)
        except ValueError as exc:
            raise ModelError("model endpoint returned a response that is not JSON", status=status) from exc
        if not isinstance(payload, dict):
            raise ModelError("model endpoint returned an unexpected response", status=status)
        choices = payload.get("choices")
        if not choices:
            message = self._redact(message_from_payload(payload))
            raise ModelError(
                f"model endpoint returned no choices: {message}"
                if message
                else "model endpoint returned no choices",
                status=status,
            )
        choice = choices[0]
        message = choice.get("message") or {}
        tool_calls = distinct_ids([
            ToolCall(
                id=raw.get("id") or new_call_id(),
                name=(raw.get("function") or {}).get("name") or "",
                arguments=arguments_text((raw.get("function") or {}).get("arguments")),
                extra=raw.get("extra_content") if isinstance(raw.get("extra_content"), dict) else None,
            )
            for raw in message.get("tool_calls") or []
        ])
        return whole(
            ModelResponse(
                text=text_or_none(message.get("content")),
                tool_calls=tool_calls,
                usage=usage_of(payload.get("usage")),
                finish_reason=choice.get("finish_reason"),
                refusal=text_or_none(message.get("refusal")),
                reasoning=text_or_none(message.get("reasoning_content")),
            )
        )

    async def _read_stream(
        self, reply: Reply, state: StreamState, on_text: TextCallback | None
    ) -> ModelResponse:
        events = EventStream()
        while not state.done:
            received = await reply.next_bytes()
            for data in events.feed(received) if received else events.end():
                if isinstance(data, ErrorField):  # llama.cpp through 2025: "error: {...}" at HTTP 200
                    message = self._redact(error_message(data.value.encode(), {}))
                    raise ModelError(
                        f"model endpoint reported an error mid-stream: {message}", kind="stream_error"
                    )
                if data.strip() == "[DONE]":
                    state.done = True
                    break
                try:
                    chunk = json.loads(data)
                except ValueError as exc:
                    raise ModelError("model endpoint sent a stream event that is not JSON") from exc
                await self._apply_chunk(chunk, state, on_text)
            if not received:
                break
        if not (state.done or state.finish_reason):
            if state.emitted_text:
                raise ModelError("model endpoint stream ended before the answer was complete", retryable=True)
            raise _RetryableFailure("truncated")
        return whole(state.response())

    async def _apply_chunk(self, chunk: Any, state: StreamState, on_text: TextCallback | None) -> None:
        if not isinstance(chunk, dict):
            return
        if chunk.get("error") or chunk.get("object") == "error":  # vLLM before its errors nested in "error"
            message = self._redact(message_from_payload(chunk))
            raise ModelError(f"model endpoint reported an error mid-stream: {message}", kind="stream_error")
        if chunk.get("usage"):
            state.usage = usage_of(chunk["usage"])
        elif isinstance(groq := chunk.get("x_groq"), dict) and groq.get("usage"):  # Groq counts tokens here
            state.usage = usage_of(groq["usage"])
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(refusal := delta.get("refusal"), str):
                state.refusal_parts.append(refusal)
            if isinstance(reasoning := delta.get("reasoning_content"), str):
                state.reasoning_parts.append(reasoning)
            content = delta.get("content")
            if content:
                state.text_parts.append(content)
                if on_text is not None:
                    # a callback that can be told the text starts over lets a broken stream be
                    # retried like any other failure
                    state.emitted_text = not isinstance(on_text, RestartableText)
                    await on_text(content)
            for raw in delta.get("tool_calls") or []:
                if isinstance(raw, dict):
                    state.add_tool_call_delta(raw)
            if choice.get("finish_reason"):
                state.finish_reason = choice["finish_reason"]


def _describe(failure: _RetryableFailure | None) -> str:
    if failure is None:
        return "?"
    if failure.kind == "status":
        return f"status {failure.status}"
    return failure.kind


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return url
