"""An OpenAI Agents SDK agent in Slack, end to end: signed Slack requests from the local workspace, the real
SDK (0.24) talking Chat Completions over HTTP to the local OpenAI-compatible server, the real engine on Redis.

The agent is written the way the SDK's docs write one; only ``wrap`` and our policies are ours.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import Agent, OpenAIChatCompletionsModel, function_tool
from openai import AsyncOpenAI

from bot.approval import Approval, always
from bot.backends import wrap
from bot.governance import four_eyes, n_of_m
from bot.models.scripted import ScriptedModel
from bot.protocol import ActionStarted
from localslack.seed import ALICE, BOB, BOT_USER_ID, CAROL, DAVE, GENERAL, TEAM_ID
from tests.audit_polling import audit_entries
from tests.e2e.framework_script import answer_in, approve_this_card_then_the_next, closed_today
from tests.e2e.test_approval_flow import button, card_in, mention_and_wait_for_card
from tests.e2e.test_decisions import inputs
from tests.fakes.openai_server import FakeOpenAI

API_KEY = "sk-test"
REFUNDS: list[str] = []
PART_REFUNDS: list[tuple[str, int]] = []
EXPORT_STARTED = asyncio.Event()
EXPORT_CANCELLED = asyncio.Event()


@function_tool(needs_approval=True)
def issue_refund(charge_id: str) -> str:
    """Refund a charge to the customer's card."""
    REFUNDS.append(charge_id)
    return f"refunded {charge_id}"


@function_tool(needs_approval=True)
def refund_part(charge_id: str, amount_cents: int) -> str:
    """Refund part of a charge to the customer's card, in cents."""
    PART_REFUNDS.append((charge_id, amount_cents))
    return f"refunded {amount_cents} cents of {charge_id}"


@function_tool
def lookup_charge(charge_id: str) -> str:
    """Look up a charge by its id."""
    return f"{charge_id}: 5.00 USD, paid"


@function_tool
async def export_ledger(quarter: str) -> str:
    """Export a quarter's ledger (slow)."""
    EXPORT_STARTED.set()
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        EXPORT_CANCELLED.set()
        raise
    return "exported"


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    REFUNDS.clear()
    PART_REFUNDS.clear()
    EXPORT_STARTED.clear()
    EXPORT_CANCELLED.clear()
    async with FakeOpenAI(api_key=API_KEY) as server:
        yield server


def support_agent(fake: FakeOpenAI) -> Agent[Any]:
    model = OpenAIChatCompletionsModel(model="gpt-4o-mini",
                                       openai_client=AsyncOpenAI(base_url=fake.base_url, api_key=API_KEY))
    return Agent(name="support", instructions="You help customers with their charges.", model=model,
                 tools=[issue_refund, lookup_charge, export_ledger, refund_part])


def refund_then_say(fake: FakeOpenAI, words: str = "Refunded ch_1.") -> None:
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1"}, "call_refund")
    fake.reply_text(words)


def tool_said(fake: FakeOpenAI, call_id: str) -> str | None:
    """What the model was told the call returned, in the newest request that carries it."""
    for request in reversed(fake.requests):
        for message in request.body["messages"]:
            if message["role"] == "tool" and message["tool_call_id"] == call_id:
                return message["content"]
    return None


def buttons(message) -> list[str]:
    return [e["text"]["text"] for b in message.blocks or [] if b["type"] == "actions" for e in b["elements"]
            if e.get("type") == "button"]


async def settlements(bot, until):
    return await audit_entries(bot.redis.client, TEAM_ID, kind="settlement", until=until)


async def test_approve_runs_the_sdk_tool_once_and_the_audit_names_who(local_slack, start_app, fake):
    refund_then_say(fake)
    bot = await start_app(ScriptedModel([]), [], agent=support_agent(fake))
    ts, card = await mention_and_wait_for_card(local_slack)
    assert "issue_refund" in json.dumps(card.blocks) and REFUNDS == []

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "Refunded ch_1.")
    assert REFUNDS == ["ch_1"]
    assert tool_said(fake, "call_refund") == "refunded ch_1"
    [entry] = await settlements(bot, until=bool)
    assert entry.data["outcome"] == "approved" and entry.actor == f"slack:{TEAM_ID}:{ALICE}"


