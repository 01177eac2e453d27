"""Enterprise Grid end to end: the app installed org-wide on "Globex" (two workspaces, one org token).

The card, the refusal and the reply go out with the org's token, the request keeps its org, and a
colleague whose own workspace is the org's other one counts as one of us — not as an outsider.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from slack_sdk.oauth.installation_store.models.installation import Installation

from localslack import (
    ANA,
    APP_ID,
    CHI,
    DEV,
    ENTERPRISE_ID,
    GRID_BOT_TOKEN,
    GRID_BOT_USER_ID,
    GRID_SALES,
    GRID_SUPPORT,
    SALES_CHANNEL,
    SUPPORT_CHANNEL,
    grid_seed,
)
from localslack.seed import GRID_BOT_ID
from localslack.server import DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET, LocalSlack
from store.installations import RedisInstallationStore
from tests.e2e.conftest import SIGNING_SECRET
from tests.e2e.test_approval_flow import button, card_in
from tests.e2e.test_governance import ALL_TOOLS, RUNS, script

OAUTH = {"SLACK_BOT_TOKEN": None, "SLACK_CLIENT_ID": DEFAULT_CLIENT_ID, "SLACK_CLIENT_SECRET": DEFAULT_CLIENT_SECRET}


@pytest.fixture
async def local_slack(request: pytest.FixtureRequest) -> AsyncIterator[LocalSlack]:
    org_wide = getattr(request, "param", True)  # parametrize indirectly with False: one install per workspace
    slack = LocalSlack(bot_url=None, signing_secret=SIGNING_SECRET, seed=grid_seed(org_wide=org_wide))
    await slack.start()
    yield slack
    await slack.stop()


async def _install_org_wide(redis) -> None:  # noqa: ANN001
    store = RedisInstallationStore(redis, client_id=DEFAULT_CLIENT_ID)
    await store.async_save(Installation(
        app_id=APP_ID, enterprise_id=ENTERPRISE_ID, team_id=None, user_id="W0ANA", is_enterprise_install=True,
        bot_token=GRID_BOT_TOKEN, bot_id=GRID_BOT_ID, bot_user_id=GRID_BOT_USER_ID, bot_scopes=["chat:write"],
    ))


async def _install_per_workspace(redis) -> None:  # noqa: ANN001
    store = RedisInstallationStore(redis, client_id=DEFAULT_CLIENT_ID)
    for team in (GRID_SALES, GRID_SUPPORT):
        await store.async_save(Installation(
            app_id=APP_ID, enterprise_id=ENTERPRISE_ID, team_id=team, user_id=ANA,
            bot_token=f"xoxb-local-{team}", bot_id=f"B{team[1:]}BOT", bot_user_id=f"W{team[1:]}BOT",
            bot_scopes=["chat:write", "users:read"],
        ))


async def _mention(slack: LocalSlack, who: str, channel: str, text: str):  # noqa: ANN202
    ts, deliveries = await slack.post_message(who, channel, f"<@{GRID_BOT_USER_ID}> {text}")
    assert deliveries and all(d.status == 200 for d in deliveries), deliveries
    return ts


async def test_an_org_colleague_from_the_other_workspace_approves_and_the_org_token_is_used(
    local_slack, start_app, redis
):
    RUNS.clear()
    await _install_org_wide(redis)
    bot = await start_app(script("deploy", target="web"), ALL_TOOLS, **OAUTH)
    # dev's own workspace is Sales: the app learns it belongs to Globex from Sales' own verified requests
    await _mention(local_slack, DEV, SALES_CHANNEL, "deploy web")  # parks a card in Sales
    await bot.wait_idle()

    ts = await _mention(local_slack, CHI, SUPPORT_CHANNEL, "deploy web")
    card = await local_slack.wait_for(lambda: card_in(local_slack, ts, channel=SUPPORT_CHANNEL))
    [record] = await bot.store.pending_for_team(GRID_SUPPORT)
    assert record.session_info["enterprise_id"] == ENTERPRISE_ID

    await local_slack.click(CHI, SUPPORT_CHANNEL, card.ts, button(card, "Approve"))  # four-eyes: not chi
    refusal = await local_slack.wait_for(lambda: local_slack.ephemerals(CHI))
    assert "someone else" in refusal[-1].text
    await local_slack.click(DEV, SUPPORT_CHANNEL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(SUPPORT_CHANNEL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    assert RUNS == [("deploy", DEV)]  # run on dev's approval
    posts = [c for c in local_slack.calls_to("chat.postMessage") if c.params.get("channel") == SUPPORT_CHANNEL]
    assert posts and {c.token for c in posts} == {GRID_BOT_TOKEN}
    assert local_slack.ephemerals(DEV) == [], "dev was not told they are from another workspace"


async def test_sessions_in_each_workspace_of_the_org_stay_apart(local_slack, start_app, redis):
    await _install_org_wide(redis)
    bot = await start_app(script("deploy", target="web"), ALL_TOOLS, **OAUTH)
    sales_ts = await _mention(local_slack, DEV, SALES_CHANNEL, "deploy web")
    support_ts = await _mention(local_slack, CHI, SUPPORT_CHANNEL, "deploy web")
    await local_slack.wait_for(lambda: card_in(local_slack, sales_ts, channel=SALES_CHANNEL))
    await local_slack.wait_for(lambda: card_in(local_slack, support_ts, channel=SUPPORT_CHANNEL))
    assert [r.team_id for r in await bot.store.pending_for_team(GRID_SALES)] == [GRID_SALES]
    assert [r.team_id for r in await bot.store.pending_for_team(GRID_SUPPORT)] == [GRID_SUPPORT]


def _also_in_sales(slack: LocalSlack, who: str) -> None:
    """Slack's side: an org admin adds ``who`` (of Support) to the Sales workspace and its #sales channel."""
    slack.ws.user(who).teams = [GRID_SUPPORT, GRID_SALES]
    slack.ws.channels[SALES_CHANNEL].members.append(who)


