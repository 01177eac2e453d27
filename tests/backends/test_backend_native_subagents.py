"""Sub-agents of a native agent (``native(model, tools, agents=[SubAgent(...)])``): the main model's ``delegate``
call parks the turn on the delegation card, the sub-agent runs in its own session, driven by native with its own
instructions and tools (its approval card in the same thread, labelled with its name), and its answer is what
the main model reads for the call. Cancel on the delegation card, or the stop button on the parent's turn, stops
the sub-agent: its card ends "no longer needed" and its call never runs. Driven through signed Slack requests,
with both models on the local OpenAI-compatible server (each request says whose it is by its instructions)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from blocks.outcomes import NO_LONGER_NEEDED
from bot.agents import SubAgent
from bot.approval import always
from bot.backends.native import native
from bot.models.openai import OpenAIChatModel
from bot.models.scripted import ScriptedModel
from bot.tools import Tool, tool
from handlers.delivery.status import STATUS_DELAY_S
from localslack.seed import ALICE, BOT_USER_ID, GENERAL
from tests.e2e.framework_script import answer_in, told_the_model
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card
from tests.fakes.openai_server import FakeOpenAI, ReceivedRequest

KEY = "sk-test"
MAIN = "You help the support team."
RESEARCH = "You research customers. Answer in one line."


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=KEY) as server:
        yield server


def delegation_script(server: FakeOpenAI, *, slow_first_step: bool = False) -> None:
    if slow_first_step:  # the thread shows "processing", and its stop button
        server.reply_delay(STATUS_DELAY_S + 0.3)
    server.reply_tool_call("delegate", {"agent": "researcher", "task": "Which plan is acme on?"}, "call_d1")
    server.reply_tool_call("crm_lookup", {"customer": "acme"}, "call_k1")  # the sub-agent's first step
    server.reply_text("acme is on gold")  # the sub-agent's answer
    server.reply_text("Answer: acme is on gold.")  # the main agent's, after reading it


def crm_tool(ran: list[str]) -> Tool:
    @tool(approval=always())
    async def crm_lookup(customer: str) -> dict[str, Any]:
        """Look a customer up in the CRM."""
        ran.append(customer)
        return {"customer": customer, "plan": "gold"}

    return crm_lookup


def notify_tool() -> Tool:
    @tool
    async def notify_team(text: str) -> str:
        """Tell the team something."""
        return "told"

    return notify_team


def agent_on(fake: FakeOpenAI, ran: list[str]):  # noqa: ANN201 - a WrappedAgent
    researcher = SubAgent(name="researcher", description="Looks customers up in the CRM.", instructions=RESEARCH,
                          tools=[crm_tool(ran)])
    return native(OpenAIChatModel("gpt-4o-mini", base_url=fake.base_url, api_key=KEY), [notify_tool()],
                  instructions=MAIN, agents=[researcher])


def whose(request: ReceivedRequest) -> str:
    return request.body["messages"][0]["content"]


def tool_names(request: ReceivedRequest) -> list[str]:
    return sorted(t["function"]["name"] for t in request.body.get("tools") or [])


async def child_card(local_slack, ts):  # noqa: ANN001, ANN201 - LocalSlack, the sub-agent's card
    def found():  # noqa: ANN202
        for message in local_slack.messages(GENERAL, ts):
            if "crm_lookup" in json.dumps(message.blocks or []) and any(
                    b.get("type") == "actions" for b in message.blocks or []):
                return message
        return None

    return await local_slack.wait_for(found)


async def test_the_sub_agent_runs_with_its_own_instructions_and_tools_and_its_answer_reaches_the_main_model(
        local_slack, start_app, fake):
    ran: list[str] = []
    delegation_script(fake)
    bot = await start_app(ScriptedModel([]), [], agent=agent_on(fake, ran))
    ts, delegation = await mention_and_wait_for_card(local_slack, "what plan is acme on?")
    shown = json.dumps(delegation.blocks)
    assert "researcher" in shown and "Which plan is acme on?" in shown
    card = await child_card(local_slack, ts)
    assert "researcher" in json.dumps(card.blocks)  # the card says which sub-agent asks
    assert ran == []

    # the main model was shown delegate (listing the sub-agent), never the sub-agent's tool
    main_first, child_first = fake.requests[0], fake.requests[1]
    assert whose(main_first) == MAIN and tool_names(main_first) == ["delegate", "notify_team"]
    delegate_spec = next(t for t in main_first.body["tools"] if t["function"]["name"] == "delegate")
    assert "researcher: Looks customers up in the CRM." in delegate_spec["function"]["description"]
    # the sub-agent's model got its instructions, its task and its tools only
    assert whose(child_first) == RESEARCH and tool_names(child_first) == ["crm_lookup"]
    assert child_first.body["messages"][-1] == {"role": "user", "content": "Which plan is acme on?"}

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await answer_in(local_slack, ts, "Answer: acme is on gold.")
    assert ran == ["acme"]
    assert [whose(r) for r in fake.requests] == [MAIN, RESEARCH, RESEARCH, MAIN]
    assert told_the_model(fake, "call_d1") == "acme is on gold"
    await bot.wait_idle()
    assert "researcher" in json.dumps(local_slack.message(GENERAL, delegation.ts).blocks)
    assert not any(b.get("type") == "actions" for b in local_slack.message(GENERAL, delegation.ts).blocks)


async def test_cancel_on_the_delegation_card_stops_the_sub_agent_and_the_main_model_goes_on(
        local_slack, start_app, fake):
    ran: list[str] = []
    delegation_script(fake)
    bot = await start_app(ScriptedModel([]), [], agent=agent_on(fake, ran))
    ts, _ = await mention_and_wait_for_card(local_slack, "what plan is acme on?")
    card = await child_card(local_slack, ts)
    delegation = next(m for m in local_slack.messages(GENERAL, ts)
                      if "Which plan is acme on?" in json.dumps(m.blocks or []) and m.ts != card.ts)

    await local_slack.click(ALICE, GENERAL, delegation.ts, button(delegation, "Cancel"))
    await local_slack.wait_for(lambda: NO_LONGER_NEEDED in local_slack.message(GENERAL, card.ts).text)
    assert not any(b.get("type") == "actions" for b in local_slack.message(GENERAL, card.ts).blocks)
    await bot.wait_idle()
    assert ran == []
    # the main model reads that the delegation did not happen; the sub-agent's answer never came
    told = json.loads(told_the_model(fake, "call_d1"))
    assert told["status"] == "rejected"
    assert [whose(r) for r in fake.requests] == [MAIN, RESEARCH, MAIN]


async def test_the_stop_button_on_the_main_turn_stops_the_sub_agent(local_slack, start_app, fake):
    ran: list[str] = []
    delegation_script(fake, slow_first_step=True)
    bot = await start_app(ScriptedModel([]), [], agent=agent_on(fake, ran))
    ts, _ = await mention_and_wait_for_card(local_slack, "what plan is acme on?")
    card = await child_card(local_slack, ts)

    await local_slack.stop_agent_session(ALICE, GENERAL, ts, late=True)
    await answer_in(local_slack, ts, "Stopped")
    await local_slack.wait_for(lambda: NO_LONGER_NEEDED in local_slack.message(GENERAL, card.ts).text)
    assert not any(b.get("type") == "actions" for b in local_slack.message(GENERAL, card.ts).blocks)
    await bot.wait_idle()
    assert ran == []
    assert [whose(r) for r in fake.requests] == [MAIN, RESEARCH]


async def test_a_sub_agent_that_fails_is_a_failed_call_the_main_model_reads(local_slack, start_app, fake):
    ran: list[str] = []
    fake.reply_tool_call("delegate", {"agent": "researcher", "task": "Which plan is acme on?"}, "call_d1")
    fake.reply_error(400, "the model refused the request")  # the sub-agent's model call fails
    fake.reply_text("The researcher could not find out.")
    await start_app(ScriptedModel([]), [], agent=agent_on(fake, ran))
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> what plan is acme on?")

    await answer_in(local_slack, ts, "The researcher could not find out.")
    told = json.loads(told_the_model(fake, "call_d1"))
    assert told["status"] == "failed" and told["error"].startswith("researcher failed:")
    assert ran == [] and [whose(r) for r in fake.requests] == [MAIN, RESEARCH, MAIN]
