"""localslack delivering events and interactions to a bot, signed exactly like Slack.

The "bot" is a tiny aiohttp receiver that verifies every request with slack_sdk's SignatureVerifier and records
it; the last tests use a real slack-bolt AsyncApp to prove Bolt accepts what localslack sends.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import aiohttp
import pytest
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from localslack import (
    ALICE,
    BOB,
    BOT_TOKEN,
    BOT_USER_ID,
    DAVE,
    ERIN,
    FINANCE,
    GENERAL,
    OTHER_TEAM_ID,
    TEAM_ID,
    LocalSlack,
    LocalSlackError,
)

SECRET = "delivery-test-secret"
Responder = Callable[["Received"], Awaitable[web.StreamResponse]]


@dataclass
class Received:
    body: bytes
    headers: dict[str, str]
    signature_valid: bool

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.body)

    @property
    def form(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(self.body.decode()).items()}

    @property
    def payload(self) -> dict[str, Any]:
        return json.loads(self.form["payload"])


@dataclass
class Receiver:
    """The bot's request URL: verifies signatures (401 when wrong, like Bolt) and records every request."""

    verifier: SignatureVerifier = field(default_factory=lambda: SignatureVerifier(SECRET))
    requests: list[Received] = field(default_factory=list)
    respond: Responder | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = dict(request.headers)
        received = Received(body, headers, self.verifier.is_valid_request(body, headers))
        self.requests.append(received)
        if not received.signature_valid:
            return web.json_response({"error": "invalid request"}, status=401)
        if self.respond is not None:
            return await self.respond(received)
        return web.Response(status=200)


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/slack/events"


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, str]]:
    bot = Receiver()
    app = web.Application()
    app.router.add_post("/slack/events", bot.handle)
    runner, url = await serve(app)
    yield bot, url
    await runner.cleanup()


@pytest.fixture
async def slack(receiver: tuple[Receiver, str]) -> AsyncIterator[LocalSlack]:
    async with LocalSlack(bot_url=receiver[1], signing_secret=SECRET) as workspace:
        yield workspace


@pytest.fixture
def bot(receiver: tuple[Receiver, str]) -> Receiver:
    return receiver[0]


@pytest.fixture
def client(slack: LocalSlack) -> AsyncWebClient:
    return AsyncWebClient(base_url=slack.api_url, token=BOT_TOKEN)


APPROVAL_BLOCKS = [
    {
        "type": "section",
        "block_id": "req-1",
        "text": {"type": "mrkdwn", "text": "*refund_charge* wants to run"},
    },
    {
        "type": "actions",
        "block_id": "req-1-actions",
        "elements": [
            {
                "type": "button",
                "action_id": "hitl.approve",
                "text": {"type": "plain_text", "text": "Approve"},
                "style": "primary",
                "value": "req_01HZX",
            },
            {
                "type": "button",
                "action_id": "hitl.cancel",
                "text": {"type": "plain_text", "text": "Cancel"},
                "value": "req_01HZX",
            },
        ],
    },
    {
        "type": "section",
        "block_id": "q-1",
        "text": {"type": "mrkdwn", "text": "Which day?"},
        "accessory": {
            "type": "static_select",
            "action_id": "hitl.answer",
            "placeholder": {"type": "plain_text", "text": "Choose an answer"},
            "options": [
                {"text": {"type": "plain_text", "text": "Saturday"}, "value": "Saturday"},
                {"text": {"type": "plain_text", "text": "Sunday"}, "value": "Sunday"},
            ],
        },
    },
]

ANSWER_MODAL = {
    "type": "modal",
    "callback_id": "hitl.free_text",
    "private_metadata": '{"request_id": "req_01HZY"}',
    "title": {"type": "plain_text", "text": "Your answer"},
    "submit": {"type": "plain_text", "text": "Send"},
    "blocks": [
        {
            "type": "input",
            "block_id": "answer",
            "label": {"type": "plain_text", "text": "Answer"},
            "element": {"type": "plain_text_input", "action_id": "text"},
        },
        {
            "type": "input",
            "block_id": "approvers",
            "optional": True,
            "label": {"type": "plain_text", "text": "Approvers"},
            "element": {"type": "multi_users_select", "action_id": "users"},
        },
    ],
}


