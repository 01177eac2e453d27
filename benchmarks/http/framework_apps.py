"""The frameworks alone: ``python -m benchmarks.http.framework_apps --framework pydantic_ai|openai_agents|langgraph …``.

The same approve cycle as the project's, written as a user would write it on the framework by itself
(the agent is ``framework_agents``'s, the one the bot runs in the paired contender), behind a bare Bolt
listener, with the framework's own pause and resume and its own state kept durably:

- ``app_mention``: ack (the ``message`` twin too); run the agent on the message: the first model call
  offers the tool, the framework pauses on its approval (pydantic-ai: the run's output is
  ``DeferredToolRequests``; the Agents SDK: ``result.interruptions``); write the paused run in sqlite
  (pydantic-ai: the message history, ``all_messages_json()``; the SDK: ``RunState.to_string()``; LangGraph:
  its own ``AsyncSqliteSaver`` checkpointer, each step) with the requester, committed before the card is posted; post the card, its button carrying the thread.
- The button: ack (Bolt answers Slack here); take the paused run out of sqlite if the clicker is its
  requester (one ``DELETE … RETURNING``: a second click finds nothing); resume it approved (pydantic-ai:
  ``DeferredToolResults(approvals={id: True})``; the SDK: ``RunState.from_string`` then ``approve``; LangGraph:
  ``Command(resume={"decisions": [{"type": "approve"}]})``, the middleware's answer): the
  tool runs, the second model call; ``chat.update`` the card, post the reply.

With ``--bots-tools`` the agent offers the model the tools the bot adds to it as well (the Agents SDK's agent: the
bot's ``ask_user``, for questions), so that each model request is the bot's, byte for byte.

With ``--stream`` the run takes the model's answers as the framework streams them (pydantic-ai
``agent.iter`` with ``node.stream``, the SDK ``Runner.run_streamed``, LangGraph ``astream``), as the bot
does to show the text as it comes; the text goes nowhere here.

Two model calls, three Slack calls, as the durable floor. Like the LangGraph peer it keeps no event-id
claim and acks the click before it is recorded. sqlite is the standard library's, on a file, written in
the event loop (the cheapest durable store such an app has).
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from aiohttp import web

from .durable import Busy
from .framework_agents import installed, langgraph_agent, openai_agents_agent, pydantic_ai_agent
from .serve import open_site, serve_until_stopped

ACTION = "framework-approve"
PROMPT = "Approve the refund?"

Start = Callable[[str, str], Awaitable[tuple[str | None, str]]]  # thread, text → (state to keep or None, reply)
Resume = Callable[[str, str], Awaitable[str]]  # thread, the kept state → the reply, approved


def available(framework: str) -> bool:
    return installed(framework)


async def pydantic_ai_cycle(model_url: str, data_dir: Path, stack: AsyncExitStack,
                            stream: bool) -> tuple[Start, Resume]:
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    agent = pydantic_ai_agent(model_url, output_type=[str, DeferredToolRequests])

    async def run(text: str | None, **given: Any) -> Any:
        if not stream:
            return await agent.run(text, **given)
        async with agent.iter(text, **given) as run:  # the model's events as they come, as the bot takes them
            async for node in run:
                if Agent.is_model_request_node(node):
                    async with node.stream(run.ctx) as events:
                        async for _ in events:
                            pass
        return run.result

    async def start(thread: str, text: str) -> tuple[str | None, str]:
        result = await run(text)
        if isinstance(result.output, DeferredToolRequests):
            return result.all_messages_json().decode(), ""
        return None, result.output

    async def resume(thread: str, state: str) -> str:
        history = ModelMessagesTypeAdapter.validate_json(state)
        pending = [part.tool_call_id for part in history[-1].parts if part.part_kind == "tool-call"]
        result = await run(None, message_history=history,
                           deferred_tool_results=DeferredToolResults(approvals=dict.fromkeys(pending, True)))
        return result.output if isinstance(result.output, str) else ""

    return start, resume


async def openai_agents_cycle(model_url: str, data_dir: Path, stack: AsyncExitStack,
                              stream: bool, bots_tools: bool = False) -> tuple[Start, Resume]:
    from agents import Runner, RunState

    agent = openai_agents_agent(model_url, bots_tools=bots_tools)

    async def run(given: Any) -> Any:
        if not stream:
            return await Runner.run(agent, given)
        result = Runner.run_streamed(agent, given)  # the model's events as they come, as the bot takes them
        async for _ in result.stream_events():
            pass
        return result

    async def start(thread: str, text: str) -> tuple[str | None, str]:
        result = await run(text)
        if result.interruptions:
            return result.to_state().to_string(), ""
        return None, str(result.final_output)

    async def resume(thread: str, state: str) -> str:
        paused = await RunState.from_string(agent, state)
        for item in paused.get_interruptions():
            paused.approve(item)
        result = await run(paused)
        return str(result.final_output)

    return start, resume


async def langgraph_cycle(model_url: str, data_dir: Path, stack: AsyncExitStack,
                          stream: bool) -> tuple[Start, Resume]:
    """LangGraph keeps the paused run itself (its checkpointer, sqlite); the table keeps the requester."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.types import Command

    saver = await stack.enter_async_context(AsyncSqliteSaver.from_conn_string(str(data_dir / "checkpoints.sqlite")))
    agent = langgraph_agent(model_url, checkpointer=saver)

    async def run(given: Any, thread: str) -> tuple[bool, str]:
        """Whether the run paused, and its last message's text."""
        config = {"configurable": {"thread_id": thread}}
        if not stream:
            state = await agent.ainvoke(given, config)
            return bool(state.get("__interrupt__")), str(state["messages"][-1].content)
        paused, last = False, ""
        # the model's tokens as they come and each step's update, as the bot takes them
        async for mode, chunk in agent.astream(given, config, stream_mode=["messages", "updates"]):
            if mode == "updates":
                paused = paused or "__interrupt__" in chunk
                for update in chunk.values():
                    if isinstance(update, dict) and update.get("messages"):
                        last = str(update["messages"][-1].content)
        return paused, last

    async def start(thread: str, text: str) -> tuple[str | None, str]:
        paused, last = await run({"messages": [{"role": "user", "content": text}]}, thread)
        return (thread, "") if paused else (None, last)

    async def resume(thread: str, state: str) -> str:
        return (await run(Command(resume={"decisions": [{"type": "approve"}]}), thread))[1]

    return start, resume


