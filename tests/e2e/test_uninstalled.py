"""A workspace the app was uninstalled from gets nothing done: its requests do not settle, its turns do not
resume or run, its schedules do not fire. Its open requests wait, and settle once it is installed again."""

from __future__ import annotations

import asyncio
import json
import logging

import aiohttp
from pydantic import BaseModel

from bot.approval import always
from bot.models.scripted import ScriptedModel, call, say
from bot.tools import ToolContext, tool
from localslack.seed import BOB, BOT_USER_ID, GENERAL, TEAM_ID
from localslack.server import DEFAULT_CLIENT_ID
from store.installations import RedisInstallationStore
from tests.e2e.test_approval_flow import button, card_in, mention_and_wait_for_card
from tests.e2e.test_external import run_migration, token_of
from tests.e2e.test_oauth import NEW_CHANNEL, NEW_TEAM, NEW_TOKEN, NEWBIE, OAUTH, install_through_oauth
from tests.e2e.test_schedules import later, roots, schedule

RAN: list[str] = []


@tool
async def drop_table(args: dict, ctx: ToolContext) -> dict:
    """Drop a table (needs nobody's approval)."""
    RAN.append("drop_table")
    return {"dropped": True}


def migrate_then_drop() -> ScriptedModel:
    return ScriptedModel([call("run_migration", database="orders"), call("drop_table"), say("done")])


async def uninstall(local_slack, team: str = TEAM_ID, event: dict | None = None) -> None:
    """Slack tells the app it was uninstalled from ``team`` (signed, as Slack sends it)."""
    envelope = {
        "type": "event_callback",
        "team_id": team,
        "api_app_id": "A0LOCAL",
        "event_id": f"Ev0GONE{team}",
        "event_time": 1,
        "event": event or {"type": "app_uninstalled"},
        "authorizations": [
            {
                "team_id": team,
                "user_id": BOT_USER_ID,
                "is_bot": True,
                "enterprise_id": None,
                "is_enterprise_install": False,
            }
        ],
    }
    body = json.dumps(envelope).encode()
    answer = await local_slack.deliver_raw(
        body, {"Content-Type": "application/json", **local_slack.sign(body)}
    )
    assert answer.status == 200


async def bobs_token(local_slack, card, channel: str = GENERAL, user: str = BOB) -> tuple[str, str]:
    await local_slack.click(user, channel, card.ts, button(card, "Get a result token"))
    note = await local_slack.wait_for(lambda: local_slack.ephemerals(user))
    return token_of(note[-1].text)


async def post_result(url: str, token: str, body: dict) -> tuple[int, dict]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, json=body, headers={"Authorization": f"Bearer {token}"}) as r,
    ):
        return r.status, await r.json()


async def test_a_result_for_an_uninstalled_workspace_is_refused_saying_why_and_its_turn_runs_nothing(
    local_slack, start_app
):
    RAN.clear()
    bot = await start_app(migrate_then_drop(), [run_migration, drop_table])
    ts, card = await mention_and_wait_for_card(local_slack, "migrate orders")
    url, token = await bobs_token(local_slack, card)

    await uninstall(local_slack)
    status, answer = await post_result(url, token, {"rows_changed": 3})
    assert status == 403 and "not installed" in answer["error"], (status, answer)
    await bot.runtime.recover()  # a sweep finds nothing of it to run either
    await bot.wait_idle()
    assert RAN == []
    assert any(b["type"] == "actions" for b in local_slack.message(GENERAL, card.ts).blocks)  # still open


@tool
async def slow_export(args: dict, ctx: ToolContext) -> dict:
    """Export the data (slowly; needs nobody's approval)."""
    RAN.append("slow_export")
    await EXPORTING.wait()
    return {"exported": True}


EXPORTING = asyncio.Event()


async def test_a_turn_whose_workspace_uninstalled_the_app_while_a_tool_ran_takes_no_next_step(
    local_slack, start_app
):
    global EXPORTING
    RAN.clear()
    EXPORTING = asyncio.Event()  # this test's loop's
    bot = await start_app(
        ScriptedModel([call("slow_export"), call("drop_table"), say("done")]), [slow_export, drop_table]
    )
    await local_slack.post_message(BOB, GENERAL, f"<@{BOT_USER_ID}> export then drop")
    await local_slack.wait_for(lambda: RAN == ["slow_export"])
    await uninstall(local_slack)
    EXPORTING.set()
    await bot.wait_idle()
    await bot.runtime.recover()
    await bot.wait_idle()
    assert RAN == ["slow_export"]


@tool(approval=always())
async def restart_api(args: dict, ctx: ToolContext) -> dict:
    """Restart the API."""
    RAN.append("restart_api")
    return {"restarted": True}


async def test_a_schedule_tick_of_an_uninstalled_workspace_is_skipped_and_logged(
    local_slack, start_app, caplog
):
    RAN.clear()
    bot = await start_app(ScriptedModel([call("restart_api"), say("done")]), [restart_api])
    await schedule(local_slack, "schedule every 1h restart the api")
    [scheduled] = await bot.runtime.schedules.list(TEAM_ID)
    await uninstall(local_slack)
    later(bot, 3601)
    with caplog.at_level(logging.INFO):
        await bot.runtime.recover()
        await bot.wait_idle()
    assert roots(local_slack) == [] and RAN == []
    assert any(
        "not installed" in r.getMessage() and scheduled.schedule_id in r.getMessage() for r in caplog.records
    )
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "the tick raised"
    [kept] = await bot.runtime.schedules.list(TEAM_ID)  # skipped, not removed: a reinstall resumes it
    assert kept.next_at > scheduled.next_at


