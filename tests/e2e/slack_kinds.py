"""Every kind of request Slack documents sending to an app, as Slack shapes them.

Built from reference/slack/payloads/ and Slack's documented shapes: Events API envelopes of several event
types, ``block_actions`` for each interactive element, view submissions and closes, options requests
(``block_suggestion``), global and message shortcuts, slash commands, legacy attachment actions
(``interactive_message``), dialogs and ``workflow_step_edit``, ``url_verification`` and
``app_rate_limited``, ``ssl_check``. Each is ``(payload, content type)``; slash commands are form fields, interactions a
form's ``payload`` field, events JSON (``encode``).
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlencode

from blocks.actions import (
    APPROVERS_ACTION_PREFIX,
    APPROVERS_BLOCK_PREFIX,
    APPROVERS_CALLBACK_ID,
    APPROVERS_USERS_ACTION_ID,
    REASON_ACTION_ID,
    REASON_BLOCK_ID,
    REASON_CALLBACK_ID,
    REMOVE_SCHEDULE_ACTION_ID,
    REVOKE_GRANT_ACTION_ID,
    modal_metadata,
)
from blocks.answers import FEEDBACK_ACTION, POSITIVE
from localslack.seed import ALICE, BOT_USER_ID, FINANCE, TEAM_ID

FORM = "application/x-www-form-urlencoded"
JSON = "application/json"
APP_ID = "A0LOCAL"
TS = "1767225602.000600"
THREAD_TS = "1767225600.000100"
RESPONSE_URL = "https://hooks.slack.invalid/actions/T0LOCAL/1/abc"
USER = {"id": ALICE, "username": "alice", "name": "alice", "team_id": TEAM_ID}
TEAM = {"id": TEAM_ID, "domain": "acme-local"}
CHANNEL = {"id": FINANCE, "name": "finance"}
# what people type: it must never reach a log line while LOG_CONTENT is off
SECRET_WORDS = "zebra-quartz-typed-by-a-person"


def _text(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text, "emoji": True}


def _option(value: str) -> dict[str, Any]:
    return {"text": _text(value), "value": value}


def event(inner: dict[str, Any]) -> dict[str, Any]:
    return {
        "token": "deprecated-verification-token", "team_id": TEAM_ID, "api_app_id": APP_ID,
        "type": "event_callback", "event_id": "Ev0KINDS", "event_time": int(time.time()),
        "authorizations": [{"enterprise_id": None, "team_id": TEAM_ID, "user_id": BOT_USER_ID, "is_bot": True,
                            "is_enterprise_install": False}],
        "is_ext_shared_channel": False, "event_context": "4-e30", "event": inner,
    }


# (element type, what the action carries besides its ids): Slack's block_actions payload per element
ELEMENTS: dict[str, dict[str, Any]] = {
    "button": {"text": _text("Go"), "value": "go", "style": "primary"},
    "static_select": {"selected_option": _option("Saturday"), "placeholder": _text("Pick")},
    "external_select": {"selected_option": _option("ext-1")},
    "users_select": {"selected_user": ALICE},
    "conversations_select": {"selected_conversation": FINANCE},
    "channels_select": {"selected_channel": FINANCE},
    "multi_static_select": {"selected_options": [_option("a"), _option("b")]},
    "multi_external_select": {"selected_options": [_option("ext-2")]},
    "multi_users_select": {"selected_users": [ALICE, "U0BOB"]},
    "multi_conversations_select": {"selected_conversations": [FINANCE]},
    "multi_channels_select": {"selected_channels": [FINANCE]},
    "overflow": {"selected_option": _option("more")},
    "datepicker": {"selected_date": "2026-12-24", "initial_date": "2026-12-01"},
    "timepicker": {"selected_time": "09:30", "timezone": "Europe/Berlin"},
    "datetimepicker": {"selected_date_time": 1767225600},
    "checkboxes": {"selected_options": [_option("x")]},
    "radio_buttons": {"selected_option": _option("y")},
    "plain_text_input": {"value": SECRET_WORDS},
    "rich_text_input": {"rich_text_value": {"type": "rich_text", "elements": [
        {"type": "rich_text_section", "elements": [{"type": "text", "text": SECRET_WORDS}]}]}},
    "email_text_input": {"value": "alice@example.com"},
    "url_text_input": {"value": "https://example.com/a"},
    "number_input": {"value": "42", "is_decimal_allowed": False},
}


def block_actions(element: str, fields: dict[str, Any]) -> dict[str, Any]:
    action = {"type": element, "action_id": f"kinds.{element}", "block_id": "kinds-block",
              "action_ts": "1767225660.000100", **fields}
    return {
        "type": "block_actions", "user": USER, "api_app_id": APP_ID, "token": "deprecated-verification-token",
        "container": {"type": "message", "message_ts": TS, "channel_id": FINANCE, "is_ephemeral": False},
        "trigger_id": "1767225660.123456.abcdef", "team": TEAM, "enterprise": None,
        "is_enterprise_install": False, "channel": CHANNEL,
        "message": {"type": "message", "ts": TS, "thread_ts": THREAD_TS, "bot_id": "B0BOT", "text": "Pick",
                    "blocks": []},
        "state": {"values": {"kinds-block": {f"kinds.{element}": {"type": element, **fields}}}},
        "response_url": RESPONSE_URL, "actions": [action],
    }


def _view(state: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": "V0KINDS", "team_id": TEAM_ID, "type": "modal", "callback_id": "kinds_modal",
        "private_metadata": "", "title": _text("Kinds"), "blocks": [], "hash": "1767225700.abc",
        "state": {"values": state or {}}, "app_id": APP_ID, "app_installed_team_id": TEAM_ID,
        "root_view_id": "V0KINDS", "previous_view_id": None, "external_id": "", "bot_id": "B0BOT",
    }


def kinds() -> dict[str, tuple[dict[str, Any], str]]:
    """name → (payload, content type): one of each kind of request Slack sends an app."""
    found: dict[str, tuple[dict[str, Any], str]] = {}
    # --- Events API --------------------------------------------------------------------------------
    found["event app_mention"] = (event({
        "type": "app_mention", "user": ALICE, "text": f"<@{BOT_USER_ID}> hello {SECRET_WORDS}", "ts": TS,
        "channel": FINANCE, "event_ts": TS, "team": TEAM_ID}), JSON)
    found["event message (channel)"] = (event({
        "type": "message", "user": ALICE, "text": f"just talking {SECRET_WORDS}", "ts": TS, "channel": FINANCE,
        "event_ts": TS, "channel_type": "channel", "team": TEAM_ID}), JSON)
    found["event message (im)"] = (event({
        "type": "message", "user": ALICE, "text": f"hello {SECRET_WORDS}", "ts": TS, "channel": "D0ALICEDM",
        "event_ts": TS, "channel_type": "im", "team": TEAM_ID}), JSON)
    found["event message (changed)"] = (event({
        "type": "message", "subtype": "message_changed", "channel": FINANCE, "channel_type": "channel",
        "ts": TS, "event_ts": TS, "hidden": True,
        "message": {"type": "message", "user": ALICE, "text": SECRET_WORDS, "ts": THREAD_TS},
        "previous_message": {"type": "message", "user": ALICE, "text": "before", "ts": THREAD_TS}}), JSON)
    found["event app_home_opened"] = (event({
        "type": "app_home_opened", "user": ALICE, "channel": "D0ALICEDM", "tab": "home", "event_ts": TS}), JSON)
    found["event assistant_thread_started"] = (event({
        "type": "assistant_thread_started", "event_ts": TS, "assistant_thread": {
            "user_id": ALICE, "context": {"channel_id": FINANCE, "team_id": TEAM_ID, "enterprise_id": None},
            "channel_id": "D0ALICEDM", "thread_ts": THREAD_TS}}), JSON)
    found["event assistant_thread_context_changed"] = (event({
        "type": "assistant_thread_context_changed", "event_ts": TS, "assistant_thread": {
            "user_id": ALICE, "context": {"channel_id": FINANCE, "team_id": TEAM_ID, "enterprise_id": None},
            "channel_id": "D0ALICEDM", "thread_ts": THREAD_TS}}), JSON)
    found["event reaction_added"] = (event({
        "type": "reaction_added", "user": ALICE, "reaction": "thumbsup", "item_user": BOT_USER_ID,
        "item": {"type": "message", "channel": FINANCE, "ts": TS}, "event_ts": TS}), JSON)
    found["event member_joined_channel"] = (event({
        "type": "member_joined_channel", "user": ALICE, "channel": FINANCE, "channel_type": "C",
        "team": TEAM_ID, "event_ts": TS}), JSON)
    found["url_verification"] = ({"token": "t", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
                                  "type": "url_verification"}, JSON)
    found["ssl_check"] = ({"ssl_check": "1", "token": "deprecated-verification-token"}, FORM)
    found["app_rate_limited"] = ({"token": "t", "type": "app_rate_limited", "team_id": TEAM_ID,
                                  "minute_rate_limited": 1518467820, "api_app_id": APP_ID}, JSON)
    # --- block_actions, one per element type ---------------------------------------------------------
    for element, fields in ELEMENTS.items():
        found[f"block_actions {element}"] = (block_actions(element, fields), FORM)
    # --- views -------------------------------------------------------------------------------------
    found["view_submission"] = ({
        "type": "view_submission", "team": TEAM, "user": USER, "api_app_id": APP_ID,
        "token": "deprecated-verification-token", "trigger_id": "1767225700.1.abc",
        "view": _view({"kinds-block": {"kinds.text": {"type": "plain_text_input", "value": SECRET_WORDS}}}),
        "response_urls": [], "is_enterprise_install": False, "enterprise": None}, FORM)
    found["view_closed"] = ({
        "type": "view_closed", "team": TEAM, "user": USER, "api_app_id": APP_ID,
        "token": "deprecated-verification-token", "view": _view(), "is_cleared": False,
        "is_enterprise_install": False, "enterprise": None}, FORM)
    # --- options requests --------------------------------------------------------------------------
    found["block_suggestion (message)"] = ({
        "type": "block_suggestion", "user": USER, "container": {"type": "message", "message_ts": TS,
                                                                 "channel_id": FINANCE, "is_ephemeral": False},
        "api_app_id": APP_ID, "token": "deprecated-verification-token", "action_id": "kinds.external_select",
        "block_id": "kinds-block", "value": SECRET_WORDS, "team": TEAM, "enterprise": None,
        "is_enterprise_install": False, "channel": CHANNEL,
        "message": {"type": "message", "ts": TS, "text": "Pick", "blocks": []}}, FORM)
    found["block_suggestion (modal)"] = ({
        "type": "block_suggestion", "user": USER, "container": {"type": "view", "view_id": "V0KINDS"},
        "api_app_id": APP_ID, "token": "deprecated-verification-token", "action_id": "kinds.external_select",
        "block_id": "kinds-block", "value": "sat", "team": TEAM, "enterprise": None,
        "is_enterprise_install": False, "view": _view()}, FORM)
    # --- shortcuts ---------------------------------------------------------------------------------
    found["shortcut"] = ({
        "type": "shortcut", "token": "deprecated-verification-token", "action_ts": "1767225700.000100",
        "team": TEAM, "user": USER, "is_enterprise_install": False, "enterprise": None,
        "callback_id": "kinds_shortcut", "trigger_id": "1767225700.1.abc"}, FORM)
    found["message_action"] = ({
        "type": "message_action", "token": "deprecated-verification-token", "action_ts": "1767225700.000100",
        "team": TEAM, "user": USER, "channel": CHANNEL, "is_enterprise_install": False, "enterprise": None,
        "callback_id": "kinds_message_shortcut", "trigger_id": "1767225700.1.abc", "message_ts": TS,
        "message": {"type": "message", "user": ALICE, "ts": TS, "text": SECRET_WORDS, "thread_ts": THREAD_TS},
        "response_url": RESPONSE_URL}, FORM)
    # --- slash commands (form fields, not a payload) ---------------------------------------------------
    found["slash command /approvers"] = ({
        "token": "deprecated-verification-token", "team_id": TEAM_ID, "team_domain": "acme-local",
        "channel_id": FINANCE, "channel_name": "finance", "user_id": ALICE, "user_name": "alice",
        "command": "/approvers", "text": "", "api_app_id": APP_ID, "is_enterprise_install": "false",
        "response_url": RESPONSE_URL, "trigger_id": "1767225700.1.abc"}, FORM)
    found["slash command (not ours)"] = ({
        **found["slash command /approvers"][0], "command": "/weather", "text": SECRET_WORDS}, FORM)
    # --- legacy: attachment actions, dialogs, steps from apps ------------------------------------------
    legacy = {"team": TEAM, "user": {"id": ALICE, "name": "alice"}, "channel": CHANNEL,
              "token": "deprecated-verification-token", "action_ts": "1767225700.000100"}
    found["interactive_message button"] = ({
        "type": "interactive_message", **legacy, "callback_id": "kinds_attachment",
        "actions": [{"name": "approve", "type": "button", "value": "yes"}], "message_ts": TS,
        "attachment_id": "1", "is_app_unfurl": False, "response_url": RESPONSE_URL,
        "trigger_id": "1767225700.1.abc",
        "original_message": {"type": "message", "text": "Legacy", "bot_id": "B0BOT", "ts": TS, "attachments": [
            {"callback_id": "kinds_attachment", "id": 1, "actions": [
                {"id": "1", "name": "approve", "text": "Approve", "type": "button", "value": "yes"}]}]}}, FORM)
    found["interactive_message select"] = ({
        **found["interactive_message button"][0],
        "actions": [{"name": "pick", "type": "select", "selected_options": [{"value": "C0FINANCE"}]}]}, FORM)
    found["dialog_submission"] = ({
        "type": "dialog_submission", **legacy, "callback_id": "kinds_dialog", "state": "",
        "submission": {"comment": SECRET_WORDS}, "response_url": RESPONSE_URL}, FORM)
    found["dialog_cancellation"] = ({
        "type": "dialog_cancellation", **legacy, "callback_id": "kinds_dialog", "state": "",
        "response_url": RESPONSE_URL}, FORM)
    found["dialog_suggestion"] = ({
        "type": "dialog_suggestion", **legacy, "callback_id": "kinds_dialog", "name": "pick",
        "value": SECRET_WORDS}, FORM)
    found["workflow_step_edit"] = ({
        "type": "workflow_step_edit", "token": "deprecated-verification-token",
        "action_ts": "1767225700.000100", "team": TEAM, "user": USER, "callback_id": "kinds_step",
        "trigger_id": "1767225700.1.abc",
        "workflow_step": {"workflow_id": "12345", "step_id": "abc", "inputs": {}, "outputs": []}}, FORM)
    found.update(ours())
    return found


def _home_click(action: dict[str, Any]) -> dict[str, Any]:
    """A click in the person's App Home (Slack sends the whole home view with it)."""
    home = {**_view(), "type": "home", "callback_id": "", "id": "V0HOME"}
    return {"type": "block_actions", "user": USER, "api_app_id": APP_ID, "token": "deprecated-verification-token",
            "container": {"type": "view", "view_id": "V0HOME"}, "trigger_id": "1767225660.123456.abcdef",
            "team": TEAM, "enterprise": None, "is_enterprise_install": False, "view": home,
            "actions": [{"block_id": "home-block", "action_ts": "1767225660.000100", **action}]}


