"""The LangGraph peer: ``python -m benchmarks.http.langgraph_app --data-dir … …``, a contender process.

The same approve cycle written as a user would write it on LangGraph: a plain ``StateGraph`` (model →
approval → tool → model) whose approval node calls ``interrupt()``, compiled with a durable
checkpointer (``AsyncSqliteSaver`` on a file: every step is written before the next runs), behind a
bare Bolt listener:

- ``app_mention``: ack (the ``message`` twin too); run the graph on the thread (``thread_id`` = the
  channel and thread ts): the first model call, offering the tool, then ``interrupt()`` parks it in
  the checkpointer; post the card, its button carrying the thread id.
- The button: ack (Bolt answers Slack here, as bare Bolt does); ``Command(resume={"by": clicker})``
  resumes the graph from its checkpoint: the approval node checks the clicker is the requester, the
  tool runs, the second model call; then ``chat.update`` the card and post the reply.

Two model calls, three Slack calls, as the durable floor. It keeps no event-id claim (Slack's resent
event would run the graph twice) and, like LangGraph apps generally, acks the click before it is
recorded. Needs the ``bench`` extra (``pip install -e '.[bench]'``: langgraph, langgraph-checkpoint-sqlite).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any, TypedDict

from aiohttp import web

from .durable import TOOL, Busy
from .serve import open_site, serve_until_stopped

GRAPH_ACTION = "langgraph-approve"


def available() -> bool:
    """Whether the bench extra is installed (the bench skips this peer, saying so, when it is not)."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None
               for name in ("langgraph", "langgraph.checkpoint.sqlite", "aiosqlite"))


class Turn(TypedDict, total=False):
    messages: list[dict[str, Any]]
    requester: str
    call: dict[str, Any]
    approved: bool
    reply: str


def build_graph(complete: Any, checkpointer: Any) -> Any:
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    async def model(state: Turn) -> Turn:
        said = await complete(state["messages"], [TOOL])
        if said.get("tool_calls"):
            return {"messages": [*state["messages"], said], "call": said["tool_calls"][0]}
        return {"messages": [*state["messages"], said], "reply": said.get("content") or ""}

    def after_model(state: Turn) -> str:
        return "approval" if state.get("call") and not state.get("reply") else END

    def approval(state: Turn) -> Turn:
        decision = interrupt({"tool": state["call"]["function"]["name"]})  # parked in the checkpointer
        return {"approved": decision.get("by") == state["requester"]}

    def after_approval(state: Turn) -> str:
        return "tool" if state.get("approved") else END

    async def tool(state: Turn) -> Turn:
        call = state["call"]
        result = {"refunded": json.loads(call["function"]["arguments"])["charge_id"], "at": time.time()}
        message = {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
        return {"messages": [*state["messages"], message], "call": {}}

    graph = StateGraph(Turn)
    graph.add_node("model", model)
    graph.add_node("approval", approval)
    graph.add_node("tool", tool)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", after_model, ["approval", END])
    graph.add_conditional_edges("approval", after_approval, ["tool", END])
    graph.add_edge("tool", "model")
    return graph.compile(checkpointer=checkpointer)


async def langgraph_app(secret: str, token: str, slack_url: str, model_url: str, db_path: Path,
                        busy: Busy) -> web.Application:
    import aiohttp
    import httpx
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.types import Command
    from slack_bolt.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    from .bare import approve_card

    session = aiohttp.ClientSession()
    model = httpx.AsyncClient(timeout=60.0)
    saver_cm = AsyncSqliteSaver.from_conn_string(str(db_path))
    saver = await saver_cm.__aenter__()
    app = AsyncApp(signing_secret=secret, client=AsyncWebClient(token=token, base_url=slack_url, session=session))

    async def complete(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": "bench-model", "messages": messages}
        if tools:
            body["tools"] = tools
        answer = await model.post(f"{model_url}/chat/completions", headers={"Authorization": "Bearer sk-bench"},
                                  json=body)
        answer.raise_for_status()
        message = answer.json()["choices"][0]["message"]
        return {k: v for k, v in message.items() if v is not None}

    graph = build_graph(complete, saver)

    @app.event("message")
    async def twin(ack: Any) -> None:  # a mention arrives twice (app_mention and message), as in Slack
        await ack()

    @app.event("app_mention")
    async def mention(event: dict[str, Any], client: AsyncWebClient) -> None:
        with busy:
            channel, thread_ts = event["channel"], event.get("thread_ts") or event["ts"]
            thread_id = f"{channel}:{thread_ts}"
            start: Turn = {"requester": event["user"],
                           "messages": [{"role": "system", "content": "You refund charges when asked."},
                                        {"role": "user", "content": event["text"]}]}
            state = await graph.ainvoke(start, {"configurable": {"thread_id": thread_id}})
            if not state.get("__interrupt__"):
                await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=state.get("reply") or "")
                return
            blocks = approve_card(GRAPH_ACTION)
            blocks[1]["elements"][0]["value"] = thread_id
            await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text="Approve the refund?",
                                          blocks=blocks)

    @app.action(GRAPH_ACTION)
    async def approve(ack: Any, body: dict[str, Any], client: AsyncWebClient) -> None:
        with busy:
            await ack()  # Bolt answers Slack here; the graph resumes after the response
            thread_id, user = body["actions"][0]["value"], body["user"]["id"]
            state = await graph.ainvoke(Command(resume={"by": user}), {"configurable": {"thread_id": thread_id}})
            if not state.get("approved"):
                return
            where = body["container"]
            channel, thread_ts = thread_id.split(":", 1)
            await client.chat_update(channel=where["channel_id"], ts=where["message_ts"],
                                     text=f"Approved by <@{user}>.", blocks=[])
            await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=state.get("reply") or "")

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def close(_: web.Application) -> None:
        await session.close()
        await model.aclose()
        await saver_cm.__aexit__(None, None, None)

    web_app = app.web_app(path="/slack/events")
    web_app.router.add_get("/healthz", healthz)
    web_app.on_cleanup.append(close)
    return web_app


async def main(args: argparse.Namespace) -> None:
    busy = Busy()
    db = Path(args.data_dir) / "langgraph.sqlite"
    db.parent.mkdir(parents=True, exist_ok=True)
    app = await langgraph_app(args.secret, args.token, args.slack_url, args.model_url, db, busy)
    runner, port = await open_site(app, args.port)
    try:
        await serve_until_stopped(f"http://127.0.0.1:{port}/slack/events", busy.idle)
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.http.langgraph_app")
    for name in ("--secret", "--token", "--slack-url", "--model-url", "--data-dir"):
        parser.add_argument(name, required=True)
    parser.add_argument("--port", type=int, default=0)
    asyncio.run(main(parser.parse_args()))
