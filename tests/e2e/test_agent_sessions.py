"""Each turn's thread is a Slack agent session: its status follows the turn,
Slack's stop button stops it, and where Slack refuses the methods the status line serves instead.

A status that would last less than the status delay is not shown (the budget: at most four Slack
calls per approve cycle with the session in them): ``processing`` comes only when a step is slow, and
``suspended`` at once only when the session showed it working, else once the card has waited the delay."""

from __future__ import annotations

import asyncio
import logging

import httpx
from pydantic import BaseModel

from blocks.outcomes import NO_LONGER_NEEDED
from bot.approval import always, never
from bot.models.scripted import ScriptedModel, call, say
from bot.tools import ToolContext, tool
from handlers.delivery.status import STATUS_DELAY_S
from localslack.seed import ALICE, BOT_USER_ID, GENERAL
from tests.e2e.test_approval_flow import (
    RUNS,
    button,
    card_in,
    mention_and_wait_for_card,
    refund_charge,
    refund_script,
)

SHOWN = ("chat.postMessage", "chat.update", "chat.delete", "agents.sessions.setStatus", "agents.sessions.rename",
         "assistant.threads.setStatus")


def shown_calls(slack, since: int = 0) -> list[str]:  # noqa: ANN001
    """The Slack calls people see the result of, each session status by its value."""
    return [c.method if c.method != "agents.sessions.setStatus" else f"session:{c.params.get('status')}"
            for c in slack.calls[since:] if c.method in SHOWN]


def session_log(slack, ts: str) -> list[dict[str, str]]:  # noqa: ANN001
    return slack.assistant_state(GENERAL, ts).session_log


def slow_refund_script() -> ScriptedModel:
    """The refund script whose first model step is still running after the status delay (by 1.2 s: on a busy
    machine the status's timer, counted from the turn's start, fires late, and a step that ended first would
    never have shown the session processing)."""
    async def slow_call(messages, tools):  # noqa: ANN001, ARG001
        await asyncio.sleep(STATUS_DELAY_S + 1.2)
        return call("refund_charge", charge_id="ch_1", amount=5.0)

    return ScriptedModel([slow_call, refund_script().steps[1]])


async def quick_approve_cycle(slack, text: str) -> str:  # noqa: ANN001
    """A mention, its card approved at once, the reply: the thread's ts."""
    ts, card = await mention_and_wait_for_card(slack, text=text)
    await slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await slack.wait_for(lambda: slack.assistant_state(GENERAL, ts).session_status == "active")
    return ts


async def test_a_quick_approve_cycle_is_at_most_four_slack_calls_with_the_session_in_them(local_slack, start_app):
    """The budget: card, card update, reply and one session call (the session created ``active``,
    titled with the request), counted as ``make bench`` counts them: every Web API call of a cycle after
    a first one (which looks up what the app keeps afterwards)."""
    bot = await start_app(ScriptedModel([call("refund_charge", charge_id="ch_1", amount=5.0), say("Refunded."),
                                         call("refund_charge", charge_id="ch_2", amount=5.0), say("Refunded.")],
                                        by_turn_position=False), [refund_charge])
    await quick_approve_cycle(local_slack, "refund ch_1 please")
    await bot.wait_idle()
    before = len(local_slack.calls)
    ts = await quick_approve_cycle(local_slack, "refund ch_2 please")
    await bot.wait_idle()
    await asyncio.sleep(STATUS_DELAY_S + 0.3)  # a status armed during the cycle would be set by now

    cycle = [c.method if c.method != "agents.sessions.setStatus" else f"session:{c.params.get('status')}"
             for c in local_slack.calls[before:]]
    # the card's update and the reply are sent side by side (neither waits on the other): either lands first
    assert cycle[:1] == ["chat.postMessage"] and sorted(cycle[1:3]) == ["chat.postMessage", "chat.update"] \
        and cycle[3:] == ["session:active"], f"card, card update and reply, and the session created active: {cycle}"
    assert len(cycle) <= 4
    state = local_slack.assistant_state(GENERAL, ts)
    assert [e["status"] for e in state.session_log] == ["active"]
    assert state.session_title == "refund ch_2 please", "titled with the request"


