"""The status line costs Slack calls only when work is slow (at most card, update and reply per
approve cycle) and shows progress on long work."""

from __future__ import annotations

import asyncio
import json

from pydantic import BaseModel

from bot.approval import never
from bot.models.scripted import ScriptedModel, call, say
from bot.tools import tool
from handlers.delivery.status import STATUS_DELAY_S
from localslack.seed import ALICE, BOT_USER_ID, GENERAL
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card, refund_charge, refund_script

CHAT = ("chat.postMessage", "chat.update", "chat.delete")


def chat_calls(slack) -> list[str]:  # noqa: ANN001
    return [c.method for c in slack.calls if c.method in CHAT]


async def test_a_quick_approve_cycle_makes_three_slack_calls(local_slack, start_app):
    bot = await start_app(refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    await bot.wait_idle()
    await asyncio.sleep(STATUS_DELAY_S + 0.3)  # a status line armed during the cycle would be posted by now
    calls = chat_calls(local_slack)  # card, then its update and the reply, side by side (either lands first)
    assert calls[:1] == ["chat.postMessage"] and sorted(calls[1:]) == ["chat.postMessage", "chat.update"], calls


class Job(BaseModel):
    name: str


@tool(approval=never())
async def slow_report(args: Job) -> dict:
    """A report that takes a while."""
    await asyncio.sleep(STATUS_DELAY_S + 1.0)
    return {"report": args.name}


def statuses_set(slack, ts: str) -> list:  # noqa: ANN001
    """The live statuses Slack accepted under the thread (``assistant.threads.setStatus``), loading messages read."""
    found = []
    for c in slack.calls_to("assistant.threads.setStatus"):
        if c.ok and c.params.get("thread_ts") == ts and c.params.get("status"):
            loading = c.params.get("loading_messages") or []
            found.append(c.model_copy(update={"params": {
                **c.params, "loading_messages": json.loads(loading) if isinstance(loading, str) else loading}}))
    return found


async def test_slow_work_shows_a_live_status_under_the_thread_that_goes_with_the_reply(local_slack, start_app):
    """Where Slack allows it (channel threads too, since setStatus takes chat:write) the status is
    Slack's own, under the thread: one call, no message to post and delete. The status line message is the
    fallback (tests/e2e/test_ai_surface.py)."""
    model = ScriptedModel([call("slow_report", name="q3"), say("Here is the q3 report.")])
    await start_app(model, [slow_report])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> the q3 report please")
    # read from the calls Slack accepted, not from the thread's state: the tasks' stream starts as the status is
    # set, and its message replaces the status (as any reply of the app's does) before a busy loop looks
    running = await local_slack.wait_for(lambda: [c for c in statuses_set(local_slack, ts) if "Running slow report"
                                                  in " ".join(c.params["loading_messages"])], timeout_s=STATUS_DELAY_S + 2)
    assert running, "a step still running after the delay says what it does"
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "q3 report." in m.text)
    assert not local_slack.assistant_state(GENERAL, ts).status, "the reply replaces the status"
    assert not [m for m in local_slack.messages(GENERAL, thread_ts=ts) if "Running" in m.text]
    assert "chat.delete" not in chat_calls(local_slack)


async def test_bot_delay_scale_stretches_how_long_a_step_runs_before_its_progress_shows(local_slack, start_app):
    """A step of 2.5 s shows its status after 1.5 s; with the delays stretched 3 times (4.5 s) it shows none."""
    model = ScriptedModel([call("slow_report", name="q3"), say("Here is the q3 report.")])
    await start_app(model, [slow_report], BOT_DELAY_SCALE="3")
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> the q3 report please")
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "q3 report." in m.text)
    assert not [c for c in local_slack.calls if c.method.endswith("setStatus") and "Running" in str(c.params)]
    assert not [m for m in local_slack.messages(GENERAL, thread_ts=ts) if "Running" in m.text]
