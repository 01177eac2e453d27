"""Approvers are told, and time exists: DMs to approvers, thread mentions, reminders and expiry.

Driven as Slack drives the app (signed HTTP through LocalSlack). Time is the runtime's clock, moved
forward by the test (``bot.runtime.settings.clock``): nothing here waits for real minutes.
"""

from __future__ import annotations

import time

from pydantic import BaseModel

from bot.approval import Approval, always
from bot.engine.turn_commands import Sweep
from bot.governance import approvers
from bot.models.scripted import ScriptedModel, call, say
from bot.tools import ToolContext, tool
from handlers.delivery.pacing import Pacer
from localslack.seed import ALICE, BOB, CAROL, DAVE, GENERAL, TEAM_ID
from tests.e2e.test_approval_flow import button, card_in, mention_and_wait_for_card
from tests.e2e.test_governance import audit_entries, governance

RUNS: list[str] = []


class Payment(BaseModel):
    vendor: str = "acme"


@tool(approval=Approval(request=always(), response=approvers("tool:pay_vendor")), remind_after=3600,
      expires_after=24 * 3600)
async def pay_vendor(args: Payment, ctx: ToolContext) -> dict:
    """Pay a vendor."""
    RUNS.append(args.vendor)
    return {"paid": args.vendor}


@tool(approval=Approval(request=always(), response=approvers("tool:pay_vendor")), notify="thread")
async def pay_quietly(args: Payment) -> dict:
    """Pay a vendor, mentioning the approvers in the thread instead of writing to them."""
    RUNS.append(args.vendor)
    return {"paid": args.vendor}


@tool(approval=always(), expires_after=600)
async def refund(args: Payment) -> dict:
    """Refund a vendor (the requester approves)."""
    RUNS.append(args.vendor)
    return {"refunded": args.vendor}


@tool(approval=Approval(request=always(), response=approvers("tool:pay_vendor")),
      escalate_after=8 * 3600, escalate_to="tool:finance_managers")
async def pay_big(args: Payment) -> dict:
    """Pay a large invoice (the finance managers step in when nobody answers)."""
    RUNS.append(args.vendor)
    return {"paid": args.vendor}


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _script(tool_name: str, *, after: str = "Done.") -> ScriptedModel:
    return ScriptedModel([call(tool_name, vendor="acme"), lambda messages, tools: say(
        after if "Nobody answered" not in str(messages[-1]) else "Nobody approved in time, so I did not pay.")])


async def _approvers(bot, *people: str) -> None:
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:pay_vendor", list(people), actor="test")


