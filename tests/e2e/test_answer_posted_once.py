"""An answer is posted once, whoever finishes it, and a revived thread's answers are its own.

- Two deliverers over the same ended stream: one whose pass ran out of lock (a long pause, a slow Slack call)
  and the one that took the session over. Whichever of them ends the stream with the answer, the other finds
  it ended and counts it as delivered: it posts nothing anew.
- A careful deliverer (the last one died mid-pass) whose look in the thread Slack does not answer (rate limited,
  down) posts nothing: it looks again later.
- A thread used again after the retention starts a new event stream whose numbers restart at 1. A careful
  pass after a killed deliverer looks in the thread before posting: the old life's answer with the same number
  is not taken for the new one.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.app import slack_retry_handlers
from bot.models.scripted import ScriptedModel, say
from bot.ports import RetryLater
from bot.protocol import ActionResult, ActionStarted, Event, MessageCompleted, TurnCompleted, TurnStarted
from bot.session import SessionRef
from handlers.delivery.channel import SlackChannel
from localslack.seed import ALICE, BOT_TOKEN, BOT_USER_ID, GENERAL
from store.outbox import RedisOutbox
from tests.chaos.harness import unstopped_streams


async def _client(bot):  # noqa: ANN001, ANN202
    return bot.slack.client


async def _thread_with_a_turn(local_slack, bot) -> tuple[str, str, TurnStarted]:  # noqa: ANN001
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> hi")
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: m.text == "hello")
    await bot.wait_idle()
    sid = f"slack:T0LOCAL:{GENERAL}:{ts}"
    [started] = [e for e in await bot.store.events(sid) if isinstance(e, TurnStarted)]
    return ts, sid, started


ANSWER = "Refunded ch_9."


@dataclass
class RefundTurn:
    """A turn whose call shows as a task (its stream starts while the call runs); its answer ends that stream."""

    local_slack: Any
    ts: str
    sid: str
    ref: SessionRef
    events: list[Event]

    def answers(self) -> list:
        return [m for m in self.local_slack.messages(GENERAL, thread_ts=self.ts)
                if m.bot_id and ANSWER in (m.text or "")]


async def _refund_turn(local_slack, bot, *, ends: bool = True) -> RefundTurn:  # noqa: ANN001
    """A thread with a turn, and the events of a second one to deliver by hand (``ends``: with its end)."""
    ts, sid, started = await _thread_with_a_turn(local_slack, bot)
    ref = SessionRef(session_id=sid, team_id="T0LOCAL", channel={"channel_id": GENERAL, "thread_ts": ts})
    events: list[Event] = [
        TurnStarted(session_id=sid, turn_id="t9", seq=901, principal=started.principal),
        ActionStarted(session_id=sid, turn_id="t9", seq=902, call_id="c9", tool_name="refund_charge"),
        ActionResult(session_id=sid, turn_id="t9", seq=903, call_id="c9", tool_name="refund_charge",
                     status="completed", output={"refunded": "ch_9"}),
        MessageCompleted(session_id=sid, turn_id="t9", seq=904, step=1, text=ANSWER),
    ]
    if ends:
        events.append(TurnCompleted(session_id=sid, turn_id="t9", seq=905))
    return RefundTurn(local_slack, ts, sid, ref, events)


async def _stalled_task_start(local_slack, bot, turn: RefundTurn, token: str):  # noqa: ANN001, ANN202
    """A deliverer shows the running call as a task, and Slack is slow to answer its ``chat.startStream``: its
    lock runs out meanwhile. Returns its outbox, its channel and the held start (``release()`` lets it land)."""
    outbox = RedisOutbox(bot.store.redis, lease_ms=300)
    assert await outbox.outbox_begin(turn.sid, ["frontend"], token) is not None
    channel = SlackChannel(outbox, lambda team: _client(bot), states=bot.store)
    channel.tasks.delay_s = 0.0
    slow_start = local_slack.hold_next("chat.startStream")
    for event in turn.events[:2]:
        await channel.deliver(event, turn.ref)
    await asyncio.wait_for(slow_start.reached.wait(), 5)
    await asyncio.sleep(0.4)
    return outbox, channel, slow_start


async def test_an_answer_that_another_deliverer_ended_its_stream_with_is_not_posted_anew(
    local_slack, start_app
):
    bot = await start_app(ScriptedModel([say("hello")]), [])
    turn = await _refund_turn(local_slack, bot, ends=False)
    ts, sid, ref, events, answers = turn.ts, turn.sid, turn.ref, turn.events, turn.answers

    def tasks_messages() -> list:
        return [
            m for m in local_slack.messages(GENERAL, thread_ts=ts) if any(t["id"] == "c9" for t in m.tasks)
        ]

    # the first deliverer shows the task, then stalls until its lock has run out (it is not dead: it goes on)
    stalled = RedisOutbox(bot.store.redis, lease_ms=300)
    assert await stalled.outbox_begin(sid, ["frontend"], "stalled-token") is not None
    first = SlackChannel(stalled, lambda team: _client(bot), states=bot.store)
    first.tasks.delay_s = 0.0  # the call runs past the status delay: its task stream starts
    for event in events[:2]:
        await first.deliver(event, ref)
    await local_slack.wait_for(lambda: tasks_messages(), timeout_s=5)
    await asyncio.sleep(0.4)

    # another replica takes the session over and ends the stream with the answer
    successor = RedisOutbox(bot.store.redis)
    assert await successor.outbox_begin(sid, ["frontend"], "next-token") is not None
    second = SlackChannel(successor, lambda team: _client(bot), states=bot.store)
    for event in events:
        await second.deliver(event, ref)
    await second.close()
    await successor.outbox_end(sid, "next-token", {}, [], claim=0, again_in_ms=None)
    [shown] = answers()
    assert tasks_messages() == [shown] and not shown.streaming

    # the stalled one wakes and delivers what it had not: its stop finds the stream ended by the other
    stops = len(local_slack.calls_to("chat.stopStream"))
    for event in events[2:]:
        await first.deliver(event, ref)
    await first.close()
    await stalled.outbox_end(sid, "stalled-token", {}, [], claim=0, again_in_ms=None)
    assert len(local_slack.calls_to("chat.stopStream")) == stops + 1  # it did try to end the stream
    assert [m.ts for m in answers()] == [shown.ts], "the answer is in the thread once"


async def test_a_revived_thread_answer_is_posted_though_the_old_life_has_one_with_its_number(
    local_slack, start_app
):
    bot = await start_app(ScriptedModel([say("hello"), say("hello again")], by_turn_position=False), [])
    ts, sid, _ = await _thread_with_a_turn(local_slack, bot)
    [old] = [m for m in local_slack.messages(GENERAL, thread_ts=ts) if m.text == "hello"]
    [first] = [e for e in await bot.store.events(sid) if isinstance(e, MessageCompleted)]
    # the retention passes: the session's keys lapse, its event numbers with them
    await bot.store.redis.delete(*await bot.store.session_keys(sid))
    assert not await bot.store.exists(sid)
    # a deliverer of the new life dies mid-pass: the next pass is careful and looks in the thread before posting
    await bot.store.redis.set(bot.store.key(sid, "outlock"), "dead-token|1")

    await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> and again", thread_ts=ts)
    await bot.wait_idle()
    [again] = [e for e in await bot.store.events(sid) if isinstance(e, MessageCompleted)]
    assert again.seq == first.seq  # numbered afresh in its new stream: the old answer's number
    await local_slack.wait_for(
        lambda: [m for m in local_slack.messages(GENERAL, thread_ts=ts) if m.text == "hello again"],
        timeout_s=5,
    )
    assert [m.ts for m in local_slack.messages(GENERAL, thread_ts=ts) if m.text == "hello"] == [old.ts]


async def test_an_answer_whose_careful_look_slack_rate_limited_is_looked_for_again_not_posted_anew(
    local_slack, start_app
):
    bot = await start_app(ScriptedModel([say("hello")]), [])
    ts, sid, _ = await _thread_with_a_turn(local_slack, bot)
    ref = SessionRef(session_id=sid, team_id="T0LOCAL", channel={"channel_id": GENERAL, "thread_ts": ts})
    done = MessageCompleted(session_id=sid, turn_id="t9", seq=904, step=1, text="Refunded ch_9.")

    def answers() -> list:
        return [m for m in local_slack.messages(GENERAL, thread_ts=ts) if m.text == "Refunded ch_9."]

    # a deliverer posts the answer and is killed before its pass ends: where it landed is nowhere in Redis
    dying = RedisOutbox(bot.store.redis)
    assert await dying.outbox_begin(sid, ["frontend"], "dying-token") is not None
    await SlackChannel(dying, lambda team: _client(bot), states=bot.store).deliver(done, ref)
    [shown] = answers()
    await bot.store.redis.set(bot.store.key(sid, "outlock"), "dying-token|1")  # time passes: its lock runs out

    # the next deliverer looks in the thread before posting, and Slack answers that look with a 429 (which the
    # outbox's client does not wait out inside the call: bot.app.slack_retry_handlers)
    successor = RedisOutbox(bot.store.redis)
    assert await successor.outbox_begin(sid, ["frontend"], "next-token") is not None
    assert successor.posts.pass_is_careful(sid)
    local_slack.fail_next("conversations.replies", status=429, retry_after=1)
    delivery = AsyncWebClient(token=BOT_TOKEN, base_url=local_slack.api_url,
                              retry_handlers=slack_retry_handlers(wait_on_rate_limits=False))

    async def delivery_client(team):  # noqa: ANN001, ANN202
        return delivery

    second = SlackChannel(successor, delivery_client, states=bot.store)
    with contextlib.suppress(RetryLater):  # (it says when to look again)
        await second.deliver(done, ref)
    await successor.outbox_end(sid, "next-token", {}, [], claim=0, again_in_ms=1000)
    assert [m.ts for m in answers()] == [shown.ts], "not posted while its look went unanswered"

    # the retry (careful still: the care is handed on) looks again and finds it
    assert await successor.outbox_begin(sid, ["frontend"], "retry-token") is not None
    await second.deliver(done, ref)
    await second.close()
    await successor.outbox_end(sid, "retry-token", {}, [], claim=0, again_in_ms=None)
    assert [m.ts for m in answers()] == [shown.ts], "the answer is in the thread once"


async def test_a_redelivered_turn_stops_every_task_stream_it_starts(local_slack, start_app):
    bot = await start_app(ScriptedModel([say("hello")]), [])
    turn = await _refund_turn(local_slack, bot)
    ts, sid, ref, events, answers = turn.ts, turn.sid, turn.ref, turn.events, turn.answers

    outbox = RedisOutbox(bot.store.redis)
    deliverer = SlackChannel(outbox, lambda team: _client(bot), states=bot.store)
    deliverer.tasks.delay_s = 0.0  # the call runs past the status delay: its task stream starts

    async def deliver_pass(token: str, batch: list) -> None:
        assert await outbox.outbox_begin(sid, ["frontend"], token) is not None
        for event in batch:
            await deliver_each(event)
        await outbox.outbox_end(sid, token, {}, [], claim=0, again_in_ms=None)

    async def deliver_each(event) -> None:  # noqa: ANN001
        await deliverer.deliver(event, ref)
        if isinstance(event, ActionStarted):  # the call runs a while: its task shows
            await local_slack.wait_for(lambda: local_slack.calls_to("chat.startStream"), timeout_s=5)
        await asyncio.sleep(0.05)

    await deliver_pass("first-token", events)
    [shown] = answers()
    # the same events again (a pass whose progress was not saved is delivered again, from its first event)
    await deliver_pass("again-token", events)
    await asyncio.sleep(0.3)
    await deliverer.close()
    assert unstopped_streams(local_slack) == {}, "every stream Slack saw started was stopped once"
    assert not [m for m in local_slack.messages(GENERAL, thread_ts=ts) if m.streaming]
    assert [m.ts for m in answers()] == [shown.ts], "the answer is in the thread once"


async def test_a_task_stream_started_late_by_a_pass_that_outlived_its_lock_is_stopped_without_the_answer(
    local_slack, start_app
):
    bot = await start_app(ScriptedModel([say("hello")]), [])
    turn = await _refund_turn(local_slack, bot)
    ts, sid, ref, events, answers = turn.ts, turn.sid, turn.ref, turn.events, turn.answers

    # the first deliverer starts the task's stream, and Slack is slow to answer it: its lock runs out meanwhile
    stalled, first, slow_start = await _stalled_task_start(local_slack, bot, turn, "stalled-token")

    # another replica takes the session over: no stream is open in its eyes, so it posts the answer whole
    successor = RedisOutbox(bot.store.redis)
    assert await successor.outbox_begin(sid, ["frontend"], "next-token") is not None
    second = SlackChannel(successor, lambda team: _client(bot), states=bot.store)
    for event in events:
        await second.deliver(event, ref)
    await second.close()
    await successor.outbox_end(sid, "next-token", {}, [], claim=0, again_in_ms=None)
    [shown] = answers()

    # the first one's start lands, and it goes on with what it had not delivered
    slow_start.release()
    await asyncio.sleep(0.3)
    for event in events[2:]:
        await first.deliver(event, ref)
    await first.close()
    await stalled.outbox_end(sid, "stalled-token", {}, [], claim=0, again_in_ms=None)
    assert unstopped_streams(local_slack) == {}, "every stream Slack saw started was stopped once"
    assert not [m for m in local_slack.messages(GENERAL, thread_ts=ts) if m.streaming]
    assert [m.ts for m in answers()] == [shown.ts], "the answer is in the thread once"


@pytest.mark.parametrize("lands", ["after_its_pass", "within_its_pass"])
async def test_a_task_stream_another_replica_opened_is_stopped_by_the_answer_that_takes_the_session_over(
    local_slack, start_app, lands
):
    """``within_its_pass``: the other replica's pass ends after the start landed, and its record of the turn (no
    stream, in its eyes) is written over the opener's."""
    bot = await start_app(ScriptedModel([say("hello")]), [])
    turn = await _refund_turn(local_slack, bot)
    ts, sid, ref, events, answers = turn.ts, turn.sid, turn.ref, turn.events, turn.answers

    # one replica starts showing the running call as a task; Slack is slow to answer, its lock runs out
    dying, first, slow_start = await _stalled_task_start(local_slack, bot, turn, "dying-token")

    # the other replica takes the session over and finds the task's stream claimed: it leaves it to the first
    second_outbox = RedisOutbox(bot.store.redis)
    second = SlackChannel(second_outbox, lambda team: _client(bot), states=bot.store)
    second.tasks.delay_s = 0.0

    async def second_pass(token: str, batch: list, meanwhile=None) -> None:  # noqa: ANN001
        assert await second_outbox.outbox_begin(sid, ["frontend"], token) is not None
        for event in batch:
            await second.deliver(event, ref)
            await asyncio.sleep(0.05)
        if meanwhile is not None:
            await meanwhile()
        await second_outbox.outbox_end(sid, token, {}, [], claim=0, again_in_ms=None)

    async def start_lands() -> None:  # the first one's start lands (its stream is recorded), and then it dies
        slow_start.release()
        await local_slack.wait_for(lambda: [c for c in local_slack.calls_to("chat.startStream") if c.response], 5)
        await asyncio.sleep(0.2)
        await first.close()

    await second_pass("next-token", events[:2], start_lands if lands == "within_its_pass" else None)
    if lands == "after_its_pass":
        await start_lands()

    # the rest of the turn is delivered by the other replica: its answer ends the stream the first one opened
    await second_pass("last-token", events[2:])
    await second.close()
    assert unstopped_streams(local_slack) == {}, "every stream Slack saw started was stopped once"
    assert not [m for m in local_slack.messages(GENERAL, thread_ts=ts) if m.streaming]
    assert len(answers()) == 1, "the answer is in the thread once"


