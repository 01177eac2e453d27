"""kill -9 while an OpenAI Agents SDK agent's approved refund has run and the model is still answering: a new
process, sharing only Redis, finishes the turn from the stored step, and the refund has run once (with the
arguments people approved, when they edited them first).

The agent lives in a module the bot processes load by BOT_AGENT; its model is the local OpenAI-compatible
server of this test, so the test decides when the first process dies (the model's answer never comes).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess

import httpx

from localslack.seed import ALICE, GENERAL
from tests.chaos.harness import stop_process
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card
from tests.e2e.test_decisions import inputs
from tests.e2e.test_restart import start_process
from tests.fakes.openai_server import FakeOpenAI

AGENT_MODULE = '''
import os
from pathlib import Path

from agents import Agent, OpenAIChatCompletionsModel, function_tool
from openai import AsyncOpenAI


@function_tool(needs_approval=True)
def issue_refund(charge_id: str) -> str:
    """Refund a charge to the customer's card."""
    with Path(os.environ["REFUNDS_FILE"]).open("a") as refunds:
        refunds.write(charge_id + "\\n")
    return "refunded " + charge_id


@function_tool(needs_approval=True)
def refund_part(charge_id: str, amount_cents: int) -> str:
    """Refund part of a charge to the customer's card, in cents."""
    with Path(os.environ["REFUNDS_FILE"]).open("a") as refunds:
        refunds.write(f"{charge_id} {amount_cents}\\n")
    return f"refunded {amount_cents} cents of {charge_id}"


agent = Agent(name="support", instructions="You help customers.", tools=[issue_refund, refund_part],
              model=OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=AsyncOpenAI()))
'''


async def started(local_slack, redis_url: str, tmp_path, env: dict[str, str]) -> subprocess.Popen:
    """A bot process answering on its port: importing the SDK takes seconds on a busy machine, longer than
    start_process waits, so this waits on until it answers."""
    proc, port = await start_process(local_slack, redis_url, tmp_path, **env)
    async with httpx.AsyncClient() as client:
        for _ in range(600):
            try:
                if (await client.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200:
                    return proc
            except httpx.TransportError:
                pass
            assert proc.poll() is None, (tmp_path / f"bot-{port}.log").read_text()
            await asyncio.sleep(0.1)
    raise AssertionError(f"the bot on port {port} never answered")


async def test_kill_9_after_the_tool_ran_runs_it_once(local_slack, redis, redis_url, tmp_path):
    (tmp_path / "sdk_support.py").write_text(AGENT_MODULE)
    refunds = tmp_path / "refunds.txt"
    async with FakeOpenAI(api_key="sk-test") as fake:
        fake.reply_tool_call("issue_refund", {"charge_id": "ch_1"}, "call_refund")
        fake.reply_delay(60)  # the answer after the refund: never comes to the first process
        fake.reply_text("Refunded (first process).")
        fake.reply_text("Refunded ch_1.")
        env = {"BOT_AGENT": "sdk_support:agent", "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test",
               "REFUNDS_FILE": str(refunds)}
        first = await started(local_slack, redis_url, tmp_path, env)
        try:
            ts, card = await mention_and_wait_for_card(local_slack)
            await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
            await local_slack.wait_for(lambda: len(fake.requests) == 2, timeout_s=15)
            assert refunds.read_text() == "ch_1\n"
        finally:
            first.send_signal(signal.SIGKILL)
            await asyncio.to_thread(first.wait)

        second = await started(local_slack, redis_url, tmp_path, env)
        try:
            await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Refunded ch_1." in m.text,
                                               timeout_s=20)
        finally:
            await stop_process(second, timeout_s=10)
        assert refunds.read_text() == "ch_1\n", "the refund ran once"
        told = [m["content"] for m in fake.requests[-1].body["messages"] if m["role"] == "tool"]
        assert told == ["refunded ch_1"]


async def test_kill_9_after_an_edited_call_ran_runs_the_edit_once_and_never_the_original(
        local_slack, redis, redis_url, tmp_path):
    (tmp_path / "sdk_support.py").write_text(AGENT_MODULE)
    refunds = tmp_path / "refunds.txt"
    async with FakeOpenAI(api_key="sk-test") as fake:
        fake.reply_tool_call("refund_part", {"charge_id": "ch_1", "amount_cents": 500}, "call_part")
        fake.reply_delay(60)  # the answer after the refund: never comes to the first process
        fake.reply_text("Refunded (first process).")
        fake.reply_text("Refunded 1.20 USD of ch_1.")
        env = {"BOT_AGENT": "sdk_support:agent", "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test",
               "REFUNDS_FILE": str(refunds)}
        first = await started(local_slack, redis_url, tmp_path, env)
        try:
            ts, card = await mention_and_wait_for_card(local_slack)
            await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Edit & approve"))
            [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE), timeout_s=15)
            assert "hitl_arg:amount_cents" in inputs(modal)
            await local_slack.submit_view(ALICE, modal.id, {"hitl_arg:amount_cents": {"value": "120"}})
            await local_slack.wait_for(lambda: len(fake.requests) == 2, timeout_s=15)
            assert refunds.read_text() == "ch_1 120\n"
        finally:
            first.send_signal(signal.SIGKILL)
            await asyncio.to_thread(first.wait)

        # the second process resumes the same paused step with the answer read again from the settled request
        second = await started(local_slack, redis_url, tmp_path, env)
        try:
            await local_slack.wait_for_message(GENERAL, thread_ts=ts, timeout_s=20,
                                               predicate=lambda m: "Refunded 1.20 USD of ch_1." in m.text)
        finally:
            await stop_process(second, timeout_s=10)
        assert refunds.read_text() == "ch_1 120\n", "the edited refund ran once, the original never"
        told = [m["content"] for m in fake.requests[-1].body["messages"] if m["role"] == "tool"]
        assert told == ["refunded 120 cents of ch_1"]