async def test_cancel_with_a_reason_is_what_the_model_reads(local_slack, start_app, fake):
    refund_then_say(fake, "I did not refund it.")
    bot = await start_app(ScriptedModel([]), [], agent=support_agent(fake))
    ts, card = await mention_and_wait_for_card(local_slack)

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Cancel with reason"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE))
    [reason] = [b for b in modal.blocks if b["type"] == "input"]
    await local_slack.submit_view(ALICE, modal.id, {reason["block_id"]: {
        reason["element"]["action_id"]: "Chargeback already open"}})

    await answer_in(local_slack, ts, "I did not refund it.")
    assert REFUNDS == []
    assert "Chargeback already open" in tool_said(fake, "call_refund")
    [entry] = await settlements(bot, until=bool)
    assert entry.data["outcome"] == "cancelled" and entry.data["note"] == "Chargeback already open"


async def test_a_tool_the_sdk_runs_freely_asks_once_our_policy_says_so(local_slack, start_app, fake):
    fake.reply_tool_call("lookup_charge", {"charge_id": "ch_1"}, "call_look")
    fake.reply_text("It was 5.00 USD.")
    await start_app(ScriptedModel([]), [], agent=wrap(support_agent(fake), policies={
        "lookup_charge": always()}))
    ts, card = await mention_and_wait_for_card(local_slack, "what was ch_1?")
    assert "lookup_charge" in json.dumps(card.blocks) and tool_said(fake, "call_look") is None

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "It was 5.00 USD.")
    assert tool_said(fake, "call_look") == "ch_1: 5.00 USD, paid"


async def test_a_lookup_needing_no_approval_answers_without_a_card(local_slack, start_app, fake):
    fake.reply_tool_call("lookup_charge", {"charge_id": "ch_1"}, "call_look")
    fake.reply_text("It was 5.00 USD.")
    await start_app(ScriptedModel([]), [], agent=support_agent(fake))
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> what was ch_1?")

    await answer_in(local_slack, ts, "It was 5.00 USD.")
    assert card_in(local_slack, ts) is None
    assert tool_said(fake, "call_look") == "ch_1: 5.00 USD, paid"


async def test_our_request_policy_refuses_an_sdk_tool_and_the_model_reads_why(local_slack, start_app, fake):
    refund_then_say(fake, "Refunds are closed, sorry.")
    await start_app(ScriptedModel([]), [], agent=wrap(support_agent(fake), policies={
        "issue_refund": Approval(request=closed_today)}))
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1")

    await answer_in(local_slack, ts, "Refunds are closed, sorry.")
    assert REFUNDS == [] and card_in(local_slack, ts) is None
    assert "Refunds are closed today." in tool_said(fake, "call_refund")


async def test_four_eyes_on_the_sdk_tool(local_slack, start_app, fake):
    refund_then_say(fake)
    await start_app(ScriptedModel([]), [], agent=wrap(support_agent(fake), policies={
        "issue_refund": Approval(request=always(), response=four_eyes())}))
    ts, card = await mention_and_wait_for_card(local_slack)

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    refusal = await local_slack.wait_for(lambda: local_slack.ephemerals(ALICE))
    assert "Four-eyes" in refusal[-1].text and REFUNDS == []

    await local_slack.click(DAVE, GENERAL, card.ts, button(card, "Approve"))
    await answer_in(local_slack, ts, "Refunded ch_1.")
    assert REFUNDS == ["ch_1"]


