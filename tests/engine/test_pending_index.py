"""A workspace's pending index (what App Home's "Waiting on you" and ``bot pending`` list) is kept by the settle
itself: a request leaves it when it closes, whether or not any frontend ever delivers that, and stays while
it is still open (an approval of several, a refusal, a settle refused because the request changed meanwhile).
A real runtime on a real Redis; its frontend goes down once it showed the card."""

from __future__ import annotations

from bot.approval import Approval, ResponseContext, allowed, always, rejected
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.protocol import Event
from bot.session import SessionRef
from tests.engine.harness import (
    ALICE,
    BOB,
    CAROL,
    RecordingChannel,
    decision,
    make_runtime,
    recording_tool,
    say,
    session,
)


class DownAfterTheCard(RecordingChannel):
    """A frontend that shows a session's card, then is down for that session: no settle is ever delivered."""

    async def deliver(self, event: Event, session: SessionRef) -> None:
        if any(r.session_id == session.session_id for r in self.requests()):
            raise RuntimeError("frontend is down")
        await super().deliver(event, session)


def _refunds(redis, policy=None, *, replicas: int = 1):
    refund, runs = recording_tool("refund", approval=Approval(request=always(), response=policy))
    script = [call("refund", call_id="r1", charge="ch_1"), model_say("refunded")]
    made = [make_runtime(redis, ScriptedModel(script), [refund], channel=DownAfterTheCard()) for _ in range(replicas)]
    return made, runs


async def _indexed(store, request_id: str) -> bool:
    return await store.redis.zscore(store.pending_key("T1"), request_id) is not None


async def _listed(store) -> list[str]:
    return [r.request_id for r in await store.pending_for_team("T1")]


async def test_a_settled_request_leaves_the_index_though_no_frontend_delivers_it(redis):
    [(runtime, channel, store)], runs = _refunds(redis)
    await say(runtime, "refund ch_1")
    [card] = channel.requests()
    assert await _indexed(store, card.request_id)
    result = await runtime.answer(decision(card.request_id, "approve", ALICE))
    await runtime.wait_idle()
    assert result.state == "settled" and len(runs) == 1
    assert channel.of("input.resolved") == []  # the frontend never saw the settle
    assert not await _indexed(store, card.request_id)


async def test_an_open_request_stays_listed_beside_one_that_settled(redis):
    [(runtime, channel, store)], _ = _refunds(redis)
    await say(runtime, "refund ch_1", ref=session("s1"))
    await say(runtime, "refund ch_1", ref=session("s2"))
    first, second = channel.requests()
    assert sorted(await _listed(store)) == sorted([first.request_id, second.request_id])
    await runtime.answer(decision(first.request_id, "cancel", ALICE))
    await runtime.wait_idle()
    # (the index first: a listing drops entries of closed requests it finds, as a reader's own upkeep)
    assert not await _indexed(store, first.request_id) and await _indexed(store, second.request_id)
    assert await _listed(store) == [second.request_id]


async def test_a_request_waiting_on_more_approvals_or_refused_stays_until_it_closes(redis):
    def two(ctx: ResponseContext):
        if ctx.response.principal.same_as(ALICE):
            return rejected("the requester may not approve their own refund")
        return allowed(required=2)

    [(runtime, channel, store)], runs = _refunds(redis, two)
    await say(runtime, "refund ch_1")
    [card] = channel.requests()
    assert (await runtime.answer(decision(card.request_id, "approve", ALICE))).state == "rejected"
    assert (await runtime.answer(decision(card.request_id, "approve", BOB))).state == "partial"
    assert await _indexed(store, card.request_id) and await _listed(store) == [card.request_id]
    assert (await runtime.answer(decision(card.request_id, "approve", CAROL))).state == "settled"
    await runtime.wait_idle()
    assert len(runs) == 1 and not await _indexed(store, card.request_id) and await _listed(store) == []


async def test_a_settle_refused_because_the_request_changed_meanwhile_leaves_it_listed(redis):
    def not_after_bob(ctx: ResponseContext):  # once Bob approved, Carol may neither second nor cancel it
        if ctx.response.principal.same_as(CAROL) and BOB.principal_id in ctx.approvals:
            return rejected("Bob approved already: Carol may not decide it")
        return allowed(required=2)

    [(runtime_a, channel_a, store_a), (runtime_b, _, _)], runs = _refunds(redis, not_after_bob, replicas=2)
    await say(runtime_a, "refund ch_1")
    [card] = channel_a.requests()
    cached = store_a.recent_request(card.request_id)
    assert (await runtime_b.answer(decision(card.request_id, "approve", BOB))).state == "partial"
    # Carol's clicks are checked on a copy from before Bob's approval: the store refuses each as changed and,
    # checked again on the stored record, each is refused. The request still waits, and is still listed.
    for option in ("cancel", "approve"):
        result = await runtime_a.answer(decision(card.request_id, option, CAROL), record=cached)
        assert result.state == "rejected", (option, result)
        assert await _indexed(store_a, card.request_id) and await _listed(store_a) == [card.request_id]
    assert runs == []