async def post_card(client: AsyncWebClient, thread_ts: str | None = None) -> str:
    posted = await client.chat_postMessage(
        channel=GENERAL, text="Approval needed", blocks=APPROVAL_BLOCKS, thread_ts=thread_ts
    )
    return posted["ts"]


async def test_mention_delivers_app_mention_and_message_with_distinct_event_ids(
    slack: LocalSlack, bot: Receiver
) -> None:
    ts, results = await slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund charge ch_123 for $40")

    assert [r.kind for r in results] == ["event_callback:app_mention", "event_callback:message"]
    assert all(r.ok and r.status == 200 for r in results)
    assert len(bot.requests) == 2 and all(r.signature_valid for r in bot.requests)
    assert all(r.headers["Content-Type"] == "application/json" for r in bot.requests)
    envelopes = {r.json["event"]["type"]: r.json for r in bot.requests}
    assert set(envelopes) == {"app_mention", "message"}
    assert envelopes["app_mention"]["event_id"] != envelopes["message"]["event_id"]
    for envelope in envelopes.values():
        assert envelope["type"] == "event_callback" and envelope["api_app_id"] == "A0LOCAL"
        assert envelope["team_id"] == TEAM_ID and envelope["is_ext_shared_channel"] is True
        assert envelope["authorizations"] == [
            {
                "enterprise_id": None,
                "team_id": TEAM_ID,
                "user_id": BOT_USER_ID,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ]
        assert isinstance(envelope["event_time"], int) and envelope["event_context"]
        event = envelope["event"]
        assert (event["user"], event["ts"], event["channel"], event["team"]) == (ALICE, ts, GENERAL, TEAM_ID)
        assert event["blocks"][0]["elements"][0]["elements"][0] == {"type": "user", "user_id": BOT_USER_ID}
    assert envelopes["message"]["event"]["channel_type"] == "channel"
    assert "channel_type" not in envelopes["app_mention"]["event"]


async def test_dm_and_plain_channel_messages_deliver_only_message_events(
    slack: LocalSlack, bot: Receiver
) -> None:
    dm = slack.dm_channel(ALICE)
    _, results = await slack.post_message(ALICE, dm, "what can you do?")
    assert [r.kind for r in results] == ["event_callback:message"]
    assert bot.requests[-1].json["event"]["channel_type"] == "im"

    root_ts, _ = await slack.post_message(BOB, FINANCE, "lunch?")
    reply_ts, results = await slack.post_message(ALICE, FINANCE, "approve", thread_ts=root_ts)
    event = bot.requests[-1].json["event"]
    assert [r.kind for r in results] == ["event_callback:message"]
    assert (event["thread_ts"], event["parent_user_id"], event["ts"]) == (root_ts, BOB, reply_ts)
    assert bot.requests[-1].json["is_ext_shared_channel"] is False


async def test_click_sends_a_signed_block_actions_form_matching_the_message(
    slack: LocalSlack, bot: Receiver, client: AsyncWebClient
) -> None:
    root_ts, _ = await slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund")
    card_ts = await post_card(client, thread_ts=root_ts)
    bot.requests.clear()

    result = await slack.click(BOB, GENERAL, card_ts, "hitl.approve")

    assert result.ok and result.kind == "block_actions"
    request = bot.requests[-1]
    assert request.signature_valid and request.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert set(request.form) == {"payload"}
    payload = request.payload
    assert payload["type"] == "block_actions"
    assert payload["user"] == {"id": BOB, "username": "bob", "name": "bob", "team_id": TEAM_ID}
    assert payload["team"] == {"id": TEAM_ID, "domain": "acme-local"}
    assert payload["container"]["message_ts"] == card_ts and payload["container"]["is_ephemeral"] is False
    assert payload["channel"] == {"id": GENERAL, "name": "general"}
    assert payload["message"]["ts"] == card_ts and payload["message"]["thread_ts"] == root_ts
    assert payload["message"]["blocks"] == APPROVAL_BLOCKS and payload["message"]["bot_id"] == "B0BOT"
    assert payload["response_url"].startswith(f"{slack.base_url}/response_url/")
    (action,) = payload["actions"]
    assert {k: action[k] for k in ("action_id", "block_id", "type", "value", "style")} == {
        "action_id": "hitl.approve",
        "block_id": "req-1-actions",
        "type": "button",
        "value": "req_01HZX",
        "style": "primary",
    }
    assert action["text"] == {"type": "plain_text", "text": "Approve"} and action["action_ts"]

    # The trigger_id in the payload opens a modal (once).
    opened = await client.views_open(trigger_id=payload["trigger_id"], view=ANSWER_MODAL)
    assert [v.id for v in slack.open_views(BOB)] == [opened["view"]["id"]]


async def test_select_sends_selected_option_and_state(
    slack: LocalSlack, bot: Receiver, client: AsyncWebClient
) -> None:
    card_ts = await post_card(client)
    result = await slack.select(ALICE, GENERAL, card_ts, "hitl.answer", "Sunday")
    assert result.ok
    payload = bot.requests[-1].payload
    (action,) = payload["actions"]
    assert action["type"] == "static_select" and action["block_id"] == "q-1"
    assert action["selected_option"] == {"text": {"type": "plain_text", "text": "Sunday"}, "value": "Sunday"}
    assert payload["state"]["values"]["q-1"]["hitl.answer"]["selected_option"]["value"] == "Sunday"


async def test_view_submission_and_response_actions(
    slack: LocalSlack, bot: Receiver, client: AsyncWebClient
) -> None:
    opened = await client.views_open(trigger_id=slack.issue_trigger_id(ALICE), view=ANSWER_MODAL)
    view_id = opened["view"]["id"]

    async def refuse(_: Received) -> web.StreamResponse:
        return web.json_response({"response_action": "errors", "errors": {"answer": "Say a bit more"}})

    bot.respond = refuse
    result = await slack.submit_view(
        ALICE, view_id, {"answer": {"text": "Tue"}, "approvers": {"users": [BOB, DAVE]}}
    )
    payload = bot.requests[-1].payload
    assert result.ok and payload["type"] == "view_submission"
    view = payload["view"]
    assert (view["id"], view["callback_id"], view["private_metadata"]) == (
        view_id,
        "hitl.free_text",
        '{"request_id": "req_01HZY"}',
    )
    assert view["hash"] == opened["view"]["hash"] and view["app_installed_team_id"] == TEAM_ID
    assert view["state"]["values"]["answer"]["text"] == {"type": "plain_text_input", "value": "Tue"}
    assert view["state"]["values"]["approvers"]["users"] == {
        "type": "multi_users_select",
        "selected_users": [BOB, DAVE],
    }
    assert payload["user"]["id"] == ALICE and payload["team"]["id"] == TEAM_ID
    assert [v.id for v in slack.open_views(ALICE)] == [view_id]
    assert slack.open_views(ALICE)[0].errors == {"answer": "Say a bit more"}

    async def update(_: Received) -> web.StreamResponse:
        thanks = {
            "type": "modal",
            "title": {"type": "plain_text", "text": "Thanks"},
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "Got it"}}],
        }
        return web.json_response({"response_action": "update", "view": thanks})

    bot.respond = update
    await slack.submit_view(ALICE, view_id, {"answer": {"text": "Tuesday after 3pm"}})
    (shown,) = slack.open_views(ALICE)
    assert (
        shown.id == view_id and shown.title == {"type": "plain_text", "text": "Thanks"} and shown.errors == {}
    )

    bot.respond = None  # empty 200 ack closes the modal
    await slack.submit_view(ALICE, view_id)
    assert slack.open_views(ALICE) == []