async def test_a_turn_with_an_approval_is_processing_then_suspended_on_whom_then_active(local_slack, start_app):
    """The model's step is slow (processing shows, with Slack's stop button), the card then waits on alice."""
    bot = await start_app(slow_refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    state = lambda: local_slack.assistant_state(GENERAL, ts)  # noqa: E731
    await local_slack.wait_for(lambda: state().session_title.startswith("Waiting"))
    assert state().session_status == "suspended"
    assert state().session_title == "Waiting for @alice to approve refund_charge", "suspended names whom, by name"
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for(lambda: state().session_status == "active")
    await bot.wait_idle()

    assert [e["status"] for e in state().session_log] == ["processing", "suspended", "active"]
    assert state().session_log[0]["title"] == "refund ch_1 please", "created titled with the first request"
    assert state().session_title == "refund ch_1 please", "answered: the title is the request again"
    # the whole turn, in Slack calls: processing once the step is slow (with the live status under the thread),
    # the card, suspended at once (it showed the agent working) naming whom, the card's update and the reply
    # (side by side: either lands first)
    shown = shown_calls(local_slack)
    assert shown[:5] + sorted(shown[5:7]) + shown[7:] == [
        "session:processing", "assistant.threads.setStatus", "chat.postMessage", "session:suspended",
        "agents.sessions.rename", "chat.postMessage", "chat.update", "agents.sessions.rename", "session:active"]


async def test_a_card_that_waits_longer_than_the_delay_suspends_the_session_naming_whom(local_slack, start_app):
    """A quick model step, a person who takes a while: the session is created suspended, titled with whom it
    waits on, and given the request's title back when the turn answers."""
    bot = await start_app(refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    state = lambda: local_slack.assistant_state(GENERAL, ts)  # noqa: E731
    await local_slack.wait_for(lambda: state().session_status == "suspended", timeout_s=STATUS_DELAY_S + 3)
    assert state().session_title == "Waiting for @alice to approve refund_charge"
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for(lambda: state().session_status == "active")
    await bot.wait_idle()
    assert state().session_log == [{"status": "suspended", "title": "Waiting for @alice to approve refund_charge"},
                                   {"status": "active", "title": "refund ch_1 please"}]
    # the card waited past the delay, so the call is a task of a streamed answer: the reply
    # is that stream's stopStream instead of a post
    assert shown_calls(local_slack) == ["chat.postMessage", "session:suspended", "chat.update",
                                        "agents.sessions.rename", "session:active"]
    assert [c.method for c in local_slack.calls if "Stream" in c.method] == ["chat.startStream", "chat.stopStream"]


async def test_where_slack_refuses_agent_sessions_it_asks_once_per_workspace_quietly(local_slack, start_app,
                                                                                       caplog):
    local_slack.ws.agent_sessions_refusal = "not_authorized"  # the app is not declared as an agent
    caplog.set_level(logging.INFO)
    bot = await start_app(ScriptedModel([say("First."), say("Second.")]), [])
    for text in ("one", "two"):
        ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> {text}")
        await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: m.text.endswith("."))
        await bot.wait_idle()
    asked = [c for c in local_slack.calls if c.method == "agents.sessions.setStatus"]
    assert [c.response.get("error") for c in asked] == ["not_authorized"], "asked once, then never again"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "agent" in r.getMessage().lower()]


