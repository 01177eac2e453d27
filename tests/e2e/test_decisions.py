"""Richer decisions as Slack drives them: cancel with a reason (modal and typed), edit before
approving, templates, questions as select menus. Every one goes through the one settle path."""

from __future__ import annotations

import json
from urllib.parse import quote

from pydantic import BaseModel, Field

from bot.approval import Approval, allowed, always, rejected
from bot.models.scripted import ScriptedModel, call, say
from bot.tools import ToolContext, money, tool
from localslack.seed import ALICE, BOB, DAVE, GENERAL, TEAM_ID
from tests.audit_polling import audit_entries
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card


class Refund(BaseModel):
    charge_id: str = Field(min_length=3)
    amount: float = money("USD", gt=0, le=100)


RAN: list[dict] = []


@tool(approval=always(), editable=True, prompt="Refund ${amount:,.2f} on {charge_id} to the customer?",
      denied_message="The refund was not approved; tell the customer it is under review.")
async def refund_charge(args: Refund, ctx: ToolContext) -> dict:
    """Refund a charge."""
    RAN.append(args.model_dump())
    return {"refunded": args.charge_id, "amount": args.amount}


def bob_decides(ctx) -> object:
    return allowed() if ctx.response.principal.slack_user_id == BOB else rejected("Only finance (bob) decides refunds.")


@tool(approval=Approval(request=always(), response=bob_decides), editable=True)
async def finance_refund(args: Refund, ctx: ToolContext) -> dict:
    """Refund needing finance."""
    RAN.append(args.model_dump())
    return {"refunded": args.charge_id}


def script(tool_name: str = "refund_charge") -> ScriptedModel:
    def answer(messages, tools):
        return say("Result: " + str(messages[-1]["content"]))

    return ScriptedModel([call(tool_name, charge_id="ch_1001", amount=40.0), answer])


async def result_reply(slack, ts):
    reply = await slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    return json.loads(reply.text.removeprefix("Result: ").replace("&quot;", '"').replace("&amp;", "&")
                      .replace("&lt;", "<").replace("&gt;", ">"))


async def entries(bot, kind):
    return await audit_entries(bot.redis.client, TEAM_ID, kind=kind)  # it lands with the pass's close


def inputs(view) -> dict[str, dict]:
    return {b["block_id"]: b for b in view.blocks if b["type"] == "input"}


# --- cancel with a reason -------------------------------------------------------------------