class Done(BaseModel):
    rows_changed: int


@tool(external=True, result=Done, approval=always())
async def migrate(args: dict, ctx: ToolContext) -> dict:
    """Run a migration (by hand, elsewhere)."""
    raise AssertionError("an external tool's function never runs")


async def test_an_open_request_waits_through_an_uninstall_and_settles_once_installed_again(
    local_slack, start_app, redis
):
    RAN.clear()
    local_slack.add_team(NEW_TEAM, "New Co", NEW_TOKEN)
    local_slack.add_user(NEWBIE, "newbie", team_id=NEW_TEAM)
    local_slack.add_channel(NEW_CHANNEL, "general", team_id=NEW_TEAM, members=[NEWBIE])
    bot = await start_app(
        ScriptedModel([call("migrate"), call("drop_table"), say("done")]), [migrate, drop_table], **OAUTH
    )
    await install_through_oauth(local_slack, bot)
    ts, _ = await local_slack.post_message(NEWBIE, NEW_CHANNEL, "<@U0NEWBOT> migrate")
    card = await local_slack.wait_for(lambda: card_in(local_slack, ts, NEW_CHANNEL))
    url, token = await bobs_token(local_slack, card, NEW_CHANNEL, NEWBIE)

    await uninstall(local_slack, NEW_TEAM)
    assert (
        await RedisInstallationStore(redis, client_id=DEFAULT_CLIENT_ID).async_find_bot(
            enterprise_id=None, team_id=NEW_TEAM
        )
        is None
    )
    status, answer = await post_result(url, token, {"rows_changed": 3})
    assert status == 403 and "not installed" in answer["error"], (status, answer)
    await bot.runtime.recover()
    await bot.wait_idle()
    assert RAN == []

    await install_through_oauth(local_slack, bot)
    status, answer = await post_result(url, token, {"rows_changed": 3})
    assert status == 200, answer
    await local_slack.wait_for(lambda: RAN == ["drop_table"])


async def test_with_one_token_the_next_request_slack_signs_for_the_workspace_says_it_is_back(
    local_slack, start_app
):
    """Slack sends requests only to an installed app: a deployment without OAuth learns so from the next one."""
    RAN.clear()
    bot = await start_app(migrate_then_drop(), [run_migration, drop_table])
    ts, card = await mention_and_wait_for_card(local_slack, "migrate orders")
    url, token = await bobs_token(local_slack, card)
    await uninstall(local_slack)
    assert (await post_result(url, token, {"rows_changed": 3}))[0] == 403

    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Get a result token"))  # the app is back
    status, answer = await post_result(url, token, {"rows_changed": 3})
    assert status == 200, answer
    await local_slack.wait_for(lambda: RAN == ["drop_table"])
    await bot.wait_idle()


async def test_a_deadline_of_an_uninstalled_workspace_waits_and_the_card_stays_open(local_slack, start_app):
    from tests.e2e.test_notices import Clock, _script, refund

    bot = await start_app(_script("refund"), [refund])
    clock = bot.runtime.settings.clock = Clock()
    ts, card = await mention_and_wait_for_card(local_slack, "refund acme")
    await uninstall(local_slack)
    clock.now += 601
    await bot.runtime.recover()
    await bot.wait_idle()
    assert not any("Nobody approved" in m.text for m in local_slack.messages(GENERAL, ts))
    assert card_in(local_slack, ts) is not None


async def test_an_org_wide_uninstall_reaches_every_workspace_of_the_org_it_served(
    local_slack, start_app, redis
):
    from slack_sdk.oauth.installation_store.models.installation import Installation

    from localslack.seed import ALICE, BOT_TOKEN

    bot = await start_app(ScriptedModel([say("hi")]), [], **OAUTH)
    await RedisInstallationStore(redis, client_id=DEFAULT_CLIENT_ID).async_save(
        Installation(
            app_id="A0LOCAL",
            enterprise_id="E0ORG",
            team_id=None,
            is_enterprise_install=True,
            user_id=ALICE,
            bot_token=BOT_TOKEN,
            bot_id="B0LOCAL",
            bot_user_id=BOT_USER_ID,
            bot_scopes=["chat:write"],
        )
    )
    org_wide = {
        "team_id": None,
        "enterprise_id": "E0ORG",
        "user_id": BOT_USER_ID,
        "is_bot": True,
        "is_enterprise_install": True,
    }

    async def event(event_id: str, event: dict) -> None:
        envelope = {
            "type": "event_callback",
            "team_id": TEAM_ID,
            "enterprise_id": "E0ORG",
            "api_app_id": "A0LOCAL",
            "event_id": event_id,
            "event_time": 1,
            "authorizations": [org_wide],
            "event": event,
        }
        body = json.dumps(envelope).encode()
        answer = await local_slack.deliver_raw(
            body, {"Content-Type": "application/json", **local_slack.sign(body)}
        )
        assert answer.status == 200

    await event(
        "Ev0SEEN",
        {
            "type": "app_mention",
            "user": ALICE,
            "text": f"<@{BOT_USER_ID}> hi",
            "ts": "1767225600.000100",
            "channel": GENERAL,
            "event_ts": "1767225600.000100",
            "team": TEAM_ID,
        },
    )
    await bot.wait_idle()
    assert await bot.runtime.installed.installed(TEAM_ID)
    await event("Ev0GONE", {"type": "app_uninstalled"})
    assert not await bot.runtime.installed.installed(TEAM_ID)
