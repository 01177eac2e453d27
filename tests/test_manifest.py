"""manifest.yml is valid for Slack and asks for what the code uses, no more."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = Path(__file__).parent / "data" / "manifest.schema.1.0.0.json"  # Slack's schema (MIT, see LICENSE-manifest-schema)


def manifest() -> dict:
    return yaml.safe_load((ROOT / "manifest.yml").read_text())


def test_manifest_validates_against_slacks_schema():
    schema = json.loads(SCHEMA.read_text())
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(manifest()), key=str)
    assert errors == [], [e.message for e in errors]


def test_manifest_subscribes_to_every_event_the_handlers_listen_for():
    events = set(manifest()["settings"]["event_subscriptions"]["bot_events"])
    assert {"app_mention", "message.im", "message.channels", "app_home_opened"} <= events
    commands = {c["command"] for c in manifest()["features"]["slash_commands"]}
    assert "/approvers" in commands
    assert manifest()["settings"]["interactivity"]["is_enabled"] is True


def test_the_ai_split_view_is_declared_with_its_events_and_scope():
    """The assistant view, the events Bolt's AsyncAssistant listens for, and assistant:write."""
    assert manifest()["features"]["assistant_view"]["assistant_description"]
    assert len(manifest()["features"]["assistant_view"]["suggested_prompts"]) <= 4
    events = set(manifest()["settings"]["event_subscriptions"]["bot_events"])
    assert {"assistant_thread_started", "assistant_thread_context_changed", "message.im"} <= events
    assert "assistant:write" in manifest()["oauth_config"]["scopes"]["bot"]


def test_scopes_cover_every_web_api_method_the_code_calls():
    scopes = set(manifest()["oauth_config"]["scopes"]["bot"])
    needs = {
        "chat_postMessage": "chat:write", "chat_update": "chat:write", "chat_postEphemeral": "chat:write",
        "chat_delete": "chat:write", "users_info": "users:read", "conversations_open": "im:write",
    }
    code = "\n".join(p.read_text() for p in (ROOT / "handlers").rglob("*.py"))
    used = set(re.findall(r"\.(chat_\w+|users_\w+|conversations_\w+|views_\w+|reactions_\w+)\(", code))
    for method in used:
        if method in needs:
            assert needs[method] in scopes, f"{method} needs {needs[method]}"
    assert "chat_postMessage" in used


def test_the_code_asks_for_exactly_the_scopes_the_manifest_grants():
    from bot.config import BOT_SCOPES, Settings

    assert sorted(manifest()["oauth_config"]["scopes"]["bot"]) == sorted(BOT_SCOPES)
    assert Settings(_env_file=None).slack_scopes.split(",") == list(BOT_SCOPES)  # type: ignore[call-arg]


def test_group_dm_threads_are_heard_and_nothing_unused_is_asked_for():
    scopes = set(manifest()["oauth_config"]["scopes"]["bot"])
    assert "mpim:history" in scopes and "message.mpim" in manifest()["settings"]["event_subscriptions"]["bot_events"]
    assert "reactions:write" not in scopes  # nothing adds reactions
    usage = next(c["usage_hint"] for c in manifest()["features"]["slash_commands"] if c["command"] == "/approvers")
    assert all(word in usage for word in ("list", "edit", "help"))


def test_the_app_is_declared_as_an_agent_with_the_stop_buttons_event():
    """Agent sessions need the app declared as an agent; the stop button sends agent_session_stopped."""
    assert manifest()["features"]["agent_view"]["agent_description"]
    assert "agent_session_stopped" in manifest()["settings"]["event_subscriptions"]["bot_events"]
