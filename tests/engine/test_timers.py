"""Deadlines fire once (bot/engine/timers.py): across replicas, after a crash between firing and forgetting
the timer, and never after an answer. Time is the runtime's clock, moved by the test."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from bot.approval import always, never
from bot.engine.turn_commands import Sweep
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.tools import Tool
from tests.engine.harness import approve, make_runtime, say, session, tool_results


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _timed(remind_after: float | None = None, expires_after: float | None = None) -> tuple[Tool, list[dict]]:
    runs: list[dict] = []

    async def pay(args: dict) -> dict:
        runs.append(dict(args))
        return {"paid": True}

    return Tool(pay, name="pay", description="Pay.", approval=always(), remind_after=remind_after,
                expires_after=expires_after), runs


def _runtime(redis, tool: Tool, clock: Clock, model: ScriptedModel | None = None, **kw):
    model = model or ScriptedModel([call("pay"), model_say("ok")])
    runtime, channel, store = make_runtime(redis, model, [tool], **kw)
    runtime.settings.clock = clock
    return runtime, channel, store


async def test_two_replicas_sweeping_at_once_fire_each_timer_once(redis):
    clock = Clock()
    tool, runs = _timed(remind_after=60, expires_after=600)
    model = ScriptedModel([call("pay"), model_say("ok")])  # one model: whichever replica resumes uses it
    a, channel_a, store = _runtime(redis, tool, clock, model)
    b, _, _ = _runtime(redis, tool, clock, model)
    await say(a, "pay")
    [req] = channel_a.of("input.requested")[0].requests
    assert req.remind_at is not None and req.expires_at is not None
    clock.now += 61
    await asyncio.gather(*(r.recover() for r in (a, b, a, b)))
    await a.wait_idle()
    await b.wait_idle()
    reminded = [e for e in await store.events(session().session_id) if e.type == "input.reminded"]
    assert [e.request_id for e in reminded] == [req.request_id]
    clock.now += 600
    await asyncio.gather(*(r.recover() for r in (a, b, a, b)))
    await a.wait_idle()
    await b.wait_idle()
    events = await store.events(session().session_id)
    resolved = [r.outcome for e in events if e.type == "input.resolved" for r in e.resolutions]
    assert resolved == ["expired"] and runs == []
    assert [e.type for e in events].count("turn.completed") == 1  # the turn went on, once
    assert "Nobody answered in time" in str(tool_results(model.requests[-1][0]))  # the model was told


async def test_a_sweeper_killed_after_firing_leaves_a_timer_that_fires_again_harmlessly(redis):
    clock = Clock()
    tool, _ = _timed(remind_after=60)
    runtime, _, store = _runtime(redis, tool, clock, lease_ms=500)
    await say(runtime, "pay")
    clock.now += 61
    # the sweeper claims the timer and fires it, then dies before forgetting it
    [(member, _claim)] = (await store.sweep(Sweep("timers", int(clock.now * 1000)))).timers
    await runtime.timers._fire(*member.split(":", 1))
    assert (await store.sweep(Sweep("timers", int(clock.now * 1000)))).timers == []  # claimed: nobody else fires it now
    clock.now += 1  # one lease later it is due again, and another sweep fires it again
    assert await runtime.timers.sweep() == 1
    await runtime.wait_idle()
    reminded = [e for e in await store.events(session().session_id) if e.type == "input.reminded"]
    assert len(reminded) == 1  # the request remembers it was reminded
    assert (await store.sweep(Sweep("timers", int(clock.now * 1000) + 10**9))).timers == []


async def test_an_answered_request_neither_reminds_nor_expires(redis):
    clock = Clock()
    tool, runs = _timed(remind_after=60, expires_after=600)
    runtime, channel, store = _runtime(redis, tool, clock)
    await say(runtime, "pay")
    [req] = channel.of("input.requested")[0].requests
    await approve(runtime, req.request_id)
    clock.now += 3600
    await runtime.recover()
    await runtime.wait_idle()
    types = [e.type for e in await store.events(session().session_id)]
    assert "input.reminded" not in types and runs == [{}]
    resolved = [r.outcome for e in channel.of("input.resolved") for r in e.resolutions]
    assert resolved == ["approved"]


async def test_a_reminder_after_the_expiry_is_not_set(redis):
    tool, _ = _timed(remind_after=600, expires_after=60)
    runtime, channel, _ = _runtime(redis, tool, Clock())
    await say(runtime, "pay")
    [req] = channel.of("input.requested")[0].requests
    assert req.remind_at is None and req.expires_at is not None


async def test_ctx_ask_with_a_timeout_returns_expired_on_replay_and_the_tool_finishes(redis):
    clock = Clock()
    seen: list[str] = []

    async def choose(args: dict, ctx) -> dict:
        answer = await ctx.ask("Which size?", options=["S", "L"], timeout=timedelta(minutes=5))
        seen.append(answer.status)
        return {"size": answer.value or "M (default)"}

    tool = Tool(choose, name="choose", description="Choose a size.", approval=never())
    model = ScriptedModel([call("choose"), model_say("ok")])
    runtime, channel, store = _runtime(redis, tool, clock, model)
    await say(runtime, "choose")
    [req] = channel.of("input.requested")[0].requests
    assert req.kind == "question" and (req.expires_at - req.created_at) == timedelta(minutes=5)
    clock.now += 299
    assert await runtime.timers.sweep() == 0
    clock.now += 2
    await runtime.recover()
    await runtime.wait_idle()
    assert seen == ["expired"]  # the replay got "expired", once
    assert "M (default)" in str(tool_results(model.requests[-1][0]))
    resolved = [r.outcome for e in await store.events(session().session_id) if e.type == "input.resolved"
                for r in e.resolutions]
    assert resolved == ["expired"]
