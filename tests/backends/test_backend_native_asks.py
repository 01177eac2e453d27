"""``ctx.ask`` inside a tool of the bot's own loop as a backend (``bot.backends.native``): the tool's question is
a card (a menu, and people may type their own answer), the answer runs the tool again with its answers so far,
and what the tool does after its last question runs once. Driven by the engine through signed Slack requests,
the model on the local OpenAI-compatible server (so the tests read what the model was told)."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from bot.approval import always
from bot.backends.native import native
from bot.models.scripted import ScriptedModel
from bot.tools import Tool, ToolContext, tool
from localslack.seed import ALICE, BOB, GENERAL
from tests.backends.test_backend_native import KEY, model_of
from tests.e2e.framework_script import answer_in, told_the_model
from tests.e2e.test_approval_flow import button, card_in, mention_and_wait_for_card
from tests.e2e.test_backend_langgraph import menu
from tests.e2e.test_notices import Clock
from tests.fakes.openai_server import FakeOpenAI


@pytest.fixture
async def fake():
    async with FakeOpenAI(api_key=KEY) as server:
        yield server


def refund_to_tool(ran: list[tuple[str, Any]], **options: Any) -> Tool:
    @tool(**options)
    async def refund_to(charge_id: str, ctx: ToolContext) -> str:
        """Refund a charge to the account the customer picks."""
        account = await ctx.ask(f"Which account for {charge_id}?", ["card", "wallet"])
        ran.append((charge_id, account.value))  # the effect, after the question
        return f"refunded {charge_id} to {account.value}"

    return refund_to


def asks_for_refund(fake: FakeOpenAI, then: str) -> None:
    fake.reply_tool_call("refund_to", {"charge_id": "ch_1"}, "call_refund")
    fake.reply_text(then)


async def test_a_tools_question_is_a_menu_and_the_pick_reaches_the_tool(local_slack, start_app, fake):
    ran: list[tuple[str, Any]] = []
    asks_for_refund(fake, "Refunded to the wallet.")
    await start_app(ScriptedModel([]), [], agent=native(model_of(fake), [refund_to_tool(ran)]))
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
    assert "Which account for ch_1?" in json.dumps(card.blocks) and ran == []
    assert "Type your own answer" in json.dumps(card.blocks)
    pick = menu(card)
    [wallet] = [o for o in pick["options"] if o["text"]["text"] == "wallet"]

    await local_slack.select(ALICE, GENERAL, card.ts, pick["action_id"], wallet["value"])

    await answer_in(local_slack, ts, "Refunded to the wallet.")
    assert ran == [("ch_1", "wallet")]
    assert told_the_model(fake, "call_refund") == "refunded ch_1 to wallet"
    assert len(fake.requests) == 2


async def test_a_tools_question_answered_by_typing_in_the_thread(local_slack, start_app, fake):
    ran: list[tuple[str, Any]] = []
    asks_for_refund(fake, "Refunded to the bank.")
    await start_app(ScriptedModel([]), [], agent=native(model_of(fake), [refund_to_tool(ran)]))
    ts, _ = await mention_and_wait_for_card(local_slack, "refund ch_1")

    await local_slack.post_message(ALICE, GENERAL, "her bank account", thread_ts=ts)

    await answer_in(local_slack, ts, "Refunded to the bank.")
    assert ran == [("ch_1", "her bank account")]
    assert told_the_model(fake, "call_refund") == "refunded ch_1 to her bank account"


async def test_only_the_requester_may_answer_the_tools_question(local_slack, start_app, fake):
    ran: list[tuple[str, Any]] = []
    asks_for_refund(fake, "Refunded to the card.")
    bot = await start_app(ScriptedModel([]), [], agent=native(model_of(fake), [refund_to_tool(ran)]))
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
    pick = menu(card)
    [card_option, wallet] = pick["options"]

    await local_slack.select(BOB, GENERAL, card.ts, pick["action_id"], wallet["value"])
    refusal = await local_slack.wait_for(lambda: local_slack.ephemerals(BOB))
    assert refusal and local_slack.ephemerals(ALICE) == []
    await local_slack.post_message(BOB, GENERAL, "the wallet", thread_ts=ts)  # Bob's words answer nothing
    await bot.wait_idle()
    assert ran == [] and len(fake.requests) == 1 and card_in(local_slack, ts) is not None

    await local_slack.select(ALICE, GENERAL, card.ts, pick["action_id"], card_option["value"])

    await answer_in(local_slack, ts, "Refunded to the card.")
    assert ran == [("ch_1", "card")]


async def test_an_approved_tool_asks_twice_and_runs_its_effect_once_with_both_answers(local_slack, start_app, fake):
    entered: list[int] = []
    effects: list[tuple[Any, Any]] = []

    @tool(approval=always())
    async def change_plan(env_hint: str, ctx: ToolContext) -> dict[str, Any]:
        """Change the deployment plan."""
        entered.append(1)
        env = await ctx.ask("Which environment?", ["prod", "staging"])
        why = await ctx.ask("Why now?")
        effects.append((env.value, why.value))
        return {"env": env.value, "why": why.value}

    fake.reply_tool_call("change_plan", {"env_hint": "any"}, "call_plan")
    fake.reply_text("Planned.")
    await start_app(ScriptedModel([]), [], agent=native(model_of(fake), [change_plan]))
    ts, approval = await mention_and_wait_for_card(local_slack, "change the plan")
    await local_slack.click(ALICE, GENERAL, approval.ts, button(approval, "Approve"))

    first = await local_slack.wait_for(lambda: _card_saying(local_slack, ts, "Which environment?"))
    pick = menu(first)
    [staging] = [o for o in pick["options"] if o["text"]["text"] == "staging"]
    await local_slack.select(ALICE, GENERAL, first.ts, pick["action_id"], staging["value"])
    await local_slack.wait_for(lambda: _card_saying(local_slack, ts, "Why now?"))
    assert effects == []
    await local_slack.post_message(ALICE, GENERAL, "the release train leaves at 5", thread_ts=ts)

    await answer_in(local_slack, ts, "Planned.")
    assert effects == [("staging", "the release train leaves at 5")] and len(entered) == 3
    assert json.loads(told_the_model(fake, "call_plan")) == {"env": "staging", "why": "the release train leaves at 5"}
    assert len(fake.requests) == 2


async def test_a_question_nobody_answers_in_time_reaches_the_tool_as_expired(local_slack, start_app, fake):
    @tool
    async def pick_region(ctx: ToolContext) -> str:
        """Deploy to the region someone picks."""
        region = await ctx.ask("Which region?", ["eu", "us"], timeout=600)
        return "default region" if region.status == "expired" else f"region {region.value}"

    fake.reply_tool_call("pick_region", {}, "call_region")
    fake.reply_text("Nobody picked, so I used the default.")
    bot = await start_app(ScriptedModel([]), [], agent=native(model_of(fake), [pick_region]))
    clock = bot.runtime.settings.clock = Clock()
    ts, card = await mention_and_wait_for_card(local_slack, "deploy somewhere")
    assert "expires" in str(card.blocks)

    clock.now += 600 + 1
    await bot.runtime.recover()

    await answer_in(local_slack, ts, "Nobody picked")
    assert told_the_model(fake, "call_region") == "default region"


def _card_saying(slack, ts, words):  # noqa: ANN001, ANN202 - LocalSlack, its message
    card = card_in(slack, ts)
    return card if card is not None and words in json.dumps(card.blocks) else None


async def test_one_answer_delivered_to_two_replicas_runs_the_tools_effect_once(local_slack, start_app, fake):
    ran: list[tuple[str, Any]] = []
    asks_for_refund(fake, "Refunded to the wallet.")
    agent = native(model_of(fake), [refund_to_tool(ran)])
    first = await start_app(ScriptedModel([]), [], agent=agent)
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
    second = await start_app(ScriptedModel([]), [], agent=agent)  # the same Redis
    pick = menu(card)
    [wallet] = [o for o in pick["options"] if o["text"]["text"] == "wallet"]
    local_slack.set_bot_url(None)  # the pick as Slack sends it, posted to both replicas by hand
    picked = await local_slack.select(ALICE, GENERAL, card.ts, pick["action_id"], wallet["value"])
    assert picked.error == "no_bot_url" and picked.payload

    body = urlencode({"payload": json.dumps(picked.payload)}).encode()
    headers = {"Content-Type": "application/x-www-form-urlencoded", **local_slack.sign(body)}
    async with httpx.AsyncClient(timeout=10) as client:
        acks = await asyncio.gather(*(client.post(f"{bot.url}/slack/events", content=body, headers=headers)
                                      for bot in (first, second, first, second)))
    local_slack.set_bot_url(f"{second.url}/slack/events")

    assert [a.status_code for a in acks] == [200] * 4
    await answer_in(local_slack, ts, "Refunded to the wallet.")
    await first.wait_idle()
    await second.wait_idle()
    assert ran == [("ch_1", "wallet")] and len(fake.requests) == 2
    assert sum("Refunded to the wallet." in m.text for m in local_slack.messages(GENERAL, ts)) == 1