async def test_a_task_stream_whose_stop_slack_rate_limited_is_stopped_later_and_the_answer_shown_once(
    local_slack, start_app
):
    bot = await start_app(ScriptedModel([say("hello")]), [])
    turn = await _refund_turn(local_slack, bot)
    ts, sid, ref, events, answers = turn.ts, turn.sid, turn.ref, turn.events, turn.answers

    # the outbox's client does not wait out a 429 inside the call (bot.app.slack_retry_handlers)
    delivery = AsyncWebClient(token=BOT_TOKEN, base_url=local_slack.api_url,
                              retry_handlers=slack_retry_handlers(wait_on_rate_limits=False))

    async def delivery_client(team):  # noqa: ANN001, ANN202
        return delivery

    outbox = RedisOutbox(bot.store.redis)
    deliverer = SlackChannel(outbox, delivery_client, states=bot.store)
    deliverer.tasks.delay_s = 0.0
    assert await outbox.outbox_begin(sid, ["frontend"], "a-token") is not None
    for event in events[:2]:
        await deliverer.deliver(event, ref)
    await local_slack.wait_for(lambda: local_slack.calls_to("chat.startStream"), timeout_s=5)
    await deliverer.deliver(events[2], ref)
    local_slack.fail_next("chat.stopStream", status=429, retry_after=1)  # Tier 2: spent for a moment
    with contextlib.suppress(RetryLater):  # the outbox delivers the answer again later
        await deliverer.deliver(events[3], ref)
    for event in events[3:]:
        await deliverer.deliver(event, ref)
    await outbox.outbox_end(sid, "a-token", {}, [], claim=0, again_in_ms=None)
    await local_slack.wait_for(lambda: not unstopped_streams(local_slack), timeout_s=5)
    await deliverer.close()
    assert not [m for m in local_slack.messages(GENERAL, thread_ts=ts) if m.streaming]
    assert len(answers()) == 1, "the answer is in the thread once"
