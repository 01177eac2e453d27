"""The offline demo model as an OpenAI-compatible endpoint (what a framework's agent talks to with no key)."""

from __future__ import annotations

import json

import httpx
from aiohttp import web

import handlers.routes.demo_model
from bot.models.demo_http import PATH

REFUND_TOOL = {"type": "function", "function": {
    "name": "refund_charge", "description": "Refund a charge.",
    "parameters": {"type": "object", "properties": {"charge_id": {"type": "string"}, "amount": {"type": "number"}}}}}


async def served() -> tuple[web.AppRunner, str]:
    app = web.Application()
    handlers.routes.demo_model.add_routes(app)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}{PATH}"  # type: ignore[union-attr]


async def test_a_request_it_understands_becomes_a_tool_call_in_openai_s_shape():
    runner, url = await served()
    try:
        async with httpx.AsyncClient() as client:
            answer = (await client.post(url, json={"model": "demo", "tools": [REFUND_TOOL], "messages": [
                {"role": "user", "content": [{"type": "text", "text": "refund ch_1001 $40"}]}]})).json()
    finally:
        await runner.cleanup()
    choice = answer["choices"][0]
    assert answer["object"] == "chat.completion" and choice["finish_reason"] == "tool_calls"
    [call] = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "refund_charge"
    assert json.loads(call["function"]["arguments"]) == {"charge_id": "ch_1001", "amount": 40.0}


async def test_a_streamed_answer_is_server_sent_chunks_ending_in_done_with_usage_when_asked():
    runner, url = await served()
    try:
        async with httpx.AsyncClient() as client:
            text = (await client.post(url, json={"model": "demo", "stream": True,
                                                 "stream_options": {"include_usage": True},
                                                 "messages": [{"role": "user", "content": "hello"}]})).text
    finally:
        await runner.cleanup()
    events = [line.removeprefix("data: ") for line in text.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    words = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert "offline" in words
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0


async def test_a_body_that_is_not_json_is_refused_in_openai_s_error_shape():
    runner, url = await served()
    try:
        async with httpx.AsyncClient() as client:
            response = await client.post(url, content=b"[1, 2")
    finally:
        await runner.cleanup()
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"
