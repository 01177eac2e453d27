"""The two reference contenders, each run as its own process: ``python -m benchmarks.http.bare bolt|raw``.

- **bolt**: the least a Bolt app does for the same cycle. On ``app_mention``: ack (Bolt acks events
  before the listener runs), one model call, one ``chat.postMessage`` with an Approve button. On the
  button: ack, one ``chat.update``. Bolt checks the signature itself. It gets the same help the project
  gives itself: one shared aiohttp session for Slack and one for the model, as the project's model client
  (without them slack_sdk opens a connection per call, and Bolt would look slower than it need be).
- **raw**: an aiohttp server that checks Slack's signature (``SignatureVerifier``) and answers 200:
  the floor of what any Slack app can answer in.

Only aiohttp and slack_bolt/slack_sdk are imported, so the restart figure measures what a bare
process of each kind costs to start.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from aiohttp import web

from .serve import open_site, serve_until_stopped

BOLT_ACTION = "bench-approve"
RAW_ACTION = "raw-approve"


def approve_card(action_id: str) -> list[dict[str, Any]]:
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": "*Approval needed:* `refund_charge`"}},
        {"type": "actions", "elements": [{"type": "button", "action_id": action_id, "value": "approve",
                                          "text": {"type": "plain_text", "text": "Approve"}}]},
    ]


def bolt_app(secret: str, token: str, slack_url: str, model_url: str) -> web.Application:
    import aiohttp
    from slack_bolt.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    session = aiohttp.ClientSession()
    model = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60.0))
    app = AsyncApp(signing_secret=secret, client=AsyncWebClient(token=token, base_url=slack_url, session=session))

    @app.event("message")
    async def twin(ack: Any) -> None:  # a mention arrives twice (app_mention and message), as in Slack
        await ack()

    @app.event("app_mention")
    async def mention(event: dict[str, Any], client: AsyncWebClient) -> None:
        async with model.post(f"{model_url}/chat/completions", headers={"Authorization": "Bearer sk-bench"},
                              json={"model": "bench-model", "messages": [{"role": "user", "content": event["text"]}]}) as answer:
            answer.raise_for_status()
            await answer.read()
        await client.chat_postMessage(channel=event["channel"], thread_ts=event["ts"], text="Approve the refund?",
                                      blocks=approve_card(BOLT_ACTION))

    @app.action(BOLT_ACTION)
    async def approve(ack: Any, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()  # Bolt answers Slack here; the update below runs after the response
        where = body["container"]
        await client.chat_update(channel=where["channel_id"], ts=where["message_ts"], text="Approved.", blocks=[])

    async def close(_: web.Application) -> None:
        await session.close()
        await model.close()

    web_app = app.web_app(path="/slack/events")
    web_app.on_cleanup.append(close)
    return web_app


def raw_app(secret: str) -> web.Application:
    from slack_sdk.signature import SignatureVerifier

    verifier = SignatureVerifier(secret)

    async def events(request: web.Request) -> web.Response:
        body = await request.read()
        if not verifier.is_valid_request(body, dict(request.headers)):
            return web.Response(status=401)
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/slack/events", events)
    return app


async def nothing_running() -> None:
    """Neither keeps work of its own after answering that the bench must wait for (Bolt's update is seen
    in Slack by the bench)."""


async def main(args: argparse.Namespace) -> None:
    if args.kind == "bolt":
        app = bolt_app(args.secret, args.token, args.slack_url, args.model_url)
    else:
        app = raw_app(args.secret)
    runner, port = await open_site(app, args.port)
    try:
        await serve_until_stopped(f"http://127.0.0.1:{port}/slack/events", nothing_running)
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.http.bare")
    parser.add_argument("kind", choices=["bolt", "raw"])
    parser.add_argument("--secret", required=True)
    parser.add_argument("--token", default="")
    parser.add_argument("--slack-url", default="")
    parser.add_argument("--model-url", default="")
    parser.add_argument("--port", type=int, default=0)
    asyncio.run(main(parser.parse_args()))
