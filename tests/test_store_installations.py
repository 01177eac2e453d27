"""Slack OAuth installation and state stores on a real Redis (store/installations.py)."""

from __future__ import annotations

import logging

import redis.asyncio as redis_asyncio
from aiohttp import web
from redis.crc import key_slot
from slack_bolt.authorization.async_authorize import AsyncInstallationStoreAuthorize
from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.oauth.installation_store.models.bot import Bot
from slack_sdk.oauth.installation_store.models.installation import Installation
from slack_sdk.oauth.state_store.async_state_store import AsyncOAuthStateStore
from slack_sdk.web.async_client import AsyncWebClient

from store.installations import USED_STATES_KEY, RedisInstallationStore, RedisOAuthStateStore


def _installation(
    user_id: str,
    *,
    team_id: str | None = "T1",
    enterprise_id: str | None = None,
    bot_token: str | None = "xoxb-1",
    installed_at: float = 1_700_000_000.0,
    is_enterprise_install: bool = False,
) -> Installation:
    return Installation(
        app_id="A1",
        enterprise_id=enterprise_id,
        team_id=team_id,
        team_name="Acme",
        bot_token=bot_token,
        bot_id="B1" if bot_token else None,
        bot_user_id="UBOT" if bot_token else None,
        bot_scopes="chat:write,commands",
        user_id=user_id,
        user_token=f"xoxp-{user_id}",
        user_scopes=["search:read"],
        is_enterprise_install=is_enterprise_install,
        installed_at=installed_at,
        custom_values={"plan": "pro"},
    )


async def test_implements_the_slack_sdk_interfaces(redis: redis_asyncio.Redis) -> None:
    assert isinstance(RedisInstallationStore(redis), AsyncInstallationStore)
    assert isinstance(RedisOAuthStateStore(redis, expiration_seconds=60, secret="s"), AsyncOAuthStateStore)


async def test_save_and_find_round_trip(redis: redis_asyncio.Redis) -> None:
    store = RedisInstallationStore(redis)
    saved = _installation("U1")
    await store.async_save(saved)

    found = await store.async_find_installation(enterprise_id=None, team_id="T1")
    assert found is not None
    assert found.to_dict() == saved.to_dict()
    assert found.bot_scopes == ["chat:write", "commands"]
    assert found.get_custom_value("plan") == "pro"

    bot = await store.async_find_bot(enterprise_id=None, team_id="T1")
    assert bot is not None
    assert (bot.bot_token, bot.bot_id, bot.bot_user_id, bot.installed_at) == (
        "xoxb-1",
        "B1",
        "UBOT",
        saved.installed_at,
    )

    assert await store.async_find_installation(enterprise_id=None, team_id="T2") is None
    assert await store.async_find_bot(enterprise_id=None, team_id="T2") is None


async def test_latest_installation_wins_and_users_are_found_with_the_latest_bot_token(
    redis: redis_asyncio.Redis,
) -> None:
    store = RedisInstallationStore(redis)
    await store.async_save(_installation("U1", bot_token="xoxb-old", installed_at=1_700_000_000.0))
    await store.async_save(_installation("U2", bot_token="xoxb-new", installed_at=1_700_000_100.0))

    latest = await store.async_find_installation(enterprise_id=None, team_id="T1")
    assert latest is not None and (latest.user_id, latest.user_token, latest.bot_token) == (
        "U2",
        "xoxp-U2",
        "xoxb-new",
    )

    first_user = await store.async_find_installation(enterprise_id=None, team_id="T1", user_id="U1")
    assert first_user is not None
    assert (first_user.user_id, first_user.user_token) == ("U1", "xoxp-U1")
    assert first_user.bot_token == "xoxb-new"  # the workspace's current bot token, not the stale one

    assert await store.async_find_installation(enterprise_id=None, team_id="T1", user_id="U9") is None
    bot = await store.async_find_bot(enterprise_id=None, team_id="T1")
    assert bot is not None and bot.bot_token == "xoxb-new"


async def test_save_bot_alone_updates_the_bot_seen_through_installations(redis: redis_asyncio.Redis) -> None:
    store = RedisInstallationStore(redis)
    await store.async_save(_installation("U1", bot_token="xoxb-1"))
    rotated = Bot(
        team_id="T1",
        bot_token="xoxb-rotated",
        bot_id="B1",
        bot_user_id="UBOT",
        bot_refresh_token="xoxe-1",
        bot_token_expires_in=3600,
        installed_at=1_700_000_000.0,
    )
    await store.async_save_bot(rotated)
    bot = await store.async_find_bot(enterprise_id=None, team_id="T1")
    assert bot is not None and bot.bot_token == "xoxb-rotated"
    assert bot.bot_token_expires_at == rotated.bot_token_expires_at
    found = await store.async_find_installation(enterprise_id=None, team_id="T1")
    assert found is not None and found.bot_token == "xoxb-rotated" and found.bot_refresh_token == "xoxe-1"


