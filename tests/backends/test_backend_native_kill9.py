"""kill -9 around a native tool's question (``ctx.ask`` in ``bot.backends.native``): the process that showed the
question card dies before the click, the next one takes the answer and runs the tool's effect, and dies while
the model is still answering; a third finishes the turn. The effect (after the tool's question) ran once, and
the model read its result.

The agent lives in a module the bot processes load by BOT_AGENT; its model is the local OpenAI-compatible
server of this test, so the test decides when a process dies (the model's answer never comes).
"""

from __future__ import annotations

import json

from localslack.seed import ALICE, BOT_USER_ID, GENERAL
from tests.chaos.harness import killed, stop_process
from tests.e2e.framework_script import told_the_model
from tests.e2e.test_approval_flow import card_in, mention_and_wait_for_card
from tests.e2e.test_backend_langgraph import menu
from tests.e2e.test_backend_openai_agents_kill9 import started
from tests.fakes.openai_server import FakeOpenAI

AGENT_MODULE = '''
import asyncio
import os
from pathlib import Path

from bot.backends.native import native
from bot.models.openai import OpenAIChatModel
from bot.tools import ToolContext, tool


@tool
async def refund_to(charge_id: str, ctx: ToolContext) -> str:
    """Refund a charge to the account the customer picks."""
    account = await ctx.ask(f"Which account for {charge_id}?", ["card", "wallet"])
    with Path(os.environ["REFUNDS_FILE"]).open("a") as refunds:
        refunds.write(f"{charge_id} {account.value}\\n")
    return f"refunded {charge_id} to {account.value}"


@tool
async def slow_lookup(charge_id: str) -> str:
    """Look a charge up in the slow ledger."""
    Path(os.environ["LOOKUP_FILE"]).write_text("started")
    await asyncio.sleep(60)
    return "found " + charge_id


agent = native(OpenAIChatModel("gpt-4o-mini", base_url=os.environ["OPENAI_BASE_URL"],
                               api_key=os.environ["OPENAI_API_KEY"], max_retries=0), [refund_to, slow_lookup])
'''


async def test_kill_9_before_the_click_and_after_the_effect_runs_the_effect_once(local_slack, redis, redis_url,
                                                                                 tmp_path):
    (tmp_path / "native_support.py").write_text(AGENT_MODULE)
    refunds = tmp_path / "refunds.txt"
    async with FakeOpenAI(api_key="sk-test") as fake:
        fake.reply_tool_call("refund_to", {"charge_id": "ch_1"}, "call_refund")
        fake.reply_delay(60)  # the answer after the refund: never comes to the second process
        fake.reply_text("Refunded (second process).")
        fake.reply_text("Refunded ch_1 to the wallet.")
        env = {"BOT_AGENT": "native_support:agent", "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test",
               "REFUNDS_FILE": str(refunds)}
        first = await started(local_slack, redis_url, tmp_path, env)
        try:
            ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
        finally:
            await killed(first)  # between the card and the click
        assert not refunds.exists()

        second = await started(local_slack, redis_url, tmp_path, env)
        try:
            pick = menu(card)
            [wallet] = [o for o in pick["options"] if o["text"]["text"] == "wallet"]
            await local_slack.select(ALICE, GENERAL, card.ts, pick["action_id"], wallet["value"])
            await local_slack.wait_for(lambda: len(fake.requests) == 2, timeout_s=15)
            assert refunds.read_text() == "ch_1 wallet\n"
        finally:
            await killed(second)  # after the effect, before the model's answer

        third = await started(local_slack, redis_url, tmp_path, env)
        try:
            await local_slack.wait_for_message(GENERAL, thread_ts=ts, timeout_s=20,
                                               predicate=lambda m: "Refunded ch_1 to the wallet." in m.text)
        finally:
            await stop_process(third, timeout_s=10)
        assert refunds.read_text() == "ch_1 wallet\n", "the effect after the question ran once"
        assert told_the_model(fake, "call_refund") == "refunded ch_1 to wallet"


async def test_a_call_that_asked_is_asked_again_after_a_kill_not_reported_interrupted(local_slack, redis, redis_url,
                                                                                      tmp_path):
    """The step's first call asked; the worker died in its second call, before the pause was stored. The next
    worker asks the same question again (the first call did not die mid-run); the second call, cut short, is
    reported interrupted."""
    (tmp_path / "native_support.py").write_text(AGENT_MODULE)
    refunds, lookup = tmp_path / "refunds.txt", tmp_path / "lookup.txt"
    async with FakeOpenAI(api_key="sk-test") as fake:
        fake.reply_tool_calls(("refund_to", {"charge_id": "ch_1"}, "call_refund"),
                              ("slow_lookup", {"charge_id": "ch_1"}, "call_slow"))
        fake.reply_text("Refunded ch_1 to the card; the lookup was cut short.")
        env = {"BOT_AGENT": "native_support:agent", "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test",
               "REFUNDS_FILE": str(refunds), "LOOKUP_FILE": str(lookup)}
        first = await started(local_slack, redis_url, tmp_path, env)
        try:
            ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1")
            await local_slack.wait_for(lookup.exists, timeout_s=15)
            assert card_in(local_slack, ts) is None  # the pause was not stored yet
        finally:
            await killed(first)  # while the second call runs

        second = await started(local_slack, redis_url, tmp_path, env)
        try:
            card = await local_slack.wait_for(lambda: card_in(local_slack, ts), timeout_s=20)
            assert "Which account for ch_1?" in json.dumps(card.blocks)
            pick = menu(card)
            [on_card] = [o for o in pick["options"] if o["text"]["text"] == "card"]
            await local_slack.select(ALICE, GENERAL, card.ts, pick["action_id"], on_card["value"])
            await local_slack.wait_for_message(GENERAL, thread_ts=ts, timeout_s=20,
                                               predicate=lambda m: "Refunded ch_1 to the card" in m.text)
        finally:
            await stop_process(second, timeout_s=10)
        assert refunds.read_text() == "ch_1 card\n"
        assert told_the_model(fake, "call_refund") == "refunded ch_1 to card"
        assert "interrupted" in json.loads(told_the_model(fake, "call_slow"))["error"]