CYCLES = {"pydantic_ai": pydantic_ai_cycle, "openai_agents": openai_agents_cycle, "langgraph": langgraph_cycle}


class PausedRuns:
    """The paused runs, by thread, in sqlite: written before the card, taken once on the requester's click."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path)
        self.db.execute("CREATE TABLE IF NOT EXISTS paused (thread TEXT PRIMARY KEY, requester TEXT, state TEXT)")
        self.db.commit()

    def keep(self, thread: str, requester: str, state: str) -> None:
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO paused VALUES (?, ?, ?)", (thread, requester, state))

    def take(self, thread: str, clicker: str) -> str | None:
        with self.db:
            row = self.db.execute("DELETE FROM paused WHERE thread = ? AND requester = ? RETURNING state",
                                  (thread, clicker)).fetchone()
        return row[0] if row else None

    def close(self) -> None:
        self.db.close()


async def framework_app(framework: str, secret: str, token: str, slack_url: str, model_url: str, data_dir: Path,
                        busy: Busy, stream: bool = False, bots_tools: bool = False) -> web.Application:
    import aiohttp
    from slack_bolt.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    from .bare import approve_card

    session = aiohttp.ClientSession()
    paused = PausedRuns(data_dir / "paused.sqlite")
    stack = AsyncExitStack()
    # the Agents SDK's agent only: the bot adds a tool to it (pydantic-ai's and LangGraph's get none)
    given = {"bots_tools": True} if bots_tools and framework == "openai_agents" else {}
    start, resume = await CYCLES[framework](model_url, data_dir, stack, stream, **given)
    app = AsyncApp(signing_secret=secret, client=AsyncWebClient(token=token, base_url=slack_url, session=session))

    @app.event("message")
    async def twin(ack: Any) -> None:  # a mention arrives twice (app_mention and message), as in Slack
        await ack()

    @app.event("app_mention")
    async def mention(event: dict[str, Any], client: AsyncWebClient) -> None:
        with busy:
            channel, thread_ts = event["channel"], event.get("thread_ts") or event["ts"]
            thread = f"{channel}:{thread_ts}"
            state, reply = await start(thread, event["text"])
            if state is None:
                await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=reply)
                return
            paused.keep(thread, event["user"], state)
            blocks = approve_card(ACTION)
            blocks[1]["elements"][0]["value"] = thread
            await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=PROMPT, blocks=blocks)

    @app.action(ACTION)
    async def approve(ack: Any, body: dict[str, Any], client: AsyncWebClient) -> None:
        with busy:
            await ack()  # Bolt answers Slack here; the run resumes after the response
            thread, user = body["actions"][0]["value"], body["user"]["id"]
            state = paused.take(thread, user)
            if state is None:
                return  # not the requester's click, or one after it
            reply = await resume(thread, state)
            where = body["container"]
            channel, thread_ts = thread.split(":", 1)
            await client.chat_update(channel=where["channel_id"], ts=where["message_ts"],
                                     text=f"Approved by <@{user}>.", blocks=[])
            await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=reply)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def close(_: web.Application) -> None:
        await session.close()
        await stack.aclose()
        paused.close()

    web_app = app.web_app(path="/slack/events")
    web_app.router.add_get("/healthz", healthz)
    web_app.on_cleanup.append(close)
    return web_app


async def main(args: argparse.Namespace) -> None:
    busy = Busy()
    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    app = await framework_app(args.framework, args.secret, args.token, args.slack_url, args.model_url, data_dir, busy,
                              args.stream, args.bots_tools)
    runner, port = await open_site(app, args.port)
    try:
        await serve_until_stopped(f"http://127.0.0.1:{port}/slack/events", busy.idle)
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.http.framework_apps")
    parser.add_argument("--framework", required=True, choices=sorted(CYCLES))
    for name in ("--secret", "--token", "--slack-url", "--model-url", "--data-dir"):
        parser.add_argument(name, required=True)
    parser.add_argument("--redis-url")  # the bench gives every contender one; this one keeps nothing in Redis
    parser.add_argument("--stream", action="store_true",
                        help="take the model's answers streamed, as the bot does (to show text as it comes)")
    parser.add_argument("--bots-tools", action="store_true",
                        help="offer the model the tools the bot adds to the agent too (the Agents SDK's ask_user), "
                             "so that it is asked exactly what the bot's copy of the agent is asked")
    parser.add_argument("--port", type=int, default=0)
    asyncio.run(main(parser.parse_args()))
