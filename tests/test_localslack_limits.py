"""LocalSlack refuses what Slack refuses: organic rate limits and missing scopes, seen through slack_sdk's
AsyncWebClient (the bot's client) as Slack's errors.

Sources are in docs/LOCALSLACK.md; the per-method table is ``localslack/methods.py``.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from localslack import ALICE, BOB, BOT_TOKEN, FINANCE, GENERAL, LocalSlack, RateLimits
from localslack import methods as slack_methods
from localslack.manifest import MANIFEST_PATH

SECRET = "limits-test-secret"
ROOT = Path(__file__).resolve().parents[1]
REFERENCE = Path("/work/shared/reference/slack/web-api.openapi.json")


@pytest.fixture
async def slack() -> AsyncIterator[LocalSlack]:
    async with LocalSlack(bot_url=None, signing_secret=SECRET) as workspace:
        yield workspace


@pytest.fixture
def client(slack: LocalSlack) -> AsyncWebClient:
    return AsyncWebClient(base_url=slack.api_url, token=BOT_TOKEN)


async def slack_error(call) -> SlackApiError:  # noqa: ANN001
    with pytest.raises(SlackApiError) as caught:
        await call
    return caught.value


def assert_rate_limited(error: SlackApiError, retry_after: int | None = None) -> None:
    assert error.response.status_code == 429
    assert error.response["error"] == "ratelimited"
    assert int(error.response.headers["Retry-After"]) >= 1
    if retry_after is not None:
        assert int(error.response.headers["Retry-After"]) == retry_after


# ---- organic rate limits ------------------------------------------------------------------------------


async def test_a_flood_of_posts_to_one_channel_is_refused_with_429_and_retry_after(
    client: AsyncWebClient, slack: LocalSlack
) -> None:
    """chat.postMessage: about one message a second per channel, short bursts tolerated."""
    burst = int(slack.rate_limits.channel_posts.burst)
    for i in range(burst):
        await client.chat_postMessage(channel=GENERAL, text=f"burst {i}")
    error = await slack_error(client.chat_postMessage(channel=GENERAL, text="one too many"))
    assert_rate_limited(error, retry_after=1)
    assert len(slack.messages(GENERAL)) == burst  # the refused post is not in the channel
    assert (await client.chat_postMessage(channel=FINANCE, text="another channel"))["ok"]  # per channel
    await asyncio.sleep(1.05)  # one second later one more fits
    assert (await client.chat_postMessage(channel=GENERAL, text="after the wait"))["ok"]


async def test_tier_limits_count_per_method_and_workspace(client: AsyncWebClient, slack: LocalSlack) -> None:
    """users.list is Tier 2 (20 a minute), users.info Tier 4 (100 a minute): N pass, N+1 waits."""
    # Time stands still here: on a loaded machine 99 calls can take long enough for a token to come back.
    slack.rate_limits.clock = lambda: 1000.0
    for _ in range(20):
        await client.users_list()
    error = await slack_error(client.users_list())
    assert_rate_limited(error, retry_after=3)  # 20 a minute: the next token in 3 s
    assert (await client.users_info(user=ALICE))["ok"]  # another method has its own bucket

    for _ in range(99):
        await client.users_info(user=BOB)
    assert_rate_limited(await slack_error(client.users_info(user=BOB)))

    other = slack.add_team("T0BETA", "Beta Inc", "xoxb-beta")
    beta = AsyncWebClient(base_url=slack.api_url, token="xoxb-beta")
    assert (await beta.users_info(user=other.bot_user_id))["ok"]  # another workspace is not affected
    assert [m for m, _, _ in slack.rate_limits.limited] == ["users.list", "users.info"]


async def test_tiers_in_use(slack: LocalSlack) -> None:
    """What the bot calls, by Slack's published tier (docs.slack.dev method pages)."""
    tiers = {m: slack_methods.spec(m).tier for m in ("chat.update", "chat.postEphemeral", "views.open",
                                                       "users.info", "conversations.replies", "users.list")}
    assert tiers == {"chat.update": 3, "chat.postEphemeral": 4, "views.open": 4, "users.info": 4,
                     "conversations.replies": 3, "users.list": 2}
    assert slack.rate_limits.tiers[3].burst == 50 and slack.rate_limits.tiers[3].per_second == 50 / 60


