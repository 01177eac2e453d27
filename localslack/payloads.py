"""Builders for what Slack sends to an app: Events API envelopes and interaction payloads.

Shapes follow reference/slack/payloads/ (themselves taken from Slack's docs and Bolt's tests). Enterprise
Grid fields follow Slack's org-app reference (api.slack.com/enterprise/apps/reference) and Bolt's
``tests/scenario_tests_async/test_events_org_apps.py``: the envelope carries ``enterprise_id``;
``authorizations[0]`` has the org's ``enterprise_id`` and, for an org-wide install, ``team_id: null`` and
``is_enterprise_install: true``; interactions carry ``enterprise: {id, name}`` and ``team.enterprise_id``.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from localslack.ids import random_id
from localslack.models import APP_ID, VERIFICATION_TOKEN, Channel, Enterprise, Message, Team, User, View


def _org_install(org: Enterprise | None) -> bool:
    return bool(org and org.org_install)


def event_envelope(
    event: dict[str, Any],
    *,
    source_team_id: str,
    installation: Team,
    channel: Channel | None,
    org: Enterprise | None = None,
) -> dict[str, Any]:
    """An ``event_callback``: envelope team_id is the source team, authorizations[0] the installation."""
    context = {"id": channel.id if channel else None, "et": event.get("type")}
    envelope: dict[str, Any] = {
        "token": VERIFICATION_TOKEN,
        "team_id": source_team_id,
    }
    if org is not None:
        envelope["enterprise_id"] = org.id
    envelope.update(
        {
            "context_team_id": installation.id,
            "context_enterprise_id": org.id if org else None,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": random_id("Ev", 10),
            "event_time": int(time.time()),
            "authorizations": [
                {
                    "enterprise_id": org.id if org else None,
                    "team_id": None if _org_install(org) else installation.id,
                    "user_id": installation.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": _org_install(org),
                }
            ],
            "is_ext_shared_channel": bool(channel and channel.is_ext_shared),
            "event_context": "4-"
            + base64.urlsafe_b64encode(json.dumps(context).encode()).decode().rstrip("="),
        }
    )
    return envelope


def lifecycle_envelope(event: dict[str, Any], *, team_id: str | None, org: Enterprise | None) -> dict[str, Any]:
    """``tokens_revoked`` / ``app_uninstalled``: Slack's samples carry no ``authorizations`` (the app has
    just lost them); ``team_id`` is the workspace (null for an org-wide uninstall, with ``enterprise_id``)."""
    envelope: dict[str, Any] = {"token": VERIFICATION_TOKEN, "team_id": team_id}
    if org is not None:
        envelope["enterprise_id"] = org.id
    envelope.update(
        {
            "api_app_id": APP_ID,
            "event": {**event, "event_ts": f"{time.time():.6f}"},
            "type": "event_callback",
            "event_id": random_id("Ev", 10),
            "event_time": int(time.time()),
        }
    )
    return envelope


def message_event(
    message: Message, channel: Channel, author: User, *, event_type: str = "message"
) -> dict[str, Any]:
    """A user's message as ``message`` (with channel_type) or ``app_mention`` sees it."""
    event: dict[str, Any] = {"type": event_type}
    if event_type == "message":
        event["channel_type"] = channel.channel_type
    event.update(
        {
            "user": message.user,
            "text": message.text,
            "ts": message.ts,
            "channel": channel.id,
            "event_ts": message.ts,
            "team": author.team_id,
        }
    )
    if message.client_msg_id:
        event["client_msg_id"] = message.client_msg_id
    if message.blocks is not None:
        event["blocks"] = message.blocks
    if message.thread_ts:
        event["thread_ts"] = message.thread_ts
        if message.parent_user_id and event_type == "message":
            event["parent_user_id"] = message.parent_user_id
    if channel.is_ext_shared:
        event["user_team"] = author.team_id
        event["source_team"] = author.team_id
    return event