async def _guests_on(slack: LocalSlack, who: str, channel: str) -> str:
    before = len(slack.ephemerals(who))
    await slack.slash_command(who, "/approvers", "guests on", channel_id=channel)
    return (await slack.wait_for(lambda: slack.ephemerals(who)[before:]))[-1].text


async def _open_to_guests(bot, team: str, channel: str) -> bool:  # noqa: ANN001
    return channel in (await bot.deps.governance.policies.get(team)).guest_channels


@pytest.mark.parametrize("local_slack", [False], indirect=True)
async def test_a_workspace_admin_is_no_admin_of_another_workspace_of_the_org(local_slack, start_app, redis):
    """Installed in each workspace: chi administers Support and is a plain member of Sales. Slack answers
    users.info for the workspace of the token asked with, so Sales' token says chi is no admin there."""
    await _install_per_workspace(redis)
    bot = await start_app(script("deploy", target="web"), ALL_TOOLS, **OAUTH)
    _also_in_sales(local_slack, CHI)

    refused = await _guests_on(local_slack, CHI, SALES_CHANNEL)
    assert "Only workspace admins" in refused
    assert not await _open_to_guests(bot, GRID_SALES, SALES_CHANNEL)

    assert "can now ask" in await _guests_on(local_slack, CHI, SUPPORT_CHANNEL)  # her own workspace
    assert await _open_to_guests(bot, GRID_SUPPORT, SUPPORT_CHANNEL)


async def test_org_wide_another_workspaces_admin_rules_nothing_and_an_org_admin_rules(local_slack, start_app, redis):
    """Installed org-wide: one token for the whole org, and users.info takes no workspace, so its workspace
    flags do not say which workspace they are about. Chi, Support's admin and a member of Sales, does not
    rule Sales; ana, an org admin, does."""
    await _install_org_wide(redis)
    bot = await start_app(script("deploy", target="web"), ALL_TOOLS, **OAUTH)
    _also_in_sales(local_slack, CHI)
    await _mention(local_slack, DEV, SALES_CHANNEL, "deploy web")  # the app learns Sales is in the org install
    await bot.wait_idle()

    refused = await _guests_on(local_slack, CHI, SALES_CHANNEL)
    assert "Only workspace admins" in refused
    assert not await _open_to_guests(bot, GRID_SALES, SALES_CHANNEL)

    assert "can now ask" in await _guests_on(local_slack, ANA, SALES_CHANNEL)
    assert await _open_to_guests(bot, GRID_SALES, SALES_CHANNEL)
