"""Delivery guarantees over real HTTP and a real local Slack.

- a message Slack saw acknowledged is already in Redis (recorded before the ack);
- a card offered twice at once is posted once (claimed before it is sent);
- a reply whose post answer was lost is found, not posted again;
- a card posted by a deliverer that died before its pass ended is found, not posted again;
- a settled request leaves the workspace's pending index with its settle, whether or not its card is
  updated, and readers of the index skip and drop an entry a dead process left;
- a channel that is gone does not hold up other sessions' cards;
- the audit log has each committed event once, however often delivery is retried.
"""

from __future__ import annotations

import asyncio
import json

from blocks.actions import request_id_of_block
from bot.models.scripted import ScriptedModel, say
from bot.protocol import (
    ActionResult,
    ActionStarted,
    InputRequested,
    MessageCompleted,
    TurnStarted,
)
from bot.session import SessionRef, new_request_id
from handlers.delivery.channel import PostInFlight, SlackChannel, card_field
from localslack.seed import ALICE, BOT_USER_ID, GENERAL
from store.audit import AuditLog
from store.outbox import RedisOutbox
from store.session_keys import OUTBOX
from tests.e2e.test_approval_flow import (
    RUNS,
    button,
    card_in,
    mention_and_wait_for_card,
    refund_charge,
    refund_script,
)
from tests.e2e.test_governance import open_home


