"""Request records read from Redis: always validated, each read its caller's own.

A cycle reads its settled record twice (the settle's lease read, then the delivery pass's read for the
card's edit); the store validates the same bytes once (store/requests.py). What a caller sees must not
change for it: every read is validated as stored (a changed or broken record is never answered from
an earlier read), and a record one caller rebinds fields on is not the one the next read returns.
"""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from bot.approval import always
from bot.engine.turn_commands import LeaseCommand
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from tests.engine.harness import make_runtime, recording_tool, say


async def _parked(redis):
    refund, _ = recording_tool("refund", approval=always())
    runtime, channel, store = make_runtime(redis, ScriptedModel([call("refund", call_id="r1", charge="ch_1"),
                                                                 model_say("refunded")]), [refund])
    await say(runtime, "refund ch_1")
    [card] = channel.requests()
    return store, card.request_id


async def test_the_same_record_read_twice_is_equal_and_each_read_its_own(redis):
    store, rid = await _parked(redis)
    first, second = await store.get_request(rid), await store.get_request(rid)
    assert first == second and first is not second
    first.status, first.approvals, first.note = "settled", ["someone"], "changed by its caller"
    third = await store.get_request(rid)
    assert third == second and third.status == "open" and third.approvals == [] and third.note is None


async def test_a_record_changed_in_redis_is_read_as_it_is_now(redis):
    store, rid = await _parked(redis)
    before = await store.get_request(rid)
    await redis.hset(store.request_key(rid), mapping={"note": "escalated", "rev": before.rev + 1})
    after = await store.get_request(rid)
    assert after.note == "escalated" and after.rev == before.rev + 1
    assert before.note is None  # (the earlier read is untouched)


async def test_a_record_that_does_not_validate_fails_on_every_read(redis):
    store, rid = await _parked(redis)
    good = await store.get_request(rid)
    key = store.request_key(rid)
    await redis.hset(key, "status", "bogus")
    for _ in range(2):  # not answered from the earlier, valid read; not remembered as valid either
        with pytest.raises(ValidationError):
            await store.get_request(rid)
    await redis.hset(key, "status", good.status)
    assert await store.get_request(rid) == good


async def _read_with_the_lease(store, rid):
    """The record as a script reads it for a lease holder (one JSON text per record: store/requests.py)."""
    sid = (await store.get_request(rid)).session_id
    token, _, _, snapshot = await store.lease(LeaseCommand(sid, "take"))
    assert token is not None and snapshot is not None
    await store.lease(LeaseCommand(sid, "release", token, still_active=True))
    return snapshot.requests.get(rid)


async def test_a_record_read_by_a_script_is_the_stored_one_with_its_approvals_and_each_read_its_own(redis):
    store, rid = await _parked(redis)
    first = await _read_with_the_lease(store, rid)
    assert first == await store.get_request(rid)  # the script's read and the plain read agree
    await redis.sadd(f"{store.request_key(rid)}:ok", "U_BOB", "U_ALICE")
    second = await _read_with_the_lease(store, rid)
    assert second.approvals == ["U_ALICE", "U_BOB"] and first.approvals == []
    second.status, second.note = "settled", "changed by its caller"
    third = await _read_with_the_lease(store, rid)
    assert third.status == "open" and third.note is None and third.approvals == ["U_ALICE", "U_BOB"]


async def test_a_record_that_does_not_validate_fails_every_read_by_a_script(redis):
    store, rid = await _parked(redis)
    good = await _read_with_the_lease(store, rid)
    key = store.request_key(rid)
    await redis.hset(key, "status", "bogus")
    for _ in range(2):
        with pytest.raises(ValidationError):
            await _read_with_the_lease(store, rid)
    await redis.hset(key, "status", good.status)
    assert await _read_with_the_lease(store, rid) == good


async def test_the_lease_reads_the_records_the_turn_waits_on_not_ones_a_message_quotes(redis):
    """The lease's script finds the parked step's request ids in the state's text; a message quoting the
    same key names (with another request's id) is escaped JSON and reads nothing."""
    store, rid = await _parked(redis)
    other_rid = rid.rsplit(".", 1)[0] + ".0123456789ab"  # another stored request, in the same slot
    await redis.hset(store.request_key(other_rid), mapping=await redis.hgetall(store.request_key(rid)))
    sid = (await store.get_request(rid)).session_id
    raw = await redis.get(store.key(sid, "state"))
    quoted = f'"request_ids":["{other_rid}"] and "limit_request_id":"{other_rid}"'
    state = raw.decode().replace('"history":[', '"history":[' + json.dumps({"role": "user", "content": quoted}) + ",", 1)
    assert quoted not in state and other_rid in state  # (there, but only as escaped text)
    await redis.set(store.key(sid, "state"), state)
    token, _, _, snapshot = await store.lease(LeaseCommand(sid, "take"))
    assert token is not None and snapshot is not None
    assert set(snapshot.requests) == {rid}
