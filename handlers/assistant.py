"""Slack's AI split view (Agents & AI Apps) through Bolt's ``AsyncAssistant`` middleware.

- ``assistant_thread_started``: the channel the person was looking at is remembered (Redis, per thread),
  and a greeting and suggested prompts drawn from the loaded tools are posted after the ack.
- ``assistant_thread_context_changed``: the new channel is remembered.
- a person's message in an assistant thread takes the same path as any DM (``handlers.events``): one
  session per thread, cards and questions in the thread exactly as in channels. The thread's first request
  gives it its title, and tells the agent which channel the person is looking at.

Everything the listeners must not lose is written before the ack; Slack calls run after it. Slack's
redeliveries of the two events change nothing (``SlackDeps.once``): no second greeting, no older
channel written over a newer one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.assistant.thread_context import AssistantThreadContext
from slack_bolt.context.assistant.thread_context_store.async_store import AsyncAssistantThreadContextStore
from slack_bolt.middleware.assistant.async_assistant import AsyncAssistant
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.request.payload_utils import (
    is_assistant_event,
    is_other_message_sub_event_in_assistant_thread,
)
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError

from blocks.assistant import PROMPTS_TITLE, greeting, suggested_prompts, thread_title
from bot.builtin import BUILTIN_TOOLS
from bot.session import slack_session_id
from handlers import events
from handlers.identity import installation_team
from handlers.shared.deps import SlackDeps
from store.assistant_threads import AssistantThreads

log = logging.getLogger(__name__)

BUILTIN = {t.name for t in BUILTIN_TOOLS}


class RedisThreadContexts(AsyncAssistantThreadContextStore):
    """Bolt's thread-context store over ``store.assistant_threads`` (one Redis read, no Slack call)."""

    def __init__(self, threads: AssistantThreads):
        self.threads = threads

    async def save(self, *, channel_id: str, thread_ts: str, context: dict[str, str]) -> None:
        await self.threads.remember_context(channel_id, thread_ts, dict(context))

    async def find(self, *, channel_id: str, thread_ts: str) -> AssistantThreadContext | None:
        found = await self.threads.context(channel_id, thread_ts)
        return AssistantThreadContext(found) if found and found.get("channel_id") else None


class ThreadsAssistant(AsyncAssistant):
    """Bolt's assistant middleware, asked only about requests it could handle. It runs in front of every
    request (a mention, a click) and tries its three listeners, each matcher building Bolt's whole set of
    listener arguments (~30–40 µs a request in all); every one of them, and its ack of other message events
    in assistant threads, first needs what one of Bolt's own two predicates below says."""

    async def async_process(self, *, req: AsyncBoltRequest, resp: BoltResponse,
                            next: Callable[[], Awaitable[BoltResponse]]) -> BoltResponse | None:
        if is_assistant_event(req.body) or is_other_message_sub_event_in_assistant_thread(req.body):
            return await super().async_process(req=req, resp=resp, next=next)
        await next()
        return None  # (as Bolt's own does when none of its listeners matched)


def register(app: AsyncApp, deps: SlackDeps) -> None:
    threads = deps.assistant_threads
    assistant = ThreadsAssistant(thread_context_store=RedisThreadContexts(threads))

    async def started(body: dict[str, Any], payload: dict[str, Any], client: Any) -> None:
        thread = payload.get("assistant_thread") or {}
        channel, thread_ts = thread.get("channel_id"), thread.get("thread_ts")
        if not channel or not thread_ts:
            return
        async with deps.once(body) as first:
            if not first:
                return  # (a redelivery: greeted already)
            if (thread.get("context") or {}).get("channel_id"):
                await threads.remember_context(channel, thread_ts, thread["context"])
        deps.tasks.spawn(
            _welcome(deps, client, channel, thread_ts, thread.get("user_id")),
            what=f"welcome in assistant thread {channel}:{thread_ts}",
        )

    async def context_changed(body: dict[str, Any], payload: dict[str, Any]) -> None:
        thread = payload.get("assistant_thread") or {}
        if not (thread.get("channel_id") and thread.get("thread_ts") and (thread.get("context") or {}).get("channel_id")):
            return
        async with deps.once(body) as first:  # a redelivery would undo a newer change
            if first:
                await threads.remember_context(thread["channel_id"], thread["thread_ts"], thread["context"])

    async def user_message(
        body: dict[str, Any], event: dict[str, Any], context: dict[str, Any], client: Any
    ) -> None:
        channel, thread_ts = event.get("channel"), event.get("thread_ts")
        team = installation_team(body)
        if event.get("subtype") or not channel or not thread_ts or not team:
            await events.handle_message(deps, body, event, context, client)
            return
        first = not await deps.store.exists(slack_session_id(team, channel, thread_ts))
        seen = event
        if first:  # the agent learns where the person is looking, once, with their first request
            where = await threads.context(channel, thread_ts)
            if where and where.get("channel_id"):
                seen = {
                    **event,
                    "text": f"{event.get('text') or ''}\n\n(I am looking at <#{where['channel_id']}>.)",
                }
        recorded_in = await events.handle_message(deps, body, seen, context, client)
        if await threads.claim_title(channel, thread_ts, recorded_in):  # its session owns the thread from now on
            deps.tasks.spawn(
                _set_title(client, channel, thread_ts, event.get("text") or ""),
                what=f"title of assistant thread {channel}:{thread_ts}",
            )

    assistant.thread_started(started)
    assistant.thread_context_changed(context_changed)
    assistant.user_message(user_message)
    app.assistant(assistant)


def _tools(deps: SlackDeps) -> list[tuple[str, str, str | None]]:
    return [(t.name, t.description, t.example) for t in deps.runtime.tools if t.name not in BUILTIN]


async def _welcome(deps: SlackDeps, client: Any, channel: str, thread_ts: str, user_id: str | None) -> None:
    tools = _tools(deps)
    try:
        await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=greeting(user_id, tools))
        prompts = suggested_prompts(tools)
        if prompts:
            await client.assistant_threads_setSuggestedPrompts(
                channel_id=channel, thread_ts=thread_ts, prompts=prompts, title=PROMPTS_TITLE
            )
    except SlackApiError as exc:  # a courtesy: the thread works without it
        log.info("no greeting in assistant thread %s:%s: %s", channel, thread_ts, exc.response.get("error"))


async def _set_title(client: Any, channel: str, thread_ts: str, text: str) -> None:
    try:
        await client.assistant_threads_setTitle(
            channel_id=channel, thread_ts=thread_ts, title=thread_title(text)
        )
    except SlackApiError as exc:
        log.info("assistant thread %s:%s keeps its title: %s", channel, thread_ts, exc.response.get("error"))
