"""The writes that start work take the turn lease for the drive that follows.

A new message's record and the settle that completes a step take the session's turn lease in their own
script when this process drives next (role ``all`` or ``worker``) and it is free. It is the same
token-fenced lease a drive takes: a process that dies holding it leaves it to lapse and the sweep drives
the session, and a holder whose lease lapsed commits nothing and starts no call. A web process takes none.
Real runtimes on a real Redis; "a dead process" is one that never goes on after the write.
"""

from __future__ import annotations

import asyncio

from bot.approval import always
from bot.engine.roles import WebRuntime
from bot.engine.tool_registry import ToolRegistry
from bot.engine.turns import RuntimeSettings
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from store.outbox import RedisOutbox
from store.turns import RedisTurns
from store.wakeups import WakeQueue
from tests.engine.harness import (
    ALICE,
    RecordingChannel,
    decision,
    make_runtime,
    recording_tool,
    say,
    session,
    take_lease,
)


async def _until(runtime, done, *, tries: int = 40) -> None:
    """Sweep as a live replica does until ``done()``."""
    for _ in range(tries):
        await runtime.recover()
        await runtime.wait_idle()
        if done():
            return
        await asyncio.sleep(0.1)


async def test_a_record_takes_the_free_lease_for_its_drive_and_a_dead_recorder_s_lapses(redis):
    runtime_a, _, store = make_runtime(redis, ScriptedModel([]), [], lease_ms=300)
    sid = session().session_id
    message = await runtime_a.record_message(session(), ALICE, "hello", message_id="m1", lease=True)
    assert message is not None
    assert await redis.get(store.key(sid, "lease")) is not None  # taken with the record
    # runtime_a dies here, before it processes the message: the lease lapses and another replica drives
    runtime_b, channel_b, _ = make_runtime(redis, ScriptedModel([model_say("hi there")]), [], lease_ms=300)
    await _until(runtime_b, lambda: "turn.completed" in channel_b.types())
    assert channel_b.types()[-2:] == ["turn.completed", "session.waiting"]
    assert [e.text for e in channel_b.of("message.completed")] == ["hi there"]


async def test_a_record_s_lease_that_lapsed_commits_nothing_and_asks_no_model(redis):
    model_a = ScriptedModel([model_say("from A")])
    runtime_a, _, _ = make_runtime(redis, model_a, [], lease_ms=300)
    message = await runtime_a.record_message(session(), ALICE, "hello", message_id="m1", lease=True)
    await asyncio.sleep(0.4)  # runtime_a stalls past its lease: runtime_b takes the session over
    runtime_b, channel_b, store = make_runtime(redis, ScriptedModel([model_say("from B")]), [], lease_ms=300)
    await _until(runtime_b, lambda: "turn.completed" in channel_b.types())
    await runtime_a.process_message(session().session_id, message)  # wakes up with the old token
    await runtime_a.wait_idle()
    assert model_a.requests == []  # the stalled holder asked the model nothing
    state = await store.state(session().session_id)
    said = [m.get("content") for m in state["history"] if m.get("role") == "assistant"]
    assert said == ["from B"], said  # one turn, B's: the stalled holder's checkpoints were refused
    assert state["turns"] == 1


async def test_a_settle_that_completes_the_step_takes_the_lease_and_a_dead_settler_s_lapses(redis):
    refund, runs = recording_tool("refund", approval=always())
    script = [call("refund", call_id="r1", charge="ch_1"), model_say("refunded")]
    runtime_a, channel_a, store = make_runtime(redis, ScriptedModel(script), [refund], lease_ms=300)
    await say(runtime_a, "refund ch_1")
    [card] = channel_a.requests()
    result = await runtime_a.answer(decision(card.request_id, "approve"), resume=False, lease=True)
    assert result.batch_complete and result.held is not None
    assert await redis.get(store.key(session().session_id, "lease")) == result.held.token.encode()
    # runtime_a dies before it resumes the turn: the lease lapses and another replica runs the call, once
    runtime_b, channel_b, _ = make_runtime(redis, ScriptedModel(script), [refund], lease_ms=300)
    await _until(runtime_b, lambda: "turn.completed" in channel_b.types())
    assert len(runs) == 1
    assert channel_b.types()[-2:] == ["turn.completed", "session.waiting"]


async def test_a_settle_s_lease_that_lapsed_starts_no_call(redis):
    refund, runs = recording_tool("refund", approval=always())
    script = [call("refund", call_id="r1", charge="ch_1"), model_say("refunded")]
    runtime_a, channel_a, _ = make_runtime(redis, ScriptedModel(script), [refund], lease_ms=300)
    await say(runtime_a, "refund ch_1")
    [card] = channel_a.requests()
    result = await runtime_a.answer(decision(card.request_id, "approve"), resume=False, lease=True)
    await asyncio.sleep(0.4)  # stalls past its lease: runtime_b resumes the turn
    runtime_b, channel_b, _ = make_runtime(redis, ScriptedModel(script), [refund], lease_ms=300)
    await _until(runtime_b, lambda: "turn.completed" in channel_b.types())
    await runtime_a.drive(session().session_id, result.held)  # wakes up with the old token and snapshot
    await runtime_a.wait_idle()
    assert len(runs) == 1  # the stalled holder's checkpoint (and its call's start) was refused


async def test_a_record_or_settle_while_a_drive_holds_the_lease_leaves_it_to_that_drive(redis):
    refund, runs = recording_tool("refund", approval=always())
    script = [call("refund", call_id="r1", charge="ch_1"), model_say("refunded")]
    runtime, channel, store = make_runtime(redis, ScriptedModel(script), [refund])
    await say(runtime, "refund ch_1")
    [card] = channel.requests()
    sid = session().session_id
    other = await take_lease(store, sid)  # another replica's drive holds it
    assert await runtime.record_message(session(), ALICE, "and quickly", message_id="m2", lease=True) is not None
    result = await runtime.answer(decision(card.request_id, "approve"), resume=False, lease=True)
    assert result.batch_complete and result.held is None
    assert await redis.get(store.key(sid, "lease")) == other.encode()
    assert runs == []


async def test_a_web_process_s_records_and_settles_take_no_lease(redis):
    refund, runs = recording_tool("refund", approval=always())
    script = [call("refund", call_id="r1", charge="ch_1"), model_say("refunded")]
    worker, channel, store = make_runtime(redis, ScriptedModel(script), [refund])
    await say(worker, "refund ch_1")
    [card] = channel.requests()
    web = WebRuntime(wakeups=WakeQueue(redis), store=RedisTurns(redis), outbox_store=RedisOutbox(redis),
                     model=ScriptedModel([]),
                     tools=ToolRegistry([refund]), channel=RecordingChannel(),
                     settings=RuntimeSettings(system_prompt=""))
    sid = session().session_id
    result = await web.answer(decision(card.request_id, "approve"), resume=False, lease=True)
    assert result.batch_complete and result.held is None
    assert await redis.get(store.key(sid, "lease")) is None  # left for the worker it hands over to
    await web.record_message(session("s2"), ALICE, "hello", message_id="m3", lease=True)
    assert await redis.get(store.key(session("s2").session_id, "lease")) is None
    await web.wait_idle()
    assert runs == []