async def test_slash_command_form_and_ack_shown_as_ephemeral(slack: LocalSlack, bot: Receiver) -> None:
    async def ack(_: Received) -> web.StreamResponse:
        return web.json_response({"text": "Approvers for refund_charge: <@U0BOB>"})

    bot.respond = ack
    result = await slack.slash_command(ALICE, "/approvers", "refund_charge", GENERAL)
    assert result.ok
    form = bot.requests[-1].form
    assert bot.requests[-1].signature_valid
    assert {
        k: form[k]
        for k in ("team_id", "channel_id", "channel_name", "user_id", "user_name", "command", "text")
    } == {
        "team_id": TEAM_ID,
        "channel_id": GENERAL,
        "channel_name": "general",
        "user_id": ALICE,
        "user_name": "alice",
        "command": "/approvers",
        "text": "refund_charge",
    }
    assert (
        form["response_url"].startswith(slack.base_url)
        and form["trigger_id"]
        and form["api_app_id"] == "A0LOCAL"
    )
    assert [e.text for e in slack.ephemerals(ALICE)] == ["Approvers for refund_charge: <@U0BOB>"]
    assert slack.ephemerals(BOB) == []


async def test_external_user_events_and_clicks_carry_their_own_team(
    slack: LocalSlack, bot: Receiver, client: AsyncWebClient
) -> None:
    await slack.post_message(ERIN, GENERAL, f"<@{BOT_USER_ID}> hi from Other Corp")
    for request in bot.requests:
        envelope = request.json
        assert envelope["team_id"] == OTHER_TEAM_ID
        assert envelope["authorizations"][0]["team_id"] == TEAM_ID
        assert envelope["is_ext_shared_channel"] is True
        assert envelope["event"]["user_team"] == OTHER_TEAM_ID and envelope["event"]["team"] == OTHER_TEAM_ID

    card_ts = await post_card(client)
    await slack.click(ERIN, GENERAL, card_ts, "hitl.cancel")
    payload = bot.requests[-1].payload
    assert payload["user"]["team_id"] == OTHER_TEAM_ID and payload["team"]["id"] == TEAM_ID