def bot_message_event(
    kind: str, message: Message, channel: Channel, previous: dict[str, Any] | None
) -> dict[str, Any]:
    """The echo Slack sends of a bot's own post / edit / delete to apps subscribed to message.*."""
    if kind == "posted":
        event = {
            **message.to_slack(),
            "channel": channel.id,
            "event_ts": message.ts,
            "channel_type": channel.channel_type,
        }
        return event
    now = f"{time.time():.6f}"
    if kind == "changed":
        return {
            "type": "message",
            "subtype": "message_changed",
            "message": message.to_slack(),
            "previous_message": previous,
            "channel": channel.id,
            "hidden": True,
            "ts": now,
            "event_ts": now,
            "channel_type": channel.channel_type,
        }
    return {
        "type": "message",
        "subtype": "message_deleted",
        "hidden": True,
        "deleted_ts": message.ts,
        "previous_message": previous,
        "channel": channel.id,
        "ts": now,
        "event_ts": now,
        "channel_type": channel.channel_type,
    }


def user_ref(user: User) -> dict[str, Any]:
    return {"id": user.id, "username": user.name, "name": user.name, "team_id": user.team_id}


def team_ref(team: Team, org: Enterprise | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": team.id, "domain": team.domain}
    if org is not None:
        out["enterprise_id"] = org.id
        out["enterprise_name"] = org.name
    return out


def action_ts() -> str:
    return f"{time.time():.6f}"


def block_actions(
    *,
    user: User,
    installation: Team,
    actions: list[dict[str, Any]],
    trigger_id: str,
    state_values: dict[str, Any],
    channel: Channel | None = None,
    message: dict[str, Any] | None = None,
    message_ts: str | None = None,
    is_ephemeral: bool = False,
    view: View | None = None,
    response_url: str | None = None,
    org: Enterprise | None = None,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "type": "block_actions",
        "user": user_ref(user),
        "api_app_id": APP_ID,
        "token": VERIFICATION_TOKEN,
    }
    if view is not None:
        payload["container"] = {"type": "view", "view_id": view.id}
    else:
        assert channel is not None
        payload["container"] = {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": channel.id,
            "is_ephemeral": is_ephemeral,
        }
        if message and message.get("thread_ts"):
            payload["container"]["thread_ts"] = message["thread_ts"]
    payload.update(
        {
            "trigger_id": trigger_id,
            "team": team_ref(installation, org),
            "enterprise": org.ref() if org else None,
            "is_enterprise_install": _org_install(org),
        }
    )
    if channel is not None:
        payload["channel"] = {"id": channel.id, "name": channel.name or "directmessage"}
    if message is not None:
        payload["message"] = message
    if view is not None:
        payload["view"] = view.to_slack()
    payload["state"] = {"values": state_values}
    if response_url is not None:
        payload["response_url"] = response_url
    payload["actions"] = actions
    return payload


def view_submission(
    *, user: User, installation: Team, view: View, trigger_id: str, org: Enterprise | None = None
) -> dict[str, Any]:
    return {
        "type": "view_submission",
        "team": team_ref(installation, org),
        "user": user_ref(user),
        "api_app_id": APP_ID,
        "token": VERIFICATION_TOKEN,
        "trigger_id": trigger_id,
        "view": view.to_slack(),
        "response_urls": [],
        "is_enterprise_install": _org_install(org),
        "enterprise": org.ref() if org else None,
    }


def view_closed(*, user: User, installation: Team, view: View, org: Enterprise | None = None) -> dict[str, Any]:
    return {
        "type": "view_closed",
        "team": team_ref(installation, org),
        "user": user_ref(user),
        "api_app_id": APP_ID,
        "token": VERIFICATION_TOKEN,
        "view": view.to_slack(),
        "is_cleared": False,
        "is_enterprise_install": _org_install(org),
        "enterprise": org.ref() if org else None,
    }


def slash_command(
    *,
    user: User,
    installation: Team,
    channel: Channel,
    command: str,
    text: str,
    response_url: str,
    trigger_id: str,
    org: Enterprise | None = None,
) -> dict[str, str]:
    fields = {
        "token": VERIFICATION_TOKEN,
        "team_id": installation.id,
        "team_domain": installation.domain,
    }
    if org is not None:
        fields["enterprise_id"] = org.id
        fields["enterprise_name"] = org.name
    return {
        **fields,
        "channel_id": channel.id,
        "channel_name": channel.name or "directmessage",
        "user_id": user.id,
        "user_name": user.name,
        "command": command,
        "text": text,
        "api_app_id": APP_ID,
        "is_enterprise_install": "true" if _org_install(org) else "false",
        "response_url": response_url,
        "trigger_id": trigger_id,
    }
