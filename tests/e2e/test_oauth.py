"""Multi-workspace install: /slack/install → Slack's consent page → /slack/oauth_redirect → the team's token is used."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import aiohttp

from bot.models.scripted import ScriptedModel, say
from handlers.oauth import authorize_url
from localslack.server import DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET
from store.installations import RedisInstallationStore

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
