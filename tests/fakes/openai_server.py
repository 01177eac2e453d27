"""A local stand-in for an OpenAI-compatible Chat Completions endpoint, for tests.

It speaks the real wire format: ``POST /v1/chat/completions`` answering ``chat.completion`` JSON, or
server-sent ``chat.completion.chunk`` events ending in ``data: [DONE]`` when ``stream`` is true (with
the trailing usage chunk when ``stream_options.include_usage`` is set), OpenAI's error body shape,
``Retry-After`` on errors, and Bearer-key checking. Replies are scripted through a queue::

    async with FakeOpenAI(api_key="sk-test") as fake:
        fake.reply_tool_call("refund", {"charge_id": "ch_1"})
        fake.reply_text("Refunded.")
        model = OpenAIChatModel("gpt-4o-mini", base_url=fake.base_url, api_key="sk-test")

When the queue is empty it answers with ``default_text`` ("ok").

``reply_recorded(name)`` answers with a response a real server sent, byte for byte, from
tests/data/model_responses/ (see ``tests.fakes.recorded``); ``refuse_when(check, name)`` answers a
recorded refusal to every request ``check`` finds wrong, as the server it was recorded from does.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.recorded import Recorded, recorded

ToolCallSpec = tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str]


@dataclass
class ReceivedRequest:
    """One HTTP request the fake received (recorded before any check, so rejected ones count too)."""

    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any  # the parsed JSON body; None when there was none or it was not JSON
    received_at: float  # time.monotonic(), for asserting retry delays


@dataclass
class _Reply:
    kind: str  # "text" | "tool_calls" | "error" | "delay" | "truncated" | "cut" | "recorded"
    text: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    message: str = ""
    retry_after: float | str | None = None
    seconds: float = 0.0
    chunk_delay_s: float = 0.0  # streamed: the pause before each chunk (a model that writes slowly)
    recording: Recorded | None = None


class FakeOpenAI:
    def __init__(self, *, api_key: str | None = None, default_text: str = "ok", host: str = "127.0.0.1"):
        self.api_key = api_key
        self.default_text = default_text
        self.host = host
        self.requests: list[ReceivedRequest] = []
        self.base_url = ""
        self._queue: deque[_Reply] = deque()
        self._refusals: list[tuple[Callable[[dict[str, Any]], bool], Recorded]] = []
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> str:
        """Listen on a port the OS picks; returns the base URL, e.g. ``http://127.0.0.1:54321/v1``."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://{self.host}:{port}/v1"
        return self.base_url

    async def stop(self) -> None:
        self._stopping.set()  # wakes handlers sleeping in a reply_delay
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeOpenAI:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- scripting --------------------------------------------------------------------------------

    def reply_text(self, text: str, *, chunk_delay_s: float = 0.0) -> None:
        """``chunk_delay_s``: when streamed, wait this long before each word (a model writing slowly)."""
        self._queue.append(_Reply("text", text=text, chunk_delay_s=chunk_delay_s))

    def reply_tool_call(self, name: str, args: dict[str, Any], call_id: str | None = None) -> None:
        self.reply_tool_calls((name, args, call_id) if call_id else (name, args))

    def reply_tool_calls(self, *tool_calls: ToolCallSpec, text: str | None = None) -> None:
        """Several tool calls in one answer; each is ``(name, args)`` or ``(name, args, call_id)``."""
        made = [
            {
                "id": spec[2] if len(spec) > 2 else f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": spec[0], "arguments": json.dumps(spec[1])},
            }
            for spec in tool_calls
        ]
        self._queue.append(_Reply("tool_calls", text=text, tool_calls=made))

    def reply_error(self, status: int, message: str, retry_after: float | str | None = None) -> None:
        """An error in OpenAI's shape; ``retry_after`` becomes the ``Retry-After`` header verbatim."""
        self._queue.append(_Reply("error", status=status, message=message, retry_after=retry_after))

    def reply_delay(self, seconds: float) -> None:
        """Wait this long before sending the next reply, in the same request (the default one if none).

        Delays queued back to back add up for one request; queue ``delay, reply, delay, reply`` for two
        slow requests.
        """
        self._queue.append(_Reply("delay", seconds=seconds))

    def reply_truncated_stream(self, text: str) -> None:
        """Stream ``text`` but end the response without a finish_reason or ``[DONE]``."""
        self._queue.append(_Reply("truncated", text=text))

    def reply_cut_stream(self, text: str) -> None:
        """Stream ``text``, then drop the connection in the middle of the response body (a crashed server
        or a proxy's idle cut): the body never ends, unlike ``reply_truncated_stream``."""
        self._queue.append(_Reply("cut", text=text))

    def reply_recorded(self, name: str) -> None:
        """Answer with a recorded response (status, headers and body as the real server sent them)."""
        self._queue.append(_Reply("recorded", recording=recorded(name)))

    def refuse_when(self, check: Callable[[dict[str, Any]], bool], name: str) -> None:
        """Answer the recorded refusal ``name`` to every request whose body ``check`` finds wrong, before the
        queue is looked at (the rule of the server it was recorded from)."""
        self._refusals.append((check, recorded(name)))

    @property
    def pending_replies(self) -> int:
        return len(self._queue)

    # -- handlers ---------------------------------------------------------------------------------

    async def _record(self, request: web.Request) -> ReceivedRequest:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        received = ReceivedRequest(
            method=request.method,
            path=request.path,
            headers={name.lower(): value for name, value in request.headers.items()},
            body=body,
            received_at=time.monotonic(),
        )
        self.requests.append(received)
        return received

    def _auth_failure(self, headers: dict[str, str]) -> web.Response | None:
        if self.api_key is None:
            return None
        authorization = headers.get("authorization", "")
        if not authorization.startswith("Bearer "):
            return _error_response(
                401,
                "You didn't provide an API key. You need to provide your API key in an Authorization header "
                "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                code=None,
            )
        given = authorization.removeprefix("Bearer ").strip()
        if given != self.api_key:
            return _error_response(
                401,
                f"Incorrect API key provided: {_masked(given)}. You can find your API key at "
                "https://platform.openai.com/account/api-keys.",
                code="invalid_api_key",
            )
        return None

    async def _models(self, request: web.Request) -> web.Response:
        received = await self._record(request)
        if failure := self._auth_failure(received.headers):
            return failure
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {"id": "gpt-4o-mini", "object": "model", "created": 1721172741, "owned_by": "system"}
                ],
            }
        )

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        received = await self._record(request)
        if failure := self._auth_failure(received.headers):
            return failure
        if problem := _invalid_body(received.body):
            return _error_response(400, problem, code=None, param=None)
        body: dict[str, Any] = received.body
        for check, refusal in self._refusals:
            if check(body):
                return refusal.response()
        reply, delay = self._next_reply()
        if delay and await self._interrupted_by_stop(delay):
            return web.Response(status=503)
        if reply.kind == "error":
            return _error_response(reply.status, reply.message, retry_after=reply.retry_after)
        if reply.recording is not None:
            return reply.recording.response()
        completion = _Completion(body, reply)
        if body.get("stream"):
            return await completion.stream(request)
        return web.json_response(completion.as_json())

    def _next_reply(self) -> tuple[_Reply, float]:
        delay = 0.0
        while self._queue and self._queue[0].kind == "delay":
            delay += self._queue.popleft().seconds
        reply = self._queue.popleft() if self._queue else _Reply("text", text=self.default_text)
        return reply, delay

    async def _interrupted_by_stop(self, seconds: float) -> bool:
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            return False
        return True


