"""A preview on every card (issue 28 item 4), as Slack shows it: the card in the thread and the approver's
DM copy say what the call would do before anyone decides; the settled card, rendered later from the
request kept in Redis, still says it."""

from __future__ import annotations

from pydantic import BaseModel

from bot.approval import Approval, always
from bot.governance import approvers
from bot.models.scripted import ScriptedModel, call, say
from bot.tools import ToolContext, tool
from localslack.seed import BOB, GENERAL, TEAM_ID
from tests.e2e.test_approval_flow import button, card_in, mention_and_wait_for_card
from tests.e2e.test_governance import governance

RUNS: list[str] = []
PREVIEWED: list[str | None] = []  # the tenant each preview ran under


class Refund(BaseModel):
    charge_id: str
    amount: float


async def balance_after(args: Refund, ctx: ToolContext) -> str:
    PREVIEWED.append(ctx.tenant)
    return f"balance after refund: ${100 - args.amount:.2f}"


@tool(approval=Approval(request=always(), response=approvers("tool:refund_with_preview")), preview=balance_after)
async def refund_with_preview(args: Refund, ctx: ToolContext) -> dict:
    """Refund a charge."""
    RUNS.append(args.charge_id)
    return {"refunded": args.charge_id}


async def test_card_and_dm_copy_show_the_preview(local_slack, start_app):
    RUNS.clear()
    PREVIEWED.clear()
    bot = await start_app(ScriptedModel([call("refund_with_preview", charge_id="ch_1", amount=88.0), say("Done.")]),
                          [refund_with_preview])
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:refund_with_preview", [BOB], actor="test")
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
    assert "Preview: balance after refund: $12.00" in str(card.blocks)
    dm = local_slack.dm_channel(BOB)
    copy = await local_slack.wait_for(lambda: card_in(local_slack, None, dm))
    assert "Preview: balance after refund: $12.00" in str(copy.blocks)
    assert RUNS == [] and PREVIEWED == [TEAM_ID]  # the tool waits; the preview ran once, in the session's tenant

    result = await local_slack.click(BOB, dm, copy.ts, button(copy, "Approve"))
    assert result.status == 200
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Done." in m.text)
    assert RUNS == ["ch_1"] and PREVIEWED == [TEAM_ID]
    settled = await local_slack.wait_for(lambda: next(
        (m for m in local_slack.messages(GENERAL, ts) if "Approved" in str(m.blocks)), None))
    assert "balance after refund: $12.00" in str(settled.blocks)