async def test_two_of_an_approver_list_on_the_sdk_tool(local_slack, start_app, fake):
    refund_then_say(fake)
    bot = await start_app(ScriptedModel([]), [], agent=wrap(support_agent(fake), policies={
        "issue_refund": Approval(request=always(), response=n_of_m(2, "tool:issue_refund"))}))
    await bot.deps.governance.policies.set_approvers(TEAM_ID, "tool:issue_refund", [BOB, CAROL, DAVE],
                                                     actor="test")
    ts, card = await mention_and_wait_for_card(local_slack)

    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for(lambda: "1 of 2" in json.dumps(local_slack.message(GENERAL, card.ts).blocks))
    await bot.wait_idle()
    assert REFUNDS == []
    await local_slack.click(CAROL, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "Refunded ch_1.")
    assert REFUNDS == ["ch_1"]
    entries = await audit_entries(bot.redis.client, TEAM_ID,
                                  until=lambda es: any(e.kind == "execution" for e in es))
    who = f"slack:{TEAM_ID}:"
    by_kind = {kind: [e for e in entries if e.kind == kind] for kind in ("request", "candidate", "settlement",
                                                                          "execution")}
    assert [e.actor for e in by_kind["request"]] == [who + ALICE]
    assert {e.actor for e in by_kind["candidate"]} == {who + BOB, who + CAROL}  # each approval, named
    assert [(e.actor, e.data["outcome"]) for e in by_kind["settlement"]] == [(who + CAROL, "approved")]
    assert [(e.subject, e.data["status"]) for e in by_kind["execution"]] == [("call_refund", "completed")]
    [request] = [e for e in entries if e.kind == "request"]
    assert (request.data["tool"], request.data["call_id"]) == ("issue_refund", "call_refund")


async def test_the_stop_button_cancels_the_running_sdk_tool(local_slack, start_app, fake):
    fake.reply_tool_call("export_ledger", {"quarter": "q3"}, "call_export")
    bot = await start_app(ScriptedModel([]), [], agent=support_agent(fake))
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> export q3")
    await asyncio.wait_for(EXPORT_STARTED.wait(), 5)
    await local_slack.wait_for(lambda: local_slack.assistant_state(GENERAL, ts).session_status == "processing")

    await local_slack.stop_agent_session(ALICE, GENERAL, ts)

    await asyncio.wait_for(EXPORT_CANCELLED.wait(), 3)
    await answer_in(local_slack, ts, "Stopped")
    await bot.wait_idle()
    assert len(fake.requests) == 1  # the model never heard a result


async def test_the_example_agent_named_by_bot_agent_asks_its_approver_list(local_slack, start_app, fake,
                                                                           monkeypatch):
    # the example's model is a name: the SDK's own client reads where to go from the environment, and its one
    # HTTP client per process is made again on this test's event loop
    monkeypatch.setattr("agents.models.openai_provider._http_client", None)
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    fake.reply_tool_call("refund_charge", {"charge_id": "ch_1001", "amount": 40.0}, "call_refund")
    fake.reply_text("Refunded 40 USD on ch_1001.")
    bot = await start_app(ScriptedModel([]), [], BOT_AGENT="examples.openai_agents_agent:slack_agent")
    await bot.deps.governance.policies.set_approvers(TEAM_ID, "tool:refund_charge", [BOB], actor="test")
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1001 $40")

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    refusal = await local_slack.wait_for(lambda: local_slack.ephemerals(ALICE))
    assert refusal and tool_said(fake, "call_refund") is None
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "Refunded 40 USD on ch_1001.")
    assert tool_said(fake, "call_refund") == "Refunded $40.00 on ch_1001."


# --- what the bot adds to the SDK: Edit & approve, and questions -------------------------------------


async def test_edit_before_approve_runs_the_sdk_tool_once_with_the_edit(local_slack, start_app, fake):
    fake.reply_tool_call("refund_part", {"charge_id": "ch_1", "amount_cents": 500}, "call_part")
    fake.reply_text("Refunded 1.20 USD of ch_1.")
    bot = await start_app(ScriptedModel([]), [], agent=support_agent(fake))
    ts, card = await mention_and_wait_for_card(local_slack)

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Edit & approve"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE))
    assert set(inputs(modal)) == {"hitl_arg:charge_id", "hitl_arg:amount_cents"}
    assert (await local_slack.submit_view(ALICE, modal.id, {"hitl_arg:amount_cents": {"value": "120"}})).status == 200

    await answer_in(local_slack, ts, "Refunded 1.20 USD of ch_1.")
    assert PART_REFUNDS == [("ch_1", 120)]
    assert tool_said(fake, "call_part") == "refunded 120 cents of ch_1"
    [resolution] = await audit_entries(bot.redis.client, TEAM_ID, kind="resolution")
    assert resolution.data["edited_input"] == {"charge_id": "ch_1", "amount_cents": 120}
    assert resolution.actor == f"slack:{TEAM_ID}:{ALICE}"
    await bot.wait_idle()
    started = [e.input for e in await bot.store.events(f"slack:{TEAM_ID}:{GENERAL}:{ts}")
               if isinstance(e, ActionStarted) and e.call_id == "call_part"]
    assert started[-1] == {"charge_id": "ch_1", "amount_cents": 120}  # the arguments that ran


