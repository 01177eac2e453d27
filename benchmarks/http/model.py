"""The model both apps call: an OpenAI-compatible Chat Completions server on loopback.

Stateless, unlike ``tests.fakes.openai_server`` (whose replies are a queue, which 32 concurrent
threads would take from in any order): the answer follows from the request. A request offering the
bench's tool gets a ``refund_charge`` call; one whose last message is that tool's result gets
"Refunded."; anything else (the bare Bolt app's one call) gets "ok". The wire format, streamed or
not, is the fake's (``_Completion``), so the project's client parses what a real endpoint sends.

A tool result carrying ``at`` (the wall-clock time the bench's tool made it) gets the reply
"Refunded. [result <at> asked <t>]", ``t`` the wall-clock time the request arrived, so the bench reads
from the reply in Slack when the tool's result was made and when the second model call came
(``result_times``).

Every request is answered after ``delay_s`` (the model's latency). The first request mentioning a
thread's tag (``ch_<tag>`` in a user message) is noted with ``time.monotonic()``: the bench compares
that with the moment it sent the mention.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tests.fakes.openai_server import _Completion, _Reply

TOOL_NAME = "refund_charge"
TAG = re.compile(r"\bch_([A-Za-z0-9]+)")


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


STAMPS = re.compile(r"\[result ([0-9.]+) asked ([0-9.]+)\]")


def result_times(text: str) -> tuple[float, float] | None:
    """From a reply's text: when the tool's result was made, and when the model call carrying it arrived."""
    found = STAMPS.search(text)
    return (float(found[1]), float(found[2])) if found else None


def _reply_for(body: dict[str, Any]) -> _Reply:
    messages = body.get("messages") or []
    if messages and messages[-1].get("role") == "tool":
        try:
            made = float(json.loads(_text_of(messages[-1]))["at"])
        except (ValueError, KeyError, TypeError):
            return _Reply("text", text="Refunded.")
        return _Reply("text", text=f"Refunded. [result {made:.6f} asked {time.time():.6f}]")
    offered = {(t.get("function") or {}).get("name") for t in body.get("tools") or []}
    if TOOL_NAME in offered:
        tag = next((m[1] for msg in messages if msg.get("role") == "user" for m in [TAG.search(_text_of(msg))] if m),
                   "x")
        call = {"id": f"call_{time.monotonic_ns() % 10**24:024d}", "type": "function",
                "function": {"name": TOOL_NAME, "arguments": json.dumps({"charge_id": f"ch_{tag}", "amount": 5.0})}}
        return _Reply("tool_calls", tool_calls=[call])
    return _Reply("text", text="ok")


class BenchModel:
    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.first_seen: dict[str, float] = {}  # thread tag → monotonic time its first request arrived
        self.requests = 0
        self.on_first: Callable[[str], None] | None = None  # called with the tag of each thread's first request
        self.base_url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._complete)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.base_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _note(self, body: dict[str, Any]) -> None:
        arrived = time.monotonic()
        for message in body.get("messages") or []:
            if message.get("role") == "user" and (found := TAG.search(_text_of(message))):
                if found[1] not in self.first_seen:
                    self.first_seen[found[1]] = arrived
                    if self.on_first is not None:
                        self.on_first(found[1])
                return

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        self.requests += 1
        self._note(body)
        if self.delay_s > 0:
            await asyncio.sleep(self.delay_s)
        completion = _Completion(body, _reply_for(body))
        if body.get("stream"):
            return await completion.stream(request)
        return web.json_response(completion.as_json())
