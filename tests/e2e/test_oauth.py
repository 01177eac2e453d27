"""Multi-workspace install: /slack/install → Slack's consent page → /slack/oauth_redirect → the team's token is used."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import parse_qs, urlsplit

import aiohttp
from slack_sdk.oauth.installation_store.models.installation import Installation

from bot.models.scripted import ScriptedModel, say
from handlers.routes.oauth import authorize_url
from localslack.seed import ALICE, BOT_TOKEN, BOT_USER_ID, GENERAL, TEAM_ID
from localslack.server import DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET
from store.installations import RedisInstallationStore
from store.slack_events import SlackEvents

NEW_TEAM, NEW_TOKEN, NEWBIE, NEW_CHANNEL = "T0NEW", "xoxb-new-co-token", "U0NEWBIE", "C0NEWGEN"
OAUTH = {"SLACK_BOT_TOKEN": None, "SLACK_CLIENT_ID": DEFAULT_CLIENT_ID, "SLACK_CLIENT_SECRET": DEFAULT_CLIENT_SECRET}


def test_authorize_page_follows_the_api_origin():
    assert authorize_url("https://slack.com/api/") == "https://slack.com/oauth/v2/authorize"
    assert authorize_url("http://127.0.0.1:4000/api/") == "http://127.0.0.1:4000/oauth/v2/authorize"


async def test_install_stores_the_installation_and_the_next_event_uses_its_token(local_slack, start_app, redis):
    local_slack.add_team(NEW_TEAM, "New Co", NEW_TOKEN)  # Slack's side: the workspace that will install us
    local_slack.add_user(NEWBIE, "newbie", team_id=NEW_TEAM)
    local_slack.add_channel(NEW_CHANNEL, "general", team_id=NEW_TEAM, members=[NEWBIE])
    bot = await start_app(ScriptedModel([say("hello from the new workspace")]), [], **OAUTH)
    store = RedisInstallationStore(redis, client_id=DEFAULT_CLIENT_ID)
    assert await store.async_find_bot(enterprise_id=None, team_id=NEW_TEAM) is None

    async with aiohttp.ClientSession() as browser:
        async with browser.get(f"{bot.url}/slack/install", allow_redirects=False) as install:
            assert install.status == 302
            location = install.headers["Location"]
            # Bolt's state cookie is Secure; a browser on the https deployment sends it back
            cookie = install.cookies["slack-app-oauth-state"]
        assert location.startswith(local_slack.oauth_authorize_url + "?")
        query = parse_qs(urlsplit(location).query)
        assert query["client_id"] == [DEFAULT_CLIENT_ID] and "chat:write" in query["scope"][0].split(",")
        async with browser.get(location) as consent:  # the page people see on (local) Slack
            assert consent.status == 200 and "Allow" in await consent.text()

        code = local_slack.issue_oauth_code(NEW_TEAM, user_id=NEWBIE)
        callback = f"{bot.url}/slack/oauth_redirect?code={code}&state={query['state'][0]}"
        headers = {"Cookie": f"{cookie.key}={cookie.value}"}
        async with browser.get(callback, headers=headers, allow_redirects=False) as done:
            assert done.status == 200, await done.text()

        # a state is good once: replaying the callback exchanges nothing more
        async with browser.get(callback, headers=headers, allow_redirects=False) as replay:
            assert replay.status >= 400

    [exchange] = local_slack.calls_to("oauth.v2.access")
    assert exchange.ok, "the code was exchanged through SLACK_API_URL"
    bot_record = await store.async_find_bot(enterprise_id=None, team_id=NEW_TEAM)
    assert bot_record is not None and bot_record.bot_token == NEW_TOKEN

    ts, deliveries = await local_slack.post_message(NEWBIE, NEW_CHANNEL, "<@U0NEWBOT> hi")
    assert all(d.status == 200 for d in deliveries), deliveries
    reply = await local_slack.wait_for_message(
        NEW_CHANNEL, thread_ts=ts, predicate=lambda m: "hello from the new workspace" in m.text)
    assert reply.team == NEW_TEAM
    posts = [c for c in local_slack.calls_to("chat.postMessage") if c.params.get("channel") == NEW_CHANNEL]
    assert posts and {c.token for c in posts} == {NEW_TOKEN}


async def test_install_with_an_unknown_state_stores_nothing(local_slack, start_app, redis):
    bot = await start_app(ScriptedModel([]), [], **OAUTH)
    code = local_slack.issue_oauth_code(NEW_TEAM)
    async with aiohttp.ClientSession() as browser:
        async with browser.get(f"{bot.url}/slack/oauth_redirect?code={code}&state=forged") as done:
            assert done.status >= 400
    assert local_slack.calls_to("oauth.v2.access") == []
    store = RedisInstallationStore(redis, client_id=DEFAULT_CLIENT_ID)
    assert await store.async_find_bot(enterprise_id=None, team_id=NEW_TEAM) is None


async def install_through_oauth(local_slack, bot, team: str = NEW_TEAM, user: str = NEWBIE) -> None:
    """The consent dance of the test above, condensed: the new workspace (or ``team``) installs the app."""
    async with aiohttp.ClientSession() as browser:
        async with browser.get(f"{bot.url}/slack/install", allow_redirects=False) as install:
            location, cookie = install.headers["Location"], install.cookies["slack-app-oauth-state"]
        state = parse_qs(urlsplit(location).query)["state"][0]
        code = local_slack.issue_oauth_code(team, user_id=user)
        async with browser.get(f"{bot.url}/slack/oauth_redirect?code={code}&state={state}",
                               headers={"Cookie": f"{cookie.key}={cookie.value}"}) as done:
            assert done.status == 200, await done.text()


async def send_event(local_slack, event: dict, *, event_id: str | None = None, retry: int = 0) -> int:
    """Deliver ``event`` to the bot as Slack does (``retry``: Slack's redelivery number, 0 for the first)."""
    envelope = {"type": "event_callback", "team_id": NEW_TEAM, "api_app_id": "A0LOCAL",
                "event_id": event_id or f"Ev{event['type']}", "event_time": 1, "event": event,
                "authorizations": [{"team_id": NEW_TEAM, "user_id": "U0NEWBOT", "is_bot": True,
                                    "enterprise_id": None, "is_enterprise_install": False}]}
    body = json.dumps(envelope).encode()
    retried = {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"} if retry else {}
    result = await local_slack.deliver_raw(body, {"Content-Type": "application/json", **local_slack.sign(body),
                                                  **retried})
    return result.status


async def test_uninstall_removes_the_installation_and_says_so(local_slack, start_app, redis, caplog):
    local_slack.add_team(NEW_TEAM, "New Co", NEW_TOKEN)
    local_slack.add_user(NEWBIE, "newbie", team_id=NEW_TEAM)
    bot = await start_app(ScriptedModel([]), [], **OAUTH)
    await install_through_oauth(local_slack, bot)
    store = RedisInstallationStore(redis, client_id=DEFAULT_CLIENT_ID)
    assert await store.async_find_bot(enterprise_id=None, team_id=NEW_TEAM) is not None

    assert await send_event(local_slack, {"type": "app_uninstalled"}) == 200
    assert await store.async_find_bot(enterprise_id=None, team_id=NEW_TEAM) is None
    assert await store.async_find_installation(enterprise_id=None, team_id=NEW_TEAM) is None
    assert any("uninstalled from workspace T0NEW" in r.getMessage() for r in caplog.records)


async def test_a_redelivered_uninstall_keeps_an_installation_made_again_since(local_slack, start_app, redis):
    """The workspace uninstalls the app and installs it again at once; Slack redelivers the
    ``app_uninstalled`` it did not see answered in time (same event_id, ``X-Slack-Retry-Num``). The new
    installation stays."""
    local_slack.add_team(NEW_TEAM, "New Co", NEW_TOKEN)
    local_slack.add_user(NEWBIE, "newbie", team_id=NEW_TEAM)
    bot = await start_app(ScriptedModel([]), [], **OAUTH)
    await install_through_oauth(local_slack, bot)
    store = RedisInstallationStore(redis, client_id=DEFAULT_CLIENT_ID)
    revoked, uninstalled = await local_slack.uninstall(NEW_TEAM)
    assert (revoked.status, uninstalled.status) == (200, 200)
    assert await store.async_find_bot(enterprise_id=None, team_id=NEW_TEAM) is None
    await install_through_oauth(local_slack, bot)
    for delivered in (revoked, uninstalled):
        assert (await local_slack.redeliver(delivered)).status == 200
    assert await store.async_find_bot(enterprise_id=None, team_id=NEW_TEAM) is not None


async def test_an_uninstall_whose_first_delivery_died_before_acting_is_acted_on_by_slacks_retry(
        local_slack, start_app, redis):
    """A replica took ``app_uninstalled`` and was killed between noting the event and forgetting the
    installation: Slack saw no 200 and retries. A retry while the dead one's claim stands is answered 503
    (Slack retries again, a minute later); the one after it acts. Before, every retry was answered 200 and
    ignored, and the workspace that removed the app stayed installed."""
    local_slack.add_team(NEW_TEAM, "New Co", NEW_TOKEN)
    local_slack.add_user(NEWBIE, "newbie", team_id=NEW_TEAM)
    bot = await start_app(ScriptedModel([]), [], **OAUTH)
    await install_through_oauth(local_slack, bot)
    store = RedisInstallationStore(redis, client_id=DEFAULT_CLIENT_ID)
    # what the killed replica left: its claim of the event (it lapses as the bot's own do, here in a second)
    assert await SlackEvents(redis, acting_s=1.0).claim("EvGONE1") == "act"

    assert await send_event(local_slack, {"type": "app_uninstalled"}, event_id="EvGONE1", retry=1) == 503
    assert await store.async_find_bot(enterprise_id=None, team_id=NEW_TEAM) is not None  # not acted on twice
    await asyncio.sleep(1.2)
    assert await send_event(local_slack, {"type": "app_uninstalled"}, event_id="EvGONE1", retry=2) == 200
    assert await store.async_find_bot(enterprise_id=None, team_id=NEW_TEAM) is None
    assert bot.runtime.installed.known_uninstalled(NEW_TEAM)
    # and once acted on, a later redelivery changes nothing, as before
    await install_through_oauth(local_slack, bot)
    assert await send_event(local_slack, {"type": "app_uninstalled"}, event_id="EvGONE1", retry=3) == 200
    assert await store.async_find_bot(enterprise_id=None, team_id=NEW_TEAM) is not None


async def test_a_revoked_bot_token_is_forgotten(local_slack, start_app, redis, caplog):
    local_slack.add_team(NEW_TEAM, "New Co", NEW_TOKEN)
    local_slack.add_user(NEWBIE, "newbie", team_id=NEW_TEAM)
    bot = await start_app(ScriptedModel([]), [], **OAUTH)
    await install_through_oauth(local_slack, bot)
    store = RedisInstallationStore(redis, client_id=DEFAULT_CLIENT_ID)
    assert await send_event(local_slack, {"type": "tokens_revoked", "tokens": {"bot": ["U0NEWBOT"]}}) == 200
    assert await store.async_find_bot(enterprise_id=None, team_id=NEW_TEAM) is None
    assert any("revoked tokens of workspace T0NEW" in r.getMessage() for r in caplog.records)


async def test_an_org_wide_install_answers_in_every_workspace_of_the_org(local_slack, start_app, redis):
    """Enterprise Grid: the installation is stored under the org (no team); cards and replies for a
    workspace of the org must find it the way Bolt's authorize does, not by the team alone."""
    bot = await start_app(ScriptedModel([say("hello from the org install")]), [], **OAUTH)
    store = RedisInstallationStore(redis, client_id=DEFAULT_CLIENT_ID)
    await store.async_save(Installation(
        app_id="A0LOCAL", enterprise_id="E0ORG", team_id=None, is_enterprise_install=True, user_id=ALICE,
        bot_token=BOT_TOKEN, bot_id="B0LOCAL", bot_user_id=BOT_USER_ID, bot_scopes=["chat:write"]))
    envelope = {
        "type": "event_callback", "team_id": TEAM_ID, "enterprise_id": "E0ORG", "api_app_id": "A0LOCAL",
        "event_id": "Ev0ORGWIDE", "event_time": 1, "is_ext_shared_channel": False,
        "authorizations": [{"enterprise_id": "E0ORG", "team_id": None, "user_id": BOT_USER_ID, "is_bot": True,
                            "is_enterprise_install": True}],
        "event": {"type": "app_mention", "user": ALICE, "text": f"<@{BOT_USER_ID}> hi", "ts": "1767225600.000100",
                  "channel": GENERAL, "event_ts": "1767225600.000100", "team": TEAM_ID},
    }
    body = json.dumps(envelope).encode()
    answer = await local_slack.deliver_raw(body, {"Content-Type": "application/json", **local_slack.sign(body)})
    assert answer.status == 200
    await bot.wait_idle()
    posts = [c for c in local_slack.calls_to("chat.postMessage") if "hello from the org install" in str(c.params)]
    assert posts and posts[0].ok and posts[0].token == BOT_TOKEN, [c.response for c in local_slack.calls]


async def test_anonymous_install_requests_store_nothing_in_redis(local_slack, start_app, redis):
    """Each GET /slack/install is anyone's to send: it must not fill the Redis that holds the parked turns."""
    bot = await start_app(ScriptedModel([]), [], **OAUTH)
    before = await redis.dbsize()
    async with aiohttp.ClientSession() as anyone:
        for _ in range(50):
            async with anyone.get(f"{bot.url}/slack/install", allow_redirects=False) as install:
                assert install.status == 302
    assert await redis.dbsize() == before
    assert [k async for k in redis.scan_iter("*oauth-state*")] == []
    await install_through_oauth(local_slack, bot)  # and installing still works, once per state


async def test_the_callback_is_bound_to_the_browser_that_started_the_install(local_slack, start_app, redis):
    """An attacker who starts an install of their own and lures the owner's browser to the callback with the
    attacker's code and state is refused, and the owner's own install (state) still works afterwards."""
    local_slack.add_team(NEW_TEAM, "New Co", NEW_TOKEN)
    local_slack.add_user(NEWBIE, "newbie", team_id=NEW_TEAM)
    bot = await start_app(ScriptedModel([]), [], **OAUTH)
    store = RedisInstallationStore(redis, client_id=DEFAULT_CLIENT_ID)

    async def start_install(browser) -> tuple[str, str]:
        async with browser.get(f"{bot.url}/slack/install", allow_redirects=False) as install:
            cookie = install.cookies["slack-app-oauth-state"]
            return parse_qs(urlsplit(install.headers["Location"]).query)["state"][0], f"{cookie.key}={cookie.value}"

    async with aiohttp.ClientSession() as owner, aiohttp.ClientSession() as attacker:
        owners_state, owners_cookie = await start_install(owner)
        attackers_state, attackers_cookie = await start_install(attacker)
        attackers_code = local_slack.issue_oauth_code(TEAM_ID, user_id=ALICE)  # the attacker's own workspace
        lure = f"{bot.url}/slack/oauth_redirect?code={attackers_code}&state={attackers_state}"
        async with owner.get(lure, headers={"Cookie": owners_cookie}, allow_redirects=False) as lured:
            assert lured.status >= 400
        async with owner.get(lure, allow_redirects=False) as no_cookie:
            assert no_cookie.status >= 400
        stolen = f"{bot.url}/slack/oauth_redirect?code={attackers_code}&state={owners_state}"
        async with attacker.get(stolen, headers={"Cookie": attackers_cookie}, allow_redirects=False) as guessed:
            assert guessed.status >= 400  # the owner's state without the owner's cookie
        assert local_slack.calls_to("oauth.v2.access") == []

        code = local_slack.issue_oauth_code(NEW_TEAM, user_id=NEWBIE)
        mine = f"{bot.url}/slack/oauth_redirect?code={code}&state={owners_state}"
        async with owner.get(mine, headers={"Cookie": owners_cookie}, allow_redirects=False) as done:
            assert done.status == 200, await done.text()
    installed = await store.async_find_bot(enterprise_id=None, team_id=NEW_TEAM)
    assert installed is not None and installed.bot_token == NEW_TOKEN
