"""The session limit on a turn of the bot's own loop as a backend (``bot.backends.native``): a turn that used its
step budget parks on the "Keep going?" card before its next model call; continue goes on with a fresh budget,
stop ends the turn saying so (and the next turn follows the conversation so far). Driven by the engine through
signed Slack requests, the model on the local OpenAI-compatible server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bot.backends.native import native
from bot.models.scripted import ScriptedModel
from bot.tools import ToolContext, tool
from localslack.seed import ALICE, GENERAL
from tests.backends.test_backend_native import KEY, lookup_tool, model_of
from tests.e2e.framework_script import answer_in, told_the_model
from tests.e2e.test_approval_flow import button, card_in, mention_and_wait_for_card
from tests.fakes.openai_server import FakeOpenAI

STOPPED = "Stopped: this turn reached its budget and was not continued."


@pytest.fixture
async def fake():
    async with FakeOpenAI(api_key=KEY) as server:
        yield server


async def limited(local_slack, start_app, fake: FakeOpenAI, ran: list[dict[str, Any]]):  # noqa: ANN201
    """A turn whose first model call asks for a lookup, on a budget of one step: its limit card."""
    fake.reply_tool_call("lookup_charge", {"charge_id": "ch_1"}, "call_look")
    fake.reply_text("The charge is 5 EUR.")
    bot = await start_app(ScriptedModel([]), [], agent=native(model_of(fake), [lookup_tool(ran)]),
                          BOT_STEP_BUDGET="1")
    ts, card = await mention_and_wait_for_card(local_slack, "look ch_1 up")
    return bot, ts, card


async def test_a_turn_over_its_step_budget_parks_on_the_limit_card_and_continue_goes_on(local_slack, start_app, fake):
    ran: list[dict[str, Any]] = []
    _, ts, card = await limited(local_slack, start_app, fake, ran)
    assert "Keep going?" in json.dumps(card.blocks) and "1 steps" in json.dumps(card.blocks)
    assert ran == [{"charge_id": "ch_1"}] and len(fake.requests) == 1  # the tool ran; the model was not asked again

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "The charge is 5 EUR.")
    assert len(fake.requests) == 2 and ran == [{"charge_id": "ch_1"}]
    assert json.loads(told_the_model(fake, "call_look")) == {"charge_id": "ch_1", "amount": 500}


async def test_stop_on_the_limit_card_ends_the_turn_saying_so_and_the_next_turn_follows_it(
        local_slack, start_app, fake):
    ran: list[dict[str, Any]] = []
    bot, ts, card = await limited(local_slack, start_app, fake, ran)

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Stop"))

    await answer_in(local_slack, ts, STOPPED)
    await bot.wait_idle()
    assert len(fake.requests) == 1 and card_in(local_slack, ts) is None
    await local_slack.post_message(ALICE, GENERAL, "so how much was it?", thread_ts=ts)
    await answer_in(local_slack, ts, "The charge is 5 EUR.")  # the next turn's model call, on a fresh budget
    assert json.loads(told_the_model(fake, "call_look")) == {"charge_id": "ch_1", "amount": 500}
    assert fake.requests[-1].body["messages"][-1] == {"role": "user", "content": "so how much was it?"}


async def test_only_model_calls_use_the_step_budget_not_a_tools_questions(local_slack, start_app, fake):
    @tool
    async def change_plan(ctx: ToolContext) -> str:
        """Change the deployment plan."""
        env = await ctx.ask("Which environment?", ["prod", "staging"])
        why = await ctx.ask("Why now?")
        return f"{env.value}: {why.value}"

    fake.reply_tool_call("change_plan", {}, "call_plan")
    fake.reply_text("Planned.")
    await start_app(ScriptedModel([]), [], agent=native(model_of(fake), [change_plan]), BOT_STEP_BUDGET="2")
    ts, _ = await mention_and_wait_for_card(local_slack, "change the plan")
    await local_slack.post_message(ALICE, GENERAL, "staging", thread_ts=ts)
    await local_slack.wait_for(lambda: "Why now?" in json.dumps(getattr(card_in(local_slack, ts), "blocks", None)))
    await local_slack.post_message(ALICE, GENERAL, "the release train leaves at 5", thread_ts=ts)

    await answer_in(local_slack, ts, "Planned.")  # the second model call: no "Keep going?" card before it
    assert told_the_model(fake, "call_plan") == "staging: the release train leaves at 5"