async def test_cancel_with_reason_from_the_modal_is_quoted_to_the_model_on_the_card_and_in_the_audit(
        local_slack, start_app):
    RAN.clear()
    bot = await start_app(script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Cancel with reason"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE))
    [reason] = inputs(modal).values()
    submitted = await local_slack.submit_view(
        ALICE, modal.id, {reason["block_id"]: {reason["element"]["action_id"]: "Over the $25 limit without a ticket"}})
    assert submitted.status == 200 and local_slack.open_views(ALICE) == []

    told = await result_reply(local_slack, ts)
    assert told["code"] == "TOOL_EXECUTION_DENIED"
    assert told["message"] == "The refund was not approved; tell the customer it is under review."
    assert told["note"] == f'slack:{TEAM_ID}:{ALICE} wrote: "Over the $25 limit without a ticket"'
    assert RAN == []
    settled = json.dumps(local_slack.message(GENERAL, card.ts).blocks)
    assert "Cancelled" in settled and "> Over the $25 limit without a ticket" in settled
    [settlement] = await entries(bot, "settlement")
    assert settlement.data["outcome"] == "cancelled" and settlement.data["note"] == "Over the $25 limit without a ticket"
    assert settlement.actor == f"slack:{TEAM_ID}:{ALICE}"


async def test_cancel_colon_reason_typed_in_the_thread_cancels_with_that_reason(local_slack, start_app):
    RAN.clear()
    await start_app(script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    await local_slack.post_message(ALICE, GENERAL, "cancel: the customer already got store credit", thread_ts=ts)
    told = await result_reply(local_slack, ts)
    assert told["note"].endswith('wrote: "the customer already got store credit"')
    assert RAN == []
    assert "store credit" in json.dumps(local_slack.message(GENERAL, card.ts).blocks)


async def test_someone_the_policy_refuses_gets_no_reason_form_and_is_told_why(local_slack, start_app):
    RAN.clear()
    await start_app(script("finance_refund"), [finance_refund])
    ts, card = await mention_and_wait_for_card(local_slack)  # dave: neither bob nor a workspace admin
    await local_slack.click(DAVE, GENERAL, card.ts, button(card, "Cancel with reason"))
    note = await local_slack.wait_for(lambda: local_slack.ephemerals(DAVE))
    assert "Only finance (bob) decides refunds." in note[-1].text
    assert local_slack.open_views(DAVE) == []
    await local_slack.click(DAVE, GENERAL, card.ts, button(card, "Edit & approve"))
    await local_slack.wait_for(lambda: len(local_slack.ephemerals(DAVE)) == 2)
    assert local_slack.open_views(DAVE) == []
    assert any(b["type"] == "actions" for b in local_slack.message(GENERAL, card.ts).blocks)


# --- edit before approving ------------------------------------------------------------------


async def test_edit_and_approve_runs_once_with_the_edit_and_the_card_model_and_audit_show_both(
        local_slack, start_app):
    RAN.clear()
    bot = await start_app(script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    assert "Refund $40.00 on ch_1001 to the customer?" in json.dumps(card.blocks)  # the tool's prompt=
    approve = button(card, "Approve")
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Edit & approve"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE))
    fields = inputs(modal)
    assert set(fields) == {"hitl_arg:charge_id", "hitl_arg:amount"}
    assert fields["hitl_arg:charge_id"]["element"]["initial_value"] == "ch_1001"
    assert float(fields["hitl_arg:amount"]["element"]["initial_value"]) == 40.0

    too_much = await local_slack.submit_view(ALICE, modal.id, {"hitl_arg:amount": {"value": "250"}})
    assert too_much.status == 200
    assert set(json.loads(too_much.body)["errors"]) == {"hitl_arg:amount"}  # shown under the field
    assert RAN == [] and local_slack.open_views(ALICE)  # the modal stays open with the error

    done = await local_slack.submit_view(ALICE, modal.id, {"hitl_arg:amount": {"value": "30"}})
    assert done.status == 200
    told = await result_reply(local_slack, ts)
    assert RAN == [{"charge_id": "ch_1001", "amount": 30.0}]
    assert told["arguments"] == {"charge_id": "ch_1001", "amount": 30.0}
    assert "changed the arguments before approving" in told["note"]
    settled = json.dumps(local_slack.message(GENERAL, card.ts).blocks)
    assert "Approved" in settled and "edited from $40.00" in settled
    assert "Refund $30.00 on ch_1001" in settled and "Refund $40.00" not in settled  # leads with what ran
    [request] = await entries(bot, "request")
    [resolution] = await entries(bot, "resolution")
    assert request.data["input"] == {"charge_id": "ch_1001", "amount": 40.0}
    assert resolution.data["edited_input"] == {"charge_id": "ch_1001", "amount": 30.0}
    assert len(RAN) == 1 and approve not in json.dumps(local_slack.message(GENERAL, card.ts).blocks)


async def test_a_response_policy_judges_the_edited_input_not_the_proposed_one(local_slack, start_app):
    RAN.clear()
    seen: list[tuple[dict, dict | None]] = []

    def up_to_50(ctx) -> object:
        seen.append((ctx.request.tool_input, ctx.request.proposed_input))
        return allowed() if ctx.request.tool_input["amount"] <= 50 else rejected("Refunds over $50 need finance.")

    @tool(name="refund_charge", approval=Approval(request=always(), response=up_to_50), editable=True)
    async def capped(args: Refund, ctx: ToolContext) -> dict:
        RAN.append(args.model_dump())
        return {"ok": True}

    await start_app(script(), [capped])
    ts, card = await mention_and_wait_for_card(local_slack)
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Edit & approve"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE))
    raised = await local_slack.submit_view(ALICE, modal.id, {"hitl_arg:amount": {"value": "90"}})
    assert "Refunds over $50 need finance." in json.loads(raised.body)["errors"]["hitl_arg:charge_id"]
    assert RAN == []
    assert seen[-1] == ({"charge_id": "ch_1001", "amount": 90.0}, {"charge_id": "ch_1001", "amount": 40.0})


async def test_a_forged_edit_of_a_tool_that_is_not_editable_settles_nothing(local_slack, start_app):
    from blocks.actions import EDIT_CALLBACK_ID, modal_metadata
    from tests.e2e.test_approval_flow import refund_charge as plain_refund

    RAN.clear()
    await start_app(script(), [plain_refund])
    ts, card = await mention_and_wait_for_card(local_slack)
    assert "Edit & approve" not in json.dumps(card.blocks)
    approve = button(card, "Approve")
    request_id = card.blocks[0]["block_id"].split(":title:")[0]
    forged = {"type": "view_submission", "team": {"id": TEAM_ID}, "user": {"id": ALICE, "team_id": TEAM_ID},
              "api_app_id": "A0LOCAL", "trigger_id": "1.2.3",
              "view": {"id": "V0FORGED", "type": "modal", "callback_id": EDIT_CALLBACK_ID, "team_id": TEAM_ID,
                       "private_metadata": modal_metadata(request_id, GENERAL, card.ts),
                       "state": {"values": {"hitl_arg:charge_id": {"value": {"type": "plain_text_input",
                                                                             "value": "ch_9999"}},
                                            "hitl_arg:amount": {"value": {"type": "number_input", "value": "99"}}}}}}
    body = ("payload=" + quote(json.dumps(forged))).encode()
    result = await local_slack.deliver_raw(body, {**local_slack.sign(body),
                                                  "Content-Type": "application/x-www-form-urlencoded"})
    assert result.status == 200
    assert any(b["type"] == "actions" for b in local_slack.message(GENERAL, card.ts).blocks)
    await local_slack.click(ALICE, GENERAL, card.ts, approve)
    await result_reply(local_slack, ts)
    from tests.e2e.test_approval_flow import RUNS

    assert RUNS[-1]["charge"] == "ch_1001"


# --- questions --------------------------------------------------------------------------------


async def test_ask_question_shows_a_select_menu_with_type_your_own_answer(local_slack, start_app):
    ask = call("ask_question", question="Which day works?", options=[{"label": "Saturday"}, {"label": "Sunday"}])
    await start_app(ScriptedModel([ask, say("ok")]), [])
    ts, card = await mention_and_wait_for_card(local_slack, "plan the offsite")
    kinds = [e["type"] for b in card.blocks if b["type"] == "actions" for e in b["elements"]]
    assert kinds == ["static_select", "button"]
    assert button(card, "Type your own answer")


async def test_an_edit_form_submitted_untouched_is_a_plain_approval(local_slack, start_app):
    RAN.clear()
    bot = await start_app(script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Edit & approve"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE))
    assert (await local_slack.submit_view(ALICE, modal.id)).status == 200
    told = await result_reply(local_slack, ts)
    assert RAN == [{"charge_id": "ch_1001", "amount": 40.0}] and "arguments" not in told
    assert "Changed before approving" not in json.dumps(local_slack.message(GENERAL, card.ts).blocks)
    [resolution] = await entries(bot, "resolution")
    assert "edited_input" not in resolution.data