async def test_limits_can_be_tightened_switched_off_and_are_on_by_default() -> None:
    async with LocalSlack(bot_url=None, signing_secret=SECRET) as slack:
        assert slack.rate_limits.enabled is True
    async with LocalSlack(bot_url=None, signing_secret=SECRET) as slack:
        tight = AsyncWebClient(base_url=slack.api_url, token=BOT_TOKEN)
        posted = await tight.chat_postMessage(channel=GENERAL, text="card")
        slack.rate_limits.limit("chat.update", per_minute=2)
        await tight.chat_update(channel=GENERAL, ts=posted["ts"], text="one")
        await tight.chat_update(channel=GENERAL, ts=posted["ts"], text="two")
        assert_rate_limited(await slack_error(tight.chat_update(channel=GENERAL, ts=posted["ts"], text="3")), 30)
        slack.reset_rate_limits()
        assert (await tight.chat_update(channel=GENERAL, ts=posted["ts"], text="three"))["ok"]

        slack.rate_limits.enabled = False
        for i in range(30):
            await tight.chat_postMessage(channel=GENERAL, text=f"flood {i}")
    async with LocalSlack(bot_url=None, signing_secret=SECRET, rate_limits=False) as slack:
        flood = AsyncWebClient(base_url=slack.api_url, token=BOT_TOKEN)
        await asyncio.gather(*(flood.chat_postMessage(channel=GENERAL, text=str(i)) for i in range(20)))
        assert len(slack.messages(GENERAL)) == 20


async def test_a_client_that_honours_retry_after_gets_through(slack: LocalSlack) -> None:
    """slack_sdk's RateLimitErrorRetryHandler (what the bot's clients use) waits Retry-After and succeeds."""
    slack.rate_limits.limit_channel_posts(per_second=1.0, burst=1)
    patient = AsyncWebClient(
        base_url=slack.api_url,
        token=BOT_TOKEN,
        retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=2)],
    )
    started = time.monotonic()
    await patient.chat_postMessage(channel=GENERAL, text="first")
    await patient.chat_postMessage(channel=GENERAL, text="second")  # 429, waits about a second, posts
    assert time.monotonic() - started >= 0.9
    assert [m.text for m in slack.messages(GENERAL)] == ["first", "second"]
    assert [c.status for c in slack.calls_to("chat.postMessage")] == [200, 429, 200]


def test_buckets_refill_at_the_tier_rate() -> None:
    now = [0.0]
    limits = RateLimits(clock=lambda: now[0])
    assert all(limits.check("conversations.list", "T1") is None for _ in range(20))
    assert limits.check("conversations.list", "T1") == 3
    now[0] += 3.0
    assert limits.check("conversations.list", "T1") is None
    assert limits.check("auth.test", "T1") is None  # "special" without a published number: not limited
    assert limits.check("conversations.list", "T2") is None  # per workspace


# ---- missing_scope ------------------------------------------------------------------------------------


def manifest_scopes() -> list[str]:
    return yaml.safe_load(MANIFEST_PATH.read_text())["oauth_config"]["scopes"]["bot"]


async def test_the_bot_token_has_exactly_the_manifests_scopes(client: AsyncWebClient) -> None:
    response = await client.auth_test()
    assert response.headers["X-OAuth-Scopes"].split(",") == manifest_scopes()
    from bot.config import BOT_SCOPES  # what the bot asks for at install (held equal in test_manifest.py)

    assert sorted(BOT_SCOPES) == sorted(manifest_scopes())


async def test_a_method_whose_scope_the_manifest_lacks_is_refused(client: AsyncWebClient) -> None:
    assert "reactions:write" not in manifest_scopes()
    posted = await client.chat_postMessage(channel=GENERAL, text="react to me")
    error = await slack_error(client.reactions_add(channel=GENERAL, timestamp=posted["ts"], name="eyes"))
    assert error.response["error"] == "missing_scope"
    assert error.response["needed"] == "reactions:write"
    assert error.response["provided"].split(",") == manifest_scopes()
    for call, needed in (
        (client.team_info(), "team:read"),
        (client.conversations_info(channel=GENERAL), "channels:read"),
        (client.conversations_list(), "channels:read"),
    ):
        error = await slack_error(call)
        assert (error.response["error"], error.response["needed"]) == ("missing_scope", needed)


