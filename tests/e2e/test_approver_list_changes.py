"""Approver lists change while requests wait: open cards and DM copies say who may
answer now, a newly added approver is told once about what already waits for them, and saving an empty
list says that nobody can approve then."""

from __future__ import annotations

import json

from localslack.seed import BOB, CAROL, DAVE, GENERAL, TEAM_ID
from tests.e2e.test_approval_flow import mention_and_wait_for_card
from tests.e2e.test_governance import ALL_TOOLS, governance, loaded_modal, open_home, script


def _bot_dms(slack, user: str) -> list:
    return [m for m in slack.messages(slack.dm_channel(user)) if m.blocks and "pay_vendor" in json.dumps(m.blocks)]


async def test_a_list_change_updates_the_open_card_and_tells_the_new_approver_once(local_slack, start_app):
    await start_app(script("pay_vendor", target="acme"), ALL_TOOLS)
    _, card = await mention_and_wait_for_card(local_slack, "pay acme")
    assert "Nobody is set up to approve `pay_vendor`" in json.dumps(card.blocks)

    home = await open_home(local_slack, CAROL)
    await local_slack.select_users(CAROL, home.id, "approvers:edit:pay_vendor", [BOB])
    updated = await local_slack.wait_for(
        lambda: f"Waiting on <@{BOB}>" in json.dumps((m := local_slack.message(GENERAL, card.ts)).blocks) and m)
    assert "Nobody is set up" not in json.dumps(updated.blocks)
    [told] = await local_slack.wait_for(lambda: _bot_dms(local_slack, BOB))  # one DM: a working copy
    assert any(b["type"] == "actions" for b in told.blocks)

    home = await open_home(local_slack, CAROL)
    await local_slack.select_users(CAROL, home.id, "approvers:edit:pay_vendor", [BOB, DAVE])
    await local_slack.wait_for(lambda: f"<@{DAVE}>" in json.dumps(local_slack.message(GENERAL, card.ts).blocks))
    await local_slack.wait_for(lambda: len(_bot_dms(local_slack, DAVE)) == 1)
    assert len(_bot_dms(local_slack, BOB)) == 1, "BOB, already told, is not told again"
    bob_copy = local_slack.message(local_slack.dm_channel(BOB), told.ts)
    assert f"<@{DAVE}>" in json.dumps(bob_copy.blocks), "his copy says who may answer now too"


async def test_saving_an_empty_list_warns_that_nobody_can_approve(local_slack, start_app):
    bot = await start_app(script("pay_vendor", target="acme"), ALL_TOOLS)
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:pay_vendor", [BOB], actor="test")
    await local_slack.slash_command(CAROL, "/approvers")
    modal = await loaded_modal(local_slack, CAROL)
    result = await local_slack.submit_view(CAROL, modal.id, {"approvers:pay_vendor": {"users": []}})
    assert result.status == 200
    [shown] = local_slack.open_views(CAROL)  # the editor's answer stays on screen, saying what it means
    said = json.dumps(shown.blocks)
    assert "Nobody can approve `pay_vendor` now" in said, said
    assert await governance(bot).policies.approvers(TEAM_ID, "tool:pay_vendor") is None

    await governance(bot).policies.set_approvers(TEAM_ID, "tool:pay_vendor", [BOB], actor="test")
    home = await open_home(local_slack, CAROL)
    await local_slack.select_users(CAROL, home.id, "approvers:edit:pay_vendor", [])
    note = await local_slack.wait_for_message(local_slack.dm_channel(CAROL),
                                              predicate=lambda m: "Nobody can approve" in m.text)
    assert "`pay_vendor`" in note.text


async def test_someone_from_another_organisation_put_on_a_list_is_never_told(local_slack, start_app):
    """A Slack Connect partner may not answer here: a list naming her (written past the editor, which
    refuses her) tells her nothing, and the card does not name her."""
    from localslack.seed import ERIN

    bot = await start_app(script("pay_vendor", target="acme"), ALL_TOOLS)
    policies = governance(bot).policies
    await policies.set_approvers(TEAM_ID, "tool:pay_vendor", [BOB], actor="test")
    _, card = await mention_and_wait_for_card(local_slack, "pay acme")
    await policies.set_approvers(TEAM_ID, "tool:pay_vendor", [ERIN, DAVE], actor="test")
    version = (await policies.get(TEAM_ID)).version
    assert await bot.runtime.refresh_responders(TEAM_ID, "tool:pay_vendor", version) == 1
    await local_slack.wait_for(lambda: len(_bot_dms(local_slack, DAVE)) == 1)
    await bot.wait_idle()
    assert f"<@{ERIN}>" not in json.dumps(local_slack.message(GENERAL, card.ts).blocks)
    assert _bot_dms(local_slack, ERIN) == []
