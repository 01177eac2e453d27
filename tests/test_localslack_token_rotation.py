"""Token rotation in LocalSlack, as Slack's guide describes it: with rotation on, an install's access token
expires after 12 hours (``expires_in``) and comes with a refresh token; ``oauth.v2.access`` with
``grant_type=refresh_token`` gives a new pair and uses the old refresh token up; an expired token answers
``token_expired``. The workspace's clock moves forward in tests instead of waiting."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from localslack import ENTERPRISE_ID, GRID_SALES, LocalSlack, grid_seed
from localslack.seed import GENERAL, TEAM_ID
from localslack.server import DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET

CREDENTIALS = {"client_id": DEFAULT_CLIENT_ID, "client_secret": DEFAULT_CLIENT_SECRET}


@pytest.fixture
async def slack() -> AsyncIterator[LocalSlack]:
    async with LocalSlack(bot_url=None, signing_secret="rotation") as local:
        local.ws.rotation.enabled = True
        yield local


async def _error(call) -> str:  # noqa: ANN001
    with pytest.raises(SlackApiError) as caught:
        await call
    return caught.value.response["error"]


async def test_a_rotating_install_expires_in_twelve_hours_and_refreshes(slack: LocalSlack) -> None:
    api = AsyncWebClient(base_url=slack.api_url)
    granted = await api.oauth_v2_access(code=slack.issue_oauth_code(TEAM_ID), **CREDENTIALS)
    assert granted["expires_in"] == 12 * 3600 and granted["refresh_token"].startswith("xoxe-")
    token = granted["access_token"]
    assert token.startswith("xoxe.xoxb-")
    bot = AsyncWebClient(base_url=slack.api_url, token=token)
    await bot.chat_postMessage(channel=GENERAL, text="fresh")

    slack.ws.rotation.advance(12 * 3600)
    assert await _error(bot.chat_postMessage(channel=GENERAL, text="stale")) == "token_expired"

    refreshed = await api.oauth_v2_access(
        grant_type="refresh_token", refresh_token=granted["refresh_token"], **CREDENTIALS
    )
    assert refreshed["token_type"] == "bot" and refreshed["expires_in"] == 12 * 3600
    assert refreshed["team"]["id"] == TEAM_ID and refreshed["access_token"] != token
    renewed = AsyncWebClient(base_url=slack.api_url, token=refreshed["access_token"])
    await renewed.chat_postMessage(channel=GENERAL, text="renewed")
    assert (
        await _error(
            api.oauth_v2_access(
                grant_type="refresh_token", refresh_token=granted["refresh_token"], **CREDENTIALS
            )
        )
        == "invalid_refresh_token"
    ), "a refresh token is used once"
    wrong = {**CREDENTIALS, "client_secret": "nope"}
    assert (
        await _error(
            api.oauth_v2_access(grant_type="refresh_token", refresh_token=refreshed["refresh_token"], **wrong)
        )
        == "bad_client_secret"
    )


async def test_without_rotation_tokens_never_expire(slack: LocalSlack) -> None:
    slack.ws.rotation.enabled = False
    api = AsyncWebClient(base_url=slack.api_url)
    granted = await api.oauth_v2_access(code=slack.issue_oauth_code(TEAM_ID), **CREDENTIALS)
    assert "refresh_token" not in granted and "expires_in" not in granted
    slack.ws.rotation.advance(365 * 86400)
    await AsyncWebClient(base_url=slack.api_url, token=granted["access_token"]).auth_test()


async def test_an_uninstall_ends_every_token_and_refresh_token_of_the_install(slack: LocalSlack) -> None:
    api = AsyncWebClient(base_url=slack.api_url)
    first = await api.oauth_v2_access(code=slack.issue_oauth_code(TEAM_ID), **CREDENTIALS)
    second = await api.oauth_v2_access(
        grant_type="refresh_token", refresh_token=first["refresh_token"], **CREDENTIALS
    )
    slack.ws.uninstall(TEAM_ID)
    for token in (first["access_token"], second["access_token"]):
        assert (
            await _error(AsyncWebClient(base_url=slack.api_url, token=token).auth_test()) == "token_revoked"
        )
    assert (
        await _error(
            api.oauth_v2_access(
                grant_type="refresh_token", refresh_token=second["refresh_token"], **CREDENTIALS
            )
        )
        == "invalid_refresh_token"
    )


async def test_an_org_wide_rotating_token_reaches_every_workspace_and_refreshes() -> None:
    async with LocalSlack(bot_url=None, signing_secret="rotation", seed=grid_seed()) as org:
        org.ws.rotation.enabled = True
        api = AsyncWebClient(base_url=org.api_url)
        granted = await api.oauth_v2_access(code=org.issue_oauth_code(ENTERPRISE_ID), **CREDENTIALS)
        assert granted["is_enterprise_install"] is True and granted["enterprise"]["id"] == ENTERPRISE_ID
        org.ws.rotation.advance(12 * 3600)
        refreshed = await api.oauth_v2_access(
            grant_type="refresh_token", refresh_token=granted["refresh_token"], **CREDENTIALS
        )
        assert refreshed["is_enterprise_install"] is True and refreshed["team"] is None
        client = AsyncWebClient(base_url=org.api_url, token=refreshed["access_token"])
        assert (await client.users_list(team_id=GRID_SALES))["members"]