async def test_failed_event_deliveries_are_retried_with_slack_headers(receiver: tuple[Receiver, str]) -> None:
    bot, url = receiver
    failures = {"left": 2}

    async def flaky(_: Received) -> web.StreamResponse:
        if failures["left"]:
            failures["left"] -= 1
            return web.Response(status=500, text="boom")
        return web.Response(status=200)

    bot.respond = flaky
    async with LocalSlack(bot_url=url, signing_secret=SECRET, retry_delays_s=(0.0, 0.01, 0.01)) as slack:
        _, (result,) = await slack.post_message(ALICE, FINANCE, "hello")  # retries are on by default
        assert not result.ok and result.retrying  # alice does not wait for Slack's retries...
        await slack.wait_for_retries()
    assert result.ok and not result.retrying  # ...which update the same result
    assert [a.status for a in result.attempts] == [500, 500, 200]
    retry_headers = [
        (r.headers.get("X-Slack-Retry-Num"), r.headers.get("X-Slack-Retry-Reason")) for r in bot.requests
    ]
    assert retry_headers == [(None, None), ("1", "http_error"), ("2", "http_error")]
    assert len({r.json["event_id"] for r in bot.requests}) == 1  # a retry is the same event
    assert all(r.signature_valid for r in bot.requests)


async def test_retries_are_on_by_default_with_slacks_count_headers_and_opt_out(
    receiver: tuple[Receiver, str],
) -> None:
    """Slack retries a failed event 3 times (immediately, after ~1 min, after ~5 min: here seconds), with
    X-Slack-Retry-Num 1..3 and X-Slack-Retry-Reason; X-Slack-No-Retry: 1 stops it; interactions are not
    retried."""
    from localslack.delivery import RETRY_DELAYS_S

    bot, url = receiver
    async with LocalSlack(bot_url=url, signing_secret=SECRET) as slack:
        assert slack.deliverer.retry is True and slack.deliverer.retry_delays_s == RETRY_DELAYS_S == (0.0, 1.0, 5.0)

    async def always_500(_: Received) -> web.StreamResponse:
        return web.Response(status=500)

    bot.respond = always_500
    async with LocalSlack(bot_url=url, signing_secret=SECRET, retry_delays_s=(0.0, 0.01, 0.01)) as slack:
        _, (result,) = await slack.post_message(ALICE, FINANCE, "hello")
        await slack.wait_for_retries()
        assert len(result.attempts) == 4 and not result.ok and not result.retrying
        assert [(r.headers.get("X-Slack-Retry-Num"), r.headers.get("X-Slack-Retry-Reason")) for r in bot.requests] == [
            (None, None), ("1", "http_error"), ("2", "http_error"), ("3", "http_error")
        ]

        bot.requests.clear()

        async def refuse_for_good(_: Received) -> web.StreamResponse:
            return web.Response(status=500, headers={"X-Slack-No-Retry": "1"})

        bot.respond = refuse_for_good
        _, (result,) = await slack.post_message(ALICE, FINANCE, "again")
        await slack.wait_for_retries()
        assert len(bot.requests) == 1 and not result.retrying

        bot.requests.clear()
        bot.respond = always_500
        client = AsyncWebClient(base_url=slack.api_url, token=BOT_TOKEN)
        card_ts = await post_card(client)
        clicked = await slack.click(BOB, GENERAL, card_ts, "hitl.approve")
        await slack.wait_for_retries()
        assert not clicked.ok and len(bot.requests) == 1  # an interaction is never sent twice


