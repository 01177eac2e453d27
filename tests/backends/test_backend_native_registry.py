"""The bot's own loop on the runtime's tools (``BOT_LOOP=native``, ``bot.engine.native_loop``): no
BOT_AGENT, the bot's model on the local OpenAI-compatible server, and the registry's real tools (an OpenAPI
operation, an MCP server's tool, the built-in ``ask_question``, BOT_TOOLS') called through the backend
interface with their own cards; a paused turn held only to the tools it waits on; ``ctx.form``; and the saved
conversation bounded like the built-in loop's history. Driven by the engine through signed Slack requests."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from pydantic import BaseModel, Field

from bot.approval import always
from bot.backends.native import native
from bot.engine.native_loop import RegistryBackend
from bot.models.scripted import ScriptedModel, call, say
from bot.protocol import InputOption
from bot.tools import Tool, ToolContext, tool
from localslack.seed import ALICE, BOB, BOT_USER_ID, GENERAL, TEAM_ID
from tests.backends.test_backend_native import KEY, model_of
from tests.e2e.framework_script import answer_in, told_the_model
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card
from tests.e2e.test_backend_langgraph import menu
from tests.e2e.test_decisions import inputs
from tests.fakes.openai_server import FakeOpenAI

MCP_SERVER = Path(__file__).parents[1] / "fixtures_tools" / "mcp_server.py"


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=KEY) as server:
        yield server


def refund_tool(ran: list[dict[str, Any]]) -> Tool:
    @tool(approval=always(), editable=True, prompt="Refund {amount} cents on {charge_id}?")
    async def issue_refund(charge_id: str, amount: int) -> str:
        """Refund part of a charge, in cents."""
        ran.append({"charge_id": charge_id, "amount": amount})
        return f"refunded {amount} on {charge_id}"

    return issue_refund


async def start_native(start_app, fake: FakeOpenAI, tools: list[Tool], **settings: Any):  # noqa: ANN001, ANN201
    bot = await start_app(model_of(fake), tools, BOT_LOOP="native", **settings)
    assert isinstance(bot.runtime.driver.frameworks.backend, RegistryBackend)  # no BOT_AGENT: the setting's loop
    return bot


# --- the registry's tools, each with its own card ------------------------------------------------


async def test_a_bot_tools_tool_runs_under_its_own_card_and_the_settings_prompt(local_slack, start_app, fake):
    ran: list[dict[str, Any]] = []
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 500}, "call_refund")
    fake.reply_text("Done: refunded.")
    bot = await start_native(start_app, fake, [refund_tool(ran)])

    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
    assert "Refund 500 cents on ch_1?" in json.dumps(card.blocks)  # the tool's own prompt (no proxy's)
    assert "Edit & approve" in json.dumps(card.blocks) and ran == []
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "Done: refunded.")
    assert ran == [{"charge_id": "ch_1", "amount": 500}]
    first = fake.requests[0].body
    assert first["messages"][0] == {"role": "system", "content": bot.runtime.settings.system_prompt}
    offered = {t["function"]["name"] for t in first["tools"]}
    assert {"issue_refund", "ask_question", "request_info"} <= offered


@pytest.fixture
async def crm(tmp_path, unused_tcp_port) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A local API and its OpenAPI document: ``addNote`` (a POST, so it asks first)."""
    seen: list[dict[str, Any]] = []

    async def note(request: web.Request) -> web.Response:
        seen.append({"path": request.path, "query": dict(request.query), "body": await request.json()})
        return web.json_response({"ok": True}, status=201)

    app = web.Application()
    app.router.add_post("/api/customers/{customer_id}/notes", note)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    document = {
        "openapi": "3.0.3", "info": {"title": "CRM", "version": "1"},
        "paths": {"/customers/{customer_id}/notes": {"post": {
            "operationId": "addNote", "summary": "Add a note to a customer",
            "parameters": [{"name": "customer_id", "in": "path", "required": True, "schema": {"type": "string"}},
                           {"name": "workspace", "in": "query", "required": True, "schema": {"type": "string"}}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}}}},
        }}},
    }
    (tmp_path / "crm.json").write_text(json.dumps(document))
    (tmp_path / "openapi.yaml").write_text(
        "connections:\n  - name: crm\n    spec: crm.json\n"
        f"    base_url: http://127.0.0.1:{unused_tcp_port}/api\n    operations: [addNote]\n"
        "    tenant_parameter: workspace\n")
    yield str(tmp_path / "openapi.yaml"), seen
    await runner.cleanup()


