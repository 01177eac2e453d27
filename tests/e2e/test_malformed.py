"""Malformed and forged requests over HTTP, as an attacker or a broken proxy would send them.

The rule (fail closed): unsigned, badly signed or stale → 401 before anything is parsed; signed but
malformed → 400 (or 200-and-ignore where Slack expects it, e.g. an unknown event type). Never a 5xx:
Slack retries those, and a crash on input is a bug.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from bot.models.scripted import ScriptedModel
from localslack.seed import ALICE, TEAM_ID
from tests.e2e.conftest import SIGNING_SECRET
from tests.e2e.test_approval_flow import mention_and_wait_for_card
from tests.e2e.test_slack_surface import question_script

FORM = "application/x-www-form-urlencoded"
JSON = "application/json"


def signature(body: bytes, timestamp: str, secret: str = SIGNING_SECRET) -> str:
    """Slack's v0 signature over the raw bytes (reference/slack/payloads/signing.json)."""
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def signed(body: bytes, content_type: str, *, timestamp: int | None = None, secret: str = SIGNING_SECRET) -> dict:
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    return {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": signature(body, stamp, secret),
    }


def form_payload(payload: Any) -> bytes:
    return ("payload=" + quote(json.dumps(payload))).encode()


def block_actions(**fields: Any) -> dict:
    payload = {
        "type": "block_actions",
        "user": {"id": ALICE, "team_id": TEAM_ID},
        "team": {"id": TEAM_ID, "domain": "acme-local"},
        "api_app_id": "A0LOCAL",
        "trigger_id": "1.2.3",
        "container": {"type": "message", "message_ts": "1.000001", "channel_id": "C0GENERAL"},
        "channel": {"id": "C0GENERAL", "name": "general"},
        "actions": [{"action_id": "nothing:of:ours", "block_id": "b", "type": "button", "value": "x"}],
    }
    payload.update(fields)
    return payload


def event_callback(event: Any, **fields: Any) -> dict:
    envelope = {
        "type": "event_callback",
        "team_id": TEAM_ID,
        "api_app_id": "A0LOCAL",
        "event_id": "Ev0MALFORMED",
        "event_time": int(time.time()),
        "authorizations": [{"team_id": TEAM_ID, "user_id": "U0BOT", "is_bot": True}],
        "event": event,
    }
    envelope.update(fields)
    return envelope


@pytest.fixture
async def http(local_slack, start_app) -> AsyncIterator[httpx.AsyncClient]:
    bot = await start_app(ScriptedModel([]), [])
    async with httpx.AsyncClient(base_url=bot.url, timeout=10) as client:
        yield client
        health = await client.get("/healthz")
        assert health.status_code == 200, "the process must survive every request"


async def post(http: httpx.AsyncClient, body: bytes, headers: dict) -> httpx.Response:
    return await http.post("/slack/events", content=body, headers=headers)


# --- signed but malformed: 400 ----------------------------------------------------------------

