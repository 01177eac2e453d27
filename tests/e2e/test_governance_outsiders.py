"""Outsiders are never made approvers, and nothing about a request reaches them.

erin (``U0EXT``) is a Slack Connect user from Other Corp, a member of #general. Approvals of people from
another organisation are refused unless the workspace lets outsiders in, so the editors (App Home and
``/approvers``) refuse to list her, a list that has her anyway (saved before, or while outsiders were let in)
names and notifies only the people who can answer, and a refusal is told where the click was made.
Driven through LocalSlack (``users.info`` there says which team each person belongs to).
"""

from __future__ import annotations

import asyncio
import json

from localslack.seed import BOB, CAROL, DAVE, ERIN, TEAM_ID
from tests.e2e.test_approval_flow import button, card_in, mention_and_wait_for_card
from tests.e2e.test_governance import ALL_TOOLS, RUNS, find, governance, loaded_modal, open_home, script


async def _listed(bot, resource: str = "tool:pay_vendor") -> list[str]:
    listing = await governance(bot).policies.approvers(TEAM_ID, resource)
    return listing.approvers if listing else []


async def test_app_home_refuses_to_make_a_slack_connect_user_an_approver(local_slack, start_app):
    bot = await start_app(script("pay_vendor", target="acme"), ALL_TOOLS)
    home = await open_home(local_slack, CAROL)  # carol is a workspace admin
    assert (await local_slack.select_users(CAROL, home.id, "approvers:edit:pay_vendor", [BOB, ERIN])).status == 200
    note = await local_slack.wait_for_message(local_slack.dm_channel(CAROL), predicate=lambda m: "erin" in m.text)
    assert "another organisation" in note.text and "was not changed" in note.text
    assert await _listed(bot) == []
    shown = await local_slack.wait_for(
        lambda: (e := find(local_slack.home_view(CAROL).blocks, "approvers:edit:pay_vendor")) is not None
        and not e.get("initial_users") and e)
    assert shown  # the select shows what is stored, not erin

    await governance(bot).policies.set_allow_external(TEAM_ID, True, actor="test")  # outsiders let in
    assert (await local_slack.select_users(CAROL, home.id, "approvers:edit:pay_vendor", [BOB, ERIN])).status == 200
    assert await _listed_soon(bot, [BOB, ERIN])


async def _listed_soon(bot, wanted: list[str]) -> bool:
    """The App Home save may finish after the ack (the admin check can run after it)."""
    for _ in range(100):
        if await _listed(bot) == wanted:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_the_approvers_modal_refuses_a_slack_connect_user_naming_her(local_slack, start_app):
    bot = await start_app(script("pay_vendor", target="acme"), ALL_TOOLS)
    await local_slack.slash_command(CAROL, "/approvers")
    modal = await loaded_modal(local_slack, CAROL)
    result = await local_slack.submit_view(CAROL, modal.id, {"approvers:pay_vendor": {"users": [BOB, ERIN]}})
    errors = json.loads(result.body)["errors"]
    assert "erin" in errors["approvers:pay_vendor"] and "another organisation" in errors["approvers:pay_vendor"]
    assert await _listed(bot) == []


async def test_an_outsider_already_on_a_list_is_neither_named_nor_sent_the_request(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(script("pay_vendor", target="initech"), ALL_TOOLS)
    # saved before the editor checked, or while the workspace let outsiders in
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:pay_vendor", [BOB, ERIN], actor="test")
    _, card = await mention_and_wait_for_card(local_slack, "pay initech")
    text = json.dumps(card.blocks)
    assert f"Waiting on <@{BOB}>" in text and ERIN not in text
    await local_slack.wait_for(lambda: card_in(local_slack, None, local_slack.dm_channel(BOB)))
    await bot.wait_idle()
    assert local_slack.messages(local_slack.dm_channel(ERIN)) == []  # no copy, no charge details by DM


async def test_a_refused_click_in_a_dm_copy_is_answered_in_that_dm(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(script("pay_vendor", target="hooli"), ALL_TOOLS)
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:pay_vendor", [BOB], actor="test")
    ts, _ = await mention_and_wait_for_card(local_slack, "pay hooli")
    dm = local_slack.dm_channel(BOB)
    copy = await local_slack.wait_for(lambda: card_in(local_slack, None, dm))
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:pay_vendor", [DAVE], actor="test")  # bob is off it
    await local_slack.click(BOB, dm, copy.ts, button(copy, "Approve"))
    [refusal] = await local_slack.wait_for(lambda: local_slack.ephemerals(BOB))
    assert refusal.channel == dm and f"<@{DAVE}>" in refusal.text  # where he clicked, saying who may
    assert RUNS == []