async def test_slow_ack_counts_as_timeout_and_is_retried(receiver: tuple[Receiver, str]) -> None:
    bot, url = receiver
    calls = {"n": 0}

    async def slow_once(_: Received) -> web.StreamResponse:
        calls["n"] += 1
        if calls["n"] == 1:
            await asyncio.sleep(0.5)
        return web.Response(status=200)

    bot.respond = slow_once
    async with LocalSlack(
        bot_url=url, signing_secret=SECRET, retry_delays_s=(0.0,), delivery_timeout_s=0.2
    ) as slack:
        _, (result,) = await slack.post_message(ALICE, FINANCE, "hello")
        await slack.wait_for_retries()
    assert [a.error for a in result.attempts] == ["http_timeout", None]
    assert bot.requests[-1].headers["X-Slack-Retry-Reason"] == "http_timeout"


async def test_response_url_posts_ephemeral_replaces_and_deletes(
    slack: LocalSlack, bot: Receiver, client: AsyncWebClient
) -> None:
    card_ts = await post_card(client)
    await slack.click(BOB, GENERAL, card_ts, "hitl.approve")
    response_url = bot.requests[-1].payload["response_url"]

    async with aiohttp.ClientSession() as http:
        async with http.post(response_url, json={"text": "Only you can see this"}) as answer:
            assert answer.status == 200
        assert [e.text for e in slack.ephemerals(BOB)] == ["Only you can see this"]
        assert slack.ephemerals(ALICE) == [] and len(slack.messages(GENERAL)) == 1

        async with http.post(
            response_url, json={"replace_original": True, "text": "Approved by bob"}
        ) as answer:
            assert answer.status == 200
        replaced = slack.message(GENERAL, card_ts)
        assert replaced is not None and replaced.text == "Approved by bob" and replaced.blocks is None

        async with http.post(response_url, json={"delete_original": True}) as answer:
            assert answer.status == 200
        assert slack.message(GENERAL, card_ts) is None

        async with http.post(f"{slack.base_url}/response_url/nope", json={"text": "x"}) as answer:
            assert answer.status == 404


async def test_home_opened_event_and_unreachable_bot(slack: LocalSlack, bot: Receiver) -> None:
    result = await slack.open_home(DAVE)
    event = bot.requests[-1].json["event"]
    assert result.ok and event["type"] == "app_home_opened" and event["tab"] == "home"
    assert event["user"] == DAVE and event["channel"] == slack.dm_channel(DAVE)

    slack.set_bot_url("http://127.0.0.1:9/slack/events")  # nothing listens on the discard port
    _, (result,) = await slack.post_message(ALICE, FINANCE, "anyone there?")
    assert not result.ok and result.error == "connection_failed"
    assert result.friendly_error() == (
        "The bot did not answer (connection refused) — is it running? Slack will send it again."
    )
    failed = await slack.slash_command(ALICE, "/approvers", "", GENERAL)
    assert not failed.ok
    assert slack.ephemerals(ALICE)[-1].text == '/approvers failed with the error "dispatch_failed"'


async def test_forged_and_stale_requests_can_be_sent_raw(slack: LocalSlack, bot: Receiver) -> None:
    body = json.dumps({"type": "event_callback", "event": {"type": "message"}}).encode()
    forged = await slack.deliver_raw(
        body, {"Content-Type": "application/json", **slack.sign(b"something else")}
    )
    stale = await slack.deliver_raw(
        body, {"Content-Type": "application/json", **slack.sign(body, int(time.time()) - 600)}
    )
    good = await slack.deliver_raw(body, {"Content-Type": "application/json", **slack.sign(body)})
    assert (forged.status, stale.status, good.status) == (401, 401, 200)


