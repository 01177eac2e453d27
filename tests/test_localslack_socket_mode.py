"""localslack's Socket Mode, driven by slack_sdk's own aiohttp Socket Mode client.

The client gets its URL from ``apps.connections.open`` (app-level token), receives ``hello`` and envelopes,
and acks them; while it is connected nothing goes to the HTTP request URL, which here is a recording
receiver so that the switch back to signed HTTP is visible too.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from localslack import ALICE, APP_ID, BOT_TOKEN, BOT_USER_ID, DAVE, FINANCE, GENERAL, LocalSlack

SECRET = "socket-test-secret"
AckPayload = Callable[[SocketModeRequest], Awaitable[dict[str, Any] | None | bool]]

CARD = [
    {
        "type": "actions",
        "block_id": "req-1-actions",
        "elements": [
            {
                "type": "button",
                "action_id": "hitl.approve",
                "text": {"type": "plain_text", "text": "Approve"},
                "value": "req_1",
            }
        ],
    }
]
MODAL = {
    "type": "modal",
    "callback_id": "hitl.free_text",
    "title": {"type": "plain_text", "text": "Your answer"},
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


@dataclass
class HttpBot:
    """The HTTP request URL: records what reaches it and checks Slack's signature."""

    verifier: SignatureVerifier = field(default_factory=lambda: SignatureVerifier(SECRET))
    requests: list[tuple[bytes, bool]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.requests.append((body, self.verifier.is_valid_request(body, dict(request.headers))))
        return web.Response(status=200)


@dataclass
class SocketApp:
    """A Socket Mode app on slack_sdk's client: records every raw message and request; acks with ``answer``."""

    client: SocketModeClient
    raw: list[dict[str, Any]] = field(default_factory=list)
    requests: list[SocketModeRequest] = field(default_factory=list)
    answer: AckPayload | None = None  # returns the ack payload; False = do not ack

    async def on_message(self, message: aiohttp.WSMessage) -> None:
        self.raw.append(json.loads(message.data))  # every text frame, also the disconnects the client consumes

    async def on_request(self, client: Any, request: SocketModeRequest) -> None:
        self.requests.append(request)
        payload = await self.answer(request) if self.answer is not None else None
        if payload is False:
            return
        await client.send_socket_mode_response(SocketModeResponse(request.envelope_id, payload=payload or None))

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.raw if m.get("type") == kind]


