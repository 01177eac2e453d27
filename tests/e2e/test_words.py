"""The words people see, as Slack drives the app through the local workspace:
refusals that say who may do what was tried, text meant for the model kept from the thread, and
"nothing is waiting" when a typed answer has nothing to answer."""

from __future__ import annotations

from pydantic import BaseModel

from bot.approval import Approval, always
from bot.governance import approvers
from bot.models.scripted import ScriptedModel, call, say
from bot.tools import tool
from localslack.seed import ALICE, BOB, BOT_USER_ID, CAROL, DAVE, GENERAL, TEAM_ID
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card
from tests.e2e.test_governance import audit_entries, governance

RAN: list[str] = []


class Refund(BaseModel):
    charge_id: str = "ch_1"


@tool(approval=Approval(request=always(), response=approvers("tool:big_refund")))
async def big_refund(args: Refund) -> dict:
    """Refund a large charge."""
    RAN.append(args.charge_id)
    return {"refunded": args.charge_id}


def _script() -> ScriptedModel:
    return ScriptedModel([call("big_refund", charge_id="ch_1"), say("Done.")])


async def test_refusals_say_who_may_approve_and_who_may_cancel(local_slack, start_app):
    RAN.clear()
    bot = await start_app(_script(), [big_refund])
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:big_refund", [BOB], actor="test")
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")  # alice asks; only bob approves

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    [told] = await local_slack.wait_for(lambda: local_slack.ephemerals(ALICE))
    assert f"Only <@{BOB}> can approve `big_refund`." in told.text
    assert "someone else" not in told.text

    await local_slack.click(DAVE, GENERAL, card.ts, button(card, "Cancel with reason"))
    [told] = await local_slack.wait_for(lambda: local_slack.ephemerals(DAVE))
    assert f"Only <@{ALICE}> (who asked), <@{BOB}> or a workspace admin can cancel this request." in told.text
    assert "can approve" not in told.text and local_slack.open_views(DAVE) == []
    assert RAN == []


async def test_a_workspace_admin_may_cancel_a_stuck_request_never_approve_it_and_the_audit_says_so(
        local_slack, start_app):
    RAN.clear()
    bot = await start_app(_script(), [big_refund])
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:big_refund", [BOB], actor="test")
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")  # carol is a workspace admin

    await local_slack.click(CAROL, GENERAL, card.ts, button(card, "Approve"))
    [told] = await local_slack.wait_for(lambda: local_slack.ephemerals(CAROL))
    assert f"Only <@{BOB}> can approve `big_refund`." in told.text  # an admin cancels, never approves

    await local_slack.click(CAROL, GENERAL, card.ts, button(card, "Cancel with reason"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(CAROL))
    [reason] = [b for b in modal.blocks if b["type"] == "input"]
    await local_slack.submit_view(CAROL, modal.id, {reason["block_id"]: {reason["element"]["action_id"]: "Stuck"}})
    await local_slack.wait_for(lambda: "Cancelled" in str(local_slack.message(GENERAL, card.ts).blocks))
    await bot.wait_idle()
    assert RAN == []
    [settlement] = await audit_entries(bot, "settlement")
    assert settlement.actor == f"slack:{TEAM_ID}:{CAROL}" and settlement.data["outcome"] == "cancelled"
    assert settlement.data["as_admin"] is True and settlement.data["note"] == "Stuck"


async def test_approve_typed_with_nothing_waiting_is_told_so_and_starts_no_turn(local_slack, start_app):
    from bot.models.demo import DemoModel

    bot = await start_app(DemoModel(), [])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> hello")
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "offline" in m.text)
    await bot.wait_idle()
    before = len(local_slack.messages(GENERAL, ts))

    await local_slack.post_message(ALICE, GENERAL, "approve", thread_ts=ts)
    [told] = await local_slack.wait_for(lambda: local_slack.ephemerals(ALICE))
    assert told.text == "Nothing is waiting for an answer here." and told.thread_ts == ts
    await bot.wait_idle()
    assert len(local_slack.messages(GENERAL, ts)) == before + 1  # alice's "approve": no help text after it


async def test_a_denial_written_for_the_model_never_reaches_the_thread(local_slack, start_app):
    from bot.demo_tools import refund_charge
    from bot.models.demo import DemoModel

    bot = await start_app(DemoModel(), [refund_charge])
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:refund_charge", [BOB], actor="test")
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1001 $40")
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Cancel"))
    told = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "didn't do it" in m.text)
    assert told.text == "I didn't do it: it was not approved."
    await bot.wait_idle()
    thread = " ".join(m.text + str(m.blocks) for m in local_slack.messages(GENERAL, ts))
    assert "under review" not in thread and "do not retry" not in thread


async def test_a_form_is_titled_for_what_it_is_and_labels_read_as_words(local_slack, start_app):
    from bot.models.demo import DemoModel

    await start_app(DemoModel(), [])
    ts, card = await mention_and_wait_for_card(local_slack, "report an incident")
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Open form"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE))
    assert modal.title["text"] == "Incident report"
    inputs = {b["block_id"].rsplit(":", 1)[-1]: b for b in modal.blocks if b["type"] == "input"}
    labels = [b["label"]["text"] for b in inputs.values()]
    assert labels == ["What happened?", "Severity", "Started at", "Customers are affected"]
    assert not any("`" in label or "optional" in label.lower() for label in labels)
    assert inputs["started_at"]["optional"] is True
    yes_no = inputs["customer_facing"]["element"]
    assert [o["text"]["text"] for o in yes_no["options"]] == ["Yes"]  # not "Customers are affected" twice


async def test_an_approval_card_names_the_tools_fields_by_their_titles(local_slack, start_app):
    from bot.demo_tools import refund_charge
    from bot.models.demo import DemoModel

    bot = await start_app(DemoModel(), [refund_charge])
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:refund_charge", [BOB], actor="test")
    _, card = await mention_and_wait_for_card(local_slack, "refund ch_1001 $40")
    fields = [f["text"] for b in card.blocks if b.get("fields") for f in b["fields"]]
    assert fields[:2] == ["*Charge ID*\nch_1001", "*Amount*\n$40.00"]
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Edit & approve"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(BOB))
    assert [b["label"]["text"] for b in modal.blocks if b["type"] == "input"] == ["Charge ID", "Amount", "Reason"]
