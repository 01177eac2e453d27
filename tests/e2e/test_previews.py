"""A preview on every card, as Slack shows it: the card in the thread and the approver's
DM copy say what the call would do before anyone decides; the settled card, rendered later from the
request kept in Redis, still says it."""

from __future__ import annotations

import logging

import pytest
from pydantic import BaseModel

from bot.approval import Approval, always
from bot.governance import approvers
from bot.models.scripted import ScriptedModel, call, say
from bot.tools import ToolContext, tool
from localslack.seed import BOB, GENERAL, TEAM_ID
from tests.e2e.test_approval_flow import button, card_in, mention_and_wait_for_card
from tests.e2e.test_governance import governance
from tests.test_mcp_tools import runs, stdio_server, write_config

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


@pytest.mark.parametrize(("preview", "says"), [
    ("note_customer", "readOnlyHint: false"),  # declared additive: it writes
    ("peek_customer", "no readOnlyHint"),  # declares nothing: by the MCP spec's defaults it may write
])
async def test_an_mcp_preview_that_does_not_declare_read_only_is_refused_at_start_and_never_called(
        local_slack, start_app, tmp_path, caplog, preview, says):
    """A preview runs when the card is drawn, before anyone approves: only a tool the server lists with
    ``readOnlyHint: true`` may be one. Any other is refused when the server's tools are listed, by name."""
    ran = tmp_path / "runs"
    config = write_config(tmp_path, {"crm": stdio_server(
        ran, approval="always", previews={"delete_customer": preview, "ship_order": "lookup_customer"})})
    with caplog.at_level(logging.WARNING, logger="bot.connections.mcp"):
        await start_app(ScriptedModel([call("crm__delete_customer", customer_id="c7"), say("Done.")]), [],
                        BOT_MCP_CONFIG=config)
    ts, card = await mention_and_wait_for_card(local_slack, "delete c7")
    assert runs(ran) == []  # neither the preview nor the tool ran before anyone decided
    assert "crm__delete_customer" in str(card.blocks) and "Preview" not in str(card.blocks)
    refused = [r.getMessage() for r in caplog.records if preview in r.getMessage()]
    assert refused and all("delete_customer's preview" in line and says in line for line in refused), refused
    assert not any("lookup_customer" in r.getMessage() for r in caplog.records)  # read-only: accepted
