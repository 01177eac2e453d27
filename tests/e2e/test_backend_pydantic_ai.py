"""A pydantic-ai agent in Slack, end to end: the real framework, its model on the local OpenAI-compatible
server, clicks and messages as signed Slack requests. Its own approvals and questions become our cards,
our policies apply to its tools, and what people decide reaches its model."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from typing import Annotated, Any

import pytest
from pydantic_ai import Agent, CallDeferred
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from bot import money
from bot.approval import Approval, always
from bot.backends import wrap
from bot.governance import four_eyes, n_of_m
from bot.models.scripted import ScriptedModel
from handlers.delivery.status import STATUS_DELAY_S
from localslack.seed import ALICE, BOB, BOT_USER_ID, CAROL, DAVE, GENERAL, TEAM_ID
from tests.audit_polling import audit_entries
from tests.e2e.framework_script import (
    answer_in,
    approve_this_card_then_the_next,
    closed_today,
    refund_then_answer,
    told_the_model,
)
from tests.e2e.test_approval_flow import button, card_in, mention_and_wait_for_card
from tests.e2e.test_decisions import inputs
from tests.e2e.test_governance import governance
from tests.e2e.test_tasks_plan import final_tasks, tasks_message
from tests.fakes.openai_server import FakeOpenAI

KEY = "sk-test"


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=KEY) as server:
        yield server


def support_agent(fake: FakeOpenAI, ran: list[dict[str, Any]]) -> Agent[None, str]:
    """A pydantic-ai agent as its docs write one: a refund it gates itself, a lookup, a question."""
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=fake.base_url, api_key=KEY))
    agent = Agent(model, instructions="You are a support agent. Refunds need a person's approval.")

    @agent.tool_plain(requires_approval=True)
    def issue_refund(charge_id: str, amount: int) -> str:
        """Refund part of a charge, in cents."""
        ran.append({"charge_id": charge_id, "amount": amount})
        return f"refunded {amount} on {charge_id}"

    @agent.tool_plain
    def lookup_charge(charge_id: str) -> dict[str, Any]:
        """Look a charge up."""
        return {"charge_id": charge_id, "amount": 500}

    @agent.tool_plain
    def pick_reason(charge_id: str) -> str:
        """Ask the person why they want the refund."""
        raise CallDeferred(metadata={"question": f"Why refund {charge_id}?", "options": ["duplicate", "fraud"]})

    return agent


async def test_approve_runs_the_refund_once_and_the_audit_names_the_decision(local_slack, start_app, fake):
    ran: list[dict[str, Any]] = []
    refund_then_answer(fake)
    bot = await start_app(ScriptedModel([]), [], agent=support_agent(fake, ran))

    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
    assert "issue_refund" in json.dumps(card.blocks) and ran == []
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "Done: the refund went through.")
    assert ran == [{"charge_id": "ch_1", "amount": 500}]
    assert told_the_model(fake, "call_refund") == "refunded 500 on ch_1"
    assert "Approved" in json.dumps(local_slack.message(GENERAL, card.ts).blocks)
    [request] = await audit_entries(bot.redis.client, TEAM_ID, kind="request")
    [resolution] = await audit_entries(bot.redis.client, TEAM_ID, kind="resolution")
    assert request.data["input"] == {"charge_id": "ch_1", "amount": 500}
    assert resolution.data["outcome"] == "approved" and resolution.actor == f"slack:{TEAM_ID}:{ALICE}"


async def test_an_amount_the_agents_tool_marks_as_money_shows_as_money_on_its_card(local_slack, start_app, fake):
    """A framework's tool whose argument is annotated with ``bot.money`` gets the card our own tools get: the
    amount as money, the tool still given the number."""
    ran: list[float] = []
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=fake.base_url, api_key=KEY))
    agent = Agent(model)

    @agent.tool_plain(requires_approval=True)
    def refund_charge(charge_id: str, amount: Annotated[float, money("USD")]) -> str:
        """Refund part of a charge, in dollars."""
        ran.append(amount)
        return f"refunded {amount} on {charge_id}"

    fake.reply_tool_call("refund_charge", {"charge_id": "ch_1", "amount": 1234.5}, "call_refund")
    fake.reply_text("Refunded.")
    await start_app(ScriptedModel([]), [], agent=agent)
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
    shown = json.dumps(card.blocks)
    assert "$1,234.50" in shown and "1234.5" not in shown

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await answer_in(local_slack, ts, "Refunded.")
    assert ran == [1234.5]


async def test_our_policy_refuses_a_tool_the_agent_gates_itself_and_no_card_is_shown(local_slack, start_app, fake):
    """``requires_approval=True`` makes pydantic-ai pause the call for a person before any of our code runs; our
    request policy refuses it all the same: no card anyone could approve, and the model reads why."""
    ran: list[dict[str, Any]] = []
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 500}, "call_refund")
    fake.reply_text("Refunds are closed, sorry.")
    await start_app(ScriptedModel([]), [], agent=wrap(support_agent(fake, ran), policies={
        "issue_refund": Approval(request=closed_today)}))
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1")

    await answer_in(local_slack, ts, "Refunds are closed, sorry.")
    assert ran == [] and card_in(local_slack, ts) is None
    assert "Refunds are closed today." in told_the_model(fake, "call_refund")


async def test_a_model_that_calls_the_refused_tool_again_and_again_stops_on_the_step_budget(
        local_slack, start_app, fake):
    """Each refusal is told at once and the model asked again: a model that never takes no ends on the budget's
    card (one step per run), not in a loop of model calls."""
    ran: list[dict[str, Any]] = []
    for n in range(6):
        fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 500}, f"call_refund_{n}")
    await start_app(ScriptedModel([]), [], agent=wrap(support_agent(fake, ran), policies={
        "issue_refund": Approval(request=closed_today)}), BOT_STEP_BUDGET="3")

    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")

    assert "Keep going?" in json.dumps(card.blocks)
    assert len(fake.requests) == 3 and ran == []


async def test_a_refused_call_beside_a_question_waits_for_the_answer_and_both_reach_the_model(
        local_slack, start_app, fake):
    ran: list[dict[str, Any]] = []
    fake.reply_tool_calls(("issue_refund", {"charge_id": "ch_1", "amount": 500}, "call_refund"),
                          ("pick_reason", {"charge_id": "ch_1"}, "call_why"))
    fake.reply_text("No refund today; noted it was a duplicate.")
    await start_app(ScriptedModel([]), [], agent=wrap(support_agent(fake, ran), policies={
        "issue_refund": Approval(request=closed_today)}))
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
    assert "Why refund ch_1?" in json.dumps(card.blocks) and "issue_refund" not in json.dumps(card.blocks)

    [menu] = [e for b in card.blocks if b["type"] == "actions" for e in b["elements"] if e["type"] == "static_select"]
    [option] = [o for o in menu["options"] if o["text"]["text"] == "duplicate"]
    await local_slack.select(ALICE, GENERAL, card.ts, menu["action_id"], option["value"])

    await answer_in(local_slack, ts, "No refund today")
    assert ran == []
    assert "Refunds are closed today." in told_the_model(fake, "call_refund")
    assert told_the_model(fake, "call_why") == "duplicate"


async def test_cancel_with_a_reason_is_what_the_model_reads(local_slack, start_app, fake):
    ran: list[dict[str, Any]] = []
    refund_then_answer(fake)
    bot = await start_app(ScriptedModel([]), [], agent=support_agent(fake, ran))
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Cancel with reason"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE))
    [reason] = inputs(modal).values()
    await local_slack.submit_view(ALICE, modal.id,
                                  {reason["block_id"]: {reason["element"]["action_id"]: "Customer got store credit"}})

    await answer_in(local_slack, ts, "Done")
    assert ran == []
    assert "Customer got store credit" in told_the_model(fake, "call_refund")
    [settlement] = await audit_entries(bot.redis.client, TEAM_ID, kind="settlement")
    assert settlement.data["outcome"] == "cancelled" and settlement.data["note"] == "Customer got store credit"
    assert settlement.actor == f"slack:{TEAM_ID}:{ALICE}"


async def test_edit_before_approve_runs_the_refund_with_the_edit(local_slack, start_app, fake):
    ran: list[dict[str, Any]] = []
    refund_then_answer(fake)
    bot = await start_app(ScriptedModel([]), [], agent=support_agent(fake, ran))
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Edit & approve"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE))
    assert set(inputs(modal)) == {"hitl_arg:charge_id", "hitl_arg:amount"}
    assert (await local_slack.submit_view(ALICE, modal.id, {"hitl_arg:amount": {"value": "120"}})).status == 200

    await answer_in(local_slack, ts, "Done")
    assert ran == [{"charge_id": "ch_1", "amount": 120}]
    assert told_the_model(fake, "call_refund") == "refunded 120 on ch_1"
    [resolution] = await audit_entries(bot.redis.client, TEAM_ID, kind="resolution")
    assert resolution.data["edited_input"] == {"charge_id": "ch_1", "amount": 120}


async def test_a_deferred_call_is_a_question_answered_from_the_menu_or_by_typing(local_slack, start_app, fake):
    await start_app(ScriptedModel([]), [], agent=support_agent(fake, []))
    for answer, pick in (("fraud", True), ("the customer asked twice", False)):
        fake.reply_tool_call("pick_reason", {"charge_id": "ch_1"}, f"call_why_{pick}")
        fake.reply_text(f"Noted: {answer}.")
        ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
        assert "Why refund ch_1?" in json.dumps(card.blocks)
        if pick:
            [menu] = [e for b in card.blocks if b["type"] == "actions" for e in b["elements"]
                      if e["type"] == "static_select"]
            [option] = [o for o in menu["options"] if o["text"]["text"] == answer]
            await local_slack.select(ALICE, GENERAL, card.ts, menu["action_id"], option["value"])
        else:
            await local_slack.post_message(ALICE, GENERAL, answer, thread_ts=ts)
        await answer_in(local_slack, ts, f"Noted: {answer}.")
        assert told_the_model(fake, f"call_why_{pick}") == answer


async def test_four_eyes_on_the_agents_refund(local_slack, start_app, fake):
    ran: list[dict[str, Any]] = []
    refund_then_answer(fake)
    agent = wrap(support_agent(fake, ran), policies={"issue_refund": Approval(request=always(), response=four_eyes())})
    await start_app(ScriptedModel([]), [], agent=agent)
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    refusal = await local_slack.wait_for(lambda: local_slack.ephemerals(ALICE))
    assert "Four-eyes" in refusal[-1].text and ran == []
    await local_slack.click(DAVE, GENERAL, card.ts, button(card, "Approve"))
    await answer_in(local_slack, ts, "Done")
    assert ran == [{"charge_id": "ch_1", "amount": 500}]


async def test_two_of_an_approver_list_on_the_agents_refund(local_slack, start_app, fake):
    ran: list[dict[str, Any]] = []
    refund_then_answer(fake)
    agent = wrap(support_agent(fake, ran),
                 policies={"issue_refund": Approval(request=always(), response=n_of_m(2, "tool:issue_refund"))})
    bot = await start_app(ScriptedModel([]), [], agent=agent)
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:issue_refund", [BOB, CAROL, DAVE], actor="test")
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")

    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for(lambda: "1 of 2" in json.dumps(local_slack.message(GENERAL, card.ts).blocks))
    await bot.wait_idle()
    assert ran == [] and card_in(local_slack, ts) is not None  # still waiting on a second approver
    await local_slack.click(CAROL, GENERAL, card.ts, button(card, "Approve"))
    await answer_in(local_slack, ts, "Done")
    await bot.wait_idle()
    assert ran == [{"charge_id": "ch_1", "amount": 500}]
    votes = await audit_entries(bot.redis.client, TEAM_ID, kind="candidate")
    assert any(v.actor == f"slack:{TEAM_ID}:{BOB}" and (v.data["approvals"], v.data["required"]) == (1, 2)
               for v in votes)
    [settlement] = await audit_entries(bot.redis.client, TEAM_ID, kind="settlement")
    assert (settlement.actor, settlement.data["outcome"]) == (f"slack:{TEAM_ID}:{CAROL}", "approved")
    [execution] = await audit_entries(bot.redis.client, TEAM_ID, kind="execution")
    assert (execution.data["tool"], execution.data["status"]) == ("issue_refund", "completed")


async def test_the_stop_button_ends_the_agents_run_before_its_tools(local_slack, start_app, fake):
    ran: list[dict[str, Any]] = []
    fake.reply_delay(3)  # a slow model: the session shows "processing" and its stop button
    refund_then_answer(fake)
    bot = await start_app(ScriptedModel([]), [], agent=support_agent(fake, ran))
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1")
    await local_slack.wait_for(lambda: local_slack.assistant_state(GENERAL, ts).session_status == "processing")

    await local_slack.stop_agent_session(ALICE, GENERAL, ts)

    await answer_in(local_slack, ts, "Stopped")
    await bot.wait_idle()
    assert ran == [] and card_in(local_slack, ts) is None


async def test_a_parked_run_outlives_its_process_and_another_resumes_it(local_slack, start_app, fake):
    ran: list[dict[str, Any]] = []
    fake.reply_tool_calls(("lookup_charge", {"charge_id": "ch_1"}, "call_look"),
                          ("issue_refund", {"charge_id": "ch_1", "amount": 500}, "call_refund"))
    fake.reply_text("Done: the refund went through.")
    first = await start_app(ScriptedModel([]), [], agent=support_agent(fake, ran))
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
    await first.close()

    # a new deploy of the same agent: the run goes on from the history pydantic-ai stored with the turn
    await start_app(ScriptedModel([]), [], agent=support_agent(fake, ran))
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "Done: the refund went through.")
    assert ran == [{"charge_id": "ch_1", "amount": 500}]
    assert json.loads(told_the_model(fake, "call_look")) == {"charge_id": "ch_1", "amount": 500}
    assert len(fake.requests) == 2  # the lookup's result came from the stored history, not a new model call


async def test_the_example_agent_runs_from_bot_agent_with_its_approver_list(local_slack, start_app, fake, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)  # the example's own model, on the local server
    monkeypatch.delitem(sys.modules, "examples.pydantic_ai_agent", raising=False)
    fake.reply_tool_calls(("lookup_customer", {"name": "acme"}, "call_look"),
                          ("refund_charge", {"charge_id": "ch_1001", "amount": 40}, "call_refund"))
    fake.reply_text("Refunded Acme $40.")
    bot = await start_app(ScriptedModel([]), [], BOT_AGENT="examples.pydantic_ai_agent:slack_agent")
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:refund_charge", [BOB], actor="test")
    ts, card = await mention_and_wait_for_card(local_slack, "refund acme's last charge, $40")

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    refusal = await local_slack.wait_for(lambda: local_slack.ephemerals(ALICE))
    assert "approve" in refusal[-1].text.lower()
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "Refunded Acme $40.")
    refund = json.loads(told_the_model(fake, "call_refund"))
    assert (refund["charge_id"], refund["amount"], refund["status"]) == ("ch_1001", 40.0, "succeeded")
    assert json.loads(told_the_model(fake, "call_look"))["customer"] == "Acme Corp"


async def test_the_approved_call_is_one_task_that_ends_complete_with_its_result(local_slack, start_app, fake):
    ran: list[dict[str, Any]] = []
    refund_then_answer(fake)
    await start_app(ScriptedModel([]), [], agent=support_agent(fake, ran))
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
    live = await local_slack.wait_for(lambda: tasks_message(local_slack, ts), timeout_s=STATUS_DELAY_S + 3)
    assert [(t["title"], t["status"]) for t in live.tasks] == [("issue_refund", "pending")]

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

    done = await final_tasks(local_slack, ts)
    [task] = done.tasks
    assert (task["title"], task["status"], task["details"]) == ("issue_refund", "complete", "approved by @alice")
    assert "refunded 500 on ch_1" in task["output"]
    assert ran == [{"charge_id": "ch_1", "amount": 500}]


async def test_a_server_that_numbers_calls_per_answer_has_each_approved_call_run(local_slack, start_app, fake):
    """Kimi K2 served by vLLM numbers tool calls per answer, ``<tool>:<n>`` with the counter restarting every
    round (github.com/open-webui/open-webui/issues/28570): the same tool called in two rounds comes back under the
    same id. The second is another call: its own card, and approved, it runs (not the first call replayed from its
    execution marker)."""
    ran: list[dict[str, Any]] = []
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 500}, "issue_refund:0")
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_2", "amount": 300}, "issue_refund:0")
    fake.reply_text("Done: both refunds went through.")
    await start_app(ScriptedModel([]), [], agent=support_agent(fake, ran))

    ts, first = await mention_and_wait_for_card(local_slack, "refund ch_1 and ch_2")
    await approve_this_card_then_the_next(local_slack, ts, first, naming="ch_2")
    await answer_in(local_slack, ts, "Done: both refunds went through.")
    assert ran == [{"charge_id": "ch_1", "amount": 500}, {"charge_id": "ch_2", "amount": 300}]
    told = [m["content"] for m in fake.requests[-1].body["messages"] if m["role"] == "tool"]
    assert told == ["refunded 500 on ch_1", "refunded 300 on ch_2"], told


async def test_two_threads_run_the_same_agent_at_once_each_gated_as_its_own(local_slack, start_app, fake):
    """One agent, one backend, two threads whose runs overlap: each run's calls are gated and fenced as that run's
    (the agent is shared; each run's toolset is wrapped for that run alone)."""
    ran: list[dict[str, Any]] = []
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 100}, "call_a")
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_2", "amount": 200}, "call_b")
    fake.reply_text("Done: one.")
    fake.reply_text("Done: two.")
    await start_app(ScriptedModel([]), [], agent=support_agent(fake, ran))
    (ts_1, card_1), (ts_2, card_2) = await asyncio.gather(
        mention_and_wait_for_card(local_slack, "refund ch_1"), mention_and_wait_for_card(local_slack, "refund ch_2"))
    shown = json.dumps(card_1.blocks) + json.dumps(card_2.blocks)  # (which thread got which reply: either)
    assert "ch_1" in shown and "ch_2" in shown and card_1.ts != card_2.ts and ran == []
    await asyncio.gather(local_slack.click(ALICE, GENERAL, card_1.ts, button(card_1, "Approve")),
                         local_slack.click(ALICE, GENERAL, card_2.ts, button(card_2, "Approve")))
    await local_slack.wait_for(lambda: len(ran) == 2)
    for ts in (ts_1, ts_2):
        await local_slack.wait_for(lambda ts=ts: any(m.text.startswith("Done:") for m in local_slack.messages(GENERAL, ts)))
    assert sorted(r["charge_id"] for r in ran) == ["ch_1", "ch_2"]
