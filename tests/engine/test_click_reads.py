"""A click needs no read before its settle, and is never decided on a stale record.

The process that parked a request (or read it last) keeps its record, with its revision, in a small
bounded memory; a click there is checked against that copy. The settle (or the refusal) checks the
revision: a request changed since (another approval, an escalation, a settle elsewhere) is not touched,
and the answer is checked again against the stored record. Two replicas on one real Redis.
"""

from __future__ import annotations

from bot.approval import Approval, ResponseContext, allowed, always, rejected
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.protocol import RequestChanged, SettleCommand
from tests.engine.harness import ALICE, BOB, CAROL, decision, make_runtime, recording_tool, say


def _two_replicas(redis, policy):
    refund, runs = recording_tool("refund", approval=Approval(request=always(), response=policy))
    script = [call("refund", call_id="r1", charge="ch_1"), model_say("refunded")]
    runtime_a, channel_a, store_a = make_runtime(redis, ScriptedModel(script), [refund])
    runtime_b, _, store_b = make_runtime(redis, ScriptedModel(script), [refund])
    return (runtime_a, channel_a, store_a), (runtime_b, store_b), runs


async def test_the_parking_process_keeps_the_record_as_stored_and_the_other_replica_reads_it(redis):
    (runtime_a, channel_a, store_a), (runtime_b, store_b), runs = _two_replicas(redis, None)
    await say(runtime_a, "refund ch_1")
    [card] = channel_a.requests()
    kept = store_a.recent_request(card.request_id)
    assert kept is not None and kept == await store_b.get_request(card.request_id)  # as a read returns it
    assert kept.rev == 1 and kept.status == "open"
    assert store_b.recent_request(card.request_id) is not None  # (b just read it: it keeps that too)

    (runtime_c, _, store_c) = make_runtime(redis, ScriptedModel([model_say("refunded")]), [])
    assert store_c.recent_request(card.request_id) is None  # a replica that neither parked nor read it


async def test_a_click_on_the_replica_that_did_not_park_it_reads_and_settles(redis):
    (runtime_a, channel_a, _), (runtime_b, store_b), runs = _two_replicas(redis, None)
    await say(runtime_a, "refund ch_1")
    [card] = channel_a.requests()
    assert store_b.recent_request(card.request_id) is None
    result = await runtime_b.answer(decision(card.request_id, "approve", ALICE),
                                    record=store_b.recent_request(card.request_id))
    await runtime_b.wait_idle()
    assert result.state == "settled" and len(runs) == 1


async def test_an_approval_added_elsewhere_is_seen_before_the_cached_copy_decides(redis):
    seen: list[list[str]] = []

    def carol_after_bob(ctx: ResponseContext):  # four eyes, in an order: Bob first, then Carol
        seen.append(list(ctx.approvals))
        if ctx.response.principal.same_as(BOB) or BOB.principal_id in ctx.approvals:
            return allowed(required=2)
        return rejected("Bob approves first")

    (runtime_a, channel_a, store_a), (runtime_b, _), runs = _two_replicas(redis, carol_after_bob)
    await say(runtime_a, "refund ch_1")
    [card] = channel_a.requests()
    cached = store_a.recent_request(card.request_id)
    assert cached is not None and cached.approvals == []
    assert (await runtime_b.answer(decision(card.request_id, "approve", BOB))).state == "partial"
    seen.clear()
    result = await runtime_a.answer(decision(card.request_id, "approve", CAROL), record=cached)
    await runtime_a.wait_idle()
    # checked on the copy (no approval yet: refused), refused by the store as changed, checked again on
    # the stored record (Bob's approval): Carol's is the second, and it counts
    assert seen == [[], [BOB.principal_id]]
    assert result.state == "settled" and len(runs) == 1


async def test_a_stale_copy_that_would_allow_an_answer_fails_closed(redis):
    def not_both(ctx: ResponseContext):  # Carol may not second an approval Bob gave (a conflict of interest)
        if ctx.response.principal.same_as(CAROL) and BOB.principal_id in ctx.approvals:
            return rejected("Bob approved already: Carol may not second it")
        return allowed(required=2)

    (runtime_a, channel_a, store_a), (runtime_b, store_b), runs = _two_replicas(redis, not_both)
    await say(runtime_a, "refund ch_1")
    [card] = channel_a.requests()
    cached = store_a.recent_request(card.request_id)
    assert (await runtime_b.answer(decision(card.request_id, "approve", BOB))).state == "partial"
    # the copy says nobody approved (Carol would be allowed): the stored record says Bob did
    result = await runtime_a.answer(decision(card.request_id, "approve", CAROL), record=cached)
    await runtime_a.wait_idle()
    assert result.state == "rejected" and "Carol may not" in (result.reason or "")
    stored = await store_b.get_request(card.request_id)
    assert stored.status == "open" and stored.approvals == [BOB.principal_id] and runs == []


async def test_a_settle_checked_against_an_old_revision_writes_nothing(redis):
    (runtime_a, channel_a, store_a), (runtime_b, store_b), runs = _two_replicas(redis, None)
    await say(runtime_a, "refund ch_1")
    [card] = channel_a.requests()
    old = await store_b.get_request(card.request_id)
    await store_b.redis.hincrby(store_b.request_key(card.request_id), "rev", 1)  # changed meanwhile
    before = await store_b.redis.xlen(store_b.key(old.session_id, "events"))
    try:
        await store_b.settle(SettleCommand(old, mode="settle", outcome="approved", rev=old.rev))
        raise AssertionError("a settle checked against an old revision was not refused")
    except RequestChanged as changed:
        assert changed.record.rev == 2 and changed.record.status == "open"
    assert (await store_b.get_request(card.request_id)).status == "open"
    assert await store_b.redis.xlen(store_b.key(old.session_id, "events")) == before
    assert runs == []


async def test_every_change_of_a_request_counts_its_revision(redis):
    def two(ctx: ResponseContext):
        return allowed(required=2)

    (runtime_a, channel_a, store_a), (runtime_b, store_b), runs = _two_replicas(redis, two)
    await say(runtime_a, "refund ch_1")
    [card] = channel_a.requests()
    rid = card.request_id
    assert (await store_b.get_request(rid)).rev == 1
    await runtime_b.answer(decision(rid, "approve", BOB))  # an approval
    assert (await store_b.get_request(rid)).rev == 2
    await runtime_b.answer(decision(rid, "approve", BOB))  # the same one again: nothing changed
    assert (await store_b.get_request(rid)).rev == 2
    await runtime_b.answer(decision(rid, "approve", CAROL), resume=False)  # Carol's approval settles it
    settled = await store_b.get_request(rid)
    assert settled.status == "settled" and settled.rev > 2