def ask(fake: FakeOpenAI, call_id: str, options: list[str]) -> None:
    fake.reply_tool_call("ask_user", {"question": "Why refund ch_1?", "options": options}, call_id)


def menu_of(card) -> dict[str, Any]:
    [menu] = [e for b in card.blocks if b["type"] == "actions" for e in b["elements"] if e["type"] == "static_select"]
    return menu


async def test_an_sdk_agents_question_answered_from_the_menu_by_the_requester_only(local_slack, start_app, fake):
    ask(fake, "call_why", ["duplicate", "fraud"])
    fake.reply_text("Noted: fraud.")
    await start_app(ScriptedModel([]), [], agent=support_agent(fake))
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
    assert "Why refund ch_1?" in json.dumps(card.blocks) and "Approve" not in buttons(card)
    menu = menu_of(card)
    [fraud] = [o for o in menu["options"] if o["text"]["text"] == "fraud"]

    await local_slack.select(BOB, GENERAL, card.ts, menu["action_id"], fraud["value"])
    refusal = await local_slack.wait_for(lambda: local_slack.ephemerals(BOB))
    assert "Only the person who" in refusal[-1].text and tool_said(fake, "call_why") is None
    await local_slack.select(ALICE, GENERAL, card.ts, menu["action_id"], fraud["value"])

    await answer_in(local_slack, ts, "Noted: fraud.")
    assert tool_said(fake, "call_why") == "fraud"


async def test_an_sdk_agents_question_answered_by_typing_in_the_thread(local_slack, start_app, fake):
    ask(fake, "call_why", ["duplicate", "fraud"])
    fake.reply_text("Noted: asked twice.")
    bot = await start_app(ScriptedModel([]), [], agent=support_agent(fake))
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
    assert "Why refund ch_1?" in json.dumps(card.blocks)
    await local_slack.post_message(BOB, GENERAL, "it was fraud", thread_ts=ts)  # not the requester's words
    await bot.wait_idle()
    assert tool_said(fake, "call_why") is None and len(fake.requests) == 1

    await local_slack.post_message(ALICE, GENERAL, "the customer was charged twice", thread_ts=ts)

    await answer_in(local_slack, ts, "Noted: asked twice.")
    assert tool_said(fake, "call_why") == "the customer was charged twice"


async def test_a_server_that_numbers_calls_per_answer_gets_each_call_approved_and_run_once(
        local_slack, start_app, fake):
    """Kimi K2 served by vLLM numbers tool calls per answer, ``<tool>:<n>`` with the counter restarting every
    round (github.com/open-webui/open-webui/issues/28570): the same tool called in two rounds comes back under
    the same id, which the SDK alone refuses ("reused a tool call ID"). The bot gives the second call an id of
    its own before the SDK reads the answer: each refund has its card, runs once, and the model reads each
    result under the id it was told."""
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1"}, "issue_refund:0")
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_2"}, "issue_refund:0")
    fake.reply_text("Refunded both.")
    await start_app(ScriptedModel([]), [], agent=support_agent(fake))
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1 and ch_2")
    assert "ch_1" in json.dumps(card.blocks)

    await approve_this_card_then_the_next(local_slack, ts, card, naming="ch_2")

    await answer_in(local_slack, ts, "Refunded both.")
    assert REFUNDS == ["ch_1", "ch_2"]
    told = {m["tool_call_id"]: m["content"] for m in fake.requests[-1].body["messages"] if m["role"] == "tool"}
    calls = [c for m in fake.requests[-1].body["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert [c["id"] for c in calls][0] == "issue_refund:0" and len({c["id"] for c in calls}) == 2
    assert sorted(told.values()) == ["refunded ch_1", "refunded ch_2"] and set(told) == {c["id"] for c in calls}