@pytest.fixture
async def http_bot() -> AsyncIterator[tuple[HttpBot, str]]:
    bot = HttpBot()
    app = web.Application()
    app.router.add_post("/slack/events", bot.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield bot, f"http://127.0.0.1:{port}/slack/events"
    await runner.cleanup()


@pytest.fixture
async def slack(http_bot: tuple[HttpBot, str]) -> AsyncIterator[LocalSlack]:
    async with LocalSlack(bot_url=http_bot[1], signing_secret=SECRET) as workspace:
        yield workspace


@pytest.fixture
async def connect(slack: LocalSlack) -> AsyncIterator[Callable[..., Awaitable[SocketApp]]]:
    """``await connect()`` → a connected SocketApp; the web client carries the bot token, as Bolt's does."""
    apps: list[SocketApp] = []

    async def start(**client_options: Any) -> SocketApp:
        web_client = AsyncWebClient(base_url=slack.api_url, token=BOT_TOKEN)
        client = SocketModeClient(app_token=slack.app_token, web_client=web_client, **client_options)
        app = SocketApp(client)
        client.on_message_listeners.append(app.on_message)
        client.socket_mode_request_listeners.append(app.on_request)
        apps.append(app)
        await client.connect()
        await slack.wait_for(lambda: app.of_type("hello"), timeout_s=5)
        return app

    yield start
    for app in apps:
        await app.client.close()


async def test_client_connects_receives_events_and_acks_instead_of_http(
    slack: LocalSlack, connect: Callable[..., Awaitable[SocketApp]], http_bot: tuple[HttpBot, str]
) -> None:
    app = await connect()
    opened = slack.calls_to("apps.connections.open")
    assert len(opened) == 1 and opened[0].token == slack.app_token
    assert opened[0].response["url"].startswith(f"ws://127.0.0.1:{slack.port}/socket/")
    hello = app.of_type("hello")[0]
    assert hello["num_connections"] == 1 and hello["connection_info"] == {"app_id": APP_ID}
    await slack.wait_for_socket(timeout_s=1)

    _, results = await slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> hello over the socket")

    assert [r.kind for r in results] == ["event_callback:app_mention", "event_callback:message"]
    assert all(r.ok for r in results), [(r.error, r.detail) for r in results]
    assert http_bot[0].requests == []  # Socket Mode replaces the request URL
    received = {r.payload["event"]["type"]: r for r in app.requests}
    assert set(received) == {"app_mention", "message"}
    for result in results:
        request = received[result.payload["event"]["type"]]
        assert request.type == "events_api"
        assert request.payload == result.payload  # the whole event_callback envelope, unchanged
        assert request.payload["type"] == "event_callback"
        assert (request.accepts_response_payload, request.retry_attempt, request.retry_reason) == (False, 0, "")
    assert {a.envelope_id for a in slack.socket_mode.acks} == {r.envelope_id for r in app.requests}

    await app.client.close()
    await slack.wait_for(lambda: not slack.socket_connected, timeout_s=5)
    _, results = await slack.post_message(ALICE, FINANCE, "back to HTTP")
    assert [r.ok for r in results] == [True]
    assert [valid for _, valid in http_bot[0].requests] == [True]  # signed HTTP again
    assert json.loads(http_bot[0].requests[0][0])["event"]["text"] == "back to HTTP"


async def test_unacked_event_times_out_and_is_retried_with_retry_fields(
    http_bot: tuple[HttpBot, str], connect: Callable[..., Awaitable[SocketApp]], slack: LocalSlack
) -> None:
    slack.deliverer.timeout_s = 0.2
    slack.deliverer.retry, slack.deliverer.retry_delays_s = True, (0.0, 0.0)
    app = await connect()

    async def ack_only_retries(request: SocketModeRequest) -> bool | None:
        return None if request.retry_attempt else False

    app.answer = ack_only_retries
    _, (result,) = await slack.post_message(ALICE, FINANCE, "are you there?")
    await slack.wait_for_retries()

    assert result.ok and [a.error for a in result.attempts] == ["http_timeout", None]
    assert [(r.retry_attempt, r.retry_reason) for r in app.requests] == [(0, ""), (1, "timeout")]
    assert len({r.payload["event_id"] for r in app.requests}) == 1  # a retry is the same event
    assert len({r.envelope_id for r in app.requests}) == 2  # in a new envelope

    slack.deliverer.retry = False

    async def never_ack(_: SocketModeRequest) -> bool:
        return False

    app.answer = never_ack
    _, (result,) = await slack.post_message(ALICE, FINANCE, "still there?")
    assert not result.ok and result.error == "http_timeout" and len(result.attempts) == 1
    assert http_bot[0].requests == []


async def test_commands_and_interactions_use_the_ack_payload_as_response_body(
    slack: LocalSlack, connect: Callable[..., Awaitable[SocketApp]]
) -> None:
    app = await connect()

    async def answer(request: SocketModeRequest) -> dict[str, Any] | None:
        if request.type == "slash_commands":
            return {"text": f"you said {request.payload['text']}"}
        if request.payload.get("type") == "view_submission":
            return {"response_action": "errors", "errors": {"answer": "Say a bit more"}}
        return None

    app.answer = answer
    result = await slack.slash_command(DAVE, "/approvers", "list")
    command = app.requests[-1]
    assert result.ok and command.type == "slash_commands" and command.accepts_response_payload
    assert command.payload["command"] == "/approvers" and command.payload["user_id"] == DAVE
    assert command.payload["response_url"].startswith(slack.base_url)
    assert slack.ephemerals(DAVE)[-1].text == "you said list"

    web_client = AsyncWebClient(base_url=slack.api_url, token=BOT_TOKEN)
    posted = await web_client.chat_postMessage(channel=GENERAL, text="Approval needed", blocks=CARD)
    result = await slack.click(ALICE, GENERAL, posted["ts"], "hitl.approve")
    click = app.requests[-1]
    assert result.ok and (click.type, click.payload["type"]) == ("interactive", "block_actions")
    assert not click.accepts_response_payload and click.retry_attempt is None
    assert click.payload["actions"][0]["value"] == "req_1" and click.payload["user"]["id"] == ALICE

    opened = await web_client.views_open(trigger_id=slack.issue_trigger_id(ALICE), view=MODAL)
    view_id = opened["view"]["id"]
    result = await slack.submit_view(ALICE, view_id, {"answer": {"text": "Tue"}})
    submission = app.requests[-1]
    assert result.ok and submission.payload["type"] == "view_submission" and submission.accepts_response_payload
    assert submission.payload["view"]["state"]["values"]["answer"]["text"]["value"] == "Tue"
    (shown,) = slack.open_views(ALICE)  # the ack's response_action kept the modal open with the error
    assert shown.id == view_id and shown.errors == {"answer": "Say a bit more"}

    app.answer = None  # an empty ack closes the modal, as an empty HTTP 200 does
    await slack.submit_view(ALICE, view_id, {"answer": {"text": "Tuesday after 3pm"}})
    assert slack.open_views(ALICE) == []


async def test_apps_connections_open_wants_the_app_token_and_urls_are_single_use(slack: LocalSlack) -> None:
    async def open_with(token: str | None) -> str:
        try:
            return (await AsyncWebClient(base_url=slack.api_url, token=token).apps_connections_open(
                app_token=token))["url"]  # type: ignore[arg-type]
        except SlackApiError as exc:
            return str(exc.response["error"])

    assert await open_with(BOT_TOKEN) == "not_allowed_token_type"
    assert await open_with("xapp-1-A0OTHER-1-nope") == "invalid_auth"
    assert await open_with("") == "not_authed"
    with pytest.raises(SlackApiError) as refused:  # and the app token is for Socket Mode only
        await AsyncWebClient(base_url=slack.api_url, token=slack.app_token).chat_postMessage(
            channel=GENERAL, text="hi")
    assert refused.value.response["error"] == "not_allowed_token_type"

    url = await open_with(slack.app_token)
    slack.socket_mode.ping_interval_s = 0.1
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url, autoping=False) as ws:
            hello = await ws.receive_json(timeout=2)
            assert hello["type"] == "hello"
            ping = await ws.receive(timeout=2)  # Slack pings its sockets; a dead client gets dropped
            assert ping.type == aiohttp.WSMsgType.PING
            with pytest.raises(aiohttp.WSServerHandshakeError) as again:
                await session.ws_connect(url)
            assert again.value.status == 401