SIGNED_MALFORMED = {
    "form payload is a JSON list": (form_payload([1, 2]), FORM),
    "form payload is a JSON string": (form_payload("hello"), FORM),
    "form payload is not JSON": (b"payload=%7Bnot-json", FORM),
    "JSON body is a list": (b"[]", JSON),
    "JSON body is null": (b"null", JSON),
    "JSON body is a number": (b"42", JSON),
    "JSON body is truncated": (b'{"type": "event_callback", "event": {"ty', JSON),
    "JSON object without a type": (json.dumps({"hello": "world"}).encode(), JSON),
    "block_actions with no actions": (form_payload(block_actions(actions=[])), FORM),
    "block_actions whose actions is an object": (form_payload(block_actions(actions={"a": 1})), FORM),
    "block_actions whose action is a string": (form_payload(block_actions(actions=["approve"])), FORM),
    "block_actions whose action_id is a number": (
        form_payload(block_actions(actions=[{"action_id": 7, "block_id": "b", "type": "button"}])), FORM),
    "block_actions whose user is a list": (form_payload(block_actions(user=[ALICE])), FORM),
    "block_actions whose team is a number": (form_payload(block_actions(team=5)), FORM),
    "view_submission whose view is a string": (
        form_payload({"type": "view_submission", "user": {"id": ALICE}, "team": {"id": TEAM_ID}, "view": "v"}), FORM),
    "event_callback whose event is a string": (json.dumps(event_callback("app_mention")).encode(), JSON),
    "event_callback without an event": (json.dumps(event_callback(None)).encode(), JSON),
    "event_callback whose authorizations is a string": (
        json.dumps(event_callback({"type": "app_mention"}, authorizations="T0LOCAL")).encode(), JSON),
    # kinds whose fields Bolt reads before any listener (a 500 from its middleware before)
    "interactive_message whose callback_id is a number": (form_payload(
        {"type": "interactive_message", "callback_id": 0, "actions": [{"name": "a", "type": "button"}],
         "user": {"id": ALICE}, "team": {"id": TEAM_ID}}), FORM),
    "interactive_message of ours without actions": (form_payload(
        {"type": "interactive_message", "callback_id": "hitl:x", "user": {"id": ALICE}, "team": {"id": TEAM_ID}}),
        FORM),
    "workflow_step_edit whose callback_id is a list": (form_payload(
        {"type": "workflow_step_edit", "callback_id": [], "workflow_step": {}, "user": {"id": ALICE},
         "team": {"id": TEAM_ID}}), FORM),
    "block_suggestion whose action_id is a number": (form_payload(
        {"type": "block_suggestion", "action_id": 7, "block_id": "b", "value": "x", "user": {"id": ALICE},
         "team": {"id": TEAM_ID}}), FORM),
    "shortcut whose callback_id is an object": (form_payload(
        {"type": "shortcut", "callback_id": {"a": 1}, "user": {"id": ALICE}, "team": {"id": TEAM_ID}}), FORM),
    "assistant_thread_started whose context is true": (json.dumps(event_callback(
        {"type": "assistant_thread_started", "assistant_thread": {
            "user_id": ALICE, "channel_id": "D0ALICE", "thread_ts": "1.2", "context": True}})).encode(), JSON),
    "assistant_thread_context_changed whose thread is a number": (json.dumps(event_callback(
        {"type": "assistant_thread_context_changed", "assistant_thread": 5})).encode(), JSON),
    "app_home_opened whose user is a list": (json.dumps(event_callback(
        {"type": "app_home_opened", "user": [ALICE], "tab": "home"})).encode(), JSON),
    "app_mention whose text is an object": (
        json.dumps(event_callback({"type": "app_mention", "user": ALICE, "text": {"x": 1}, "ts": "1.2",
                                   "channel": "C0GENERAL"})).encode(), JSON),
}


@pytest.mark.parametrize("case", list(SIGNED_MALFORMED))
async def test_signed_but_malformed_is_a_400(http, case):
    body, content_type = SIGNED_MALFORMED[case]
    response = await post(http, body, signed(body, content_type))
    assert response.status_code == 400, (case, response.status_code, response.text)


async def test_signed_non_utf8_body_is_refused_without_a_5xx(http):
    body = b"payload=\xff\xfe"
    response = await post(http, body, signed(body, FORM))
    assert 400 <= response.status_code < 500, response.status_code


# --- signed and well formed but not for us: 200 and ignored ----------------------------------


async def test_url_verification_answers_the_challenge(http):
    body = json.dumps({"type": "url_verification", "challenge": "c-123", "token": "t"}).encode()
    response = await post(http, body, signed(body, JSON))
    assert response.status_code == 200 and "c-123" in response.text


async def test_unknown_event_type_is_acknowledged(http):
    body = json.dumps(event_callback({"type": "reaction_added", "user": ALICE, "reaction": "+1"})).encode()
    response = await post(http, body, signed(body, JSON))
    assert response.status_code == 200


async def test_unknown_action_id_is_acknowledged(http):
    body = form_payload(block_actions())
    response = await post(http, body, signed(body, FORM))
    assert response.status_code == 200