async def test_an_openapi_operation_asks_on_its_card_then_calls_the_api_once(local_slack, start_app, fake, crm):
    config, seen = crm
    fake.reply_tool_call("crm_addNote", {"customer_id": "c1", "body": {"text": "called back"}}, "call_note")
    fake.reply_text("Noted.")
    await start_native(start_app, fake, [], BOT_OPENAPI=config)

    ts, card = await mention_and_wait_for_card(local_slack, "note that I called c1 back")
    assert "crm_addNote" in json.dumps(card.blocks) or "Add a note" in json.dumps(card.blocks)
    assert seen == []
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "Noted.")
    # the tenant is the signed request's workspace (the model is never told of it)
    assert seen == [{"path": "/api/customers/c1/notes", "query": {"workspace": TEAM_ID}, "body": {"text": "called back"}}]
    assert "workspace" not in json.dumps(fake.requests[0].body["tools"])
    assert json.loads(told_the_model(fake, "call_note")) == {"status": 201, "body": {"ok": True}}


async def test_an_mcp_servers_tool_asks_under_the_configured_policy_and_runs_once(local_slack, start_app, fake,
                                                                                   tmp_path):
    ran = tmp_path / "runs"
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"crm": {
        "command": sys.executable, "args": [str(MCP_SERVER), "stdio"], "env": {"MCP_RUNS_FILE": str(ran)},
        "approval": "never"}}, "policies": {"*delete*": "always"}}))
    fake.reply_tool_call("crm__delete_customer", {"customer_id": "c1"}, "call_delete")
    fake.reply_text("Deleted.")
    await start_native(start_app, fake, [], BOT_MCP_CONFIG=str(config))

    ts, card = await mention_and_wait_for_card(local_slack, "delete customer c1")
    assert "crm__delete_customer" in json.dumps(card.blocks) and not ran.exists()
    offered = {t["function"]["name"] for t in fake.requests[0].body["tools"]}
    assert {"crm__lookup_customer", "crm__delete_customer"} <= offered  # the server's list, as it is now
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "Deleted.")
    assert ran.read_text().splitlines() == ["deleted c1"]
    assert "deleted c1" in told_the_model(fake, "call_delete")


async def test_the_builtin_ask_question_is_a_menu_and_the_pick_reaches_the_model(local_slack, start_app, fake):
    fake.reply_tool_call("ask_question", {"question": "Which plan?", "options": [{"label": "Basic"},
                                                                                  {"label": "Pro"}]}, "call_q")
    fake.reply_text("Pro it is.")
    await start_native(start_app, fake, [])
    ts, card = await mention_and_wait_for_card(local_slack, "upgrade me")
    assert "Which plan?" in json.dumps(card.blocks)
    pick = menu(card)
    [pro] = [o for o in pick["options"] if o["text"]["text"] == "Pro"]

    await local_slack.select(ALICE, GENERAL, card.ts, pick["action_id"], pro["value"])

    await answer_in(local_slack, ts, "Pro it is.")
    assert json.loads(told_the_model(fake, "call_q")) == {"status": "answered", "answer": "Pro"}


# --- across deploys: held to the tools the pause waits on -----------------------------------------


async def test_a_paused_turn_resumes_after_a_deploy_that_adds_an_unrelated_tool(local_slack, start_app, fake):
    ran: list[dict[str, Any]] = []
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 500}, "call_refund")
    fake.reply_text("Done: refunded.")
    first = await start_native(start_app, fake, [refund_tool(ran)])
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
    await first.close()

    @tool
    async def lookup_charge(charge_id: str) -> str:
        """Look a charge up."""
        return charge_id

    # the next version: the same refund tool, and one more (the whole toolset's fingerprint changed)
    await start_native(start_app, fake, [refund_tool(ran), lookup_charge])
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "Done: refunded.")
    assert ran == [{"charge_id": "ch_1", "amount": 500}]
    assert "lookup_charge" in {t["function"]["name"] for t in fake.requests[-1].body["tools"]}


async def test_a_paused_turn_fails_closed_when_its_tools_schema_changed(local_slack, start_app, fake):
    ran: list[dict[str, Any]] = []
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 500}, "call_refund")
    fake.reply_text("Done: refunded.")
    bot = await start_native(start_app, fake, [refund_tool(ran)])
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")

    @tool(approval=always(), name="issue_refund")
    async def issue_refund_v2(charge_id: str, amount: int, currency: str) -> str:
        """Refund part of a charge."""
        ran.append({"charge_id": charge_id, "amount": amount, "currency": currency})
        return "refunded"

    # the same name, other arguments: as an MCP server's tool listed again changed (or a deploy)
    bot.runtime.tools.register(issue_refund_v2, replace=True)
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

    said = await answer_in(local_slack, ts, "changed since")
    assert "issue_refund" in said.text and "Ask again" in said.text
    assert ran == [] and len(fake.requests) == 1  # nothing ran, and the model was not asked again


