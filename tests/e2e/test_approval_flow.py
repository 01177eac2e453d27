"""Mention → card → click → tool runs once → answer in the thread → card updated, as Slack drives it."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from bot.approval import Approval, allowed, always, rejected
from bot.models.scripted import ScriptedModel, call, say
from bot.tools import ToolContext, tool
from localslack.seed import ALICE, BOB, BOT_USER_ID, CAROL, GENERAL


class Refund(BaseModel):
    charge_id: str
    amount: float


RUNS: list[dict] = []


@tool(approval=always())
async def refund_charge(args: Refund, ctx: ToolContext) -> dict:
    """Refund a charge."""
    RUNS.append({"charge": args.charge_id, "principal": ctx.principal.principal_id if ctx.principal else None})
    return {"refunded": args.charge_id}


def bob_only(ctx) -> object:
    if ctx.response.principal.slack_user_id == BOB:
        return allowed()
    return rejected("Only finance (bob) can approve refunds.")


@tool(approval=Approval(request=always(), response=bob_only))
async def finance_refund(args: Refund, ctx: ToolContext) -> dict:
    """Refund needing finance."""
    RUNS.append({"charge": args.charge_id, "principal": ctx.principal.principal_id if ctx.principal else None})
    return {"refunded": args.charge_id}


def refund_script(tool_name: str = "refund_charge") -> ScriptedModel:
    def answer(messages, tools):
        return say("Result: " + str(messages[-1]["content"]))

    return ScriptedModel([call(tool_name, charge_id="ch_1", amount=5.0), answer])


def card_in(slack, thread_ts, channel=GENERAL):
    """The newest message in the thread that has buttons."""
    for message in reversed(slack.messages(channel, thread_ts)):
        for block in message.blocks or []:
            if block.get("type") == "actions":
                return message
    return None


def button(message, label):
    for block in message.blocks or []:
        for element in block.get("elements", []):
            if element.get("type") == "button" and element["text"]["text"] == label:
                return element["action_id"]
    raise AssertionError(f"no {label} button in {message.blocks}")


async def mention_and_wait_for_card(slack, text="refund ch_1 please", user=ALICE):
    ts, deliveries = await slack.post_message(user, GENERAL, f"<@{BOT_USER_ID}> {text}")
    assert all(d.status == 200 for d in deliveries), deliveries
    card = await slack.wait_for(lambda: card_in(slack, ts))
    return ts, card


async def test_requester_approves_tool_runs_once_and_card_updates(local_slack, start_app):
    RUNS.clear()
    model = refund_script()
    await start_app(model, [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    assert RUNS == []
    assert "refund_charge" in str(card.blocks)

    result = await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    assert result.status == 200
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    assert "refunded" in reply.text
    assert RUNS == [{"charge": "ch_1", "principal": "slack:T0LOCAL:U0ALICE"}]
    updated = local_slack.message(GENERAL, card.ts)
    assert all(b["type"] != "actions" for b in updated.blocks), "buttons must be gone"
    assert f"<@{ALICE}>" in str(updated.blocks) and "Approved" in str(updated.blocks)


async def test_cancel_never_runs_and_model_is_told(local_slack, start_app):
    RUNS.clear()
    model = refund_script()
    await start_app(model, [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Cancel"))
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    assert "TOOL_EXECUTION_DENIED" in reply.text
    assert RUNS == []
    assert "Cancelled" in str(local_slack.message(GENERAL, card.ts).blocks)


async def test_other_user_refused_privately_request_stays_pending(local_slack, start_app):
    RUNS.clear()
    await start_app(refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))
    note = await local_slack.wait_for(lambda: local_slack.ephemerals(BOB))
    assert "Only the person who requested" in note[-1].text
    assert local_slack.ephemerals(ALICE) == []
    assert RUNS == []
    assert any(b["type"] == "actions" for b in local_slack.message(GENERAL, card.ts).blocks)
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for(lambda: RUNS)
    assert len(RUNS) == 1


async def test_response_policy_rejects_one_accepts_another(local_slack, start_app):
    RUNS.clear()
    await start_app(refund_script("finance_refund"), [finance_refund])
    ts, card = await mention_and_wait_for_card(local_slack)
    await local_slack.click(CAROL, GENERAL, card.ts, button(card, "Approve"))
    note = await local_slack.wait_for(lambda: local_slack.ephemerals(CAROL))
    assert "Only finance" in note[-1].text
    assert RUNS == []
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for(lambda: RUNS)
    assert RUNS == [{"charge": "ch_1", "principal": "slack:T0LOCAL:U0BOB"}]
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)


async def test_eight_concurrent_clicks_one_execution(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    action = button(card, "Approve")
    results = await asyncio.gather(*(local_slack.click(ALICE, GENERAL, card.ts, action) for _ in range(8)))
    assert all(r.status == 200 for r in results)
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    await bot.wait_idle()
    assert len(RUNS) == 1
    already = [e for e in local_slack.ephemerals(ALICE) if "Already approved" in e.text]
    assert already, "late clickers are told who settled it"


async def test_typed_approve_in_thread(local_slack, start_app):
    RUNS.clear()
    await start_app(refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    await local_slack.post_message(ALICE, GENERAL, "approve", thread_ts=ts)
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    assert len(RUNS) == 1
    updated = local_slack.message(GENERAL, card.ts)
    assert all(b["type"] != "actions" for b in updated.blocks)
    assert f"<@{ALICE}>" in str(updated.blocks), "a typed answer names who answered"