# --- unsigned, badly signed or stale: 401 before parsing ---------------------------------------


def _unsigned_cases() -> dict[str, tuple[bytes, dict]]:
    good = form_payload(block_actions())
    now = int(time.time())
    stamp = str(now)
    return {
        "no signature headers": (good, {"Content-Type": FORM}),
        "unsigned malformed payload": (form_payload([1, 2]), {"Content-Type": FORM}),
        "unsigned unparsable payload": (b"payload=%7Bnot-json", {"Content-Type": FORM}),
        "non-numeric timestamp": (good, {"Content-Type": FORM, "X-Slack-Request-Timestamp": "soon",
                                         "X-Slack-Signature": signature(good, "soon")}),
        "non-ASCII signature": (good, {"Content-Type": FORM, "X-Slack-Request-Timestamp": stamp,
                                       "X-Slack-Signature": "v0=é".encode()}),
        "empty signature": (good, {"Content-Type": FORM, "X-Slack-Request-Timestamp": stamp,
                                   "X-Slack-Signature": ""}),
        "wrong secret": (good, signed(good, FORM, secret="not-the-secret")),
        "stale timestamp (6 minutes)": (good, signed(good, FORM, timestamp=now - 360)),
        "future timestamp (6 minutes)": (good, signed(good, FORM, timestamp=now + 360)),
        "huge timestamp": (good, {"Content-Type": FORM, "X-Slack-Request-Timestamp": "9" * 400,
                                  "X-Slack-Signature": signature(good, "9" * 400)}),
        "body changed after signing": (good + b"&x=1", signed(good, FORM)),
        "signature of another request": (good, signed(form_payload(block_actions(trigger_id="9")), FORM)),
    }


UNSIGNED = _unsigned_cases()


@pytest.mark.parametrize("case", list(UNSIGNED))
async def test_unsigned_or_badly_signed_is_a_401(http, case):
    body, headers = _unsigned_cases()[case]  # built afresh: timestamps are relative to now
    response = await post(http, body, headers)
    assert response.status_code == 401, (case, response.status_code, response.text)


# --- signed, aimed at a live card, with junk where a listener reads ------------------------------


async def captured_choice(slack, card, action_id: str, value: str) -> dict:
    """The exact block_actions payload Slack would send for alice's pick in a card's menu (not delivered)."""
    previous = slack.bot_url
    slack.set_bot_url(None)
    try:
        result = await slack.select(ALICE, "C0GENERAL", card.ts, action_id, value)
    finally:
        slack.set_bot_url(previous)
    assert result.payload and result.payload["actions"][0].get("selected_option"), result
    return result.payload


@pytest.mark.parametrize("junk", [["Sunday"], {"value": "Sunday"}, 7, None], ids=["list", "dict", "number", "null"])
async def test_a_pick_whose_option_value_is_not_a_string_is_a_400_and_answers_nothing(local_slack, start_app, junk):
    bot = await start_app(question_script(), [])
    ts, card = await mention_and_wait_for_card(local_slack, "plan the offsite")
    menu = next(e for b in card.blocks for e in b.get("elements", []) if "options" in e)
    sunday = next(o["value"] for o in menu["options"] if "Sunday" in json.dumps(o["text"]))
    pick = await captured_choice(local_slack, card, menu["action_id"], sunday)
    pick["actions"][0]["selected_option"]["value"] = junk
    async with httpx.AsyncClient(base_url=bot.url, timeout=10) as http:
        body = form_payload(pick)
        response = await post(http, body, signed(body, FORM))
        assert response.status_code == 400, (response.status_code, response.text)
        assert (await http.get("/healthz")).status_code == 200
    # the question is still open: the real pick answers it
    await local_slack.select(ALICE, "C0GENERAL", card.ts, menu["action_id"], sunday)
    reply = await local_slack.wait_for_message("C0GENERAL", thread_ts=ts, predicate=lambda m: "You said" in m.text)
    assert "Sunday" in reply.text
