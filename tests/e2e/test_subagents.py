"""Sub-agents as Slack shows them: the delegation card and the sub-agent's own
approval card land in the mention's thread, labelled with its name; Approve on the child's card lets
the parent answer in the thread; Cancel on the delegation card stops the child."""

from __future__ import annotations

import json

from bot.models.scripted import say
from localslack.seed import ALICE, GENERAL, TEAM_ID
from store.audit import AuditLog
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card
from tests.engine.test_subagents import RAN, RESEARCHER, crm_lookup, models


def cards(slack, ts: str) -> list:
    return [m for m in slack.messages(GENERAL, ts) if any(b.get("type") == "actions" for b in m.blocks or [])]


async def both_cards(slack, ts: str):
    found = await slack.wait_for(lambda: len(cards(slack, ts)) == 2 and cards(slack, ts))
    delegation = next(m for m in found if "is working on" in json.dumps(m.blocks))
    approval = next(m for m in found if m is not delegation)
    return delegation, approval


async def test_the_sub_agents_card_is_approved_in_the_thread_and_the_parent_replies(local_slack, start_app):
    RAN.clear()
    model, *_ = models()
    bot = await start_app(model, [crm_lookup, RESEARCHER])
    ts, _ = await mention_and_wait_for_card(local_slack, "what plan is acme on?")
    delegation, approval = await both_cards(local_slack, ts)
    assert "researcher* is working on" in json.dumps(delegation.blocks)
    assert [
        e["text"]["text"] for b in delegation.blocks if b["type"] == "actions" for e in b["elements"]
    ] == ["Cancel"]
    shown = json.dumps(approval.blocks)
    assert "From sub-agent *researcher*" in shown and "crm_lookup" in shown

    await local_slack.click(ALICE, GENERAL, approval.ts, button(approval, "Approve"))
    reply = await local_slack.wait_for_message(
        GENERAL, thread_ts=ts, predicate=lambda m: m.text.startswith("Answer:")
    )
    assert reply.text == "Answer: acme is on gold"
    assert [(customer, who.principal_id) for customer, who in RAN] == [("acme", f"slack:{TEAM_ID}:{ALICE}")]
    # the sub-agent's own words are not posted: the parent relays them
    assert not any(m.text == "acme is on gold" for m in local_slack.messages(GENERAL, ts))
    await local_slack.wait_for(
        lambda: "Finished" in json.dumps(local_slack.message(GENERAL, delegation.ts).blocks)
    )
    await bot.wait_idle()  # the audit log is written by the delivery, not before the card's update
    resolutions = await AuditLog(bot.redis.client).entries(TEAM_ID, kind="resolution", limit=None)
    assert any(
        e.data.get("via") == "subagent" and e.data["request_kind"] == "delegation" for e in resolutions
    )


async def test_cancel_on_the_delegation_card_stops_the_sub_agent(local_slack, start_app):
    RAN.clear()
    model, *_ = models(parent_then=say("Stopped."))
    await start_app(model, [crm_lookup, RESEARCHER])
    ts, _ = await mention_and_wait_for_card(local_slack, "what plan is acme on?")
    delegation, approval = await both_cards(local_slack, ts)
    await local_slack.click(ALICE, GENERAL, delegation.ts, button(delegation, "Cancel"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: m.text == "Stopped.")
    await local_slack.wait_for(lambda: not cards(local_slack, ts))  # both cards lost their buttons
    assert "No longer needed" in json.dumps(local_slack.message(GENERAL, approval.ts).blocks)
    assert RAN == []


async def test_approve_on_the_sub_agents_card_right_after_cancelling_the_delegation_runs_nothing(
    local_slack, start_app
):
    # the second click comes before the relay has stopped the sub-agent
    RAN.clear()
    model, *_ = models(parent_then=say("Stopped."))
    await start_app(model, [crm_lookup, RESEARCHER])
    ts, _ = await mention_and_wait_for_card(local_slack, "what plan is acme on?")
    delegation, approval = await both_cards(local_slack, ts)
    await local_slack.click(ALICE, GENERAL, delegation.ts, button(delegation, "Cancel"))
    await local_slack.click(ALICE, GENERAL, approval.ts, button(approval, "Approve"))
    note = await local_slack.wait_for(
        lambda: [e for e in local_slack.ephemerals(ALICE) if "no longer needed" in e.text]
    )
    assert note[0].text == "This request is no longer needed."
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: m.text == "Stopped.")
    await local_slack.wait_for(lambda: not cards(local_slack, ts))  # both cards lost their buttons
    assert "No longer needed" in json.dumps(local_slack.message(GENERAL, approval.ts).blocks)
    assert RAN == []