class _Completion:
    """One scripted answer rendered as a ``chat.completion`` or a stream of chunks."""

    def __init__(self, body: dict[str, Any], reply: _Reply):
        self.body = body
        self.reply = reply
        self.id = f"chatcmpl-{uuid.uuid4().hex[:29]}"
        self.created = int(time.time())
        self.model = body.get("model", "")
        self.finish_reason = "tool_calls" if reply.tool_calls else "stop"

    def usage(self) -> dict[str, Any]:
        prompt = len(json.dumps(self.body.get("messages", []))) // 4
        completion = len(self.reply.text or "") // 4 + sum(
            len(c["function"]["arguments"]) // 4 + 5 for c in self.reply.tool_calls
        )
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        }

    def as_json(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.reply.text, "refusal": None}
        if self.reply.tool_calls:
            message["tool_calls"] = self.reply.tool_calls
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": self.finish_reason}
            ],
            "usage": self.usage(),
            "system_fingerprint": "fp_fake",
        }

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        if self._include_usage:
            chunk["usage"] = None  # OpenAI sends null on every chunk but the last
        return chunk

    @property
    def _include_usage(self) -> bool:
        return bool((self.body.get("stream_options") or {}).get("include_usage"))

    def chunks(self) -> list[dict[str, Any]]:
        first: dict[str, Any] = {"role": "assistant", "content": "", "refusal": None}
        if self.reply.tool_calls and not self.reply.text:
            first["content"] = None
        out = [self._chunk(first)]
        out += [self._chunk({"content": piece}) for piece in _words(self.reply.text or "")]
        for index, tool_call in enumerate(self.reply.tool_calls):
            opening = {
                "index": index,
                "id": tool_call["id"],
                "type": "function",
                "function": {"name": tool_call["function"]["name"], "arguments": ""},
            }
            out.append(self._chunk({"tool_calls": [opening]}))
            for piece in _pieces(tool_call["function"]["arguments"], 4):
                out.append(self._chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
        if self.reply.kind in ("truncated", "cut"):
            return out
        out.append(self._chunk({}, self.finish_reason))
        if self._include_usage:
            final = self._chunk({})
            final["choices"] = []
            final["usage"] = self.usage()
            out.append(final)
        return out

    async def stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        try:
            for chunk in self.chunks():
                if self.reply.chunk_delay_s:
                    await asyncio.sleep(self.reply.chunk_delay_s)
                await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if self.reply.kind == "cut":
                await asyncio.sleep(0.05)  # the chunks so far reach the client first
                assert request.transport is not None
                request.transport.abort()  # no last chunk: the client sees a body cut short
                return response
            if self.reply.kind != "truncated":
                await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except ConnectionError:
            pass  # the client went away (e.g. it timed out); nothing to tell it
        return response


def _invalid_body(body: Any) -> str | None:
    """The message OpenAI gives for the mistakes a client is most likely to make, else None."""
    if not isinstance(body, dict):
        return (
            "We could not parse the JSON body of your request. (HINT: This likely means you aren't using "
            "your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not "
            "valid JSON.)"
        )
    if not body.get("model"):
        return "you must provide a model parameter"
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        return "Missing required parameter: 'messages'."
    if "stream_options" in body and not body.get("stream"):
        return "The 'stream_options' parameter is only allowed when 'stream' is enabled."
    if "tools" in body and not body["tools"]:
        return "[] is too short - 'tools'"
    return None


def _error_response(
    status: int,
    message: str,
    *,
    code: str | None = "",
    param: str | None = None,
    retry_after: float | str | None = None,
) -> web.Response:
    error_type, default_code = _ERROR_KINDS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None)
    )
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    payload = {
        "error": {
            "message": message,
            "type": error_type,
            "param": param,
            "code": default_code if code == "" else code,
        }
    }
    return web.json_response(payload, status=status, headers=headers)


_ERROR_KINDS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", None),
}


def _masked(key: str) -> str:
    # OpenAI shows only the ends of a wrong key.
    return f"{key[:3]}{'*' * max(len(key) - 7, 0)}{key[-4:]}" if len(key) > 8 else "*" * len(key)


def _words(text: str) -> list[str]:
    return re.findall(r"\S+\s*|\s+", text)


def _pieces(text: str, size: int) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), size)]
