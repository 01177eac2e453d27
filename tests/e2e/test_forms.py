"""Forms as Slack drives them: ``ctx.form()`` in a tool and the built-in
``request_info``. The card has "Open form"; the modal comes from the one form generator; errors show
inline; typed replies don't answer forms; only the requester may fill one in; the tool resumes once."""

from __future__ import annotations

import json
from datetime import date
from typing import Literal

from pydantic import BaseModel, Field

from bot.models.scripted import ScriptedModel, call, say
from bot.tools import ToolContext, tool
from localslack.seed import ALICE, BOB, GENERAL, TEAM_ID
from tests.audit_polling import audit_entries
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card
from tests.e2e.test_decisions import inputs, result_reply


class Shipment(BaseModel):
    address: str = Field(min_length=5, title="Delivery address")
    boxes: int = Field(ge=1, le=20, title="Boxes")
    speed: Literal["standard", "express"] = "standard"
    ship_on: date | None = Field(default=None, title="Ship on")
    fragile: bool = False


RUNS: list[str] = []
SHIPPED: list[dict] = []


@tool
async def ship_order(args: dict, ctx: ToolContext) -> dict:
    """Ship the customer's order."""
    RUNS.append("ran")  # every run, replays included
    answer = await ctx.form(Shipment, "Where should the order go?")
    if answer.status != "answered" or answer.values is None:
        return {"status": answer.status}
    SHIPPED.append(answer.values.model_dump(mode="json"))  # after the form: happens once
    return {"shipped": answer.values.model_dump(mode="json"), "by": answer.responder.principal_id}


def ship_script() -> ScriptedModel:
    return ScriptedModel([call("ship_order"), lambda messages, tools: say("Result: " + messages[-1]["content"])])


async def open_form(slack, user, card):
    await slack.click(user, GENERAL, card.ts, button(card, "Open form"))
    [modal] = await slack.wait_for(lambda: slack.open_views(user))
    return modal


async def test_a_tool_form_is_filled_in_checked_inline_and_resumes_the_tool_once(local_slack, start_app):
    RUNS.clear()
    SHIPPED.clear()
    bot = await start_app(ship_script(), [ship_order])
    ts, card = await mention_and_wait_for_card(local_slack, "ship order 42")
    text = json.dumps(card.blocks)
    assert "Where should the order go?" in text and "Delivery address" in text
    assert "Typed replies don\\u2019t answer a form" in text
    assert "Type your own answer" not in text

    modal = await open_form(local_slack, ALICE, card)
    fields = inputs(modal)
    assert list(fields) == [f"hitl_field:{name}" for name in ("address", "boxes", "speed", "ship_on", "fragile")]
    assert fields["hitl_field:boxes"]["element"]["type"] == "number_input"
    assert fields["hitl_field:speed"]["element"]["initial_option"]["value"] == "standard"  # the default
    assert fields["hitl_field:ship_on"]["element"]["type"] == "datepicker"

    bad = await local_slack.submit_view(ALICE, modal.id, {"hitl_field:address": {"value": "here"},
                                                          "hitl_field:boxes": {"value": "99"}})
    assert set(json.loads(bad.body)["errors"]) == {"hitl_field:address", "hitl_field:boxes"}
    assert SHIPPED == [] and local_slack.open_views(ALICE)

    good = await local_slack.submit_view(ALICE, modal.id, {
        "hitl_field:address": {"value": "1 Main St, Springfield"}, "hitl_field:boxes": {"value": "3"},
        "hitl_field:speed": {"value": "express"}, "hitl_field:ship_on": {"value": "2026-12-24"},
        "hitl_field:fragile": {"value": ["true"]}})
    assert good.status == 200 and local_slack.open_views(ALICE) == []
    told = await result_reply(local_slack, ts)
    shipped = {"address": "1 Main St, Springfield", "boxes": 3, "speed": "express", "ship_on": "2026-12-24",
               "fragile": True}
    assert told["shipped"] == shipped and told["by"].endswith(ALICE)
    assert SHIPPED == [shipped] and RUNS == ["ran", "ran"]  # asked once, replayed once, shipped once

    settled = local_slack.message(GENERAL, card.ts)
    shown = json.dumps(settled.blocks)
    assert "Filled in" in shown and "1 Main St, Springfield" in shown and "Ship on" in shown
    assert not any(b["type"] == "actions" for b in settled.blocks)
    [resolution] = await audit_entries(bot.redis.client, TEAM_ID, kind="resolution")
    assert resolution.data["values"] == shipped


async def test_only_the_requester_may_fill_in_a_form_and_typing_does_not_answer_it(local_slack, start_app):
    RUNS.clear()
    SHIPPED.clear()
    await start_app(ship_script(), [ship_order])
    ts, card = await mention_and_wait_for_card(local_slack, "ship order 42")

    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Open form"))
    note = await local_slack.wait_for(lambda: local_slack.ephemerals(BOB))
    assert "Only the person who requested" in note[-1].text and local_slack.open_views(BOB) == []

    await local_slack.post_message(BOB, GENERAL, "1 Main St, Springfield", thread_ts=ts)  # someone else typing
    modal = await open_form(local_slack, ALICE, card)  # still open: the text answered nothing
    done = await local_slack.submit_view(ALICE, modal.id, {
        "hitl_field:address": {"value": "1 Main St, Springfield"}, "hitl_field:boxes": {"value": "1"}})
    assert done.status == 200
    told = await result_reply(local_slack, ts)
    assert told["shipped"]["boxes"] == 1 and len(SHIPPED) == 1


async def test_request_info_lets_the_model_ask_for_a_form_of_its_own(local_slack, start_app):
    ask = call("request_info", prompt="I need the incident details.", fields=[
        {"name": "summary", "label": "What happened?", "type": "long_text"},
        {"name": "severity", "label": "Severity", "type": "choice", "options": ["SEV1", "SEV2"]},
        {"name": "customers", "label": "Customers affected", "type": "yes_no"},
        {"name": "areas", "label": "Areas", "type": "choices", "options": ["api", "web", "billing"],
         "required": False},
    ])
    await start_app(ScriptedModel([ask, lambda messages, tools: say("Result: " + messages[-1]["content"])]), [])
    ts, card = await mention_and_wait_for_card(local_slack, "file an incident")
    assert "I need the incident details." in json.dumps(card.blocks)
    modal = await open_form(local_slack, ALICE, card)
    fields = inputs(modal)
    assert fields["hitl_field:summary"]["element"]["multiline"] is True
    assert fields["hitl_field:areas"]["element"]["type"] == "multi_static_select"
    await local_slack.submit_view(ALICE, modal.id, {
        "hitl_field:summary": {"value": "Checkout returned 500s"}, "hitl_field:severity": {"value": "SEV1"},
        "hitl_field:areas": {"value": ["api", "billing"]}})
    told = await result_reply(local_slack, ts)
    assert told["status"] == "answered"
    assert told["values"] == {"summary": "Checkout returned 500s", "severity": "SEV1", "customers": False,
                              "areas": ["api", "billing"]}


async def test_request_info_with_a_bad_form_tells_the_model_why_and_parks_nothing(local_slack, start_app):
    ask = call("request_info", prompt="Details?", fields=[{"name": "tier", "label": "Tier", "type": "choice"}])
    await start_app(ScriptedModel([ask, lambda messages, tools: say("Result: " + messages[-1]["content"])]), [])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, "<@U0BOT> go")
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    assert "needs 2 to 25 options" in reply.text
