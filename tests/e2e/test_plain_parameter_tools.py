"""A tool written with plain typed parameters, through Slack: its card shows its fields, and "Edit &
approve" opens a form of them; the call runs once, with the edit."""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import Field

from bot import ToolContext, always, money, tool
from localslack.seed import ALICE, GENERAL
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card
from tests.e2e.test_decisions import inputs, result_reply, script

RAN: list[dict] = []


@tool(approval=always(), editable=True, prompt="Refund ${amount:,.2f} on {charge_id} to the customer?")
async def refund_charge(
    ctx: ToolContext,
    charge_id: Annotated[str, Field(min_length=3, title="Charge")],
    amount: Annotated[float, money("USD", gt=0, le=100)],
) -> dict:
    """Refund a charge."""
    RAN.append({"charge_id": charge_id, "amount": amount, "by": ctx.principal.slack_user_id})
    return {"refunded": charge_id, "amount": amount}


async def test_a_plain_parameter_tools_card_shows_its_fields_and_edit_and_approve_runs_the_edit_once(
    local_slack, start_app
):
    RAN.clear()
    await start_app(script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    shown = json.dumps(card.blocks)
    assert "Refund $40.00 on ch_1001 to the customer?" in shown
    assert "Charge" in shown and "ch_1001" in shown and "$40.00" in shown  # the fields, titled and as money
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Edit & approve"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE))
    fields = inputs(modal)
    assert set(fields) == {"hitl_arg:charge_id", "hitl_arg:amount"}
    assert fields["hitl_arg:charge_id"]["element"]["initial_value"] == "ch_1001"

    too_much = await local_slack.submit_view(ALICE, modal.id, {"hitl_arg:amount": {"value": "250"}})
    assert set(json.loads(too_much.body)["errors"]) == {"hitl_arg:amount"} and RAN == []
    done = await local_slack.submit_view(ALICE, modal.id, {"hitl_arg:amount": {"value": "30"}})
    assert done.status == 200
    told = await result_reply(local_slack, ts)
    assert RAN == [{"charge_id": "ch_1001", "amount": 30.0, "by": ALICE}]
    assert told["arguments"] == {"charge_id": "ch_1001", "amount": 30.0}
    assert "edited from $40.00" in json.dumps(local_slack.message(GENERAL, card.ts).blocks)
