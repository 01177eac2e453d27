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


def form(element: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "modal",
        "title": {"type": "plain_text", "text": "Form"},
        "submit": {"type": "plain_text", "text": "Send"},
        "blocks": [{"type": "input", "block_id": "b", "label": {"type": "plain_text", "text": "Field"},
                    "element": {"action_id": "value", **element}}],
    }


@pytest.mark.parametrize(
    ("element", "pointer"),
    [
        ({"type": "number_input"}, "/element]"),
        ({"type": "number_input", "is_decimal_allowed": "true"}, "/element/is_decimal_allowed"),
        ({"type": "number_input", "is_decimal_allowed": False, "min_value": 1}, "/element/min_value"),
        ({"type": "number_input", "is_decimal_allowed": False, "initial_value": 3}, "/element/initial_value"),
        ({"type": "number_input", "is_decimal_allowed": True, "max_value": "lots"}, "/element/max_value"),
        ({"type": "number_input", "is_decimal_allowed": True, "min_value": "5", "max_value": "1"}, "/element/min_value"),
        ({"type": "datetimepicker", "initial_date_time": "1764806400"}, "/element/initial_date_time"),
        ({"type": "datetimepicker", "initial_date_time": 1764806400.5}, "/element/initial_date_time"),
        ({"type": "datetimepicker", "initial_date_time": -1}, "/element/initial_date_time"),
        ({"type": "plain_text_input", "max_length": 3001}, "/element/max_length"),
        ({"type": "plain_text_input", "max_length": 0}, "/element/max_length"),
        ({"type": "plain_text_input", "min_length": 3001}, "/element/min_length"),
        ({"type": "plain_text_input", "initial_value": 42}, "/element/initial_value"),
        ({"type": "multi_static_select", "options": [option("a")], "max_selected_items": 0},
         "/element/max_selected_items"),
    ],
    ids=[
        "number-without-is_decimal_allowed",
        "number-is_decimal_allowed-string",
        "number-min-as-int",
        "number-initial-as-int",
        "number-max-not-a-number",
        "number-min-over-max",
        "datetime-as-string",
        "datetime-as-float",
        "datetime-negative",
        "text-max-3001",
        "text-max-0",
        "text-min-3001",
        "text-initial-int",
        "multi-select-max-0",
    ],
)
async def test_form_inputs_slack_refuses(
    client: AsyncWebClient, slack: LocalSlack, element: dict[str, Any], pointer: str
) -> None:
    error = await slack_error(client.views_open(trigger_id=slack.issue_trigger_id(ALICE), view=form(element)))
    assert error.response["error"] == "invalid_arguments"
    messages = error.response["response_metadata"]["messages"]
    assert any(pointer in m for m in messages), messages
    assert slack.open_views(ALICE) == []


async def test_form_inputs_at_their_limits_pass(client: AsyncWebClient, slack: LocalSlack) -> None:
    for element in (
        {"type": "number_input", "is_decimal_allowed": False, "min_value": "-3", "max_value": "-3", "initial_value": "-3"},
        {"type": "number_input", "is_decimal_allowed": True, "initial_value": "12.50", "min_value": "0.01"},
        {"type": "datetimepicker", "initial_date_time": 9_999_999_999},
        {"type": "datetimepicker", "initial_date_time": 0},
        {"type": "plain_text_input", "min_length": 3000, "max_length": 3000, "multiline": True},
        {"type": "plain_text_input", "min_length": 0, "max_length": 1},
        {"type": "multi_static_select", "options": [option("a")], "max_selected_items": 1},
    ):
        opened = await client.views_open(trigger_id=slack.issue_trigger_id(ALICE), view=form(element))
        assert opened["ok"], element


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
