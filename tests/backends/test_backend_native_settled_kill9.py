"""kill -9 around the calls the engine settles for a native agent. An external-result call: the process that
showed the card (and gave the DBA a result token) dies before the result is posted; the result is posted to the
next process, which dies while the model is answering; a third finishes the turn. The posted result is what the
model read, once; posting it again is refused; the answer is said once. A delegation: the process that showed
the sub-agent's card dies; the next one takes the approval, runs the sub-agent's call once and resumes the main
agent with the sub-agent's answer.

The agent lives in a module the bot processes load by BOT_AGENT; its model is the local OpenAI-compatible server
of this test, so the test decides when a process dies (the model's answer never comes).
"""

from __future__ import annotations

import json
import re

import aiohttp

from localslack.seed import ALICE, BOB, GENERAL
from tests.chaos.harness import killed, stop_process
from tests.e2e.framework_script import told_the_model
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card
from tests.e2e.test_external import token_of
from tests.e2e.test_restart import start_process
from tests.fakes.openai_server import FakeOpenAI

AGENT_MODULE = '''
import os

from pydantic import BaseModel

from bot.approval import Approval, allowed, always, rejected
from bot.backends.native import native
from bot.models.openai import OpenAIChatModel
from bot.tools import ToolContext, tool


class Migration(BaseModel):
    database: str


class MigrationResult(BaseModel):
    rows_changed: int


def bob_runs_migrations(ctx) -> object:
    return allowed() if ctx.response.principal.slack_user_id == "U0BOB" else rejected("Only the DBA runs migrations.")


@tool(external=True, result=MigrationResult, approval=Approval(request=always(), response=bob_runs_migrations))
async def run_migration(args: Migration, ctx: ToolContext) -> dict:
    """Run a database migration (done by the DBA, by hand)."""
    raise AssertionError("an external tool's function never runs")


agent = native(OpenAIChatModel("gpt-4o-mini", base_url=os.environ["OPENAI_BASE_URL"],
                               api_key=os.environ["OPENAI_API_KEY"], max_retries=0), [run_migration])
'''


def on_port(url: str, port: int) -> str:
    """The token's URL, sent to the process now running (the token is the app's, not a process's)."""
    return re.sub(r"^http://[^/]+", f"http://127.0.0.1:{port}", url)


async def posted(url: str, token: str, body: dict) -> int:
    async with aiohttp.ClientSession() as http, http.post(
            url, json=body, headers={"Authorization": f"Bearer {token}"}) as response:
        return response.status


async def test_kill_9_between_the_card_and_the_post_and_after_it_neither_loses_nor_doubles_the_result(
        local_slack, redis, redis_url, tmp_path):
    (tmp_path / "native_dba.py").write_text(AGENT_MODULE)
    async with FakeOpenAI(api_key="sk-test") as fake:
        fake.reply_tool_call("run_migration", {"database": "orders"}, "call_migrate")
        fake.reply_delay(60)  # the answer after the result: never comes to the second process
        fake.reply_text("Migrated (second process).")
        fake.reply_text("Migrated orders: 42 rows.")
        env = {"BOT_AGENT": "native_dba:agent", "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test"}
        first, _ = await start_process(local_slack, redis_url, tmp_path, **env)
        try:
            ts, card = await mention_and_wait_for_card(local_slack, "migrate orders")
            assert "Run elsewhere" in json.dumps(card.blocks)
            await local_slack.click(BOB, GENERAL, card.ts, button(card, "Get a result token"))
            note = await local_slack.wait_for(lambda: local_slack.ephemerals(BOB))
            url, token = token_of(note[-1].text)
        finally:
            await killed(first)  # between the card and the post

        second, port = await start_process(local_slack, redis_url, tmp_path, **env)
        try:
            assert await posted(on_port(url, port), token, {"rows_changed": 42}) == 200
            await local_slack.wait_for(lambda: len(fake.requests) == 2, timeout_s=15)
            assert told_the_model(fake, "call_migrate") == json.dumps({"rows_changed": 42})
        finally:
            await killed(second)  # after the result was taken, before the model's answer

        third, port = await start_process(local_slack, redis_url, tmp_path, **env)
        try:
            await local_slack.wait_for_message(GENERAL, thread_ts=ts, timeout_s=20,
                                               predicate=lambda m: "Migrated orders: 42 rows." in m.text)
            assert await posted(on_port(url, port), token, {"rows_changed": 43}) == 409  # settled: once
        finally:
            await stop_process(third, timeout_s=10)
        assert told_the_model(fake, "call_migrate") == json.dumps({"rows_changed": 42})
        tool_messages = [m for m in fake.requests[-1].body["messages"] if m["role"] == "tool"]
        assert len(tool_messages) == 1, "the result was read once"
        answers = [m for m in local_slack.messages(GENERAL, thread_ts=ts) if "Migrated" in m.text]
        assert [m.text for m in answers] == ["Migrated orders: 42 rows."]


