"""An Enterprise Grid org in LocalSlack (opt-in: ``LocalSlack(seed=grid_seed())``): two workspaces, the app
installed org-wide (one token for both) or per workspace, and payloads that carry the org the way Slack's
org-app reference and Bolt's own org-app tests show them. A real Bolt AsyncApp reads them as org-wide.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from localslack import (
    ANA,
    BEN,
    CHI,
    DEV,
    ENTERPRISE_ID,
    GRID_BOT_TOKEN,
    GRID_BOT_USER_ID,
    GRID_SALES,
    GRID_SUPPORT,
    SALES_CHANNEL,
    SUPPORT_CHANNEL,
    LocalSlack,
    grid_seed,
)
from localslack.server import DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET

SECRET = "grid-test-secret"
CARD = [
    {"type": "section", "block_id": "req", "text": {"type": "mrkdwn", "text": "*refund* wants to run"}},
    {
        "type": "actions",
        "block_id": "req-actions",
        "elements": [
            {"type": "button", "action_id": "approve", "value": "r1", "text": {"type": "plain_text", "text": "Approve"}}
        ],
    },
]


@pytest.fixture
async def org() -> AsyncIterator[LocalSlack]:
    async with LocalSlack(bot_url=None, signing_secret=SECRET, seed=grid_seed()) as slack:
        yield slack


@pytest.fixture
def client(org: LocalSlack) -> AsyncWebClient:
    return AsyncWebClient(base_url=org.api_url, token=GRID_BOT_TOKEN)


async def slack_error(call) -> SlackApiError:  # noqa: ANN001
    with pytest.raises(SlackApiError) as caught:
        await call
    return caught.value


async def test_one_org_wide_token_reaches_both_workspaces(org: LocalSlack, client: AsyncWebClient) -> None:
    assert org.bot_token == GRID_BOT_TOKEN
    identity = await client.auth_test()
    assert identity["is_enterprise_install"] is True and identity["enterprise_id"] == ENTERPRISE_ID
    assert identity["team_id"] == ENTERPRISE_ID and identity["user_id"] == GRID_BOT_USER_ID
    for channel, team in ((SALES_CHANNEL, GRID_SALES), (SUPPORT_CHANNEL, GRID_SUPPORT)):
        posted = await client.chat_postMessage(channel=channel, text="hello")
        assert posted["message"]["team"] == team and posted["message"]["user"] == GRID_BOT_USER_ID
    # "channel_name is passed instead of the channel_id" with an org-wide token: team_not_found
    error = await slack_error(client.chat_postMessage(channel="#sales", text="by name"))
    assert error.response["error"] == "team_not_found"


async def test_org_wide_calls_that_need_a_workspace_must_name_it(org: LocalSlack, client: AsyncWebClient) -> None:
    """users.list / conversations.list: "team_id ... required if org token is used"."""
    error = await slack_error(client.users_list())
    assert error.response["error"] == "missing_argument"
    sales = {m["id"] for m in (await client.users_list(team_id=GRID_SALES))["members"]}
    support = {m["id"] for m in (await client.users_list(team_id=GRID_SUPPORT))["members"]}
    assert {ANA, BEN, DEV} <= sales and CHI not in sales
    assert {CHI, DEV} <= support and ANA not in support  # dev is in both workspaces


async def test_grid_people_carry_their_org_role(client: AsyncWebClient) -> None:
    ana = (await client.users_info(user=ANA))["user"]
    assert ana["is_admin"] is False  # no workspace role...
    assert ana["enterprise_user"]["is_admin"] is True  # ...but an org admin
    assert ana["enterprise_user"]["enterprise_id"] == ENTERPRISE_ID
    dev = (await client.users_info(user=DEV))["user"]
    assert dev["enterprise_user"]["teams"] == [GRID_SALES, GRID_SUPPORT]
    assert dev["id"].startswith("W")  # Grid user ids are global


async def test_events_carry_the_org_and_an_org_wide_authorization(org: LocalSlack) -> None:
    ts, (mention, message) = await org.post_message(BEN, SALES_CHANNEL, f"<@{GRID_BOT_USER_ID}> refund")
    for envelope in (mention.payload, message.payload):
        assert envelope["team_id"] == GRID_SALES and envelope["enterprise_id"] == ENTERPRISE_ID
        assert envelope["authorizations"] == [
            {
                "enterprise_id": ENTERPRISE_ID,
                "team_id": None,  # an org-wide installation has no workspace
                "user_id": GRID_BOT_USER_ID,
                "is_bot": True,
                "is_enterprise_install": True,
            }
        ]
    _, (other,) = await org.post_message(CHI, SUPPORT_CHANNEL, "no mention")
    assert other.payload["team_id"] == GRID_SUPPORT and other.payload["authorizations"][0]["team_id"] is None


async def test_interactions_and_commands_carry_the_org(org: LocalSlack, client: AsyncWebClient) -> None:
    card = await client.chat_postMessage(channel=SALES_CHANNEL, text="Approval", blocks=CARD)
    click = (await org.click(ANA, SALES_CHANNEL, card["ts"], "approve")).payload
    assert click["enterprise"] == {"id": ENTERPRISE_ID, "name": "Globex"}
    assert click["is_enterprise_install"] is True
    assert click["team"] == {"id": GRID_SALES, "domain": "globex-sales", "enterprise_id": ENTERPRISE_ID,
                             "enterprise_name": "Globex"}
    assert click["user"]["team_id"] == GRID_SALES
    command = (await org.slash_command(CHI, "/approvers", "", SUPPORT_CHANNEL)).payload
    assert (command["team_id"], command["enterprise_id"], command["enterprise_name"]) == (
        GRID_SUPPORT,
        ENTERPRISE_ID,
        "Globex",
    )
    assert command["is_enterprise_install"] == "true"


async def test_a_per_workspace_install_in_an_org() -> None:
    async with LocalSlack(bot_url=None, signing_secret=SECRET, seed=grid_seed(org_wide=False)) as slack:
        sales = AsyncWebClient(base_url=slack.api_url, token=f"xoxb-local-{GRID_SALES}")
        identity = await sales.auth_test()
        assert (identity["team_id"], identity["enterprise_id"], identity["is_enterprise_install"]) == (
            GRID_SALES,
            ENTERPRISE_ID,
            False,
        )
        error = await slack_error(sales.chat_postMessage(channel=SUPPORT_CHANNEL, text="not my workspace"))
        assert error.response["error"] == "channel_not_found"
        _, (result,) = await slack.post_message(BEN, SALES_CHANNEL, "hi")
        assert result.payload["authorizations"][0] == {
            "enterprise_id": ENTERPRISE_ID,
            "team_id": GRID_SALES,
            "user_id": "W0SALESBOT",
            "is_bot": True,
            "is_enterprise_install": False,
        }


async def test_installing_on_the_whole_org_over_oauth() -> None:
    async with LocalSlack(bot_url=None, signing_secret=SECRET, seed=grid_seed(org_wide=False)) as slack:
        code = slack.issue_oauth_code(ENTERPRISE_ID, user_id=ANA)
        installed = await AsyncWebClient(base_url=slack.api_url).oauth_v2_access(
            client_id=DEFAULT_CLIENT_ID, client_secret=DEFAULT_CLIENT_SECRET, code=code
        )
        assert installed["team"] is None and installed["is_enterprise_install"] is True
        assert installed["enterprise"] == {"id": ENTERPRISE_ID, "name": "Globex"}
        token = AsyncWebClient(base_url=slack.api_url, token=installed["access_token"])
        assert (await token.auth_test())["is_enterprise_install"] is True
        for channel in (SALES_CHANNEL, SUPPORT_CHANNEL):
            # the org's bot is a new user: like any bot it posts only where it has been invited
            error = await slack_error(token.chat_postMessage(channel=channel, text="org-wide now"))
            assert error.response["error"] == "not_in_channel"
            slack.invite(channel, installed["bot_user_id"])
            assert (await token.chat_postMessage(channel=channel, text="org-wide now"))["ok"]


async def test_uninstalling_from_the_org_revokes_the_org_token(org: LocalSlack, client: AsyncWebClient) -> None:
    results = await org.uninstall(ENTERPRISE_ID)
    assert (await slack_error(client.auth_test())).response["error"] == "token_revoked"
    revoked = results[0].payload
    assert revoked["team_id"] is None and revoked["enterprise_id"] == ENTERPRISE_ID
    assert revoked["event"]["tokens"]["bot"] == [GRID_BOT_USER_ID]


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/slack/events"


async def test_bolt_reads_localslack_grid_payloads_as_an_org_wide_install(org: LocalSlack) -> None:
    seen: list[dict[str, Any]] = []

    async def authorize(enterprise_id: str | None, team_id: str | None, context: Any) -> AuthorizeResult:
        seen.append({"enterprise_id": enterprise_id, "team_id": team_id,
                     "is_enterprise_install": context.is_enterprise_install})
        return AuthorizeResult(enterprise_id=enterprise_id, team_id=team_id, bot_token=GRID_BOT_TOKEN,
                               bot_user_id=GRID_BOT_USER_ID, bot_id="B0GRIDBOT")

    app = AsyncApp(signing_secret=SECRET, authorize=authorize, client=AsyncWebClient(base_url=org.api_url))

    @app.event("app_mention")
    async def on_mention(event: dict, say) -> None:  # noqa: ANN001
        await say(text="Approval needed", blocks=CARD, thread_ts=event["ts"])

    @app.event("message")
    async def on_message() -> None:
        pass

    @app.action("approve")
    async def on_approve(ack, body: dict, client: AsyncWebClient) -> None:  # noqa: ANN001
        await ack()
        await client.chat_update(channel=body["channel"]["id"], ts=body["message"]["ts"], text="Approved")

    runner, url = await serve(app.web_app(path="/slack/events"))
    org.set_bot_url(url)
    try:
        root, results = await org.post_message(DEV, SUPPORT_CHANNEL, f"<@{GRID_BOT_USER_ID}> refund please")
        assert all(r.ok for r in results), [r.body for r in results]
        card = await org.wait_for_message(SUPPORT_CHANNEL, thread_ts=root, predicate=lambda m: m.bot_id is not None)
        assert card.team == GRID_SUPPORT
        assert (await org.click(CHI, SUPPORT_CHANNEL, card.ts, "approve")).ok
        await org.wait_for(lambda: org.message(SUPPORT_CHANNEL, card.ts).text == "Approved")
    finally:
        await runner.cleanup()
    event_auth, click_auth = seen[0], seen[-1]
    assert event_auth == {"enterprise_id": ENTERPRISE_ID, "team_id": None, "is_enterprise_install": True}
    assert click_auth == {"enterprise_id": ENTERPRISE_ID, "team_id": GRID_SUPPORT, "is_enterprise_install": True}


async def test_the_default_workspace_is_not_a_grid_org() -> None:
    async with LocalSlack(bot_url=None, signing_secret=SECRET) as slack:
        _, (result,) = await slack.post_message("U0ALICE", "C0FINANCE", "hello")
        assert "enterprise_id" not in result.payload
        assert result.payload["authorizations"][0]["enterprise_id"] is None
        assert json.dumps(result.payload).count("is_enterprise_install\": true") == 0