# ---- a real Bolt app as the bot -----------------------------------------------------------------------


async def test_bolt_app_round_trip(slack: LocalSlack) -> None:
    client = AsyncWebClient(base_url=slack.api_url, token=BOT_TOKEN)
    app = AsyncApp(signing_secret=SECRET, client=client)
    seen: list[str] = []

    @app.event("app_mention")
    async def on_mention(event: dict, say) -> None:  # noqa: ANN001
        seen.append(event["event_ts"])
        await say(text="Approval needed", blocks=APPROVAL_BLOCKS, thread_ts=event["ts"])

    @app.event("message")
    async def on_message(event: dict) -> None:
        seen.append("message")

    @app.action("hitl.approve")
    async def on_approve(ack, body: dict, client: AsyncWebClient) -> None:  # noqa: ANN001
        await ack()
        await client.views_open(trigger_id=body["trigger_id"], view=ANSWER_MODAL)

    @app.view("hitl.free_text")
    async def on_submit(ack, view: dict, respond) -> None:  # noqa: ANN001
        text = view["state"]["values"]["answer"]["text"]["value"]
        if len(text) < 3:
            await ack(response_action="errors", errors={"answer": "Too short"})
        else:
            await ack()

    @app.command("/approvers")
    async def on_command(ack, respond) -> None:  # noqa: ANN001
        await ack("Working on it")
        await respond(text="Approvers: <@U0BOB>")

    runner, url = await serve(app.web_app(path="/slack/events"))
    slack.set_bot_url(url)
    try:
        root_ts, results = await slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1")
        assert all(r.ok for r in results)
        card = await slack.wait_for_message(
            GENERAL, thread_ts=root_ts, predicate=lambda m: m.bot_id is not None
        )
        assert card.blocks == APPROVAL_BLOCKS and "message" in seen

        assert (await slack.click(BOB, GENERAL, card.ts, "hitl.approve")).ok
        (modal_view,) = await slack.wait_for(lambda: slack.open_views(BOB))
        await slack.submit_view(BOB, modal_view.id, {"answer": {"text": "no"}})
        assert slack.open_views(BOB)[0].errors == {"answer": "Too short"}
        await slack.submit_view(BOB, modal_view.id, {"answer": {"text": "Tuesday"}})
        assert slack.open_views(BOB) == []

        assert (await slack.slash_command(ALICE, "/approvers", "", GENERAL)).ok
        texts = await slack.wait_for(
            lambda: {e.text for e in slack.ephemerals(ALICE)} if len(slack.ephemerals(ALICE)) == 2 else None
        )
        assert texts == {"Working on it", "Approvers: <@U0BOB>"}  # ack body and respond() race, as in Slack
    finally:
        await runner.cleanup()


HOME_VIEW = {
    "type": "home",
    "blocks": [
        {"type": "header", "text": {"type": "plain_text", "text": "Approver lists"}},
        {
            "type": "input",
            "block_id": "finance",
            "dispatch_action": True,
            "label": {"type": "plain_text", "text": "Finance approvers"},
            "element": {"type": "multi_users_select", "action_id": "set_approvers", "initial_users": [BOB]},
        },
        {
            "type": "actions",
            "block_id": "home-actions",
            "elements": [
                {
                    "type": "button",
                    "action_id": "refresh",
                    "text": {"type": "plain_text", "text": "Refresh"},
                    "value": "r",
                }
            ],
        },
    ],
}