async def test_the_stop_button_mid_approval_ends_the_card_and_runs_nothing(local_slack, start_app):
    """Clicked while the agent worked (a slow step: the session showed processing and its stop button),
    delivered once the card was up: the card ends "no longer needed", the thread says it stopped, the
    session is closed (its buttons are gone), and nothing runs."""
    RUNS.clear()
    bot = await start_app(slow_refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    delivered = await local_slack.stop_agent_session(ALICE, GENERAL, ts, late=True)
    assert delivered is not None and delivered.status == 200
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Stopped" in m.text)
    await local_slack.wait_for(lambda: local_slack.assistant_state(GENERAL, ts).session_status == "closed")
    assert NO_LONGER_NEEDED in local_slack.message(GENERAL, card.ts).text
    await bot.wait_idle()
    assert RUNS == [], "nothing runs after the stop"
    assert not [m for m in local_slack.messages(GENERAL, thread_ts=ts) if "Result:" in m.text]


async def test_the_stop_button_mid_approval_on_another_replica_ends_the_card_and_runs_nothing(local_slack,
                                                                                             start_app):
    """The card was posted by one replica; the stop reaches another. The card ends "no longer needed", the
    session closes, and nothing runs."""
    RUNS.clear()
    first = await start_app(slow_refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    await first.wait_idle()
    second = await start_app(refund_script(), [refund_charge])  # Slack now delivers to the second replica
    delivered = await local_slack.stop_agent_session(ALICE, GENERAL, ts, late=True)
    assert delivered is not None and delivered.status == 200
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Stopped" in m.text)
    await local_slack.wait_for(lambda: local_slack.assistant_state(GENERAL, ts).session_status == "closed")
    await first.wait_idle()
    await second.wait_idle()
    assert NO_LONGER_NEEDED in local_slack.message(GENERAL, card.ts).text
    assert RUNS == [], "nothing runs after the stop"
    assert not [m for m in local_slack.messages(GENERAL, thread_ts=ts) if "Result:" in m.text]


GATE: dict[str, asyncio.Event] = {}
EXPORTS: list[str] = []


class Export(BaseModel):
    name: str


TOLD: list[str] = []  # how each running export learned of the stop
TOLD_WITHIN_S = 3.0  # same replica: at once; another replica: its next renewal (1 s while a tool runs)


@tool(approval=never())
async def long_export(args: Export, ctx: ToolContext) -> dict:
    """An export that takes a while (until released), and would finish unless told to stop."""
    GATE["started"].set()
    try:
        await GATE["release"].wait()
    except asyncio.CancelledError:
        TOLD.append(f"cancelled, stopped={ctx.stopped}")
        GATE["told"].set()
        raise
    EXPORTS.append(args.name)
    return {"exported": args.name}


async def told_of_the_stop() -> None:
    """The running export was told (cancelled, ``ctx.stopped`` set) within the bound, without being released."""
    await asyncio.wait_for(GATE["told"].wait(), TOLD_WITHIN_S)
    assert TOLD == ["cancelled, stopped=True"]


async def test_the_stop_button_mid_tool_tells_the_running_call_and_stops_the_turn(local_slack, start_app):
    GATE.update(started=asyncio.Event(), release=asyncio.Event(), told=asyncio.Event())
    EXPORTS.clear()
    TOLD.clear()
    model = ScriptedModel([call("long_export", name="q3"), call("long_export", name="q4"), say("All exported.")])
    bot = await start_app(model, [long_export])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> export q3 then q4")
    await asyncio.wait_for(GATE["started"].wait(), 5)
    await local_slack.wait_for(lambda: local_slack.assistant_state(GENERAL, ts).session_status == "processing")
    await local_slack.stop_agent_session(ALICE, GENERAL, ts)
    await told_of_the_stop()
    GATE["release"].set()
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Stopped" in m.text)
    await bot.wait_idle()
    assert EXPORTS == [], "the call under way is told and stops before its side effect; the next never starts"
    [task] = next(m for m in local_slack.messages(GENERAL, thread_ts=ts) if m.bot_id and m.tasks).tasks
    assert (task["title"], task["status"], task.get("details")) == ("long_export", "error", "stopped"), \
        "the running call's task says it was stopped (not refused)"
    assert local_slack.assistant_state(GENERAL, ts).session_status == "closed"
    assert not [m for m in local_slack.messages(GENERAL, thread_ts=ts) if "All exported" in m.text]


async def test_the_stop_button_reaching_another_replica_stops_the_turn_running_on_the_first(local_slack, start_app):
    GATE.update(started=asyncio.Event(), release=asyncio.Event(), told=asyncio.Event())
    EXPORTS.clear()
    TOLD.clear()
    first = await start_app(ScriptedModel([call("long_export", name="q3"), call("long_export", name="q4"),
                                           say("All exported.")]), [long_export])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> export q3 then q4")
    await asyncio.wait_for(GATE["started"].wait(), 5)
    await local_slack.wait_for(lambda: local_slack.assistant_state(GENERAL, ts).session_status == "processing")
    second = await start_app(ScriptedModel([say("The second replica's model is never asked.")]), [long_export])
    async with httpx.AsyncClient() as browser:  # the local workspace's stop button; delivered to the second replica
        clicked = await browser.post(f"{local_slack.ui_url.rstrip('/')}/ui/stop",
                                     json={"user": ALICE, "channel": GENERAL, "ts": ts})
    assert clicked.json()["ok"], clicked.json()
    await told_of_the_stop()  # the first replica learns it from Redis, with its lease renewal
    GATE["release"].set()
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Stopped" in m.text)
    await first.wait_idle()
    await second.wait_idle()
    assert EXPORTS == [], "the call under way on the first replica is told and stops; nothing runs after it"
    await local_slack.wait_for(lambda: local_slack.assistant_state(GENERAL, ts).session_status == "closed")
    assert not [m for m in local_slack.messages(GENERAL, thread_ts=ts) if "exported" in m.text.lower()
                or "never asked" in m.text]


@tool(approval=always())
async def gated_export(args: Export) -> dict:
    """An export that needs approval and takes a while."""
    GATE["started"].set()
    await GATE["release"].wait()
    EXPORTS.append(args.name)
    return {"exported": args.name}


async def test_an_approved_call_that_runs_long_is_processing_again_and_the_stop_button_stops_the_turn(
        local_slack, start_app):
    GATE.update(started=asyncio.Event(), release=asyncio.Event())
    EXPORTS.clear()
    model = ScriptedModel([call("gated_export", name="q3"), call("gated_export", name="q4"), say("All exported.")])
    bot = await start_app(model, [gated_export])
    ts, card = await mention_and_wait_for_card(local_slack, text="export q3 then q4")
    state = lambda: local_slack.assistant_state(GENERAL, ts)  # noqa: E731
    await local_slack.wait_for(lambda: state().session_title.startswith("Waiting"))
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await asyncio.wait_for(GATE["started"].wait(), 5)
    await local_slack.wait_for(lambda: state().session_status == "processing", timeout_s=STATUS_DELAY_S + 3)
    assert state().session_title == "export q3 then q4", "working again: the title is the request again"
    await local_slack.stop_agent_session(ALICE, GENERAL, ts)
    GATE["release"].set()
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Stopped" in m.text)
    await bot.wait_idle()
    # the stop is written before Slack's ack, and the call under way is told then: released only after the
    # press, q3 never finishes (nor does q4 start)
    assert EXPORTS == [] and state().session_status == "closed"
    assert sum(1 for m in local_slack.messages(GENERAL, thread_ts=ts) if card_in_blocks(m)) == 0, "no second card"


def card_in_blocks(message) -> bool:  # noqa: ANN001
    return any(b.get("type") == "actions" for b in message.blocks or [])


def stop_then_refund_again_script(*, cancelled: bool = False) -> ScriptedModel:
    """Turn one: a slow step then a refund card (stopped there, or ``cancelled`` and answered); turn two, in
    the same thread: another refund card, then the result."""
    async def answer(messages, tools):  # noqa: ANN001, ARG001
        return say("Result: " + str(messages[-1]["content"]))

    first = [slow_refund_script().steps[0], *([say("Not refunded.")] if cancelled else [])]
    return ScriptedModel([*first, call("refund_charge", charge_id="ch_2", amount=7.0), answer])


async def second_card(slack, ts: str, first) -> object:  # noqa: ANN001
    """The thread's newest card with buttons, once it is not ``first``."""
    return await slack.wait_for(lambda: (c := card_in(slack, ts)) is not None and c.ts != first.ts and c)


async def the_second_turn_goes_on(slack, bot, ts: str, card) -> None:  # noqa: ANN001
    """The second turn's card is still open, and approving it runs the refund and answers."""
    await bot.wait_idle()
    assert NO_LONGER_NEEDED not in slack.message(GENERAL, card.ts).text, "the new card is not touched"
    assert card_in_blocks(slack.message(GENERAL, card.ts)), "its buttons are still there"
    await slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    await bot.wait_idle()
    assert [r["charge"] for r in RUNS] == ["ch_2"]


async def test_a_redelivered_stop_changes_nothing(local_slack, start_app):
    """Slack sends ``agent_session_stopped`` again (same event_id, ``X-Slack-Retry-Num``) when it did not see
    the 200 in time, up to minutes later. By then alice's stopped turn is over and she asked again in the
    thread: the redelivery is answered 200 and stops nothing; her new card keeps its buttons and works."""
    RUNS.clear()
    bot = await start_app(stop_then_refund_again_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    stopped = await local_slack.stop_agent_session(ALICE, GENERAL, ts, late=True)
    assert stopped is not None and stopped.status == 200
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Stopped" in m.text)
    await bot.wait_idle()
    await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_2 instead", thread_ts=ts)
    second = await second_card(local_slack, ts, card)

    again = await local_slack.redeliver(stopped)
    assert again.status == 200 and again.attempts[-1].retry_num == 1
    await the_second_turn_goes_on(local_slack, bot, ts, second)


async def test_a_stop_that_reaches_the_bot_only_after_its_turn_ended_stops_nothing(local_slack, start_app):
    """Alice pressed stop while her first turn was processing, but Slack could not reach the bot then; its
    retry arrives minutes later, the first the bot sees of it, when that turn is over and her next one waits
    on a card. A stop applies to the turn it was pressed on: the new turn goes on."""
    RUNS.clear()
    bot = await start_app(stop_then_refund_again_script(cancelled=True), [refund_charge])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1 please")
    await local_slack.wait_for(lambda: local_slack.assistant_state(GENERAL, ts).session_status == "processing")
    url, local_slack.deliverer.retry = local_slack.bot_url, False
    local_slack.set_bot_url("http://127.0.0.1:9/slack/events")  # nobody there: the press is not delivered now
    try:
        pressed = await local_slack.stop_agent_session(ALICE, GENERAL, ts)
    finally:
        local_slack.set_bot_url(url)
        local_slack.deliverer.retry = True
    assert pressed is not None and pressed.error == "connection_failed"
    card = await local_slack.wait_for(lambda: card_in(local_slack, ts))
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Cancel"))  # the first turn ends otherwise
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: m.text == "Not refunded.")
    await bot.wait_idle()
    await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_2 instead", thread_ts=ts)
    second = await second_card(local_slack, ts, card)

    late = await local_slack.redeliver(pressed, reason="connection_failed")
    assert late.status == 200
    await the_second_turn_goes_on(local_slack, bot, ts, second)