async def test_conversation_methods_need_the_scope_of_the_conversations_type() -> None:
    async with LocalSlack(bot_url=None, signing_secret=SECRET, scopes=["chat:write", "im:write"]) as slack:
        slack.add_channel("C0SECRET", "secret", members=[ALICE], is_private=True)
        client = AsyncWebClient(base_url=slack.api_url, token=BOT_TOKEN)
        dm = (await client.conversations_open(users=ALICE))["channel"]["id"]
        for channel, needed in ((GENERAL, "channels:history"), ("C0SECRET", "groups:history"), (dm, "im:history")):
            error = await slack_error(client.conversations_history(channel=channel))
            assert (error.response["error"], error.response["needed"]) == ("missing_scope", needed)
            posted = await client.chat_postMessage(channel=channel, text="x")
            error = await slack_error(client.conversations_replies(channel=channel, ts=posted["ts"]))
            assert error.response["needed"] == needed
        error = await slack_error(client.users_info(user=ALICE))
        assert (error.response["error"], error.response["needed"]) == ("missing_scope", "users:read")
    async with LocalSlack(bot_url=None, signing_secret=SECRET, scopes=["chat:write"]) as slack:
        client = AsyncWebClient(base_url=slack.api_url, token=BOT_TOKEN)
        error = await slack_error(client.conversations_open(users=ALICE))
        assert (error.response["error"], error.response["needed"]) == ("missing_scope", "im:write")


async def test_an_oauth_install_has_the_scopes_it_asked_for(slack: LocalSlack) -> None:
    from localslack.server import DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET

    code = slack.issue_oauth_code("T0NEW", scopes=["chat:write"])
    installed = await AsyncWebClient(base_url=slack.api_url).oauth_v2_access(
        client_id=DEFAULT_CLIENT_ID, client_secret=DEFAULT_CLIENT_SECRET, code=code
    )
    assert installed["scope"] == "chat:write"
    token = AsyncWebClient(base_url=slack.api_url, token=installed["access_token"])
    error = await slack_error(token.users_info(user=installed["bot_user_id"]))
    assert (error.response["error"], error.response["needed"]) == ("missing_scope", "users:read")


async def test_every_method_the_bot_calls_is_granted_by_the_manifest() -> None:
    """LocalSlack's own reading of the method pages, applied to the code: nothing the bot calls would be
    refused for a missing scope in any kind of conversation."""
    code = "\n".join(p.read_text() for d in ("bot", "handlers", "blocks", "store") for p in (ROOT / d).rglob("*.py"))
    # slack_sdk names a method with "_" for each ".": apps_connections_open is apps.connections.open
    called = {name.replace("_", ".") for name in re.findall(r"\.((?:chat|users|conversations|views|reactions|team"
                                                                  r"|bots|auth|apps)_\w+)\(", code)}
    assert "chat.postMessage" in called
    granted = set(manifest_scopes())
    for method in sorted(called):
        assert method in slack_methods.METHODS, f"{method}: LocalSlack does not serve it"
        spec = slack_methods.spec(method)
        kinds = ("channel", "group", "im", "mpim") if spec.channel_scope else (None,)
        if method == "conversations.open":
            kinds = ("im",)  # the bot opens DMs with one person
        for kind in kinds:
            needed = spec.scope_for(kind)
            assert needed is None or needed in granted, f"{method} in a {kind} needs {needed}"


@pytest.mark.skipif(not REFERENCE.exists(), reason="Slack's Web API description is not on this machine")
def test_the_scope_table_matches_slacks_web_api_description() -> None:
    """localslack/methods.py against the OpenAPI description's "Requires scope: `…`" per method."""
    paths = json.loads(REFERENCE.read_text())["paths"]
    umbrella = {"conversations:history": "history", "conversations:read": "read", "conversations:write": "write"}
    for method, spec in slack_methods.METHODS.items():
        operations = paths.get(f"/{method}")
        if not operations:
            continue
        token = [p for op in operations.values() for p in op.get("parameters", []) if p["name"] == "token"]
        if not token:
            continue
        documented = re.search(r"Requires scope: `([^`]+)`", token[0]["description"]).group(1)  # type: ignore[union-attr]
        if documented in umbrella:
            assert spec.channel_scope == umbrella[documented], method
        elif documented == "none":
            assert spec.scopes == () and spec.channel_scope is None, method
        else:
            assert spec.scopes == (documented,), method