async def test_installation_without_bot_token_saves_no_bot(redis: redis_asyncio.Redis) -> None:
    store = RedisInstallationStore(redis)
    await store.async_save(_installation("U1", bot_token=None))
    assert await store.async_find_bot(enterprise_id=None, team_id="T1") is None
    found = await store.async_find_installation(enterprise_id=None, team_id="T1", user_id="U1")
    assert found is not None and found.user_token == "xoxp-U1" and found.bot_token is None


async def test_org_wide_install_is_found_from_any_workspace_of_the_org(redis: redis_asyncio.Redis) -> None:
    store = RedisInstallationStore(redis)
    await store.async_save(_installation("U1", enterprise_id="E1", team_id=None, is_enterprise_install=True))

    found = await store.async_find_installation(enterprise_id="E1", team_id="T7", is_enterprise_install=True)
    assert found is not None and found.is_enterprise_install and found.enterprise_id == "E1"
    bot = await store.async_find_bot(enterprise_id="E1", team_id="T7", is_enterprise_install=True)
    assert bot is not None and bot.bot_token == "xoxb-1"
    # Not an org-wide lookup: the workspace T7 itself has no installation.
    assert await store.async_find_installation(enterprise_id="E1", team_id="T7") is None


async def test_grid_workspace_installs_are_separate_from_plain_workspaces(redis: redis_asyncio.Redis) -> None:
    store = RedisInstallationStore(redis)
    await store.async_save(_installation("U1", enterprise_id="E1", team_id="T1", bot_token="xoxb-grid"))
    await store.async_save(_installation("U1", team_id="T1", bot_token="xoxb-plain"))
    grid = await store.async_find_bot(enterprise_id="E1", team_id="T1")
    plain = await store.async_find_bot(enterprise_id=None, team_id="T1")
    assert (grid.bot_token, plain.bot_token) == ("xoxb-grid", "xoxb-plain")


async def test_deleting_a_user_never_hands_out_their_token_again(redis: redis_asyncio.Redis) -> None:
    store = RedisInstallationStore(redis)
    await store.async_save(_installation("U1", installed_at=1_700_000_000.0))
    await store.async_save(_installation("U3", installed_at=1_700_000_050.0))
    await store.async_save(_installation("U2", installed_at=1_700_000_100.0))

    await store.async_delete_installation(enterprise_id=None, team_id="T1", user_id="U2")
    assert await store.async_find_installation(enterprise_id=None, team_id="T1", user_id="U2") is None
    latest = await store.async_find_installation(enterprise_id=None, team_id="T1")
    assert latest is not None and latest.user_id == "U3"  # the newest one left
    assert await store.async_find_bot(enterprise_id=None, team_id="T1") is not None

    # Deleting a user who is not the latest leaves the latest alone.
    await store.async_delete_installation(enterprise_id=None, team_id="T1", user_id="U1")
    latest = await store.async_find_installation(enterprise_id=None, team_id="T1")
    assert latest is not None and latest.user_id == "U3"

    await store.async_delete_installation(enterprise_id=None, team_id="T1", user_id="U3")
    assert await store.async_find_installation(enterprise_id=None, team_id="T1") is None


async def test_delete_all_installations_keeps_the_bot_then_delete_bot(redis: redis_asyncio.Redis) -> None:
    store = RedisInstallationStore(redis)
    await store.async_save(_installation("U1"))
    await store.async_save(_installation("U2"))
    await store.async_delete_installation(enterprise_id=None, team_id="T1")
    assert await store.async_find_installation(enterprise_id=None, team_id="T1") is None
    assert await store.async_find_installation(enterprise_id=None, team_id="T1", user_id="U1") is None
    assert await store.async_find_bot(enterprise_id=None, team_id="T1") is not None

    await store.async_delete_bot(enterprise_id=None, team_id="T1")
    assert await store.async_find_bot(enterprise_id=None, team_id="T1") is None


async def test_delete_all_forgets_the_workspace_only(redis: redis_asyncio.Redis) -> None:
    store = RedisInstallationStore(redis)
    await store.async_save(_installation("U1", team_id="T1"))
    await store.async_save(_installation("U1", team_id="T2"))
    await store.async_delete_all(enterprise_id=None, team_id="T1")
    assert await store.async_find_installation(enterprise_id=None, team_id="T1") is None
    assert await store.async_find_bot(enterprise_id=None, team_id="T1") is None
    assert await store.async_find_installation(enterprise_id=None, team_id="T2") is not None


async def test_client_ids_keep_apps_apart_and_keys_share_a_slot(redis: redis_asyncio.Redis) -> None:
    app_a = RedisInstallationStore(redis, client_id="111.aaa")
    app_b = RedisInstallationStore(redis, client_id="222.bbb")
    await app_a.async_save(_installation("U1"))
    assert await app_b.async_find_installation(enterprise_id=None, team_id="T1") is None
    assert "{inst:-:T1}" in app_a.key(None, "T1")
    assert key_slot(app_a.key(None, "T1").encode()) == key_slot(app_b.key(None, "T1").encode())