def ours() -> dict[str, tuple[dict[str, Any], str]]:
    """One request for each of our own listeners, aimed at it (our action ids, callback ids, commands and
    the events we act on), so junk in them reaches the code that reads them instead of the fallback."""
    found: dict[str, tuple[dict[str, Any], str]] = {}
    found["ours: App Home approvers pick"] = (_home_click({
        "type": "multi_users_select", "action_id": f"{APPROVERS_ACTION_PREFIX}refund_charge",
        "selected_users": [ALICE, "U0BOB"]}), FORM)
    found["ours: App Home revoke"] = (_home_click({
        "type": "button", "action_id": REVOKE_GRANT_ACTION_ID, "text": _text("Revoke"), "value": "g-0001"}), FORM)
    found["ours: App Home remove schedule"] = (_home_click({
        "type": "button", "action_id": REMOVE_SCHEDULE_ACTION_ID, "text": _text("Remove"), "value": "s-0001"}), FORM)
    feedback = block_actions("feedback_buttons", {"value": POSITIVE})
    feedback["actions"][0]["action_id"] = FEEDBACK_ACTION
    found["ours: feedback"] = (feedback, FORM)
    found["ours: a card's button"] = (
        {**block_actions("button", {"text": _text("Approve"), "value": "approve"}),
         "actions": [{"type": "button", "action_id": "hitl:0123456789abcdef.feedface:btn:0", "block_id": "b",
                      "value": "approve", "action_ts": "1767225660.000100"}]}, FORM)
    found["ours: approvers editor saved"] = ({
        "type": "view_submission", "team": TEAM, "user": USER, "api_app_id": APP_ID,
        "token": "deprecated-verification-token", "trigger_id": "1767225700.1.abc",
        "view": {**_view({f"{APPROVERS_BLOCK_PREFIX}refund_charge": {APPROVERS_USERS_ACTION_ID: {
            "type": "multi_users_select", "selected_users": [ALICE]}}}), "callback_id": APPROVERS_CALLBACK_ID},
        "response_urls": [], "is_enterprise_install": False, "enterprise": None}, FORM)
    found["ours: reason submitted"] = ({
        "type": "view_submission", "team": TEAM, "user": USER, "api_app_id": APP_ID,
        "token": "deprecated-verification-token", "trigger_id": "1767225700.1.abc",
        "view": {**_view({REASON_BLOCK_ID: {REASON_ACTION_ID: {"type": "plain_text_input", "value": SECRET_WORDS}}}),
                 "callback_id": REASON_CALLBACK_ID,
                 "private_metadata": modal_metadata("0123456789abcdef.feedface", FINANCE, TS)},
        "response_urls": [], "is_enterprise_install": False, "enterprise": None}, FORM)
    found["ours: event agent_session_stopped"] = (event({
        "type": "agent_session_stopped", "channel": "D0ALICEDM", "thread_ts": THREAD_TS, "user": ALICE,
        "streaming_message_ts": [], "event_ts": TS}), JSON)
    found["ours: event tokens_revoked"] = ({
        "token": "deprecated-verification-token", "team_id": TEAM_ID, "api_app_id": APP_ID, "type": "event_callback",
        "event_id": "Ev0REVOKED", "event_time": int(time.time()),
        "event": {"type": "tokens_revoked", "tokens": {"oauth": ["U0NOBODY"], "bot": []}, "event_ts": TS}}, JSON)
    found["ours: slash command /agent"] = ({
        "token": "deprecated-verification-token", "team_id": TEAM_ID, "team_domain": "acme-local",
        "channel_id": FINANCE, "channel_name": "finance", "user_id": ALICE, "user_name": "alice",
        "command": "/agent", "text": "list", "api_app_id": APP_ID, "is_enterprise_install": "false",
        "response_url": RESPONSE_URL, "trigger_id": "1767225700.1.abc"}, FORM)
    return found


def encode(payload: Any, content_type: str) -> bytes:
    """The body Slack would send: JSON for events, form fields for commands, a form's ``payload`` else."""
    if content_type == JSON:
        return json.dumps(payload).encode()
    if isinstance(payload, dict) and ("command" in payload or "ssl_check" in payload) and "type" not in payload:
        return urlencode({k: v if isinstance(v, str) else json.dumps(v) for k, v in payload.items()}).encode()
    return urlencode({"payload": json.dumps(payload)}).encode()
