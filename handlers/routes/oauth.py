"""Multi-workspace install: Bolt's OAuth flow on our Redis stores.

Set ``SLACK_CLIENT_ID`` and ``SLACK_CLIENT_SECRET`` and the bot serves ``GET /slack/install`` (a
redirect to Slack's consent page) and ``GET /slack/oauth_redirect`` (code → ``oauth.v2.access`` →
installation saved). Every later request is authorized from the installation store, so one
deployment serves many workspaces, each with its own token and approver lists.

Both Slack URLs follow ``SLACK_API_URL``: the consent page is on its origin
(``https://slack.com/oauth/v2/authorize`` for the default API URL, the local workspace's page when
it points there), and the token exchange goes through the app's ``AsyncWebClient``, whose base URL
is ``SLACK_API_URL`` (Bolt hands the app's client to the flow).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from slack_bolt.oauth.async_callback_options import AsyncCallbackOptions, AsyncFailureArgs, AsyncSuccessArgs
from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_bolt.response import BoltResponse
from slack_sdk.oauth.token_rotation.async_rotator import AsyncTokenRotator
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import ConfigError, Settings
from bot.engine.installed import Installed
from handlers.tokens import RotatingInstallationStore
from store.installations import RedisInstallationStore, RedisOAuthStateStore

INSTALL_PATH = "/slack/install"
REDIRECT_PATH = "/slack/oauth_redirect"
STATE_SECONDS = 600
AUTHORIZE_PATH = "/oauth/v2/authorize"


def authorize_url(slack_api_url: str) -> str:
    """Slack's consent page on the same origin as the Web API (``https://slack.com/api/`` → slack.com)."""
    parts = urlsplit(slack_api_url)
    if not parts.scheme or not parts.netloc:
        raise ConfigError(f"SLACK_API_URL: not an absolute URL: {slack_api_url!r}")
    return f"{parts.scheme}://{parts.netloc}{AUTHORIZE_PATH}"


def scopes_of(settings: Settings) -> list[str]:
    return [s.strip() for s in settings.slack_scopes.split(",") if s.strip()]


def rotating_installations(settings: Settings, redis: Any, client: AsyncWebClient,
                           clock: Callable[[], float]) -> RotatingInstallationStore:
    """The installation store, refreshing expiring bot tokens through ``client`` (``SLACK_API_URL``)."""
    rotator = AsyncTokenRotator(client_id=settings.slack_client_id or "", client=client,
                                client_secret=settings.slack_client_secret or "")
    return RotatingInstallationStore(redis, client_id=settings.slack_client_id or "", rotator=rotator, clock=clock)


def oauth_settings(settings: Settings, installations: RedisInstallationStore,
                   states: Callable[[], RedisOAuthStateStore], installed: Installed | None = None) -> AsyncOAuthSettings:
    """Bolt's OAuth settings over the stores ``bot/app.py`` built (``states()`` lasting ``STATE_SECONDS``, built
    once the settings are known to be complete: they are signed with the client secret).
    ``installed``: told at once of a workspace that installed the app (its waiting requests may settle)."""
    if not settings.slack_client_id or not settings.slack_client_secret:
        raise ConfigError("set both SLACK_CLIENT_ID and SLACK_CLIENT_SECRET for multi-workspace OAuth")
    return AsyncOAuthSettings(
        client_id=settings.slack_client_id,
        client_secret=settings.slack_client_secret,
        scopes=scopes_of(settings),
        user_scopes=[],
        installation_store=installations,
        state_store=states(),
        state_expiration_seconds=STATE_SECONDS,
        install_path=INSTALL_PATH,
        redirect_uri_path=REDIRECT_PATH,
        install_page_rendering_enabled=False,  # straight to Slack's consent page
        authorization_url=authorize_url(settings.slack_api_url),
        callback_options=None if installed is None else _telling(installed),
    )


def _telling(installed: Installed) -> AsyncCallbackOptions:
    """Bolt's own callback pages, after telling ``installed`` of the workspace (the store lifted its mark)."""

    async def success(args: AsyncSuccessArgs) -> BoltResponse:
        done = args.installation
        if done.team_id and not done.is_enterprise_install:
            await installed.installed_in(done.team_id)
        else:
            await installed.refresh()
        return await args.default.success(args)

    async def failure(args: AsyncFailureArgs) -> BoltResponse:
        return await args.default.failure(args)

    return AsyncCallbackOptions(success=success, failure=failure)