class SilentModel:
    """A model that never answers: the turn stays where the message left it."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def complete(self, messages, tools):  # noqa: ANN001 - ChatModel protocol
        self.asked.set()
        await asyncio.Event().wait()


async def test_a_message_is_in_redis_before_slack_gets_the_ack(local_slack, start_app):
    model = SilentModel()
    bot = await start_app(model, [])
    ts, deliveries = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> remember this")
    assert deliveries and all(d.status == 200 for d in deliveries)
    # right at the ack: either still queued or already taken into a turn — in Redis either way
    sid = f"slack:T0LOCAL:{GENERAL}:{ts}"
    snap = await bot.store.snapshot(sid)
    queued = [m["text"] for m in snap.inbox]
    started = [m["content"] for m in (snap.state or {}).get("history", []) if m.get("role") == "user"]
    assert "remember this" in queued + started
    await bot.runtime.abandon()  # the model would block shutdown


async def test_a_card_offered_twice_at_once_is_posted_once(local_slack, start_app):
    bot = await start_app(refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    sid = f"slack:T0LOCAL:{GENERAL}:{ts}"
    [request_id] = [r.request_id for r in await bot.store.pending_for_team("T0LOCAL")]
    # a request whose card is not in Slack yet, offered by two deliverers at once (a sweep re-offering a
    # card whose first post is still in flight)
    req = (await bot.store.get_request(request_id)).request.model_copy(update={"request_id": new_request_id(sid)})
    channel = SlackChannel(bot.outbox_store, lambda team: _client(bot), states=bot.store)
    ref = SessionRef(session_id=sid, team_id="T0LOCAL", channel={"channel_id": GENERAL, "thread_ts": ts})
    event = InputRequested(session_id=sid, turn_id="t", requests=[req])
    outcomes = await asyncio.gather(*(channel.deliver(event, ref) for _ in range(3)), return_exceptions=True)
    assert all(o is None or isinstance(o, PostInFlight) for o in outcomes)  # others come back later
    await channel.deliver(event, ref)  # ... and when they do, the card is there already
    posted = [m for m in local_slack.messages(GENERAL, thread_ts=ts)
              if any(request_id_of_block(b.get("block_id")) == req.request_id for b in m.blocks)]
    assert len(posted) == 1 and posted[0].ts != card.ts


async def test_a_reply_whose_answer_was_lost_is_found_not_posted_again(local_slack, start_app):
    bot = await start_app(ScriptedModel([say("hello")]), [])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> hi")
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: m.text == "hello")
    await bot.wait_idle()
    sid = f"slack:T0LOCAL:{GENERAL}:{ts}"
    [(field, _)] = [(f, v) for f, v in (await bot.store.redis.hgetall(bot.store.key(sid, "chan"))).items()
                    if f.startswith(b"post:")]
    await bot.outbox_store.posts.set(sid, field.decode(), "claimed:1")  # posted long ago; the worker died before recording it
    ref = SessionRef(session_id=sid, team_id="T0LOCAL", channel={"channel_id": GENERAL, "thread_ts": ts})
    # the same event delivered again (as the outbox reads it from the session's events)
    [done] = [e for e in await bot.store.events(sid) if isinstance(e, MessageCompleted)]
    assert field.decode() == f"post:{done.seq}:0"
    await SlackChannel(bot.outbox_store, lambda team: _client(bot), states=bot.store).deliver(done, ref)
    assert [m.text for m in local_slack.messages(GENERAL, thread_ts=ts)].count("hello") == 1


async def test_a_card_whose_deliverer_died_before_its_pass_ended_is_found_not_posted_again(local_slack, start_app):
    bot = await start_app(refund_script(), [refund_charge])
    ts, first = await mention_and_wait_for_card(local_slack)
    await bot.wait_idle()
    sid = f"slack:T0LOCAL:{GENERAL}:{ts}"
    [request_id] = [r.request_id for r in await bot.store.pending_for_team("T0LOCAL")]
    # a finished pass left where its card is in Redis, and lets go of what it had read
    where = await bot.store.redis.hget(bot.store.key(sid, "chan"), card_field(request_id))
    assert json.loads(where)["ts"] == first.ts
    await bot.store.redis.hset(bot.store.key(sid, "chan"), "elsewhere", "changed after the pass")
    assert await bot.outbox_store.posts.get(sid, "elsewhere") == "changed after the pass"

    # a deliverer posts a card in its pass and dies before the pass ends (nothing after the post runs)
    req = (await bot.store.get_request(request_id)).request.model_copy(update={"request_id": new_request_id(sid)})
    event = InputRequested(session_id=sid, turn_id="t", requests=[req])
    ref = SessionRef(session_id=sid, team_id="T0LOCAL", channel={"channel_id": GENERAL, "thread_ts": ts})
    dying = RedisOutbox(bot.store.redis, lease_ms=200)
    assert await dying.outbox_begin(sid, ["frontend"], "dying-token") is not None
    await SlackChannel(dying, lambda team: _client(bot), states=bot.store).deliver(event, ref)
    assert len(_cards_of(local_slack, ts, req.request_id)) == 1
    # where the card is was to be written with the pass's end: Redis holds only the claim
    assert (await bot.store.redis.hget(bot.store.key(sid, "chan"), card_field(req.request_id))).startswith(b"claimed")
    await asyncio.sleep(0.3)  # its deliverer lock lapses

    # the next deliverer (another process: its own store) delivers the event again
    successor = RedisOutbox(bot.store.redis)
    assert await successor.outbox_begin(sid, ["frontend"], "next-token") is not None
    await SlackChannel(successor, lambda team: _client(bot), states=bot.store).deliver(event, ref)
    await successor.outbox_end(sid, "next-token", {}, [], claim=0, again_in_ms=None)
    assert len(_cards_of(local_slack, ts, req.request_id)) == 1  # found in the thread, not posted again
    recorded = await bot.store.redis.hget(bot.store.key(sid, "chan"), card_field(req.request_id))
    assert json.loads(recorded)["ts"] == _cards_of(local_slack, ts, req.request_id)[0].ts


async def test_a_card_claimed_in_a_dead_pass_memory_is_found_not_posted_again(local_slack, start_app):
    bot = await start_app(refund_script(), [refund_charge])
    ts, _ = await mention_and_wait_for_card(local_slack)
    await bot.wait_idle()
    sid = f"slack:T0LOCAL:{GENERAL}:{ts}"
    [request_id] = [r.request_id for r in await bot.store.pending_for_team("T0LOCAL")]
    req = (await bot.store.get_request(request_id)).request.model_copy(update={"request_id": new_request_id(sid)})
    event = InputRequested(session_id=sid, turn_id="t", requests=[req])
    ref = SessionRef(session_id=sid, team_id="T0LOCAL", channel={"channel_id": GENERAL, "thread_ts": ts})

    # a deliverer with a fresh lock claims the card in its pass's memory, posts it and dies before its pass ends
    dying = RedisOutbox(bot.store.redis)
    assert await dying.outbox_begin(sid, ["frontend"], "dying-token") is not None
    await SlackChannel(dying, lambda team: _client(bot), states=bot.store).deliver(event, ref)
    assert len(_cards_of(local_slack, ts, req.request_id)) == 1
    assert await bot.store.redis.hget(bot.store.key(sid, "chan"), card_field(req.request_id)) is None  # nothing in Redis
    await bot.store.redis.set(bot.store.key(sid, "outlock"), "dying-token|1")  # time passes: its lock runs out

    successor = RedisOutbox(bot.store.redis)
    assert await successor.outbox_begin(sid, ["frontend"], "next-token") is not None
    assert successor.posts.pass_is_careful(sid)
    await SlackChannel(successor, lambda team: _client(bot), states=bot.store).deliver(event, ref)
    await successor.outbox_end(sid, "next-token", {}, [], claim=0, again_in_ms=0)  # it left work behind
    [card] = _cards_of(local_slack, ts, req.request_id)  # found in the thread, not posted again
    # so the next pass is careful too: the events it did not reach may have been posted by the dead one
    assert await successor.outbox_begin(sid, ["frontend"], "careful-again") is not None
    assert successor.posts.pass_is_careful(sid)
    await successor.outbox_end(sid, "careful-again", {}, [], claim=0, again_in_ms=None)
    recorded = await bot.store.redis.hget(bot.store.key(sid, "chan"), card_field(req.request_id))
    assert json.loads(recorded)["ts"] == card.ts
    # and the next pass is not careful: its predecessor ended its pass
    assert await successor.outbox_begin(sid, ["frontend"], "third-token") is not None
    assert not successor.posts.pass_is_careful(sid)
    await successor.outbox_end(sid, "third-token", {}, [], claim=0, again_in_ms=None)


async def test_a_post_whose_answer_was_lost_leaves_its_claim_with_the_pass_end(local_slack, start_app):
    bot = await start_app(refund_script(), [refund_charge])
    ts, _ = await mention_and_wait_for_card(local_slack)
    await bot.wait_idle()
    sid = f"slack:T0LOCAL:{GENERAL}:{ts}"
    store = RedisOutbox(bot.store.redis)
    assert await store.outbox_begin(sid, ["frontend"], "token") is not None
    assert await store.posts.claim(sid, "post:99:0", "claimed:5", in_pass=True)
    assert not await store.posts.claim(sid, "post:99:0", "claimed:6", in_pass=True)  # once per pass
    assert await store.posts.claim(sid, "post:98:0", "claimed:5", in_pass=True)
    await store.posts.delete(sid, "post:98:0")  # Slack said no: nothing was posted, nothing kept
    assert await bot.store.redis.hget(bot.store.key(sid, "chan"), "post:99:0") is None  # in memory so far
    # the post's answer never came (neither recorded nor given up): its claim is written at the pass's end
    await store.outbox_end(sid, "token", {}, [], claim=0, again_in_ms=None)
    assert await bot.store.redis.hget(bot.store.key(sid, "chan"), "post:99:0") == b"claimed:5"
    assert await bot.store.redis.hget(bot.store.key(sid, "chan"), "post:98:0") is None


async def test_an_answer_that_ended_its_tasks_stream_in_a_dead_pass_is_not_posted_again(local_slack, start_app):
    bot = await start_app(ScriptedModel([say("hello")]), [])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> hi")
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: m.text == "hello")
    await bot.wait_idle()
    sid = f"slack:T0LOCAL:{GENERAL}:{ts}"
    [started] = [e for e in await bot.store.events(sid) if isinstance(e, TurnStarted)]
    ref = SessionRef(session_id=sid, team_id="T0LOCAL", channel={"channel_id": GENERAL, "thread_ts": ts})
    # a turn whose call shows as a task (its stream starts while the call runs), then its answer ends that stream
    answer = "Refunded ch_9."
    events = [TurnStarted(session_id=sid, turn_id="t9", seq=901, principal=started.principal),
              ActionStarted(session_id=sid, turn_id="t9", seq=902, call_id="c9", tool_name="refund_charge"),
              ActionResult(session_id=sid, turn_id="t9", seq=903, call_id="c9", tool_name="refund_charge",
                           status="completed", output={"refunded": "ch_9"}),
              MessageCompleted(session_id=sid, turn_id="t9", seq=904, step=1, text=answer)]

    def answers() -> list:
        return [m for m in local_slack.messages(GENERAL, thread_ts=ts) if m.bot_id and answer in (m.text or "")]

    def tasks_messages() -> list:
        return [m for m in local_slack.messages(GENERAL, thread_ts=ts) if any(t["id"] == "c9" for t in m.tasks)]

    # a deliverer with a fresh lock shows the task, ends its stream with the answer and dies before its pass ends
    dying = RedisOutbox(bot.store.redis)
    assert await dying.outbox_begin(sid, ["frontend"], "dying-token") is not None
    first = SlackChannel(dying, lambda team: _client(bot), states=bot.store)
    first.tasks.delay_s = 0.0  # the call runs past the status delay: its task stream starts
    for event in events[:2]:
        await first.deliver(event, ref)
    await local_slack.wait_for(lambda: tasks_messages(), timeout_s=5)
    for event in events[2:]:
        await first.deliver(event, ref)
    [shown] = answers()
    assert tasks_messages() == [shown] and not shown.streaming  # one message: the task, then the answer
    await first.close()
    await bot.store.redis.set(bot.store.key(sid, "outlock"), "dying-token|1")  # time passes: its lock runs out

    # the next deliverer (another process) delivers the same events in a careful pass
    successor = RedisOutbox(bot.store.redis)
    assert await successor.outbox_begin(sid, ["frontend"], "next-token") is not None
    assert successor.posts.pass_is_careful(sid)
    second = SlackChannel(successor, lambda team: _client(bot), states=bot.store)
    for event in events:
        await second.deliver(event, ref)
    await second.close()
    await successor.outbox_end(sid, "next-token", {}, [], claim=0, again_in_ms=None)
    assert [m.ts for m in answers()] == [shown.ts], "the answer is in the thread once"
    assert [m.ts for m in tasks_messages()] == [shown.ts], "and so is the task"


async def test_an_answer_streamed_in_a_dead_pass_is_not_posted_again(local_slack, start_app):
    bot = await start_app(ScriptedModel([say("hello")]), [])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> hi")
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: m.text == "hello")
    await bot.wait_idle()
    sid = f"slack:T0LOCAL:{GENERAL}:{ts}"
    [started] = [e for e in await bot.store.events(sid) if isinstance(e, TurnStarted)]
    ref = SessionRef(session_id=sid, team_id="T0LOCAL", channel={"channel_id": GENERAL, "thread_ts": ts})
    answer = "Refunded ch_9, as you asked."
    done = MessageCompleted(session_id=sid, turn_id="t9", seq=904, step=1, text=answer)

    def answers() -> list:
        return [m for m in local_slack.messages(GENERAL, thread_ts=ts) if m.bot_id and "Refunded" in (m.text or "")]

    # a deliverer streams the answer as it is written, ends its stream with the rest and dies before its pass ends
    dying = RedisOutbox(bot.store.redis)
    assert await dying.outbox_begin(sid, ["frontend"], "dying-token") is not None
    first = SlackChannel(dying, lambda team: _client(bot), states=bot.store)
    first.live.stream_after_s = 0.0  # the step writes slowly: it streams
    first.live.text_so_far(ref, "t9", 1, "Refunded ch_9", started.principal)
    await local_slack.wait_for(lambda: [m for m in answers() if m.streaming], timeout_s=5)
    await first.deliver(done, ref)
    [shown] = answers()
    assert shown.text == answer and not shown.streaming
    await first.close()
    await bot.store.redis.set(bot.store.key(sid, "outlock"), "dying-token|1")  # time passes: its lock runs out

    successor = RedisOutbox(bot.store.redis)
    assert await successor.outbox_begin(sid, ["frontend"], "next-token") is not None
    assert successor.posts.pass_is_careful(sid)
    second = SlackChannel(successor, lambda team: _client(bot), states=bot.store)
    await second.deliver(done, ref)
    await second.close()
    await successor.outbox_end(sid, "next-token", {}, [], claim=0, again_in_ms=None)
    assert [(m.ts, m.text) for m in answers()] == [(shown.ts, answer)], "the answer is in the thread once"


async def test_a_settled_request_leaves_the_pending_index_with_its_settle_and_readers_drop_a_leftover(
        local_slack, start_app):
    RUNS.clear()
    bot = await start_app(refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    await bot.wait_idle()
    pending = bot.store.pending_key("T0LOCAL")
    [request_id] = [r.request_id for r in await bot.store.pending_for_team("T0LOCAL")]
    local_slack.fail_next("chat.update", error="internal_error", times=1000)  # no card update gets through
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for(lambda: RUNS)
    assert await bot.store.redis.zscore(pending, request_id) is None  # dropped by the settle itself
    assert card_in(local_slack, ts) is not None  # while the card still shows its buttons

    # on a Redis Cluster the settle's index write is its own command after the script: a process that dies
    # between them leaves the entry (put back here), which whoever reads the index next skips and drops
    await bot.store.redis.zadd(pending, {request_id: 1})
    assert await bot.store.pending_for_team("T0LOCAL") == []
    assert await bot.store.redis.zscore(pending, request_id) is None


def _cards_of(local_slack, thread_ts: str, request_id: str) -> list:
    return [m for m in local_slack.messages(GENERAL, thread_ts=thread_ts)
            if any(request_id_of_block(b.get("block_id")) == request_id for b in m.blocks)]


async def test_a_channel_that_is_gone_does_not_hold_up_other_sessions(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(refund_script(), [refund_charge])
    local_slack.fail_next("chat.postMessage", error="channel_not_found")  # the card (no status line: it was quick)
    dead_ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1")
    await bot.wait_idle()
    assert card_in(local_slack, dead_ts) is None
    dead_sid = f"slack:T0LOCAL:{GENERAL}:{dead_ts}"
    await bot.runtime.recover()  # (the audit's retry its pass's close wrote is moot: the sweep's read drops it)
    assert await bot.store.redis.zscore(OUTBOX, dead_sid) is None  # skipped, not retried forever
    [parked] = [r for r in await bot.store.pending_for_team("T0LOCAL") if r.session_id == dead_sid]
    assert parked.status == "open" and parked.undeliverable == "Slack said channel_not_found"
    home = await open_home(local_slack, ALICE)  # App Home says where it went, and it waits there
    assert "couldn't be posted in the conversation (Slack said channel_not_found)" in json.dumps(home.blocks)
    ts, card = await mention_and_wait_for_card(local_slack)  # another session is served at once
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for(lambda: RUNS)


async def test_the_audit_log_has_each_event_once_despite_retries(local_slack, start_app):
    bot = await start_app(refund_script(), [refund_charge])
    local_slack.fail_next("chat.postMessage", error="internal_error", times=6)  # the card fails a few times
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1")
    await bot.wait_idle()
    sid = f"slack:T0LOCAL:{GENERAL}:{ts}"
    for _ in range(6):
        # as if each backoff had run out: the sweep finds the session due and the hold lapsed
        await bot.store.redis.hdel(bot.store.key(sid, "out"), "_hold:frontend")
        await bot.store.redis.zadd(OUTBOX, {sid: 0})
        await bot.runtime.recover()
        await bot.wait_idle()
    card = await local_slack.wait_for(lambda: card_in(local_slack, ts))
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Refunded" in m.text or "refund" in m.text.lower())
    await bot.wait_idle()
    entries = [e async for e in AuditLog(bot.store.redis).iter_entries("T0LOCAL")]
    requests = [e for e in entries if e.kind == "request"]
    assert len(requests) == 1
    seqs = [(e.data.get("session_id"), e.data.get("event_seq"), e.kind, e.subject) for e in entries if e.data.get("event_seq")]
    assert len(seqs) == len(set(seqs))


async def _client(bot):
    return bot.slack.client


async def test_a_rate_limited_card_waits_as_slack_asked_and_holds_up_no_one_else(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(refund_script(), [refund_charge])
    # Slack answers 429 + Retry-After: 2 to the card of the first session
    local_slack.fail_next("chat.postMessage", status=429, retry_after=2)
    first_ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1")
    await bot.wait_idle()
    refused_at = asyncio.get_running_loop().time()
    assert card_in(local_slack, first_ts) is None
    # another conversation is served at once, while the first one waits
    second_ts, _ = await mention_and_wait_for_card(local_slack)
    assert card_in(local_slack, first_ts) is None

    done = asyncio.Event()

    async def sweeping() -> None:  # what every replica's recovery loop does (stopped by a flag: see
        while not done.is_set():  # a cancellation can be lost inside a Redis call)
            await bot.runtime.recover()
            await asyncio.sleep(0.2)

    sweeper = asyncio.create_task(sweeping())
    try:
        card = await local_slack.wait_for(lambda: card_in(local_slack, first_ts), timeout_s=6)
    finally:
        done.set()
        await asyncio.wait_for(sweeper, 5)
    waited = asyncio.get_running_loop().time() - refused_at
    assert waited >= 1.5, f"posted again after {waited:.2f}s although Slack said to wait 2s"
    cards = [m for m in local_slack.messages(GENERAL, thread_ts=first_ts) if card_in(local_slack, first_ts) and
             any(b.get("type") == "actions" for b in m.blocks or [])]
    assert [m.ts for m in cards] == [card.ts]  # posted once
    assert card_in(local_slack, second_ts) is not None


async def test_a_failing_consumer_never_makes_slack_delivery_repeat(local_slack, start_app):
    # one fan-out: every reader of committed events (Slack, App Home, notices, audit, or a team's own) is
    # an outbox consumer with its own cursor. One that is down for good is offered its events again on its
    # own; the card is posted once, the answer goes on
    refreshes: list[str] = []

    class DownForGood:  # a consumer a team added (the ``bot.ports.Channel`` extension point)
        async def deliver(self, event, session):  # noqa: ANN001 - the Channel protocol
            if isinstance(event, InputRequested):
                refreshes.append(event.type)
                raise RuntimeError("our dashboard is down")

    RUNS.clear()
    bot = await start_app(refund_script(), [refund_charge], recovery_interval=0.2)  # the sweep retries
    bot.runtime.add_consumer("dashboard", DownForGood())
    ts, card = await mention_and_wait_for_card(local_slack)
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    await local_slack.wait_for(lambda: len(refreshes) >= 3)  # the refresh alone is offered its event again
    [request_id] = {request_id_of_block(b.get("block_id")) for b in card.blocks} - {None}
    card_posts = [c for c in local_slack.calls_to("chat.postMessage")
                  if request_id in json.dumps(c.params.get("blocks") or "")]
    assert len(card_posts) == 1, card_posts
    replies = [c for c in local_slack.calls_to("chat.postMessage") if "Result:" in str(c.params.get("text"))]
    assert len(replies) == 1 and RUNS == [{"charge": "ch_1", "principal": "slack:T0LOCAL:U0ALICE"}]
    assert "Approved" in str(local_slack.message(GENERAL, card.ts).blocks)


async def test_a_reply_does_not_wait_for_its_card_update_and_is_posted_once(local_slack, start_app):
    # the settled card and the answer are different messages: Slack slow to edit the card holds up no answer
    RUNS.clear()
    bot = await start_app(refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    await bot.wait_idle()
    held = local_slack.hold_next("chat.update")
    try:
        await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
        await asyncio.wait_for(held.reached.wait(), 5)
        # posted whole, not streamed: a quick answer is one post (a step still writing after a second streams)
        await local_slack.wait_for_message(GENERAL, thread_ts=ts, timeout_s=0.8,
                                           predicate=lambda m: "Result:" in m.text and not m.streaming)
        assert card_in(local_slack, ts) is not None  # its edit is still on its way
    finally:
        held.release()
    await local_slack.wait_for(lambda: card_in(local_slack, ts) is None)
    await bot.wait_idle()
    assert local_slack.calls_to("chat.update")[0].params["ts"] == card.ts
    assert "Approved" in str(local_slack.message(GENERAL, card.ts).blocks)
    assert len(_replies(local_slack, ts)) == 1 and len(RUNS) == 1


async def test_a_card_update_that_failed_beside_its_reply_is_retried_and_the_reply_not_posted_again(
        local_slack, start_app):
    RUNS.clear()
    bot = await start_app(refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    await bot.wait_idle()
    local_slack.fail_next("chat.update", error="internal_error")  # Slack fails to edit the card, once
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, timeout_s=0.8,
                                       predicate=lambda m: "Result:" in m.text and not m.streaming)
    await bot.wait_idle()
    assert card_in(local_slack, ts) is not None  # not edited: the session's events are offered again later
    sid = f"slack:T0LOCAL:{GENERAL}:{ts}"
    assert await bot.store.redis.zscore(OUTBOX, sid) is not None
    # as if the backoff had run out: the sweep finds the session due and the hold lapsed
    await bot.store.redis.hdel(bot.store.key(sid, "out"), "_hold:frontend")
    await bot.store.redis.zadd(OUTBOX, {sid: 0})
    await bot.runtime.recover()
    await bot.wait_idle()
    assert card_in(local_slack, ts) is None and "Approved" in str(local_slack.message(GENERAL, card.ts).blocks)
    assert len(_replies(local_slack, ts)) == 1 and len(RUNS) == 1


def _replies(local_slack, thread_ts: str) -> list:
    return [m for m in local_slack.messages(GENERAL, thread_ts=thread_ts) if m.bot_id and "Result:" in (m.text or "")]


async def test_a_mention_redelivered_minutes_later_is_not_asked_again(local_slack, start_app):
    """Slack redelivers both events of a mention (``app_mention`` and its ``message`` twin) after the turn
    answered: each is one message (by channel and ts), so the model is asked once and the thread has one
    answer."""
    model = ScriptedModel([say("Done."), say("Asked twice.")])
    bot = await start_app(model, [])
    ts, deliveries = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> hello")
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: m.text == "Done.")
    await bot.wait_idle()
    for delivered in deliveries:
        assert (await local_slack.redeliver(delivered)).status == 200
    await bot.wait_idle()
    assert [m.text for m in local_slack.messages(GENERAL, thread_ts=ts) if m.bot_id] == ["Done."]
    assert len(model.requests) == 1
