"""LocalSlack refuses what Slack refuses, beyond slack_sdk's validators: Block Kit rules, channel ids,
membership, archived channels, revoked tokens and deactivated accounts — each seen through slack_sdk's
AsyncWebClient as Slack's error. Sources are in docs/LOCALSLACK.md.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from localslack import (
    ALICE,
    BOB,
    BOT_TOKEN,
    BOT_USER_ID,
    DAVE,
    FINANCE,
    GENERAL,
    TEAM_ID,
    LocalSlack,
    LocalSlackError,
)
from localslack.blockkit import validate_blocks

SECRET = "rules-test-secret"


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


def option(value: str, text: str = "Choice") -> dict[str, Any]:
    return {"text": {"type": "plain_text", "text": text}, "value": value}


def select(**element: Any) -> list[dict[str, Any]]:
    return [
        {
            "type": "section",
            "block_id": "pick",
            "text": {"type": "mrkdwn", "text": "Pick one"},
            "accessory": {"type": "static_select", "action_id": "choose", **element},
        }
    ]


def radios(count: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "actions",
            "elements": [
                {"type": "radio_buttons", "action_id": "r", "options": [option(str(i)) for i in range(count)]}
            ],
        }
    ]


# ---- Block Kit: stricter than slack_sdk's validators -------------------------------------------------


@pytest.mark.parametrize(
    ("blocks", "pointer"),
    [
        ([{"type": "header", "text": {"type": "mrkdwn", "text": "*Approval*"}}], "/blocks/0/text"),
        (
            [{"type": "actions", "elements": [{"type": "button", "action_id": "b",
                                               "text": {"type": "mrkdwn", "text": "*Go*"}}]}],
            "/blocks/0/elements/0/text",
        ),
        (select(options=[option("a"), option("b")], initial_option=option("c")), "/initial_option"),
        (select(options=[option("a")], initial_option=option("a", "Other text")), "/initial_option"),
        (select(options=[option("v" * 151)]), "/options/0/value"),
        (select(options=[]), "/options"),
        (radios(11), "/blocks/0/elements/0/options"),
        (
            select(options=[option("a")], placeholder={"type": "mrkdwn", "text": "pick"}),
            "/accessory/placeholder",
        ),
    ],
    ids=[
        "header-mrkdwn",
        "button-text-mrkdwn",
        "initial-option-not-an-option",
        "initial-option-other-text",
        "option-value-151",
        "select-without-options",
        "11-radio-buttons",
        "placeholder-mrkdwn",
    ],
)
async def test_blocks_slack_refuses_and_slack_sdk_lets_through(
    client: AsyncWebClient, slack: LocalSlack, blocks: list[dict[str, Any]], pointer: str
) -> None:
    error = await slack_error(client.chat_postMessage(channel=GENERAL, text="x", blocks=blocks))
    assert error.response["error"] == "invalid_blocks"
    assert any(pointer in e for e in error.response["errors"]), error.response["errors"]
    assert slack.messages(GENERAL) == []


async def test_the_limits_themselves_pass(client: AsyncWebClient) -> None:
    assert (await client.chat_postMessage(channel=GENERAL, text="x", blocks=radios(10)))["ok"]
    assert (await client.chat_postMessage(channel=GENERAL, text="x", blocks=select(options=[option("v" * 150)])))["ok"]
    chosen = select(options=[option("a"), option("b", "Bee")], initial_option=option("b", "Bee"))
    assert (await client.chat_postMessage(channel=GENERAL, text="x", blocks=chosen))["ok"]
    radio_mrkdwn = [{"type": "actions", "elements": [{"type": "radio_buttons", "action_id": "r", "options": [
        {"text": {"type": "mrkdwn", "text": "*bold* is fine here"}, "value": "1"}]}]}]
    assert (await client.chat_postMessage(channel=GENERAL, text="x", blocks=radio_mrkdwn))["ok"]
    assert validate_blocks([{"type": "header", "text": {"type": "plain_text", "text": "Approval"}}]) == []


async def test_modal_titles_are_plain_text_only(client: AsyncWebClient, slack: LocalSlack) -> None:
    view = {
        "type": "modal",
        "title": {"type": "mrkdwn", "text": "*Answer*"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "Hello"}}],
    }
    error = await slack_error(client.views_open(trigger_id=slack.issue_trigger_id(ALICE), view=view))
    assert error.response["error"] == "invalid_arguments"
    assert any("/view/title" in m for m in error.response["response_metadata"]["messages"])
    view["title"] = {"type": "plain_text", "text": "Answer"}
    view["close"] = {"type": "mrkdwn", "text": "Cancel"}
    error = await slack_error(client.views_open(trigger_id=slack.issue_trigger_id(ALICE), view=view))
    assert any("/view/close" in m for m in error.response["response_metadata"]["messages"])


# ---- channels: ids, membership -----------------------------------------------------------------------


async def test_chat_update_needs_the_channel_id_not_a_user_id_or_a_name(
    client: AsyncWebClient, slack: LocalSlack
) -> None:
    dm_post = await client.chat_postMessage(channel=ALICE, text="a DM card")  # a user id posts to the DM
    dm_id = dm_post["channel"]
    assert dm_id.startswith("D")
    error = await slack_error(client.chat_update(channel=ALICE, ts=dm_post["ts"], text="settled"))
    assert error.response["error"] == "channel_not_found"
    assert (await client.chat_update(channel=dm_id, ts=dm_post["ts"], text="settled"))["ok"]

    posted = await client.chat_postMessage(channel="#general", text="by name")  # postMessage takes names
    assert posted["channel"] == GENERAL
    for wrong in ("#general", "general"):
        error = await slack_error(client.chat_update(channel=wrong, ts=posted["ts"], text="x"))
        assert error.response["error"] == "channel_not_found"
    error = await slack_error(client.chat_delete(channel="#general", ts=posted["ts"]))
    assert error.response["error"] == "channel_not_found"
    assert slack.message(GENERAL, posted["ts"]).text == "by name"


async def test_conversations_replies_needs_the_bot_in_the_channel(
    client: AsyncWebClient, slack: LocalSlack
) -> None:
    slack.add_channel("C0NOBOT", "no-bot", members=[ALICE, BOB], bot_member=False)
    ts, deliveries = await slack.post_message(ALICE, "C0NOBOT", "a thread the bot cannot see")
    assert deliveries == []  # the app is not in the channel: no events either
    error = await slack_error(client.conversations_replies(channel="C0NOBOT", ts=ts))
    assert error.response["error"] == "not_in_channel"
    error = await slack_error(client.conversations_history(channel="C0NOBOT"))
    assert error.response["error"] == "not_in_channel"
    error = await slack_error(client.chat_postMessage(channel="C0NOBOT", text="hi", thread_ts=ts))
    assert error.response["error"] == "not_in_channel"


# ---- archived channels -------------------------------------------------------------------------------


async def test_an_archived_channel_refuses_posts_and_edits(client: AsyncWebClient, slack: LocalSlack) -> None:
    card = await client.chat_postMessage(channel=FINANCE, text="Approval needed")
    slack.archive_channel(FINANCE)
    error = await slack_error(client.chat_postMessage(channel=FINANCE, text="too late"))
    assert error.response["error"] == "is_archived"
    error = await slack_error(client.chat_postEphemeral(channel=FINANCE, user=BOB, text="psst"))
    assert error.response["error"] == "is_archived"
    # chat.update: "is_inactive: The message cannot be edited within a frozen, archived or deleted channel"
    error = await slack_error(client.chat_update(channel=FINANCE, ts=card["ts"], text="Approved"))
    assert error.response["error"] == "is_inactive"
    slack.grant_scopes("channels:read")
    info = (await client.conversations_info(channel=FINANCE))["channel"]
    assert info["is_archived"] is True
    with pytest.raises(LocalSlackError, match="archived"):
        await slack.post_message(ALICE, FINANCE, "hello?")
    slack.unarchive_channel(FINANCE)
    assert (await client.chat_update(channel=FINANCE, ts=card["ts"], text="Approved"))["ok"]


# ---- tokens: revoked, inactive ------------------------------------------------------------------------


async def test_an_uninstalled_apps_token_is_revoked_and_the_app_is_told(
    client: AsyncWebClient, slack: LocalSlack
) -> None:
    assert (await client.auth_test())["ok"]
    results = await slack.uninstall(TEAM_ID)
    for call in (client.auth_test(), client.chat_postMessage(channel=GENERAL, text="still here?")):
        error = await slack_error(call)
        assert error.response["error"] == "token_revoked"
    kinds = [r.payload["event"]["type"] for r in results]
    assert kinds == ["tokens_revoked", "app_uninstalled"]  # Slack sends both, in no promised order
    revoked = results[0].payload
    assert revoked["team_id"] == TEAM_ID and revoked["event"]["tokens"] == {"oauth": [], "bot": [BOT_USER_ID]}
    assert BOT_USER_ID not in slack.ws.channel(GENERAL).members
    _, deliveries = await slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> hello?")
    assert deliveries == []  # an uninstalled app hears nothing
    slack.revoke_token("xoxb-never-issued")
    stranger = AsyncWebClient(base_url=slack.api_url, token="xoxb-never-issued")
    assert (await slack_error(stranger.auth_test())).response["error"] == "token_revoked"


async def test_a_deactivated_account_is_inactive(client: AsyncWebClient, slack: LocalSlack) -> None:
    slack.deactivate_user(DAVE)
    dave = (await client.users_info(user=DAVE))["user"]
    assert dave["deleted"] is True
    error = await slack_error(client.conversations_open(users=DAVE))
    assert error.response["error"] == "user_disabled"
    with pytest.raises(LocalSlackError, match="deactivated"):
        await slack.post_message(DAVE, GENERAL, "I am gone")

    slack.deactivate_user(BOT_USER_ID)  # the bot user itself: its token belongs to a deleted user
    error = await slack_error(client.chat_postMessage(channel=GENERAL, text="hello"))
    assert error.response["error"] == "account_inactive"