async def test_a_paused_turn_whose_tool_is_gone_here_waits_for_a_process_that_has_it(local_slack, start_app, fake):
    ran: list[str] = []

    @tool
    async def refund_to(charge_id: str, ctx: ToolContext) -> str:
        """Refund a charge to the account the customer picks."""
        account = await ctx.ask(f"Which account for {charge_id}?", ["card", "wallet"])
        ran.append(str(account.value))
        return f"refunded {charge_id} to {account.value}"

    fake.reply_tool_call("refund_to", {"charge_id": "ch_1"}, "call_refund")
    fake.reply_text("Refunded to the wallet.")
    bot = await start_native(start_app, fake, [refund_to])
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
    bot.runtime.tools.unregister("refund_to")  # as an MCP server that is down, or a replica of another version
    pick = menu(card)
    [wallet] = [o for o in pick["options"] if o["text"]["text"] == "wallet"]

    await local_slack.select(ALICE, GENERAL, card.ts, pick["action_id"], wallet["value"])
    await bot.wait_idle()
    assert ran == [] and len(fake.requests) == 1  # not resumed without it, and not failed either
    assert not any("changed since" in m.text or "went wrong" in m.text for m in local_slack.messages(GENERAL, ts))

    bot.runtime.tools.register(refund_to)  # back: the retry resumes the turn
    await asyncio.sleep(1.2)  # the first retry's delay after a failed drive
    await bot.runtime.recover()

    await answer_in(local_slack, ts, "Refunded to the wallet.")
    assert ran == ["wallet"]


async def test_a_turn_the_builtin_loop_parked_ends_in_it_after_a_deploy_that_switches_the_loop(
        local_slack, start_app, fake):
    ran: list[dict[str, Any]] = []
    model = ScriptedModel([call("issue_refund", call_id="c1", charge_id="ch_1", amount=500),
                           say("Refunded by the built-in loop.")])
    first = await start_app(model, [refund_tool(ran)])  # BOT_LOOP=builtin, the default
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
    await first.close()
    await start_app(model, [refund_tool(ran)], BOT_LOOP="native")

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "Refunded by the built-in loop.")
    assert ran == [{"charge_id": "ch_1", "amount": 500}] and fake.requests == []


async def test_a_run_paused_on_fixed_tools_is_not_resumed_on_the_registry(local_slack, start_app, fake):
    ran: list[dict[str, Any]] = []
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 500}, "call_refund")
    fake.reply_text("Done: refunded.")
    first = await start_app(model_of(fake), [], agent=native(model_of(fake), [refund_tool(ran)]))
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
    await first.close()
    await start_native(start_app, fake, [refund_tool(ran)])  # the same framework ("native"), other tools

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "different version of the agent")
    assert ran == [] and len(fake.requests) == 1


# --- ctx.form ------------------------------------------------------------------------------------


class Shipment(BaseModel):
    address: str = Field(min_length=5, title="Delivery address")
    boxes: int = Field(ge=1, le=20, title="Boxes")


async def test_a_tools_form_is_filled_in_by_the_requester_only_and_reaches_the_tool(local_slack, start_app, fake):
    shipped: list[dict[str, Any]] = []

    @tool
    async def ship_order(order_id: str, ctx: ToolContext) -> dict[str, Any]:
        """Ship the customer's order."""
        answer = await ctx.form(Shipment, "Where should the order go?")
        if answer.status != "answered" or answer.values is None:
            return {"status": answer.status}
        shipped.append(answer.values.model_dump())  # after the form: happens once
        return {"shipped": order_id, **answer.values.model_dump()}

    fake.reply_tool_call("ship_order", {"order_id": "o42"}, "call_ship")
    fake.reply_text("Shipped.")
    await start_native(start_app, fake, [ship_order])
    ts, card = await mention_and_wait_for_card(local_slack, "ship order 42")
    assert "Where should the order go?" in json.dumps(card.blocks)

    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Open form"))
    note = await local_slack.wait_for(lambda: local_slack.ephemerals(BOB))
    assert "Only the person who requested" in note[-1].text and local_slack.open_views(BOB) == []

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Open form"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE))
    assert set(inputs(modal)) == {"hitl_field:address", "hitl_field:boxes"}
    done = await local_slack.submit_view(ALICE, modal.id, {"hitl_field:address": {"value": "1 Main St"},
                                                           "hitl_field:boxes": {"value": "3"}})
    assert done.status == 200

    await answer_in(local_slack, ts, "Shipped.")
    assert shipped == [{"address": "1 Main St", "boxes": 3}]
    assert json.loads(told_the_model(fake, "call_ship")) == {"shipped": "o42", "address": "1 Main St", "boxes": 3}


