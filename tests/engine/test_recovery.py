"""Failures and recovery (DESIGN §7): dead workers, frontends that hiccup, models that are down."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time

import pytest

from bot.approval import always
from bot.engine.turn_commands import Sweep
from bot.models.openai import OpenAIChatModel
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.tools import Tool, ToolContext
from store.session_keys import OUTBOX
from tests.engine.harness import (
    RecordingChannel,
    approve,
    assert_valid_history,
    make_runtime,
    say,
    session,
    shown,
    tool_results,
    user_texts,
)

LEASE_MS = 300


def _script() -> list:
    return [call("sync_ledger", call_id="s1", account="acme"), model_say("Sync finished.")]


@pytest.mark.parametrize("idempotent", [False, True], ids=["not-idempotent", "idempotent"])
async def test_dead_worker_turn_is_continued_by_another(redis, idempotent):
    entered = asyncio.Event()
    keys: list[str] = []

    async def hangs(args: dict, ctx: ToolContext) -> dict:
        keys.append(ctx.idempotency_key)
        entered.set()
        await asyncio.Event().wait()  # the worker dies in here
        return {}

    tool_a = Tool(hangs, name="sync_ledger", idempotent=idempotent)
    runtime_a, channel_a, store = make_runtime(redis, ScriptedModel(_script()), [tool_a], lease_ms=LEASE_MS)
    worker = asyncio.create_task(say(runtime_a, "sync acme"))
    await asyncio.wait_for(entered.wait(), 2)
    worker.cancel()  # a dead worker: it never releases its lease
    with contextlib.suppress(asyncio.CancelledError):
        await worker
    sid = session().session_id
    assert await redis.exists(store.key(sid, "lease"))

    runs_b: list[str] = []

    async def works(args: dict, ctx: ToolContext) -> dict:
        runs_b.append(ctx.idempotency_key)
        return {"synced": args["account"]}

    model_b = ScriptedModel(_script())
    runtime_b, channel_b, _ = make_runtime(redis, model_b, [Tool(works, name="sync_ledger", idempotent=idempotent)],
                                           lease_ms=LEASE_MS)
    await runtime_b.drive(sid)  # the lease is still held: nothing happens yet
    assert channel_b.events == []

    deadline = time.monotonic() + 3
    while "turn.completed" not in channel_b.types() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        await runtime_b.recover()
    await runtime_b.wait_idle()  # the outbox may be between two deliveries of that turn's last events
    assert channel_b.types()[-2:] == ["turn.completed", "session.waiting"]
    history = shown(model_b)
    assert_valid_history(history)
    seen = tool_results(history)["s1"]
    if idempotent:
        assert runs_b == keys  # re-run once, with the same idempotency key
        assert json.loads(seen) == {"synced": "acme"}
    else:
        assert runs_b == []  # not silently re-run: the model is told it was interrupted
        assert "interrupted" in seen
        assert [r.status for r in channel_b.of("action.result")] == ["failed"]
    assert len(model_b.requests) == 1


async def test_failed_card_delivery_is_offered_again(redis):
    gated = Tool(lambda args: {"ok": True}, name="deploy", approval=always())
    channel = RecordingChannel(fail_input_requested=1000)
    runtime, channel, store = make_runtime(redis, ScriptedModel([call("deploy"), model_say("ok")]), [gated],
                                           channel=channel)
    await say(runtime, "deploy")
    assert channel.of("input.requested") == []  # the frontend failed to show it
    assert "turn.waiting" not in channel.types()  # order is kept: nothing after the card jumps ahead of it
    sid = session().session_id
    assert await runtime.outbox.store.outbox_due() == []  # retried after a backoff, not in a tight loop
    assert await runtime.recover() == 0
    assert channel.fail_input_requested > 990  # a handful of attempts, not a spin

    channel.fail_input_requested = 0  # the frontend is back
    # make the retry due now instead of sleeping through the backoff
    await redis.hdel(store.key(sid, "out"), "_hold:frontend")
    await redis.zadd(OUTBOX, {sid: 0})
    await runtime.recover()
    [req] = channel.requests()
    assert req.kind == "tool-approval"
    assert channel.types()[-2:] == ["input.requested", "turn.waiting"]
    assert await runtime.recover() == 0  # shown once, not again
    assert len(channel.requests()) == 1

    assert (await approve(runtime, req.request_id)).state == "settled"
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_model_endpoint_down_fails_the_turn_cleanly(redis):
    down = OpenAIChatModel("gpt-4o-mini", base_url=f"http://127.0.0.1:{_closed_port()}/v1", api_key="sk-x",
                           max_retries=0, timeout=2)
    try:
        runtime, channel, store = make_runtime(redis, down, [])
        posted = await asyncio.wait_for(say(runtime, "hello"), 5)
    finally:
        await down.aclose()
    assert posted.state == "queued"
    assert channel.types() == ["turn.started", "turn.failed", "session.waiting"]
    [failed] = channel.of("turn.failed")
    assert failed.reason and "model" in failed.reason.lower()
    assert "sk-x" not in failed.reason

    # nothing half-written: the state loads, no turn is open, no lease is held, nothing queued
    sid = session().session_id
    raw, _, _ = await store.load(sid)
    assert raw is not None and raw["turn"] is None
    assert not await redis.exists(store.key(sid, "lease"))
    assert await store.inbox(sid) == []
    assert (await store.sweep(Sweep("sessions"))).sessions == []

    # the endpoint is back (a new process with a working model): the next message starts a new turn
    model = ScriptedModel([model_say("Hi!")])
    runtime_b, channel_b, _ = make_runtime(redis, model, [])
    await say(runtime_b, "hello again")
    assert channel_b.types() == ["turn.started", "message.completed", "turn.completed", "session.waiting"]
    assert user_texts(shown(model)) == ["hello", "hello again"]


async def test_a_slow_tool_keeps_its_lease(redis):
    runs: list[int] = []

    async def slow(args: dict) -> dict:
        runs.append(1)
        await asyncio.sleep(3 * LEASE_MS / 1000)
        return {"ok": True}

    runtime_a, channel_a, store = make_runtime(redis, ScriptedModel(_script()), [Tool(slow, name="sync_ledger")],
                                               lease_ms=LEASE_MS)
    runtime_b, channel_b, _ = make_runtime(redis, ScriptedModel(_script()), [Tool(slow, name="sync_ledger")],
                                           lease_ms=LEASE_MS)
    worker = asyncio.create_task(say(runtime_a, "sync acme"))
    deadline = time.monotonic() + 5
    while not worker.done() and time.monotonic() < deadline:  # a second replica sweeps all the while
        await runtime_b.recover()
        await asyncio.sleep(LEASE_MS / 4000)
    await asyncio.wait_for(worker, 1)
    assert runs == [1]
    assert channel_b.events == []
    assert channel_a.types()[-2:] == ["turn.completed", "session.waiting"]


# --- timers never wait on a tool or a model ------------------------------------------


class _ByPrompt:
    """One scripted model per session, chosen by the first thing said in it (both sessions share the process)."""

    name = "by-prompt"

    def __init__(self, **scripts: list) -> None:
        self.models = {prompt: ScriptedModel(script) for prompt, script in scripts.items()}

    async def complete(self, messages: list[dict], tools: list, *, on_text=None):
        first = next(m["content"] for m in messages if m.get("role") == "user")
        return await self.models[first].complete(messages, tools, on_text=on_text)


async def test_recovery_hands_a_slow_turn_to_the_background_and_deadlines_fire_on_time(redis):
    from bot.protocol import InputResponse
    from tests.engine.harness import ALICE
    from tests.engine.test_timers import Clock

    clock = Clock()
    entered, release, syncs = asyncio.Event(), asyncio.Event(), []

    async def sync_ledger(args: dict) -> dict:
        syncs.append(args)
        entered.set()
        await release.wait()  # a slow tool: the test holds it
        return {"synced": True}

    async def pay(args: dict) -> dict:
        return {"paid": True}

    tools = [Tool(sync_ledger, name="sync_ledger", approval=always()),
             Tool(pay, name="pay", approval=always(), expires_after=60)]
    model = _ByPrompt(sync=[call("sync_ledger"), model_say("synced")], pay=[call("pay"), model_say("not paid")])
    runtime, channel, store = make_runtime(redis, model, tools)
    runtime.settings.clock = clock
    slow, paying = session("slow"), session("paying")
    await say(runtime, "sync", ref=slow)
    await say(runtime, "pay", ref=paying)
    sync_card, pay_card = channel.requests()
    # the sync was approved, and the process that settled it died before driving it: recovery's to continue
    await runtime.answer(InputResponse(request_id=sync_card.request_id, option_id="approve", principal=ALICE),
                         resume=False)

    startup = asyncio.create_task(runtime.recover())  # what start-up runs
    await asyncio.wait_for(entered.wait(), 2)  # the slow tool is running
    done, _ = await asyncio.wait({startup}, timeout=1)
    assert startup in done, "recovery waits on a slow tool"

    clock.now += 61  # the payment's card expires meanwhile: the next sweep fires it, and its turn goes on
    await asyncio.wait_for(runtime.recover(), 1)
    deadline = time.monotonic() + 3
    while "turn.completed" not in [e.type for e in await store.events(paying.session_id)]:
        assert time.monotonic() < deadline, "the expiry waited on the slow tool"
        await asyncio.sleep(0.05)
        await runtime.recover()
    resolved = [r.outcome for e in await store.events(paying.session_id) if e.type == "input.resolved"
                for r in e.resolutions]
    assert resolved == ["expired"]
    assert not release.is_set() and len(syncs) == 1  # all that while the sync ran, once (never a second drive)

    release.set()
    await runtime.wait_idle()
    assert [e.type for e in await store.events(slow.session_id)][-2:] == ["turn.completed", "session.waiting"]
    assert len(syncs) == 1
