"""Enterprise Grid end to end: the app installed org-wide on "Globex" (two workspaces, one org token).

The card, the refusal and the reply go out with the org's token, the request keeps its org, and a
colleague whose own workspace is the org's other one counts as one of us — not as an outsider.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from slack_sdk.oauth.installation_store.models.installation import Installation

from localslack import (
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
async def local_slack() -> AsyncIterator[LocalSlack]:
    slack = LocalSlack(bot_url=None, signing_secret=SIGNING_SECRET, seed=grid_seed(org_wide=True))
    await slack.start()
    yield slack
    await slack.stop()


async def _install_org_wide(redis) -> None:  # noqa: ANN001
    store = RedisInstallationStore(redis, client_id=DEFAULT_CLIENT_ID)
    await store.async_save(Installation(
        app_id=APP_ID, enterprise_id=ENTERPRISE_ID, team_id=None, user_id="W0ANA", is_enterprise_install=True,
        bot_token=GRID_BOT_TOKEN, bot_id=GRID_BOT_ID, bot_user_id=GRID_BOT_USER_ID, bot_scopes=["chat:write"],
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
    await bot.runtime.wait_idle()

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
