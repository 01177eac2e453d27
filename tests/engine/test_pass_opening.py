"""A delivery pass begun by the checkpoint whose events go out at once (DESIGN §12 Outbox).

The process that commits a drive's park or its turn's end delivers those events right away; the checkpoint's
round trip takes the session's deliverer lock and reads what a pass's begin reads, so the pass sends no begin
of its own. Such a pass is the same pass: careful after a dead deliverer, never taken while another pass
holds the lock (the process then delivers as before, when that pass lets go), never left holding the lock when
the checkpoint is refused, and never taken by a web process, which hands delivery to workers.
On a real Valkey with real runtimes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from bot.engine.outbox import PassOpening
from bot.engine.roles import WebRuntime
from bot.engine.tool_registry import ToolRegistry
from bot.engine.turn_commands import CommitCommand
from bot.engine.turns import RuntimeSettings
from bot.models.scripted import ScriptedModel
from bot.models.scripted import say as model_say
from bot.protocol import LeaseLost, MessageCompleted
from store.outbox import RedisOutbox
from store.session_keys import OUTBOX
from store.turns import RedisTurns
from store.wakeups import WakeQueue
from tests.engine.harness import RecordingChannel, make_runtime, say, session, take_lease


def _opening(outbox: RedisOutbox, sid: str, team_id: str | None) -> PassOpening:
    opening = PassOpening("checkpoint-token", ["frontend"], asyncio.get_running_loop().create_future(), team_id)
    opening.begin = outbox.begin_with_checkpoint(sid, opening)
    return opening


def _said(sid: str, text: str) -> MessageCompleted:
    return MessageCompleted(session_id=sid, turn_id="t", text=text)


async def test_a_checkpoint_after_a_dead_deliverer_begins_a_careful_pass_over_what_it_committed(redis):
    runtime, _, store = make_runtime(redis, ScriptedModel([]), [])
    outbox = runtime.outbox.store
    ref = session("careful")
    sid = ref.session_id
    await redis.set(store.key(sid, "outlock"), "dead-token|1")  # its deliverer died mid-pass: the lock ran out
    token = await take_lease(store, sid)
    opening = _opening(outbox, sid, ref.team_id)

    committed, _, _ = await store.commit(CommitCommand(sid, token, {"turns": 0}, [_said(sid, "hello")], ref=ref, read=False,
                                                opening=opening))

    assert opening.begun is not None
    assert [(e.seq, e.text) for _, e in opening.begun.entries] == [(committed[0].seq, "hello")]
    assert opening.begun.ref.team_id == ref.team_id  # the routing data the checkpoint wrote, read after it
    assert outbox.posts.pass_is_careful(sid)  # what the dead one posted may be unrecorded: it looks first
    assert (await redis.get(store.key(sid, "outlock"))).startswith(b"checkpoint-token|")
    assert await redis.zscore(OUTBOX, sid) == opening.begun.claim  # due again one lease on, if this one dies


async def test_a_checkpoint_takes_no_lock_another_pass_holds_and_its_events_go_out_after_that_pass(redis):
    runtime, channel, store = make_runtime(redis, ScriptedModel([model_say("the answer")]), [])
    ref = session("busy")
    sid = ref.session_id
    held = f"other-pass|{int(time.time() * 1000) + 60_000}".encode()
    await redis.set(store.key(sid, "outlock"), held)  # another replica is delivering this session

    await say(runtime, "hi", ref=ref)

    assert await redis.get(store.key(sid, "outlock")) == held  # not taken, not touched
    assert channel.of("message.completed") == []
    assert await redis.zscore(OUTBOX, sid) is not None  # still on the list: nothing is left behind
    await redis.delete(store.key(sid, "outlock"))  # that pass ends
    await redis.zadd(OUTBOX, {sid: 0})  # (its recheck is due)
    await runtime.recover()
    await runtime.wait_idle()
    assert [e.text for e in channel.of("message.completed")] == ["the answer"]


async def test_a_refused_checkpoint_never_leaves_the_lock_its_round_trip_took(redis):
    runtime, channel, store = make_runtime(redis, ScriptedModel([]), [])
    ref = session("refused")
    sid = ref.session_id
    stale = await take_lease(store, sid)
    await store.commit(CommitCommand(sid, stale, {"turns": 0}, [_said(sid, "before")], ref=ref))  # not delivered yet
    await redis.delete(store.key(sid, "lease"))
    assert await take_lease(store, sid)  # another worker took the turn

    opening = runtime.outbox.open_pass(sid)
    assert opening is not None
    try:
        with contextlib.suppress(LeaseLost):
            await store.commit(CommitCommand(sid, stale, {"turns": 1}, [_said(sid, "fenced")], ref=ref, read=False,
                                         opening=opening))
            raise AssertionError("a fenced checkpoint must raise LeaseLost")
    finally:
        opening.opened()
    await runtime.wait_idle()

    assert opening.begun is not None  # the begin after the refused script took the lock: its pass ran
    assert await redis.get(store.key(sid, "outlock")) is None  # and let go
    assert [e.text for e in channel.of("message.completed")] == ["before"]  # nothing of the refused write


async def test_a_commit_after_the_checkpoint_s_read_gets_a_pass_of_its_own(redis):
    runtime, channel, store = make_runtime(redis, ScriptedModel([]), [])
    ref = session("after")
    sid = ref.session_id
    token = await take_lease(store, sid)
    opening = runtime.outbox.open_pass(sid)
    assert opening is not None
    try:
        await store.commit(CommitCommand(sid, token, {"turns": 0}, [_said(sid, "first")], ref=ref, read=False,
                                     opening=opening))
        # another task of this process commits and kicks before the checkpoint's pass goes on
        [later] = (await store.commit(CommitCommand(sid, None, None, [_said(sid, "second")]))).events
        runtime.outbox.kick(sid, later.seq)
    finally:
        opening.opened()
    await runtime.wait_idle()
    assert [e.text for e in channel.of("message.completed")] == ["first", "second"]
    assert await runtime.outbox.store.outbox_due() == []


async def test_a_web_process_never_takes_the_deliverer_lock(redis):
    web = WebRuntime(wakeups=WakeQueue(redis), store=RedisTurns(redis), outbox_store=RedisOutbox(redis),
                     model=ScriptedModel([]), tools=ToolRegistry([]), channel=RecordingChannel(),
                     settings=RuntimeSettings(system_prompt=""))
    assert web.outbox.open_pass(session("web").session_id) is None  # its commits hand delivery to a worker