async def test_interactions_inside_home_and_modal_views(
    slack: LocalSlack, bot: Receiver, client: AsyncWebClient
) -> None:
    home_id = (await client.views_publish(user_id=ALICE, view=HOME_VIEW))["view"]["id"]
    result = await slack.select_users(ALICE, home_id, "set_approvers", [BOB, DAVE])
    assert result is not None and result.ok
    payload = bot.requests[-1].payload
    assert payload["container"] == {"type": "view", "view_id": home_id}
    assert payload["view"]["type"] == "home" and "response_url" not in payload and "channel" not in payload
    assert (
        payload["actions"][0]["selected_users"] == [BOB, DAVE]
        and payload["actions"][0]["block_id"] == "finance"
    )
    assert payload["view"]["state"]["values"]["finance"]["set_approvers"]["selected_users"] == [BOB, DAVE]

    await slack.click_in_view(ALICE, home_id, "refresh")
    assert bot.requests[-1].payload["actions"][0]["value"] == "r"

    modal_id = (await client.views_open(trigger_id=slack.issue_trigger_id(ALICE), view=ANSWER_MODAL))["view"][
        "id"
    ]
    sent = len(bot.requests)
    # An input block without dispatch_action keeps the choice for the submission and sends nothing.
    assert await slack.select_users(ALICE, modal_id, "users", [DAVE]) is None
    assert len(bot.requests) == sent
    await slack.submit_view(ALICE, modal_id, {"answer": {"text": "ok"}})
    values = bot.requests[-1].payload["view"]["state"]["values"]
    assert values["approvers"]["users"]["selected_users"] == [DAVE]

    with pytest.raises(LocalSlackError):
        await slack.click_in_view(ALICE, modal_id, "refresh")  # the modal is closed now


async def test_bot_messages_are_echoed_when_asked(receiver: tuple[Receiver, str]) -> None:
    bot, url = receiver
    async with LocalSlack(bot_url=url, signing_secret=SECRET, echo_bot_messages=True) as slack:
        client = AsyncWebClient(base_url=slack.api_url, token=BOT_TOKEN)
        posted = await client.chat_postMessage(channel=FINANCE, text="working…")
        await client.chat_update(channel=FINANCE, ts=posted["ts"], text="done")
        await slack.wait_for(lambda: len(bot.requests) >= 2)
    events = sorted((r.json["event"] for r in bot.requests), key=lambda e: e["event_ts"])
    assert events[0]["bot_id"] == "B0BOT" and events[0]["ts"] == posted["ts"] and "subtype" not in events[0]
    assert events[1]["subtype"] == "message_changed" and events[1]["message"]["text"] == "done"
    assert events[1]["previous_message"]["text"] == "working…"


async def test_form_inputs_submit_in_slacks_state_shapes_prefilled_ones_included(
    slack: LocalSlack, bot: Receiver, client: AsyncWebClient
) -> None:
    """The inputs the form generator uses (blocks.forms): untouched ones report their initial value, and a
    datetimepicker reports epoch seconds, as Slack does."""
    def block(block_id: str, element: dict) -> dict:
        return {"type": "input", "block_id": block_id, "label": {"type": "plain_text", "text": block_id},
                "optional": True, "element": {"action_id": "value", **element}}

    option = {"text": {"type": "plain_text", "text": "pro"}, "value": "pro"}
    form = {"type": "modal", "callback_id": "form", "title": {"type": "plain_text", "text": "Form"},
            "submit": {"type": "plain_text", "text": "Send"}, "blocks": [
                block("amount", {"type": "number_input", "is_decimal_allowed": True, "initial_value": "40"}),
                block("plan", {"type": "static_select", "options": [option], "initial_option": option}),
                block("tags", {"type": "multi_static_select", "options": [option], "initial_options": [option]}),
                block("notify", {"type": "checkboxes", "options": [option], "initial_options": [option]}),
                block("at", {"type": "datetimepicker", "initial_date_time": 1764806400}),
                block("due", {"type": "datetimepicker"}),
            ]}
    opened = await client.views_open(trigger_id=slack.issue_trigger_id(ALICE), view=form)
    await slack.submit_view(ALICE, opened["view"]["id"], {"due": {"value": "2026-12-04T10:30"}})
    values = bot.requests[-1].payload["view"]["state"]["values"]
    assert values["amount"]["value"] == {"type": "number_input", "value": "40"}
    assert values["plan"]["value"]["selected_option"]["value"] == "pro"
    assert [o["value"] for o in values["tags"]["value"]["selected_options"]] == ["pro"]
    assert [o["value"] for o in values["notify"]["value"]["selected_options"]] == ["pro"]
    assert values["at"]["value"] == {"type": "datetimepicker", "selected_date_time": 1764806400}
    assert values["due"]["value"] == {"type": "datetimepicker", "selected_date_time": 1796380200}
