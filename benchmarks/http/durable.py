"""The durable floor: ``python -m benchmarks.http.durable --redis-url … …``, a contender process.

Bare Bolt (``bare.py``) does less than the project's cycle: one model call and two Slack calls, and it
keeps nothing. This contender does the project's whole cycle with the least durability a
person-in-the-loop app cannot do without, so its figures are a floor for any implementation of the
product, not a competitor:

- ``app_mention``: ack (the ``message`` twin too, ack only); claim the event id (``SET NX``: Slack
  resends an event it thinks was lost); the first model call, offering the tool; park the turn: one
  write of the pydantic-validated turn (the thread, the requester, the messages, the call) with a
  retention; post the card, its button carrying the request id.
- The button: one Lua script settles the request if it is still parked and the clicker is its
  requester, appends the decision to an audit stream and returns the turn; then ack (record → ack,
  as the project does); run the tool; the second model call with its result; ``chat.update`` the
  card; post the reply; one write marks the turn done.

Four Redis round trips, two model calls, three Slack calls, two pydantic validations per cycle. What
the project does beyond this, and this does not: delivery through an outbox (a card or reply is
posted at most once across a crash), exactly-once execution across a crash mid-tool, leases between
replicas, approver lists and four-eyes, App Home, the audit log's hash chain, streamed model calls,
the status line, recovery sweeps.

Imports Bolt, slack_sdk, aiohttp, redis-py and pydantic, so its restart figure is the least a
process needing Redis and pydantic costs to start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from typing import Any

from aiohttp import web

from .serve import open_site, serve_until_stopped

FLOOR_ACTION = "floor-approve"
RETENTION_MS = 7 * 24 * 3600 * 1000
TOOL = {"type": "function", "function": {
    "name": "refund_charge", "description": "Refund a charge.",
    "parameters": {"type": "object", "properties": {"charge_id": {"type": "string"}, "amount": {"type": "number"}},
                   "required": ["charge_id", "amount"]}}}

# KEYS: the turn, the audit stream. ARGV: the clicker, the request id.
# → {"ok", doc} settled by this click | {"refused"} not the requester | {"gone"} settled before or unknown
SETTLE = """
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'parked' then return {'gone'} end
if redis.call('HGET', KEYS[1], 'requester') ~= ARGV[1] then return {'refused'} end
redis.call('HSET', KEYS[1], 'status', 'approved', 'approver', ARGV[1])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', 100000, '*', 'request', ARGV[2], 'by', ARGV[1], 'outcome', 'approved')
return {'ok', redis.call('HGET', KEYS[1], 'doc')}
"""


class Busy:
    """How many listeners are running; the bench's ``/idle`` waits until none is."""

    def __init__(self) -> None:
        self.running = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def __enter__(self) -> None:
        self.running += 1
        self._idle.clear()

    def __exit__(self, *exc: object) -> None:
        self.running -= 1
        if not self.running:
            self._idle.set()

    async def idle(self) -> None:
        await self._idle.wait()


def floor_app(secret: str, token: str, slack_url: str, model_url: str, redis_url: str,
              busy: Busy) -> web.Application:
    import aiohttp
    from pydantic import BaseModel
    from redis.asyncio import Redis
    from slack_bolt.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    from .bare import approve_card

    class ToolCall(BaseModel):
        id: str
        name: str
        arguments: str

    class ParkedTurn(BaseModel):
        channel: str
        thread_ts: str
        requester: str
        messages: list[dict[str, Any]]
        call: ToolCall

    session = aiohttp.ClientSession()
    # the model on its own aiohttp session, as the project's client (bot/models/transport.py)
    model = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60.0))
    redis = Redis.from_url(redis_url)
    settle = redis.register_script(SETTLE)
    app = AsyncApp(signing_secret=secret, client=AsyncWebClient(token=token, base_url=slack_url, session=session))

    async def complete(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": "bench-model", "messages": messages}
        if tools:
            body["tools"] = tools
        async with model.post(f"{model_url}/chat/completions", headers={"Authorization": "Bearer sk-bench"},
                              json=body) as answer:
            answer.raise_for_status()
            return (await answer.json())["choices"][0]["message"]

    @app.event("message")
    async def twin(ack: Any) -> None:  # a mention arrives twice (app_mention and message), as in Slack
        await ack()

    @app.event("app_mention")
    async def mention(body: dict[str, Any], event: dict[str, Any], client: AsyncWebClient) -> None:
        with busy:
            if not await redis.set(f"floor:event:{body['event_id']}", 1, nx=True, px=RETENTION_MS):
                return  # Slack resent an event already taken
            messages = [{"role": "system", "content": "You refund charges when asked."},
                        {"role": "user", "content": event["text"]}]
            said = await complete(messages, [TOOL])
            call = said["tool_calls"][0]
            turn = ParkedTurn(channel=event["channel"], thread_ts=event.get("thread_ts") or event["ts"],
                              requester=event["user"], messages=[*messages, said],
                              call=ToolCall(id=call["id"], name=call["function"]["name"],
                                            arguments=call["function"]["arguments"]))
            request_id = uuid.uuid4().hex
            key = f"floor:turn:{request_id}"
            async with redis.pipeline(transaction=True) as pipe:
                pipe.hset(key, mapping={"status": "parked", "requester": turn.requester,
                                        "doc": turn.model_dump_json()})
                pipe.pexpire(key, RETENTION_MS)
                await pipe.execute()
            blocks = approve_card(FLOOR_ACTION)
            blocks[1]["elements"][0]["value"] = request_id
            await client.chat_postMessage(channel=turn.channel, thread_ts=turn.thread_ts,
                                          text="Approve the refund?", blocks=blocks)

    @app.action(FLOOR_ACTION)
    async def approve(ack: Any, body: dict[str, Any], client: AsyncWebClient) -> None:
        with busy:
            request_id, user = body["actions"][0]["value"], body["user"]["id"]
            key = f"floor:turn:{request_id}"
            answer = await settle(keys=[key, "floor:audit"], args=[user, request_id])
            await ack()
            if answer[0] != b"ok":
                return
            turn = ParkedTurn.model_validate_json(answer[1])
            result = {"refunded": json.loads(turn.call.arguments)["charge_id"], "at": time.time()}
            said = await complete([*turn.messages, {"role": "tool", "tool_call_id": turn.call.id,
                                                    "content": json.dumps(result)}], [TOOL])
            where = body["container"]
            await client.chat_update(channel=where["channel_id"], ts=where["message_ts"],
                                     text=f"Approved by <@{user}>.", blocks=[])
            await client.chat_postMessage(channel=turn.channel, thread_ts=turn.thread_ts, text=said["content"])
            await redis.hset(key, "status", "done")

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def close(_: web.Application) -> None:
        await session.close()
        await model.close()
        await redis.aclose()

    web_app = app.web_app(path="/slack/events")
    web_app.router.add_get("/healthz", healthz)
    web_app.on_cleanup.append(close)
    return web_app


async def main(args: argparse.Namespace) -> None:
    busy = Busy()
    app = floor_app(args.secret, args.token, args.slack_url, args.model_url, args.redis_url, busy)
    runner, port = await open_site(app, args.port)
    try:
        await serve_until_stopped(f"http://127.0.0.1:{port}/slack/events", busy.idle)
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.http.durable")
    for name in ("--secret", "--token", "--slack-url", "--model-url", "--redis-url"):
        parser.add_argument(name, required=True)
    parser.add_argument("--port", type=int, default=0)
    asyncio.run(main(parser.parse_args()))