async def test_state_is_consumed_once(redis: redis_asyncio.Redis) -> None:
    states = RedisOAuthStateStore(redis, expiration_seconds=60, secret="s3cret")
    state = await states.async_issue()
    other = await states.async_issue()
    assert state != other and len(state) >= 32

    assert await states.async_consume(state) is True
    assert await states.async_consume(state) is False
    assert await states.async_consume("never-issued") is False
    assert await states.async_consume("") is False
    # Another replica (the same app: the same client secret) takes the same states; another app's are refused.
    assert await RedisOAuthStateStore(redis, expiration_seconds=60, secret="other").async_consume(other) is False
    assert await RedisOAuthStateStore(redis, expiration_seconds=60, secret="s3cret").async_consume(other) is True


async def test_state_expires(redis: redis_asyncio.Redis) -> None:
    now = [1_900_000_000.0]
    states = RedisOAuthStateStore(redis, expiration_seconds=600, secret="s3cret", clock=lambda: now[0])
    state = await states.async_issue()
    now[0] += 600
    assert await states.async_consume(state) is False


async def test_a_state_changed_in_any_part_is_refused(redis: redis_asyncio.Redis) -> None:
    states = RedisOAuthStateStore(redis, expiration_seconds=600, secret="s3cret")
    nonce, expiry, mac = (await states.async_issue()).split(".")
    assert await states.async_consume(f"{nonce}.{int(expiry) + 3600}.{mac}") is False  # a longer life
    assert await states.async_consume(f"x{nonce}.{expiry}.{mac}") is False
    other = "1" if mac[-1] == "0" else "0"  # a last character that differs from the real one, whatever it is
    assert await states.async_consume(f"{nonce}.{expiry}.{mac[:-1]}{other}") is False
    assert await states.async_consume(f"{nonce}.{expiry}.{mac}") is True


async def test_used_states_are_remembered_within_a_cap(redis: redis_asyncio.Redis) -> None:
    states = RedisOAuthStateStore(redis, expiration_seconds=600, secret="s3cret", max_used=5)
    for _ in range(20):
        assert await states.async_consume(await states.async_issue()) is True
    assert await redis.zcard(USED_STATES_KEY) == 5
    assert 0 < await redis.ttl(USED_STATES_KEY) <= 600
    fresh = await states.async_issue()
    assert await states.async_consume(fresh) is True and await states.async_consume(fresh) is False


async def _auth_test_server(seen_tokens: list[str]) -> tuple[web.AppRunner, str]:
    """A local stand-in for Slack's auth.test, answering in Slack's wire format."""

    async def auth_test(request: web.Request) -> web.Response:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        seen_tokens.append(token)
        user_id = "UBOT" if token.startswith("xoxb-") else token.removeprefix("xoxp-")
        body = {
            "ok": True,
            "url": "https://acme.slack.com/",
            "team": "Acme",
            "user": "bot" if user_id == "UBOT" else "person",
            "team_id": "T1",
            "user_id": user_id,
            "bot_id": "B1" if user_id == "UBOT" else None,
            "is_enterprise_install": False,
        }
        return web.json_response(body)

    app = web.Application()
    app.router.add_post("/api/auth.test", auth_test)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}/api/"


async def test_bolt_authorizes_requests_from_the_stored_installation(redis: redis_asyncio.Redis) -> None:
    store = RedisInstallationStore(redis)
    await store.async_save(_installation("U1", bot_token="xoxb-current"))
    seen: list[str] = []
    runner, base_url = await _auth_test_server(seen)
    try:
        authorize = AsyncInstallationStoreAuthorize(
            logger=logging.getLogger("test"), installation_store=store
        )
        context = AsyncBoltContext()
        context["client"] = AsyncWebClient(base_url=base_url)
        result = await authorize(context=context, enterprise_id=None, team_id="T1", user_id="U1")
        assert result is not None
        assert (result.bot_token, result.user_token, result.bot_user_id) == (
            "xoxb-current",
            "xoxp-U1",
            "UBOT",
        )

        # A user who never installed gets the bot token only.
        other = await authorize(context=context, enterprise_id=None, team_id="T1", user_id="U2")
        assert other is not None and other.bot_token == "xoxb-current" and other.user_token is None

        # After the app is uninstalled Bolt finds nothing to authorize with.
        await store.async_delete_all(enterprise_id=None, team_id="T1")
        assert await authorize(context=context, enterprise_id=None, team_id="T1", user_id="U1") is None
    finally:
        await runner.cleanup()
    assert "xoxb-current" in seen


async def test_a_new_installation_lifts_the_uninstall_mark_of_its_workspace_or_its_orgs(
    redis: redis_asyncio.Redis,
) -> None:
    from store.install_marks import InstallMarks

    store, marks = RedisInstallationStore(redis), InstallMarks(redis)
    await store.async_remember_workspace("T2", "E1", True)
    await store.async_remember_workspace("T3", "E9", True)
    await marks.mark_uninstalled(["T1", "T2", "T3"])
    assert await marks.uninstalled() == {"T1", "T2", "T3"}
    await store.async_save(_installation("U1"))
    assert await marks.uninstalled() == {"T2", "T3"}
    await store.async_save(_installation("U2", team_id=None, enterprise_id="E1", is_enterprise_install=True))
    assert await marks.uninstalled() == {"T3"}  # the org's workspaces, not another org's