SUBAGENT_MODULE = '''
import os
from pathlib import Path

from bot.agents import SubAgent
from bot.approval import always
from bot.backends.native import native
from bot.models.openai import OpenAIChatModel
from bot.tools import tool


@tool(approval=always())
async def crm_lookup(customer: str) -> dict:
    """Look a customer up in the CRM."""
    with Path(os.environ["LOOKUPS_FILE"]).open("a") as lookups:
        lookups.write(customer + "\\n")
    return {"customer": customer, "plan": "gold"}


researcher = SubAgent(name="researcher", description="Looks customers up in the CRM.",
                      instructions="You research customers.", tools=[crm_lookup])
agent = native(OpenAIChatModel("gpt-4o-mini", base_url=os.environ["OPENAI_BASE_URL"],
                               api_key=os.environ["OPENAI_API_KEY"], max_retries=0), [],
               instructions="You help the support team.", agents=[researcher])
'''


async def test_kill_9_while_the_sub_agent_waits_on_its_card_then_the_next_process_finishes_both(
        local_slack, redis, redis_url, tmp_path):
    """The process that showed the sub-agent's card dies; the approval reaches the next one, which runs the
    sub-agent's call once, ends the sub-agent's turn and resumes the main agent with its answer."""
    (tmp_path / "native_team.py").write_text(SUBAGENT_MODULE)
    lookups = tmp_path / "lookups.txt"
    async with FakeOpenAI(api_key="sk-test") as fake:
        fake.reply_tool_call("delegate", {"agent": "researcher", "task": "Which plan is acme on?"}, "call_d1")
        fake.reply_tool_call("crm_lookup", {"customer": "acme"}, "call_k1")
        fake.reply_text("acme is on gold")
        fake.reply_text("Answer: acme is on gold.")
        env = {"BOT_AGENT": "native_team:agent", "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test",
               "LOOKUPS_FILE": str(lookups)}
        first, _ = await start_process(local_slack, redis_url, tmp_path, **env)
        try:
            ts, card = await mention_and_wait_for_card(local_slack, "what plan is acme on?")
            card = await local_slack.wait_for(
                lambda: next((m for m in local_slack.messages(GENERAL, ts) if "crm_lookup" in json.dumps(m.blocks or [])
                              and any(b.get("type") == "actions" for b in m.blocks or [])), None), timeout_s=15)
        finally:
            await killed(first)  # the sub-agent waits on its card

        second, _ = await start_process(local_slack, redis_url, tmp_path, **env)
        try:
            await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
            await local_slack.wait_for_message(GENERAL, thread_ts=ts, timeout_s=20,
                                               predicate=lambda m: "Answer: acme is on gold." in m.text)
        finally:
            await stop_process(second, timeout_s=10)
        assert lookups.read_text() == "acme\n"
        assert told_the_model(fake, "call_d1") == "acme is on gold"
        assert len(fake.requests) == 4