async def test_disconnect_message_makes_the_client_reconnect_without_losing_events(
    slack: LocalSlack, connect: Callable[..., Awaitable[SocketApp]]
) -> None:
    slack.socket_mode.refresh_grace_s = 0.2
    app = await connect()

    assert await slack.disconnect_sockets("refresh_requested") == 1
    await slack.wait_for(lambda: len(app.of_type("hello")) == 2, timeout_s=5)
    assert app.of_type("disconnect")[0]["reason"] == "refresh_requested"
    assert len(slack.calls_to("apps.connections.open")) == 2  # a fresh URL for the new socket
    await slack.wait_for(lambda: len(slack.socket_mode.open_connections) == 1, timeout_s=5)

    _, (result,) = await slack.post_message(ALICE, FINANCE, "after the refresh")
    assert result.ok
    assert app.requests[-1].payload["event"]["text"] == "after the refresh"
    assert slack.socket_mode.connection_count == 2


async def test_socket_closing_mid_envelope_fails_fast_and_the_retry_goes_over_http(
    slack: LocalSlack, connect: Callable[..., Awaitable[SocketApp]], http_bot: tuple[HttpBot, str]
) -> None:
    """A socket that drops mid-envelope fails that attempt at once (no 3 s wait) and the retry uses HTTP."""
    slack.deliverer.retry, slack.deliverer.retry_delays_s = True, (0.0,)
    app = await connect(auto_reconnect_enabled=False)

    async def hang_up(_: SocketModeRequest) -> bool:
        await app.client.close()
        return False

    app.answer = hang_up
    _, (result,) = await slack.post_message(ALICE, FINANCE, "anyone?")
    await slack.wait_for_retries()
    assert result.ok and [a.error for a in result.attempts] == ["connection_failed", None]
    assert result.attempts[0].elapsed_s < 2
    assert len(http_bot[0].requests) == 1 and http_bot[0].requests[0][1]
    assert http_bot[0].requests[0][0] and json.loads(http_bot[0].requests[0][0])["event"]["text"] == "anyone?"