async def test_each_approver_gets_a_working_copy_by_dm_and_every_copy_follows_the_card(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(_script("pay_vendor"), [pay_vendor])
    await _approvers(bot, BOB, CAROL)
    ts, card = await mention_and_wait_for_card(local_slack, "pay acme")
    copies = {}
    for person in (BOB, CAROL):
        dm = local_slack.dm_channel(person)
        copies[person] = await local_slack.wait_for(lambda dm=dm: card_in(local_slack, None, dm))
        head = copies[person].blocks[0]["elements"][0]["text"]
        assert f"<@{ALICE}> needs your approval in <#{GENERAL}>" in head and "Open the thread" in head
    assert card_in(local_slack, None, local_slack.dm_channel(ALICE)) is None  # she asked: the card is in her thread

    # bob approves from his DM: the same request settles, the tool runs once, every copy says so
    result = await local_slack.click(BOB, local_slack.dm_channel(BOB), copies[BOB].ts, button(copies[BOB], "Approve"))
    assert result.status == 200
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Done." in m.text)
    assert RUNS == ["acme"]
    for person in (BOB, CAROL):
        dm = local_slack.dm_channel(person)
        settled = await local_slack.wait_for(
            lambda dm=dm: next((m for m in local_slack.messages(dm, None) if "Approved" in str(m.blocks)), None))
        assert card_in(local_slack, None, dm) is None  # no buttons left anywhere
        assert f"<@{BOB}>" in str(settled.blocks)
        assert f"<@{ALICE}> asked for your approval in <#{GENERAL}>" in str(settled.blocks)  # still says where
    assert card_in(local_slack, ts) is None


async def test_notify_thread_mentions_the_approvers_under_the_card_once(local_slack, start_app):
    bot = await start_app(_script("pay_quietly"), [pay_quietly])
    await _approvers(bot, BOB, CAROL)
    ts, _ = await mention_and_wait_for_card(local_slack, "pay acme quietly")
    mention = await local_slack.wait_for_message(GENERAL, thread_ts=ts,
                                                 predicate=lambda m: "your approval is needed above" in m.text)
    assert f"<@{BOB}>" in mention.text and f"<@{CAROL}>" in mention.text
    await bot.runtime.recover()  # a sweep after the fact repeats nothing
    assert sum("needed above" in m.text for m in local_slack.messages(GENERAL, ts)) == 1
    assert local_slack.messages(local_slack.dm_channel(BOB)) == []


async def test_a_reminder_fires_once_in_the_thread_and_by_dm(local_slack, start_app):
    bot = await start_app(_script("pay_vendor"), [pay_vendor])
    clock = bot.runtime.settings.clock = Clock()
    await _approvers(bot, BOB)
    ts, card = await mention_and_wait_for_card(local_slack, "pay acme")
    await bot.runtime.recover()
    assert not any("Still waiting" in m.text for m in local_slack.messages(GENERAL, ts))  # not yet

    clock.now += 3601
    for _ in range(3):  # swept again and again (and by a second replica below): one reminder
        await bot.runtime.recover()
    second = await _replica(start_app, bot)
    await second.runtime.recover()
    reminder = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Still waiting" in m.text)
    assert "after 1 h" in reminder.text and f"Waiting on <@{BOB}>" in reminder.text
    dm = local_slack.dm_channel(BOB)
    await local_slack.wait_for_message(dm, predicate=lambda m: "Still waiting" in m.text)
    await bot.wait_idle()
    await second.wait_idle()
    assert sum("Still waiting" in m.text for m in local_slack.messages(GENERAL, ts)) == 1
    assert sum("Still waiting" in m.text for m in local_slack.messages(dm, None)) == 1
    assert card_in(local_slack, ts) is not None  # still open: a reminder decides nothing


async def test_expiry_fires_once_the_card_says_so_and_the_turn_goes_on(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(_script("refund"), [refund])
    clock = bot.runtime.settings.clock = Clock()
    ts, card = await mention_and_wait_for_card(local_slack, "refund acme")
    assert "expires" in str(card.blocks)
    clock.now += 601
    second = await _replica(start_app, bot)
    await bot.runtime.recover()
    await second.runtime.recover()
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Nobody approved" in m.text)
    assert reply
    settled = next(m for m in local_slack.messages(GENERAL, ts) if m.ts == card.ts)
    assert "Expired after 10 min — nobody answered" in str(settled.blocks)
    assert card_in(local_slack, ts) is None and RUNS == []
    await bot.runtime.recover()  # swept again: nothing fires twice
    await bot.wait_idle()
    assert sum("Nobody approved" in m.text for m in local_slack.messages(GENERAL, ts)) == 1
    assert [(e.actor, e.data["outcome"], e.data.get("ended_by")) for e in await audit_entries(bot, "resolution")] \
        == [(None, "expired", "expiry")], "the audit says what ended it: nobody, the deadline"


async def test_an_answer_before_the_deadline_wins_and_the_timer_is_moot(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(_script("refund"), [refund])
    clock = bot.runtime.settings.clock = Clock()
    ts, card = await mention_and_wait_for_card(local_slack, "refund acme")
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Done." in m.text)
    clock.now += 601
    await bot.runtime.recover()
    await bot.wait_idle()
    assert RUNS == ["acme"]
    assert "Approved" in str(next(m for m in local_slack.messages(GENERAL, ts) if m.ts == card.ts).blocks)
    assert (await bot.runtime.store.sweep(Sweep("timers", int(clock.now * 1000) + 10**9))).timers == []  # nothing left behind


async def test_no_dm_for_the_requester_or_a_policy_without_names(local_slack, start_app):
    bot = await start_app(_script("pay_vendor"), [pay_vendor])
    await _approvers(bot, ALICE, DAVE)  # alice asks: only dave is told
    await mention_and_wait_for_card(local_slack, "pay acme")
    dm = local_slack.dm_channel(DAVE)
    await local_slack.wait_for(lambda: card_in(local_slack, None, dm))
    assert local_slack.messages(local_slack.dm_channel(ALICE)) == []


async def test_escalation_lets_the_managers_answer_tells_them_once_and_not_before(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(_script("pay_big"), [pay_big])
    clock = bot.runtime.settings.clock = Clock()
    await _approvers(bot, BOB)
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:finance_managers", [DAVE], actor="test")
    ts, card = await mention_and_wait_for_card(local_slack, "pay acme a lot")
    approve = button(card, "Approve")
    await local_slack.click(DAVE, GENERAL, card.ts, approve)  # not yet: dave is not an approver
    refusal = await local_slack.wait_for(lambda: local_slack.ephemerals(DAVE))
    assert f"Only <@{BOB}> can approve" in refusal[-1].text and RUNS == []

    clock.now += 8 * 3600 + 1
    second = await _replica(start_app, bot)
    await bot.runtime.recover()
    await second.runtime.recover()
    line = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Nobody answered in" in m.text)
    assert f"Nobody answered in 8 h: escalated to <@{DAVE}>" in line.text
    await local_slack.wait_for(lambda: "escalated to" in str(local_slack.message(GENERAL, card.ts).blocks))
    dm = local_slack.dm_channel(DAVE)
    copy = await local_slack.wait_for(lambda: card_in(local_slack, None, dm))
    await bot.wait_idle()
    await second.wait_idle()
    assert sum("Nobody answered in" in m.text for m in local_slack.messages(GENERAL, ts)) == 1

    await local_slack.click(DAVE, dm, copy.ts, button(copy, "Approve"))  # now dave's answer counts
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Done." in m.text)
    assert RUNS == ["acme"]
    await bot.wait_idle()  # the copies follow in the same delivery pass as the answer
    await second.wait_idle()
    assert card_in(local_slack, ts) is None and card_in(local_slack, None, dm) is None
    assert card_in(local_slack, None, local_slack.dm_channel(BOB)) is None  # bob's copy followed too


async def _replica(start_app, bot):
    """A second replica on the same Redis, with the same clock and model (Slack now delivers to it)."""
    second = await start_app(bot.runtime.model, list(bot.runtime.tools))
    second.runtime.settings.clock = bot.runtime.settings.clock
    return second


async def test_a_notice_held_back_by_pacing_is_sent_later_not_lost(local_slack, start_app):
    # Slack's pace for bob's DM says "not for 2.3 s": the outbox is told to come back, and the notice's
    # claim must not stay behind (a claim means "sent or being sent": it would never be sent)
    bot = await start_app(_script("pay_vendor"), [pay_vendor], recovery_interval=0.2)
    await _approvers(bot, BOB)
    notices = bot.runtime.outbox.consumers["notify"]
    notices.pacing.posts = Pacer(interval_s=2.3, burst=1)
    notices.pacing.posts.reserve(local_slack.dm_channel(BOB))  # a post to bob just went out
    ts, _ = await mention_and_wait_for_card(local_slack, "pay acme")
    dm = local_slack.dm_channel(BOB)
    assert card_in(local_slack, None, dm) is None
    copy = await local_slack.wait_for(lambda: card_in(local_slack, None, dm), timeout_s=8)
    assert "needs your approval" in str(copy.blocks)


async def test_a_question_with_a_timeout_expires_once_its_card_says_so_and_the_model_carries_on(local_slack, start_app):
    """``ask_question(timeout_minutes=30)``: nobody answers, the timer fires (in either replica), the
    card says how long it waited, and the model hears that nobody answered — once."""
    from bot.builtin import ask_question

    def after(messages, tools):
        last = str(messages[-1])
        return say("Nobody picked, so I used the default." if '"expired"' in last else f"Got: {last}")

    model = ScriptedModel([call("ask_question", question="Which region?", timeout_minutes=30,
                                options=[{"label": "EU"}, {"label": "US"}]), after])
    bot = await start_app(model, [ask_question])
    clock = bot.runtime.settings.clock = Clock()
    ts, card = await mention_and_wait_for_card(local_slack, "deploy somewhere")
    assert "Which region?" in str(card.blocks) and "expires" in str(card.blocks)
    clock.now += 29 * 60
    await bot.runtime.recover()
    assert card_in(local_slack, ts) is not None  # not yet
    clock.now += 60 + 1
    second = await _replica(start_app, bot)
    await bot.runtime.recover()
    await second.runtime.recover()
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Nobody picked" in m.text)
    settled = next(m for m in local_slack.messages(GENERAL, ts) if m.ts == card.ts)
    assert "Expired after 30 min — nobody answered" in str(settled.blocks)
    await bot.runtime.recover()
    await bot.wait_idle()
    assert sum("Nobody picked" in m.text for m in local_slack.messages(GENERAL, ts)) == 1


async def test_app_home_says_what_is_due_when_and_follows_the_clock(local_slack, start_app):
    """The approver's and the requester's App Home show the reminder, the escalation and the expiry;
    once the escalation time has passed they say it happened."""
    from tests.e2e.test_governance import open_home

    RUNS.clear()

    @tool(approval=Approval(request=always(), response=approvers("tool:pay_vendor")), remind_after=3600,
          escalate_after=8 * 3600, escalate_to="tool:finance_managers", expires_after=24 * 3600)
    async def pay_late(args: Payment) -> dict:
        """Pay a late invoice."""
        return {"paid": args.vendor}

    bot = await start_app(_script("pay_late"), [pay_late])
    clock = bot.runtime.settings.clock = Clock()
    await _approvers(bot, BOB)
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:finance_managers", [DAVE], actor="test")
    await mention_and_wait_for_card(local_slack, "pay acme late")
    [record] = await bot.runtime.store.pending_for_team(TEAM_ID)
    req = record.request

    def stamp(at) -> str:
        return f"<!date^{int(at.timestamp())}^"

    bob = str((await open_home(local_slack, BOB)).blocks)
    assert f"Reminder {stamp(req.remind_at)}" in bob
    assert f"escalates to the `finance_managers` list {stamp(req.escalate_at)}" in bob
    assert f"expires {stamp(req.expires_at)}" in bob
    alice = str((await open_home(local_slack, ALICE)).blocks)  # the requester sees the same
    assert f"escalates to the `finance_managers` list {stamp(req.escalate_at)}" in alice

    clock.now += 8 * 3600 + 1
    await bot.runtime.recover()
    await bot.wait_idle()
    bob = str((await open_home(local_slack, BOB)).blocks)
    assert f"Reminded {stamp(req.remind_at)}" in bob and "escalated to the `finance_managers` list" in bob


async def test_a_deadline_set_before_a_restart_fires_once_in_the_process_after_it(local_slack, start_app):
    """The process that parked the request is gone (closed); a new one on the same Redis finds the
    timer, expires the request once, and the turn goes on there."""
    RUNS.clear()
    first = await start_app(_script("refund"), [refund])
    clock = first.runtime.settings.clock = Clock()
    ts, card = await mention_and_wait_for_card(local_slack, "refund acme")
    await first.close()
    clock.now += 601
    after = await _replica(start_app, first)  # the new process, same Redis, same clock
    await after.runtime.recover()
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Nobody approved" in m.text)
    await after.runtime.recover()
    await after.wait_idle()
    assert sum("Nobody approved" in m.text for m in local_slack.messages(GENERAL, ts)) == 1
    assert "Expired after 10 min" in str(local_slack.message(GENERAL, card.ts).blocks) and RUNS == []
