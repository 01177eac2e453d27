"""Token rotation end to end: with rotation on, Slack's access tokens expire after 12 hours. Whatever the
app sends on its own — a scheduled turn after a quiet night, its posts, App Home, user lookups — refreshes
the workspace's token first (``oauth.v2.access`` with ``grant_type=refresh_token``), not only what follows
a request from Slack. Slack's clock and the app's move forward together instead of waiting."""

from __future__ import annotations

import asyncio
import time

from slack_sdk.web.async_client import AsyncWebClient

from bot.config import Settings
from bot.models.scripted import ScriptedModel, say
from handlers.routes.oauth import rotating_installations
from handlers.tokens import RotatingInstallationStore
from localslack.seed import ALICE, CAROL, GENERAL, TEAM_ID
from localslack.server import DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET
from store.installations import RedisInstallationStore
from tests.e2e.test_governance import ALL_TOOLS, find, open_home
from tests.e2e.test_oauth import OAUTH, install_through_oauth
from tests.e2e.test_schedules import later, roots, schedule

HOURS = 3600


def quiet_for(local_slack, bot, seconds: float) -> None:  # noqa: ANN001
    """Time passes on both sides: Slack's tokens age, and the app's timers come due."""
    local_slack.ws.rotation.advance(seconds)
    later(bot, seconds)


async def _installed_token(redis) -> tuple[str, str | None, int | None]:  # noqa: ANN001
    bot = await RedisInstallationStore(redis, client_id=DEFAULT_CLIENT_ID).async_find_bot(
        enterprise_id=None, team_id=TEAM_ID
    )
    assert bot is not None
    return bot.bot_token, bot.bot_refresh_token, bot.bot_token_expires_at


async def test_a_turn_a_schedule_starts_after_a_quiet_night_refreshes_the_token_first(
    local_slack, start_app, redis
):
    local_slack.ws.rotation.enabled = True
    bot = await start_app(ScriptedModel([say("Good morning: all green.")]), [], **OAUTH)
    await install_through_oauth(local_slack, bot, TEAM_ID, ALICE)
    first, refresh, expires_at = await _installed_token(redis)
    assert refresh and expires_at, "the install's token expires and can be refreshed"
    assert (await schedule(local_slack, "schedule in 13h say good morning")).startswith(
        ":alarm_clock: Scheduled."
    )

    quiet_for(local_slack, bot, 13 * HOURS)  # no request from Slack all night: the token expired
    await bot.runtime.recover()  # the sweep starts the scheduled turn
    [root] = await local_slack.wait_for(lambda: roots(local_slack) or None)
    await local_slack.wait_for_message(GENERAL, thread_ts=root.ts, predicate=lambda m: "all green" in m.text)

    [refreshed] = local_slack.calls_to("oauth.v2.access")[1:]  # after the install's code exchange
    assert refreshed.ok and refreshed.params.get("grant_type") == "refresh_token"
    now_token, _, now_expires_at = await _installed_token(redis)
    assert now_token != first and now_expires_at and now_expires_at > expires_at, "the new token is stored"
    posts = [c for c in local_slack.calls_to("chat.postMessage") if c.params.get("channel") == GENERAL]
    assert posts and all(c.ok for c in posts) and {c.token for c in posts} == {now_token}
    assert not [c for c in local_slack.calls if c.response.get("error") == "token_expired"]


async def test_app_home_and_admin_lookups_after_a_quiet_night_use_a_refreshed_token(
    local_slack, start_app, redis
):
    local_slack.ws.rotation.enabled = True
    bot = await start_app(ScriptedModel([]), ALL_TOOLS, **OAUTH)
    await install_through_oauth(local_slack, bot, TEAM_ID, ALICE)
    first, _, _ = await _installed_token(redis)
    quiet_for(local_slack, bot, 13 * HOURS)

    home = await open_home(local_slack, CAROL)  # an admin's App Home: users.info, then views.publish
    assert find(home.blocks, "approvers:edit:pay_vendor"), "Slack said carol is an admin, with a fresh token"
    used = {c.token for c in local_slack.calls if c.method in ("users.info", "views.publish")}
    assert used and first not in used
    assert not [c for c in local_slack.calls if c.response.get("error") == "token_expired"]


async def test_two_replicas_due_at_once_refresh_once_and_both_get_the_new_token(
    local_slack, start_app, redis
):
    """Slack uses a refresh token up: the replica that refreshes second is refused, and takes the token the
    first one stored instead of failing."""
    local_slack.ws.rotation.enabled = True
    bot = await start_app(ScriptedModel([]), [], **OAUTH)
    await install_through_oauth(local_slack, bot, TEAM_ID, ALICE)
    first, _, _ = await _installed_token(redis)
    local_slack.ws.rotation.advance(11 * HOURS)  # within two hours of expiry: due, not yet expired
    ahead = time.time() + 11 * HOURS
    replicas = [_replica(redis, local_slack, lambda: ahead) for _ in range(2)]
    holds = [local_slack.hold_next("oauth.v2.access") for _ in replicas]
    lookups = [asyncio.create_task(r.async_find_bot_for_workspace(TEAM_ID)) for r in replicas]
    for hold in holds:
        await hold.reached.wait()
    for hold in holds:  # one refresh is answered, then the other
        hold.release()
        await asyncio.sleep(0.05)
    found = await asyncio.gather(*lookups)

    tokens = {b.bot_token for b in found if b is not None}
    assert len(tokens) == 1 and first not in tokens, tokens
    refreshes = [
        c for c in local_slack.calls_to("oauth.v2.access") if c.params.get("grant_type") == "refresh_token"
    ]
    assert sorted(c.response.get("error", "ok") for c in refreshes) == ["invalid_refresh_token", "ok"]
    assert (await _installed_token(redis))[0] in tokens
    client = AsyncWebClient(base_url=local_slack.api_url, token=tokens.pop())
    assert (await client.chat_postMessage(channel=GENERAL, text="both replicas post"))["ok"]


def _replica(redis, local_slack, clock) -> RotatingInstallationStore:  # noqa: ANN001
    return rotating_installations(
        _settings(local_slack), redis, AsyncWebClient(base_url=local_slack.api_url), clock
    )


def _settings(local_slack) -> Settings:  # noqa: ANN001
    return Settings(
        _env_file=None,
        SLACK_CLIENT_ID=DEFAULT_CLIENT_ID,
        SLACK_CLIENT_SECRET=DEFAULT_CLIENT_SECRET,
        SLACK_SIGNING_SECRET="x",
        SLACK_API_URL=local_slack.api_url,
    )