async def test_the_builtin_request_info_asks_for_a_form_and_the_model_reads_its_values(local_slack, start_app, fake):
    fake.reply_tool_call("request_info", {"prompt": "I need the incident details.", "fields": [
        {"name": "summary", "label": "What happened?", "type": "long_text"},
        {"name": "severity", "label": "Severity", "type": "choice", "options": ["SEV1", "SEV2"]}]}, "call_info")
    fake.reply_text("Filed.")
    await start_native(start_app, fake, [])
    ts, card = await mention_and_wait_for_card(local_slack, "file an incident")
    assert "I need the incident details." in json.dumps(card.blocks)

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Open form"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE))
    await local_slack.submit_view(ALICE, modal.id, {"hitl_field:summary": {"value": "Checkout returned 500s"},
                                                    "hitl_field:severity": {"value": "SEV1"}})

    await answer_in(local_slack, ts, "Filed.")
    told = json.loads(told_the_model(fake, "call_info"))
    assert told["status"] == "answered"
    assert told["values"] == {"summary": "Checkout returned 500s", "severity": "SEV1"}


# --- the saved conversation's bound --------------------------------------------------------------


async def test_the_saved_conversation_is_bounded_by_the_history_limit(local_slack, start_app, fake):
    turns = 6
    for n in range(turns):
        fake.reply_text(f"answer {n}")
    await start_native(start_app, fake, [], BOT_HISTORY_LIMIT="4")

    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> question 0")
    await answer_in(local_slack, ts, "answer 0")
    for n in range(1, turns):
        await local_slack.post_message(ALICE, GENERAL, f"question {n}", thread_ts=ts)
        await answer_in(local_slack, ts, f"answer {n}")

    sent = fake.requests[-1].body["messages"]
    assert sent[0]["role"] == "system"
    # the newest 4 messages kept after the last turn (2 turns), then this turn's question
    assert [m["content"] for m in sent[1:]] == ["question 3", "answer 3", "question 4", "answer 4", "question 5"]


async def test_a_tools_question_looks_the_same_on_both_loops_its_options_described_and_as_radio_buttons(
        local_slack, start_app, fake):
    """``ctx.ask`` with described options shown as radio buttons: the native loop's card is the built-in loop's
    (the options' words and the radio buttons), not a bare menu of labels."""

    @tool
    async def close_account(account_id: str, ctx: ToolContext) -> str:
        """Close a customer's account."""
        how = await ctx.ask(f"How should {account_id} be closed?", [
            InputOption(id="refund", label="Refund balance", description="Sends the $12.40 left back to the card"),
            InputOption(id="keep", label="Keep balance", description="Holds it for 90 days", style="danger"),
        ], style="radio")
        return f"closed {account_id}: {how.option_id}"

    cards = {}
    for loop in ("builtin", "native"):
        fake.reply_tool_call("close_account", {"account_id": "acct_9"}, f"call_close_{loop}")
        await start_app(model_of(fake), [close_account], BOT_LOOP=loop)
        _, card = await mention_and_wait_for_card(local_slack, f"close acct_9 ({loop})")
        cards[loop] = card.blocks
    shown = json.dumps(cards["native"])
    assert "Sends the $12.40 left back to the card" in shown and "Holds it for 90 days" in shown
    assert "radio_buttons" in shown and "static_select" not in shown

    def without_ids(blocks: Any) -> Any:  # request ids and thread times differ between the two turns
        text = json.dumps(blocks).replace("(builtin)", "(loop)").replace("(native)", "(loop)")
        return re.sub(r'"(action_id|block_id|value)": "[^"]*"', r'"\1": ""', text)

    assert without_ids(cards["native"]) == without_ids(cards["builtin"])


async def test_a_server_that_numbers_calls_per_answer_has_each_call_run(local_slack, start_app, fake):
    """Kimi K2 served by vLLM numbers tool calls per answer, ``<tool>:<n>`` with the counter restarting every
    round (github.com/open-webui/open-webui/issues/28570): the same tool called in two rounds comes back under the same id. The second is another call: it runs,
    and the model reads its own result (not the first's, replayed from the first call's execution marker)."""
    ran: list[dict[str, Any]] = []

    @tool
    async def issue_refund(charge_id: str, amount: int) -> str:
        """Refund part of a charge, in cents."""
        ran.append({"charge_id": charge_id, "amount": amount})
        return f"refunded {amount} on {charge_id}"

    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 500}, "issue_refund:0")
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_2", "amount": 300}, "issue_refund:0")
    fake.reply_text("Refunded both.")
    await start_native(start_app, fake, [issue_refund])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1 and ch_2")
    await answer_in(local_slack, ts, "Refunded both.")
    assert ran == [{"charge_id": "ch_1", "amount": 500}, {"charge_id": "ch_2", "amount": 300}]
    messages = fake.requests[2].body["messages"]
    told = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    asked = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert len(set(asked)) == 2 and asked[0] == "issue_refund:0"  # the second call has an id of its own now
    assert [told[i] for i in asked] == ["refunded 500 on ch_1", "refunded 300 on ch_2"]
