"""A response policy added in one file: any two of a list, one of them a manager.

``bot/manager_approval.py`` is the whole of it: nothing in handlers/, blocks/, bot/connections/mcp/ or bot/connections/openapi.py
names it, yet App Home offers its two lists and says how it reads, the card says who may answer, and a
click is held to it (two approvals, one from the managers' list, never the requester's).
"""

from __future__ import annotations

import json

from pydantic import BaseModel

from bot.approval import Approval, always
from bot.manager_approval import two_with_a_manager
from bot.models.scripted import ScriptedModel, call, say
from bot.tools import ToolContext, tool
from localslack.seed import ALICE, BOB, CAROL, DAVE, GENERAL, TEAM_ID
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card
from tests.e2e.test_governance import find, governance, open_home

RAN: list[str | None] = []


class Refund(BaseModel):
    charge_id: str = "ch_1"


@tool(approval=Approval(request=always(), response=two_with_a_manager("tool:big_refund", "list:managers")))
async def big_refund(args: Refund, ctx: ToolContext) -> dict:
    """Refund a large charge."""
    RAN.append(ctx.principal.slack_user_id if ctx.principal else None)
    return {"refunded": args.charge_id}


def script() -> ScriptedModel:
    return ScriptedModel([call("big_refund", charge_id="ch_9"), lambda messages, tools: say("Result: done")])


def ephemeral_with(slack, user, words):
    return [e for e in slack.ephemerals(user) if words in e.text]


async def test_app_home_offers_both_lists_and_says_how_the_rule_reads(local_slack, start_app):
    await start_app(script(), [big_refund], BOT_ADMINS=DAVE)
    home = await open_home(local_slack, DAVE)
    assert find(home.blocks, "approvers:edit:big_refund") is not None
    assert find(home.blocks, "approvers:edit:list:managers") is not None
    text = json.dumps(home.blocks)
    assert "approves `big_refund` (asks every time; any 2 on the list, one of them a manager)" in text


async def test_two_approvals_are_needed_and_one_must_come_from_a_manager(local_slack, start_app):
    RAN.clear()
    bot = await start_app(script(), [big_refund])
    policies = governance(bot).policies
    await policies.set_approvers(TEAM_ID, "tool:big_refund", [BOB, CAROL], actor="test")
    await policies.set_approvers(TEAM_ID, "list:managers", [DAVE], actor="test")
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_9")
    shown = json.dumps(card.blocks)
    assert f"Needs 2 of <@{BOB}>, <@{CAROL}> and <@{DAVE}>, one of them a manager" in shown

    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for(lambda: "1 of 2" in json.dumps(local_slack.message(GENERAL, card.ts).blocks))
    await local_slack.click(CAROL, GENERAL, card.ts, button(card, "Approve"))  # a second non-manager
    await local_slack.wait_for(lambda: ephemeral_with(local_slack, CAROL, "must come from a manager"))
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))  # the requester never counts
    await local_slack.wait_for(lambda: ephemeral_with(local_slack, ALICE, "can't approve your own"))
    await bot.wait_idle()
    assert RAN == []

    await local_slack.click(DAVE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    await bot.wait_idle()
    assert RAN == [DAVE]
