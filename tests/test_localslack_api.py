"""localslack's Web API spoken to by slack_sdk's real AsyncWebClient (the bot's client), plus a UI smoke test."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from localslack import (
    ALICE,
    BOB,
    BOT_ID,
    BOT_TOKEN,
    BOT_USER_ID,
    CAROL,
    DAVE,
    ERIN,
    FINANCE,
    GENERAL,
    OTHER_TEAM_ID,
    TEAM_ID,
    LocalSlack,
)
from localslack.server import DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET

SECRET = "test-signing-secret"


def card(block_id: str = "req-1") -> list[dict]:
    return [
        {
            "type": "section",
            "block_id": block_id,
            "text": {"type": "mrkdwn", "text": "*refund_charge* wants to run"},
        },
        {
            "type": "actions",
            "block_id": f"{block_id}-actions",
            "elements": [
                {
                    "type": "button",
                    "action_id": "hitl.approve",
                    "text": {"type": "plain_text", "text": "Approve"},
                    "style": "primary",
                    "value": "req_1",
                },
                {
                    "type": "button",
                    "action_id": "hitl.cancel",
                    "text": {"type": "plain_text", "text": "Cancel"},
                    "value": "req_1",
                },
            ],
        },
    ]


def modal(title: str = "Your answer") -> dict:
    return {
        "type": "modal",
        "callback_id": "hitl.free_text",
        "title": {"type": "plain_text", "text": title},
        "submit": {"type": "plain_text", "text": "Send"},
        "blocks": [
            {
                "type": "input",
                "block_id": "answer",
                "label": {"type": "plain_text", "text": "Answer"},
                "element": {"type": "plain_text_input", "action_id": "text"},
            }
        ],
    }


@pytest.fixture
async def slack() -> AsyncIterator[LocalSlack]:
    async with LocalSlack(bot_url=None, signing_secret=SECRET, trigger_ttl_s=0.5) as workspace:
        yield workspace


@pytest.fixture
def client(slack: LocalSlack) -> AsyncWebClient:
    return AsyncWebClient(base_url=slack.api_url, token=BOT_TOKEN)


async def slack_error(call) -> SlackApiError:
    with pytest.raises(SlackApiError) as caught:
        await call
    return caught.value


async def test_auth_test_identifies_the_bot(client: AsyncWebClient, slack: LocalSlack) -> None:
    response = await client.auth_test()
    assert response["ok"] is True
    assert (response["user_id"], response["bot_id"], response["team_id"]) == (BOT_USER_ID, BOT_ID, TEAM_ID)
    assert response["team"] == "Acme (local)"
    assert response["url"] == slack.base_url + "/"


async def test_bot_reply_in_a_thread_updates_the_root_and_history(
    client: AsyncWebClient, slack: LocalSlack
) -> None:
    root_ts, _ = await slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1")
    reply = await client.chat_postMessage(channel=GENERAL, thread_ts=root_ts, text="On it", blocks=card())

    assert reply["channel"] == GENERAL
    assert float(reply["ts"]) > float(root_ts)
    assert reply["message"]["thread_ts"] == root_ts
    assert reply["message"]["bot_id"] == BOT_ID
    assert reply["message"]["blocks"][0]["block_id"] == "req-1"

    root = slack.message(GENERAL, root_ts)
    assert root is not None and root.reply_count == 1 and root.latest_reply == reply["ts"]
    assert [m.ts for m in slack.messages(GENERAL, thread_ts=root_ts)] == [root_ts, reply["ts"]]

    replies = await client.conversations_replies(channel=GENERAL, ts=root_ts)
    assert [m["ts"] for m in replies["messages"]] == [root_ts, reply["ts"]]
    assert replies["messages"][0]["reply_count"] == 1
    assert replies["messages"][1]["parent_user_id"] == ALICE

    history = await client.conversations_history(channel=GENERAL)
    assert [m["ts"] for m in history["messages"]] == [root_ts]  # replies stay in the thread


async def test_form_encoded_post_with_blocks_as_a_json_string(
    client: AsyncWebClient, slack: LocalSlack
) -> None:
    response = await client.api_call(
        "chat.postMessage", data={"channel": GENERAL, "text": "card", "blocks": json.dumps(card())}
    )
    assert response["message"]["blocks"][1]["elements"][0]["action_id"] == "hitl.approve"
    recorded = slack.calls_to("chat.postMessage")[-1]
    assert recorded.params["blocks"] == card() and recorded.token == BOT_TOKEN


async def test_update_keeps_ts_and_blocks_and_rejects_foreign_messages(
    client: AsyncWebClient, slack: LocalSlack
) -> None:
    posted = await client.chat_postMessage(channel=GENERAL, text="Approval needed", blocks=card())
    updated = await client.chat_update(channel=GENERAL, ts=posted["ts"], text="Approved by bob")
    assert updated["ts"] == posted["ts"] and updated["text"] == "Approved by bob"
    stored = slack.message(GENERAL, posted["ts"])
    assert stored is not None and stored.text == "Approved by bob"
    assert stored.blocks == card()  # text-only update keeps the blocks, as Slack does
    assert stored.edited and stored.edited["user"] == BOT_USER_ID

    await client.chat_update(channel=GENERAL, ts=posted["ts"], text="done", blocks=[])
    assert slack.message(GENERAL, posted["ts"]).blocks is None

    alice_ts, _ = await slack.post_message(ALICE, GENERAL, "hello")
    error = await slack_error(client.chat_update(channel=GENERAL, ts=alice_ts, text="hijack"))
    assert error.response["error"] == "cant_update_message"
    error = await slack_error(client.chat_update(channel=GENERAL, ts="1.000001", text="x"))
    assert error.response["error"] == "message_not_found"


async def test_ephemeral_is_visible_only_to_its_user(client: AsyncWebClient, slack: LocalSlack) -> None:
    response = await client.chat_postEphemeral(channel=FINANCE, user=BOB, text="Only you can approve this")
    assert set(response.data) == {"ok", "message_ts"}
    assert [e.text for e in slack.ephemerals(BOB)] == ["Only you can approve this"]
    assert slack.ephemerals(ALICE) == []
    assert slack.messages(FINANCE) == []

    error = await slack_error(
        client.chat_postEphemeral(channel=FINANCE, user=DAVE, text="dave is not in #finance")
    )
    assert error.response["error"] == "user_not_in_channel"


async def test_delete_removes_the_message(client: AsyncWebClient, slack: LocalSlack) -> None:
    posted = await client.chat_postMessage(channel=GENERAL, text="temporary")
    deleted = await client.chat_delete(channel=GENERAL, ts=posted["ts"])
    assert (deleted["channel"], deleted["ts"]) == (GENERAL, posted["ts"])
    assert slack.messages(GENERAL) == []
    error = await slack_error(client.chat_delete(channel=GENERAL, ts=posted["ts"]))
    assert error.response["error"] == "message_not_found"


@pytest.mark.parametrize(
    "blocks",
    [
        [
            {
                "type": "actions",
                "elements": [
                    {"type": "button", "action_id": "a", "text": {"type": "plain_text", "text": "x" * 76}}
                ],
            }
        ],
        [{"type": "section", "block_id": "empty"}],
        [{"type": "header"}],
        [{"type": "no_such_block"}],
        [{"type": "section", "text": {"type": "mrkdwn", "text": "x"}}] * 51,
    ],
    ids=[
        "button-text-over-75",
        "section-without-text-or-fields",
        "header-without-text",
        "unknown-type",
        "51-blocks",
    ],
)
async def test_invalid_blocks_are_refused(
    client: AsyncWebClient, slack: LocalSlack, blocks: list[dict]
) -> None:
    error = await slack_error(client.chat_postMessage(channel=GENERAL, text="x", blocks=blocks))
    assert error.response["error"] == "invalid_blocks"
    assert any("json-pointer:/blocks" in e for e in error.response["errors"])
    assert slack.messages(GENERAL) == []


async def test_too_long_text(client: AsyncWebClient, slack: LocalSlack) -> None:
    error = await slack_error(client.chat_postMessage(channel=GENERAL, text="x" * 40_001))
    assert error.response["error"] == "msg_too_long"
    posted = await client.chat_postMessage(channel=GENERAL, text="x" * 40_000)
    error = await slack_error(client.chat_update(channel=GENERAL, ts=posted["ts"], text="y" * 4_001))
    assert error.response["error"] == "msg_too_long"


async def test_blocks_whose_texts_add_up_to_more_than_12k_are_refused(client: AsyncWebClient, slack: LocalSlack) -> None:
    section = {"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3000}}
    error = await slack_error(client.chat_postMessage(channel=GENERAL, text="long", blocks=[section] * 5))
    assert error.response["error"] == "msg_blocks_too_long"
    assert slack.messages(GENERAL) == []
    posted = await client.chat_postMessage(channel=GENERAL, text="long", blocks=[section] * 4)
    assert posted["ok"]


async def test_channel_not_found_invalid_auth_and_unknown_method(
    client: AsyncWebClient, slack: LocalSlack
) -> None:
    error = await slack_error(client.chat_postMessage(channel="C0NOPE", text="hi"))
    assert error.response["error"] == "channel_not_found"
    stranger = AsyncWebClient(base_url=slack.api_url, token="xoxb-not-a-real-token")
    error = await slack_error(stranger.auth_test())
    assert error.response["error"] == "invalid_auth"
    error = await slack_error(client.api_call("nope.nothing"))
    assert error.response["error"] == "unknown_method"
    error = await slack_error(client.views_open(trigger_id="", view=modal()))
    assert error.response["error"] == "invalid_arguments"


async def test_trigger_ids_are_single_use_and_expire(client: AsyncWebClient, slack: LocalSlack) -> None:
    trigger = slack.issue_trigger_id(ALICE)
    opened = await client.views_open(trigger_id=trigger, view=modal())
    view = opened["view"]
    assert view["id"].startswith("V") and view["hash"] and view["callback_id"] == "hitl.free_text"
    assert [v.id for v in slack.open_views(ALICE)] == [view["id"]]

    error = await slack_error(client.views_open(trigger_id=trigger, view=modal()))
    assert error.response["error"] == "exchanged_trigger_id"

    stale = slack.issue_trigger_id(ALICE)
    await asyncio.sleep(0.6)  # the fixture's trigger_ttl_s is 0.5 (Slack: 3 s)
    error = await slack_error(client.views_open(trigger_id=stale, view=modal()))
    assert error.response["error"] == "expired_trigger_id"

    huge = {**modal(), "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3000}}] * 99}
    error = await slack_error(client.views_open(trigger_id=slack.issue_trigger_id(ALICE), view=huge))
    assert error.response["error"] == "view_too_large"

    error = await slack_error(
        client.views_open(trigger_id=slack.issue_trigger_id(ALICE), view=modal("x" * 25))
    )
    assert error.response["error"] == "invalid_arguments"
    assert any("title" in m for m in error.response["response_metadata"]["messages"])


async def test_views_push_update_and_stack_limit(client: AsyncWebClient, slack: LocalSlack) -> None:
    first = (await client.views_open(trigger_id=slack.issue_trigger_id(ALICE), view=modal()))["view"]
    await client.views_push(trigger_id=slack.issue_trigger_id(ALICE), view=modal("Second"))
    await client.views_push(trigger_id=slack.issue_trigger_id(ALICE), view=modal("Third"))
    error = await slack_error(
        client.views_push(trigger_id=slack.issue_trigger_id(ALICE), view=modal("Fourth"))
    )
    assert error.response["error"] == "push_limit_reached"
    assert len(slack.open_views(ALICE)) == 3

    updated = await client.views_update(view_id=first["id"], hash=first["hash"], view=modal("Updated"))
    assert updated["view"]["id"] == first["id"] and updated["view"]["hash"] != first["hash"]
    error = await slack_error(client.views_update(view_id=first["id"], hash=first["hash"], view=modal()))
    assert error.response["error"] == "hash_conflict"


async def test_views_publish_sets_the_home_tab(client: AsyncWebClient, slack: LocalSlack) -> None:
    home = {"type": "home", "blocks": [{"type": "header", "text": {"type": "plain_text", "text": "Pending"}}]}
    published = await client.views_publish(user_id=CAROL, view=home)
    assert published["view"]["type"] == "home"
    stored = slack.home_view(CAROL)
    assert stored is not None and stored.blocks == home["blocks"] and stored.id == published["view"]["id"]
    assert slack.home_view(ALICE) is None

    error = await slack_error(
        client.views_publish(user_id=CAROL, view={**home, "submit": {"type": "plain_text", "text": "x"}})
    )
    assert error.response["error"] == "invalid_arguments"
    error = await slack_error(client.views_publish(user_id="U0NOBODY", view=home))
    assert error.response["error"] == "user_not_found"


async def test_users_info_gives_each_persons_time_zone_as_slack_does(client: AsyncWebClient, slack: LocalSlack) -> None:
    """``tz`` (IANA), ``tz_label`` and ``tz_offset`` (seconds east of UTC, now) agree; no zone: none of them."""
    from datetime import UTC, datetime
    from zoneinfo import ZoneInfo

    slack.ws.user(BOB).tz = "Asia/Kolkata"
    bob = (await client.users_info(user=BOB))["user"]
    assert (bob["tz"], bob["tz_label"], bob["tz_offset"]) == ("Asia/Kolkata", "IST", 19800)
    slack.ws.user(BOB).tz = "Europe/Paris"
    paris = datetime.now(UTC).astimezone(ZoneInfo("Europe/Paris")).utcoffset()
    assert (await client.users_info(user=BOB))["user"]["tz_offset"] == paris.total_seconds()
    slack.ws.user(BOB).tz = None
    assert "tz" not in (await client.users_info(user=BOB))["user"]


async def test_users_info_reports_roles_and_teams(client: AsyncWebClient) -> None:
    carol = (await client.users_info(user=CAROL))["user"]
    assert (carol["is_admin"], carol["is_owner"], carol["is_primary_owner"], carol["deleted"]) == (
        True,
        True,
        False,
        False,
    )
    assert carol["team_id"] == TEAM_ID and carol["profile"]["real_name"] == "Carol Chen"
    bob = (await client.users_info(user=BOB))["user"]
    assert bob["is_admin"] is False
    erin = (await client.users_info(user=ERIN))["user"]
    assert erin["team_id"] == OTHER_TEAM_ID
    error = await slack_error(client.users_info(user="U0NOBODY"))
    assert error.response["error"] == "user_not_found"
    members = (await client.users_list())["members"]
    assert {m["id"] for m in members} == {
        BOT_USER_ID,
        ALICE,
        BOB,
        CAROL,
        DAVE,
    }  # erin belongs to another team


async def test_rate_limit_fault_is_seen_as_429_with_retry_after(
    client: AsyncWebClient, slack: LocalSlack
) -> None:
    slack.fail_next("chat.postMessage", retry_after=7)
    error = await slack_error(client.chat_postMessage(channel=GENERAL, text="hi"))
    assert error.response.status_code == 429
    assert error.response.headers["Retry-After"] == "7"
    assert error.response["error"] == "ratelimited"
    assert (await client.chat_postMessage(channel=GENERAL, text="hi"))[
        "ok"
    ] is True  # only the next call failed

    slack.fail_next("chat.update", error="edit_window_closed")
    posted = await client.chat_postMessage(channel=GENERAL, text="x")
    error = await slack_error(client.chat_update(channel=GENERAL, ts=posted["ts"], text="y"))
    assert (error.response.status_code, error.response["error"]) == (200, "edit_window_closed")
    assert [c.status for c in slack.calls_to("chat.postMessage")] == [429, 200, 200]


async def test_oauth_code_exchange_installs_a_new_team(slack: LocalSlack) -> None:
    code = slack.issue_oauth_code("T0NEW", user_id="U0NEWADMIN")
    anonymous = AsyncWebClient(base_url=slack.api_url)
    response = await anonymous.oauth_v2_access(
        client_id=DEFAULT_CLIENT_ID, client_secret=DEFAULT_CLIENT_SECRET, code=code
    )
    assert response["token_type"] == "bot" and response["access_token"].startswith("xoxb-")
    assert response["team"] == {"id": "T0NEW", "name": "T0NEW"}
    assert response["authed_user"] == {"id": "U0NEWADMIN"}
    assert "chat:write" in response["scope"].split(",")

    installed = AsyncWebClient(base_url=slack.api_url, token=response["access_token"])
    identity = await installed.auth_test()
    assert (identity["team_id"], identity["user_id"]) == ("T0NEW", response["bot_user_id"])

    error = await slack_error(
        anonymous.oauth_v2_access(client_id=DEFAULT_CLIENT_ID, client_secret=DEFAULT_CLIENT_SECRET, code=code)
    )
    assert error.response["error"] == "invalid_code"
    error = await slack_error(
        anonymous.oauth_v2_access(client_id=DEFAULT_CLIENT_ID, client_secret="wrong", code="x")
    )
    assert error.response["error"] == "bad_client_secret"


async def test_second_team_has_its_own_token_and_cannot_see_the_first(slack: LocalSlack) -> None:
    team = slack.add_team("T0BETA", "Beta Inc", "xoxb-beta")
    slack.add_user("U0BETAUSER", "bea", team_id="T0BETA")
    slack.add_channel("C0BETA", "beta-general", team_id="T0BETA", members=["U0BETAUSER"])
    beta = AsyncWebClient(base_url=slack.api_url, token="xoxb-beta")
    assert (await beta.auth_test())["user_id"] == team.bot_user_id
    posted = await beta.chat_postMessage(channel="C0BETA", text="hello beta")
    assert posted["message"]["bot_id"] == team.bot_id
    error = await slack_error(beta.chat_postMessage(channel=GENERAL, text="sneaky"))
    assert error.response["error"] == "channel_not_found"


async def test_dm_open_reactions_info_and_permalink(client: AsyncWebClient, slack: LocalSlack) -> None:
    # the manifest grants neither reactions:write nor channels:read: Slack refuses, naming the scope
    error = await slack_error(client.conversations_info(channel=GENERAL))
    assert (error.response["error"], error.response["needed"]) == ("missing_scope", "channels:read")
    slack.grant_scopes("reactions:write", "channels:read", "team:read")
    opened = await client.conversations_open(users=ALICE)
    dm_id = opened["channel"]["id"]
    assert dm_id == slack.dm_channel(ALICE) and dm_id.startswith("D")
    again = await client.conversations_open(users=ALICE, return_im=True)
    assert (
        again["already_open"] is True
        and again["channel"]["is_im"] is True
        and again["channel"]["user"] == ALICE
    )

    posted = await client.chat_postMessage(channel=dm_id, text="hi alice")
    await client.reactions_add(channel=dm_id, timestamp=posted["ts"], name="eyes")
    assert [r.name for r in slack.message(dm_id, posted["ts"]).reactions] == ["eyes"]
    error = await slack_error(client.reactions_add(channel=dm_id, timestamp=posted["ts"], name="eyes"))
    assert error.response["error"] == "already_reacted"
    await client.reactions_remove(channel=dm_id, timestamp=posted["ts"], name="eyes")
    assert slack.message(dm_id, posted["ts"]).reactions == []

    info = (await client.conversations_info(channel=GENERAL))["channel"]
    assert info["is_ext_shared"] is True and info["name"] == "general" and info["is_member"] is True
    link = await client.chat_getPermalink(
        channel=GENERAL, message_ts=(await client.chat_postMessage(channel=GENERAL, text="x"))["ts"]
    )
    assert link["permalink"].startswith(f"{slack.base_url}/archives/{GENERAL}/p")
    team = (await client.team_info())["team"]
    assert (team["id"], team["name"]) == (TEAM_ID, "Acme (local)")


async def test_ui_page_and_state() -> None:
    workspace = LocalSlack(bot_url=None, signing_secret=SECRET)
    async with TestClient(TestServer(workspace.build_app())) as http:
        page = await http.get("/")
        assert page.status == 200 and "text/html" in page.headers["Content-Type"]
        assert "<html" in (await page.text()).lower()
        await workspace.post_message(ALICE, GENERAL, "hello from alice")

        state = await http.get("/ui/state", params={"user": BOB})
        assert state.status == 200
        body = await state.json()
        assert body["me"]["id"] == BOB
        assert {c["id"] for c in body["channels"]} >= {GENERAL, FINANCE}
        assert [m["text"] for m in body["messages"][GENERAL]] == ["hello from alice"]

        erin = await (await http.get("/ui/state", params={"user": ERIN})).json()
        assert FINANCE not in {c["id"] for c in erin["channels"]} and erin["me"]["external"] is True

        posted = await http.post("/ui/post", json={"user": ALICE, "channel": GENERAL, "text": "@agent help"})
        answer = await posted.json()
        assert (
            answer["ok"] is True
            and answer["problem"] == "No bot is connected to this workspace (no bot URL set)."
        )
        assert workspace.messages(GENERAL)[-1].text == f"<@{BOT_USER_ID}> help"

        css = await http.get("/static/app.css")
        assert css.status == 200
    await workspace.stop()


async def test_standalone_server_serves_the_api_over_real_http(slack: LocalSlack) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(slack.api_url + "auth.test", data={"token": BOT_TOKEN}) as response:
            assert (await response.json())["user_id"] == BOT_USER_ID
        async with http.get(
            slack.api_url + "users.info", params={"user": ALICE, "token": BOT_TOKEN}
        ) as response:
            assert (await response.json())["user"]["name"] == "alice"
        async with http.post(slack.api_url + "auth.test") as response:
            assert (await response.json())["error"] == "not_authed"
