"""A result token is worth what its holder is: it settles nothing once their Slack account is deactivated, and
the holder or a workspace admin can revoke it. What the API tells a caller with a bad token reveals nothing."""

from __future__ import annotations

import json

import aiohttp

from bot.models.scripted import ScriptedModel, call, say
from localslack.seed import ALICE, BOB, CAROL, GENERAL, TEAM_ID
from tests.audit_polling import audit_entries
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card
from tests.e2e.test_external import run_migration, script, token_of


async def token_for(local_slack, card, user: str = BOB) -> tuple[str, str]:
    def notes() -> list:
        return [e for e in local_slack.ephemerals(user) if "Bearer" in e.text]

    before = len(notes())
    await local_slack.click(user, GENERAL, card.ts, button(card, "Get a result token"))
    await local_slack.wait_for(lambda: len(notes()) > before)
    return token_of(notes()[-1].text)


async def send(method: str, url: str, token: str, body: dict | None = None) -> tuple[int, dict]:
    async with (
        aiohttp.ClientSession() as http,
        http.request(
            method, url, data=json.dumps(body or {}), headers={"Authorization": f"Bearer {token}"}
        ) as r,
    ):
        return r.status, await r.json()


def still_open(local_slack, card) -> bool:
    return any(b["type"] == "actions" for b in local_slack.message(GENERAL, card.ts).blocks)


async def test_a_token_settles_nothing_once_its_holders_account_is_deactivated(local_slack, start_app):
    await start_app(script(), [run_migration])
    _, card = await mention_and_wait_for_card(local_slack, "migrate orders")
    url, token = await token_for(local_slack, card)
    local_slack.deactivate_user(BOB)  # users.info now says deleted: true
    status, answer = await send("POST", url, token, {"rows_changed": 3})
    assert status == 403 and "no longer an active member" in answer["error"], (status, answer)
    assert still_open(local_slack, card)


async def test_the_holder_revokes_their_token_and_a_new_one_works(local_slack, start_app):
    bot = await start_app(script(), [run_migration])
    _, card = await mention_and_wait_for_card(local_slack, "migrate orders")
    url, token = await token_for(local_slack, card)
    status, answer = await send("DELETE", url, token)
    assert status == 200 and answer["ok"] is True, answer
    assert (await send("POST", url, token, {"rows_changed": 3}))[0] == 401
    assert still_open(local_slack, card)
    holder = f"slack:{TEAM_ID}:{BOB}"
    [revoked] = await audit_entries(bot.redis.client, TEAM_ID, kind="result-tokens.revoked")
    assert (revoked.actor, revoked.subject, revoked.data["via"]) == (holder, holder, "api")  # who, whose, how

    later = bot.runtime.settings.clock() + 1  # a token given after the revocation is good
    bot.runtime.settings.clock = lambda: later
    _, fresh = await token_for(local_slack, card)
    assert fresh != token
    assert (await send("POST", url, fresh, {"rows_changed": 3}))[0] == 200


async def test_a_workspace_admin_revokes_someones_tokens_and_nobody_else_can(local_slack, start_app):
    bot = await start_app(script(), [run_migration])
    _, card = await mention_and_wait_for_card(local_slack, "migrate orders")
    url, token = await token_for(local_slack, card)

    await local_slack.slash_command(ALICE, "/approvers", f"revoke-tokens <@{BOB}>", channel_id=GENERAL)
    refused = await local_slack.wait_for(
        lambda: [e for e in local_slack.ephemerals(ALICE) if "admin" in e.text]
    )
    assert "Only workspace admins" in refused[-1].text
    assert (await send("POST", url, token, {"rows_changed": "lots"}))[0] == 422  # still good

    await local_slack.slash_command(CAROL, "/approvers", f"revoke-tokens <@{BOB}>", channel_id=GENERAL)
    await local_slack.wait_for(lambda: [e for e in local_slack.ephemerals(CAROL) if "revoked" in e.text])
    assert (await send("POST", url, token, {"rows_changed": 3}))[0] == 401
    assert still_open(local_slack, card)
    [revoked] = await audit_entries(bot.redis.client, TEAM_ID, kind="result-tokens.revoked")
    assert (revoked.actor, revoked.subject) == (f"slack:{TEAM_ID}:{CAROL}", f"slack:{TEAM_ID}:{BOB}")


async def test_a_token_shown_to_another_request_gets_the_same_answer_as_one_for_no_request(
    local_slack, start_app
):
    """401 whether the other request exists or not: a token says nothing about requests it is not for."""
    await start_app(
        ScriptedModel(
            [call("run_migration", database="orders"), call("run_migration", database="users"), say("done")]
        ),
        [run_migration],
    )
    _, card = await mention_and_wait_for_card(local_slack, "migrate orders")
    url, token = await token_for(local_slack, card)
    _, second = await mention_and_wait_for_card(local_slack, "migrate users")
    other_url, _ = await token_for(local_slack, second)
    assert other_url != url
    existing = await send("POST", other_url, token, {"rows_changed": 3})
    missing = await send(
        "POST", url.rsplit("/", 2)[0] + "/0000000000000000.000000000000/result", token, {"rows_changed": 3}
    )
    assert existing == missing and existing[0] == 401
    assert (await send("POST", url, token, {"rows_changed": 3}))[0] == 200
    status, answer = await send("POST", url, token, {"rows_changed": 3})  # replayed
    assert status == 409 and "already settled" in answer["error"]
