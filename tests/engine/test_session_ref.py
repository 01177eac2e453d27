"""The session's ref (where its posts go, what the deliverer routes by) as its delivery pass reads it.

A lease holder's checkpoint writes the ref only when it changed (the last mark carries the sum of the ref it
left): whatever checkpoints wrote it, the pass reads the latest ref. On a real Valkey.
"""

from __future__ import annotations

from bot.engine.turn_commands import CommitCommand
from bot.protocol import MessageCompleted
from bot.session import SessionRef
from store.outbox import RedisOutbox
from store.turns import RedisTurns
from tests.engine.harness import session, take_lease


def _said(sid: str, text: str) -> MessageCompleted:
    return MessageCompleted(session_id=sid, turn_id="t", text=text)


async def _ref_read_by_a_pass(outbox: RedisOutbox, sid: str, token: str) -> SessionRef:
    begun = await outbox.outbox_begin(sid, ["frontend"], token)
    assert begun is not None
    await outbox.outbox_end(sid, token, {}, [], claim=begun.claim, again_in_ms=None)
    return begun.ref


async def test_a_changed_ref_is_written_by_the_next_checkpoint_and_an_unchanged_one_stays(redis):
    store, outbox = RedisTurns(redis), RedisOutbox(redis)
    ref = session("ref-changes")
    sid = ref.session_id
    token = await take_lease(store, sid)
    assert token is not None
    await store.commit(CommitCommand(sid, token, {"turns": 0}, [_said(sid, "one")], ref=ref))
    assert await _ref_read_by_a_pass(outbox, sid, "p1") == ref
    moved = ref.model_copy(update={"channel": {"channel_id": "C2", "thread_ts": "2.0"}})
    await store.commit(CommitCommand(sid, token, {"turns": 1}, [_said(sid, "two")], ref=moved))  # the same holder, a new ref
    assert await _ref_read_by_a_pass(outbox, sid, "p2") == moved
    await store.commit(CommitCommand(sid, token, {"turns": 2}, [_said(sid, "three")], ref=moved, release=True))
    again = await take_lease(store, sid)  # another holder, the same ref: it is there
    assert again is not None
    await store.commit(CommitCommand(sid, again, {"turns": 3}, [_said(sid, "four")], ref=moved))
    assert await _ref_read_by_a_pass(outbox, sid, "p3") == moved
    await store.commit(CommitCommand(sid, again, {"turns": 4}, [_said(sid, "five")], ref=ref))  # and back
    assert await _ref_read_by_a_pass(outbox, sid, "p4") == ref


async def test_a_ref_written_without_a_lease_is_replaced_by_the_holder_s_next_checkpoint(redis):
    store, outbox = RedisTurns(redis), RedisOutbox(redis)
    ref = session("ref-tokenless")
    sid = ref.session_id
    token = await take_lease(store, sid)
    assert token is not None
    await store.commit(CommitCommand(sid, token, {"turns": 0}, [_said(sid, "one")], ref=ref))
    other = ref.model_copy(update={"channel": {"channel_id": "C9", "thread_ts": "9.0"}})
    await store.commit(CommitCommand(sid, None, None, [_said(sid, "aside")], ref=other))  # no lease: the last mark's sum is old
    await store.commit(CommitCommand(sid, token, {"turns": 1}, [_said(sid, "two")], ref=ref))
    assert await _ref_read_by_a_pass(outbox, sid, "p1") == ref
