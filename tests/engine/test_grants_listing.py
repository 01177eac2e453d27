"""A standing grant and its App Home listing have one lifetime and one write.

``GrantStore.list`` is what App Home shows (handlers/home.py). Real Valkey; the retention is shortened
in the store's settings.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

from redis.exceptions import ResponseError

from bot.approval import always
from bot.builtin import BUILTIN_TOOLS
from bot.engine.tool_registry import ToolRegistry
from bot.engine.turns import Runtime, RuntimeSettings
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.protocol import InputResponse
from store.outbox import RedisOutbox
from store.turns import RedisTurns
from tests.engine.harness import (
    ALICE,
    RecordingChannel,
    approve,
    recording_tool,
    request_status,
    say,
    session,
)

RETENTION_S = 0.4


def _runtime(redis, *, turns: int = 1):
    restart, runs = recording_tool("restart", approval=always(grantable=["conversation"]))
    steps = [s for _ in range(turns) for s in (call("restart"), model_say("restarted"))]
    store = RedisTurns(redis, retention_s=RETENTION_S)  # type: ignore[arg-type]
    channel = RecordingChannel()
    runtime = Runtime(store=store, outbox_store=RedisOutbox(redis, retention_s=RETENTION_S),  # type: ignore[arg-type]
                      model=ScriptedModel(steps), tools=ToolRegistry([*BUILTIN_TOOLS, restart]),
                      channel=channel, settings=RuntimeSettings(system_prompt=""))
    return runtime, channel, store, runs


async def _grant_here(runtime: Runtime, request_id: str):
    result = await runtime.answer(InputResponse(request_id=request_id, option_id="approve", grant="conversation",
                                                principal=ALICE))
    await runtime.wait_idle()
    return result


async def _listed(store: RedisTurns) -> list[str]:
    return [g.grant_id for g in await store.grants.list("T1", datetime.now(UTC))]


async def _in_force(store: RedisTurns) -> bool:
    return "restart" in (await store.snapshot(session().session_id)).grants


async def test_a_grant_whose_listing_cannot_be_written_is_not_in_force(redis):
    runtime, channel, store, runs = _runtime(redis)
    await say(runtime, "restart it")
    [req] = channel.requests()
    await redis.set(store.grants.key("T1"), "not a hash")  # the listing's write fails (WRONGTYPE)

    with contextlib.suppress(ResponseError):
        await _grant_here(runtime, req.request_id)

    await redis.delete(store.grants.key("T1"))
    assert not await _in_force(store) or await _listed(store), \
        "a grant is in force that App Home cannot show, so nobody can revoke it"
    assert await request_status(store, req.request_id) == "open" and runs == []  # nothing happened: click again


async def test_a_lapsed_conversation_grant_leaves_app_home(redis):
    runtime, channel, store, runs = _runtime(redis, turns=2)
    await say(runtime, "restart it")
    [req] = channel.requests()
    assert (await _grant_here(runtime, req.request_id)).state == "settled"
    assert len(runs) == 1 and await _in_force(store)
    assert await _listed(store) == [f"conversation|{session().session_id}|restart"]

    await asyncio.sleep(RETENTION_S * 2)  # the conversation's retention passes: the grant lapses

    assert await _listed(store) == [], "a lapsed conversation grant is still listed"
    assert await redis.hlen(store.grants.key("T1")) == 0  # trimmed on read
    await say(runtime, "restart it")  # the thread used again: a new conversation, asked again
    assert len(channel.requests()) == 2 and len(runs) == 1, "the lapsed grant still approved a call"


async def test_a_click_that_did_not_count_lists_no_grant(redis):
    runtime, channel, store, runs = _runtime(redis)
    await say(runtime, "restart it")
    [req] = channel.requests()
    await approve(runtime, req.request_id)  # approved without "don't ask again": nothing granted

    late = await _grant_here(runtime, req.request_id)  # a second click, with "don't ask again here"

    assert late.state == "stale" and not await _in_force(store)
    assert await _listed(store) == []
