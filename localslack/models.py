"""The workspace's objects (teams, users, channels, messages, views) and the records tests read.

Each model knows how to render itself in Slack's wire shape (``to_slack``); the rest of the package keeps
these objects, never raw dicts, so there is one place where a Slack field name is spelled.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, Field

APP_ID = "A0LOCAL"
VERIFICATION_TOKEN = "localslack-verification-token"

# Avatar colours in the order Slack's default palette roughly uses; picked by user index.
USER_COLORS = ("9f69e7", "4bbe2e", "e7392d", "3c989f", "e0a729", "2b6836", "674b1b", "e96699")


class Enterprise(BaseModel):
    """An Enterprise Grid organization (``E…``) holding several workspaces.

    With ``org_install`` the app is installed org-wide: one bot user and one bot token for every workspace
    of the org (``is_enterprise_install: true`` in payloads, ``authorizations[0].team_id`` null).
    """

    id: str
    name: str
    domain: str
    org_install: bool = False
    bot_user_id: str | None = None
    bot_id: str | None = None
    bot_token: str | None = None

    def ref(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name}


class Team(BaseModel):
    id: str
    name: str
    domain: str
    bot_user_id: str | None = None
    bot_id: str | None = None
    bot_token: str | None = None
    enterprise_id: str | None = None  # the Grid org this workspace belongs to

    @property
    def installed(self) -> bool:
        return self.bot_token is not None

    def to_slack(self, base_url: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "url": f"{base_url}/",
            "domain": self.domain,
            "email_domain": f"{self.domain}.example",
            "icon": {"image_default": True, "image_34": f"{base_url}/ui/team/{self.id}.svg"},
            "avatar_base_url": f"{base_url}/ui/avatar/",
            "is_verified": False,
        }


def _zone_fields(tz: str | None) -> dict[str, Any]:
    """``tz``, ``tz_label`` and ``tz_offset`` (seconds east of UTC, as of now) as ``users.info`` gives them;
    nothing for a person with no zone, as Slack leaves them out."""
    if not tz:
        return {}
    try:
        now = datetime.now(UTC).astimezone(ZoneInfo(tz))
    except (ZoneInfoNotFoundError, ValueError):
        return {"tz": tz, "tz_label": tz, "tz_offset": 0}
    offset = now.utcoffset()
    return {"tz": tz, "tz_label": now.tzname() or tz, "tz_offset": int(offset.total_seconds()) if offset else 0}


class User(BaseModel):
    id: str
    team_id: str
    name: str
    real_name: str
    title: str = ""
    # workspace roles, held in the person's own workspace ``team_id`` (Slack's top-level flags are about the
    # workspace a call acts in: another workspace of the org shows them false)
    is_admin: bool = False
    is_owner: bool = False
    is_primary_owner: bool = False
    is_restricted: bool = False
    is_ultra_restricted: bool = False
    is_bot: bool = False
    bot_id: str | None = None
    deleted: bool = False
    color: str = USER_COLORS[0]
    tz: str | None = "Europe/London"  # IANA name; None: Slack knows no zone for them (users.info omits it)
    # Enterprise Grid: the org, the org-level roles and every workspace of the org the person is in
    enterprise_id: str | None = None
    enterprise_name: str = ""
    is_org_admin: bool = False
    is_org_owner: bool = False
    teams: list[str] = Field(default_factory=list)

    def avatar_url(self, base_url: str) -> str:
        return f"{base_url}/ui/avatar/{self.id}.svg"

    def to_slack(self, base_url: str, workspace: str | None = None) -> dict[str, Any]:
        """The user object as a call acting in ``workspace`` sees it (None: their own workspace)."""
        avatar = self.avatar_url(base_url)
        here = workspace is None or workspace == self.team_id
        first, _, last = self.real_name.partition(" ")
        profile: dict[str, Any] = {
            "title": self.title,
            "phone": "",
            "skype": "",
            "real_name": self.real_name,
            "real_name_normalized": self.real_name,
            "display_name": self.name,
            "display_name_normalized": self.name,
            "fields": None,
            "status_text": "",
            "status_emoji": "",
            "status_expiration": 0,
            "avatar_hash": self.id.lower(),
            "first_name": first,
            "last_name": last,
            "team": self.team_id,
            **{f"image_{size}": avatar for size in (24, 32, 48, 72, 192, 512)},
        }
        if self.is_bot:
            profile["bot_id"] = self.bot_id
            profile["api_app_id"] = APP_ID
            profile["always_active"] = True
        else:
            profile["email"] = f"{self.name}@{self.team_id.lower()}.example"
        out: dict[str, Any] = {
            "id": self.id,
            "team_id": self.team_id,
            "name": self.name,
            "deleted": self.deleted,
            "color": self.color,
            "real_name": self.real_name,
            **_zone_fields(self.tz),
            "profile": profile,
            "is_admin": here and self.is_admin,
            "is_owner": here and self.is_owner,
            "is_primary_owner": here and self.is_primary_owner,
            "is_restricted": self.is_restricted,
            "is_ultra_restricted": self.is_ultra_restricted,
            "is_bot": self.is_bot,
            "is_app_user": False,
            "updated": 1767225600,
            "is_email_confirmed": not self.is_bot,
            "who_can_share_contact_card": "EVERYONE",
        }
        if self.enterprise_id:
            out["enterprise_user"] = {
                "id": self.id,
                "enterprise_id": self.enterprise_id,
                "enterprise_name": self.enterprise_name,
                "is_admin": self.is_org_admin,
                "is_owner": self.is_org_owner,
                "is_primary_owner": False,
                "teams": list(self.teams or [self.team_id]),
            }
        return out


class Channel(BaseModel):
    id: str
    team_id: str
    name: str | None = None  # None for a DM
    is_im: bool = False
    is_mpim: bool = False  # a group DM: private, no name people chose (Slack names it mpdm-a--b--c-1)
    is_private: bool = False
    im_user: str | None = None  # the human in a DM with the bot
    members: list[str] = Field(default_factory=list)
    connected_team_ids: list[str] = Field(default_factory=list)  # Slack Connect: other teams sharing it
    created: int = 1767225600
    topic: str = ""
    purpose: str = ""
    is_archived: bool = False

    @property
    def is_ext_shared(self) -> bool:
        return bool(self.connected_team_ids)

    @property
    def channel_type(self) -> Literal["channel", "group", "im", "mpim"]:
        if self.is_im:
            return "im"
        if self.is_mpim:
            return "mpim"
        return "group" if self.is_private else "channel"

    def visible_to_team(self, team_id: str) -> bool:
        return team_id == self.team_id or team_id in self.connected_team_ids

    def to_slack(self, viewer_id: str) -> dict[str, Any]:
        if self.is_im:
            return {
                "id": self.id,
                "created": self.created,
                "is_archived": self.is_archived,
                "is_im": True,
                "is_org_shared": False,
                "context_team_id": self.team_id,
                "updated": self.created * 1000,
                "user": self.im_user,
                "is_user_deleted": False,
                "priority": 0,
            }
        return {
            "id": self.id,
            "name": self.name,
            "is_channel": not self.is_private and not self.is_mpim,
            "is_group": self.is_private and not self.is_mpim,
            "is_im": False,
            "is_mpim": self.is_mpim,
            "is_private": self.is_private,
            "created": self.created,
            "is_archived": self.is_archived,
            "is_general": self.name == "general",
            "unlinked": 0,
            "name_normalized": self.name,
            "is_shared": self.is_ext_shared,
            "is_org_shared": False,
            "is_pending_ext_shared": False,
            "pending_shared": [],
            "context_team_id": self.team_id,
            "updated": self.created * 1000,
            "parent_conversation": None,
            "creator": "",
            "is_ext_shared": self.is_ext_shared,
            "shared_team_ids": [self.team_id, *self.connected_team_ids],
            "pending_connected_team_ids": [],
            "is_member": viewer_id in self.members,
            "topic": {"value": self.topic, "creator": "", "last_set": 0},
            "purpose": {"value": self.purpose, "creator": "", "last_set": 0},
            "previous_names": [],
            "num_members": len(self.members),
        }


class Reaction(BaseModel):
    name: str
    users: list[str] = Field(default_factory=list)

    def to_slack(self) -> dict[str, Any]:
        return {"name": self.name, "users": list(self.users), "count": len(self.users)}


class Message(BaseModel):
    """A message in a channel's history (never an ephemeral)."""

    channel: str
    ts: str
    user: str
    team: str
    text: str = ""
    blocks: list[dict[str, Any]] | None = None
    attachments: list[dict[str, Any]] | None = None
    bot_id: str | None = None
    thread_ts: str | None = None
    parent_user_id: str | None = None
    subtype: str | None = None
    client_msg_id: str | None = None
    metadata: dict[str, Any] | None = None
    edited: dict[str, str] | None = None
    reactions: list[Reaction] = Field(default_factory=list)
    # chat.startStream: the message grows with chat.appendStream until chat.stopStream ends it
    streaming: bool = False
    # its task_update chunks (by id, in order of first appearance), as "timeline" or "plan" (plan_update: its title)
    tasks: list[dict[str, Any]] = Field(default_factory=list)
    task_display_mode: str | None = None
    plan_title: str | None = None
    # Thread bookkeeping, kept on the parent like Slack does.
    reply_count: int = 0
    reply_users: list[str] = Field(default_factory=list)
    latest_reply: str | None = None

    @property
    def is_reply(self) -> bool:
        return self.thread_ts is not None and self.thread_ts != self.ts

    def to_slack(self, bot_profile: dict[str, Any] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"user": self.user, "type": "message", "ts": self.ts}
        if self.subtype:
            out["subtype"] = self.subtype
        if self.bot_id:
            out["bot_id"] = self.bot_id
            out["app_id"] = APP_ID
        if self.client_msg_id:
            out["client_msg_id"] = self.client_msg_id
        out["text"] = self.text
        out["team"] = self.team
        if bot_profile is not None:
            out["bot_profile"] = bot_profile
        if self.blocks is not None:
            out["blocks"] = self.blocks
        if self.attachments:
            out["attachments"] = self.attachments
        if self.metadata:
            out["metadata"] = self.metadata
        if self.edited:
            out["edited"] = dict(self.edited)
        if self.thread_ts:
            out["thread_ts"] = self.thread_ts
        if self.is_reply and self.parent_user_id:
            out["parent_user_id"] = self.parent_user_id
        if self.reply_count:
            out["reply_count"] = self.reply_count
            out["reply_users_count"] = len(self.reply_users)
            out["latest_reply"] = self.latest_reply
            out["reply_users"] = list(self.reply_users)
            out["is_locked"] = False
            out["subscribed"] = False
        if self.reactions:
            out["reactions"] = [r.to_slack() for r in self.reactions]
        return out


class AssistantThread(BaseModel):
    """What Slack keeps about a thread beyond its messages for an AI app: the split view's title and
    suggested prompts, the live status under it (``assistant.threads.*``) and the context the person was
    looking at when they opened it (``assistant_thread_started``)."""

    channel: str
    thread_ts: str
    user: str | None = None  # who opened it (assistant split view threads only)
    title: str = ""
    prompts_title: str = ""
    prompts: list[dict[str, str]] = Field(default_factory=list)
    status: str = ""
    loading_messages: list[str] = Field(default_factory=list)
    status_at: float = 0.0  # Slack drops a status after two minutes without a message
    context: dict[str, Any] = Field(default_factory=dict)
    # the thread as an agent session (``agents.sessions.*``): its status, title and every status set, in order
    session_status: str = ""
    session_title: str = ""
    session_log: list[dict[str, str]] = Field(default_factory=list)


class Ephemeral(BaseModel):
    """A message only its recipient sees; it lives outside the channel history."""

    channel: str
    ts: str
    user: str  # the recipient
    text: str = ""
    blocks: list[dict[str, Any]] | None = None
    attachments: list[dict[str, Any]] | None = None
    thread_ts: str | None = None
    bot_id: str | None = None
    sender: str | None = None  # bot user id, or None for Slackbot notices
    sender_name: str = "agent"

    def to_slack(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "message", "subtype": "ephemeral", "ts": self.ts, "text": self.text}
        if self.sender:
            out["user"] = self.sender
        if self.bot_id:
            out["bot_id"] = self.bot_id
        if self.blocks is not None:
            out["blocks"] = self.blocks
        if self.attachments:
            out["attachments"] = self.attachments
        if self.thread_ts:
            out["thread_ts"] = self.thread_ts
        return out


class View(BaseModel):
    """A modal or an App Home view as Slack keeps it (id, hash, the user's typed state)."""

    id: str
    team_id: str
    user_id: str
    type: Literal["modal", "home"]
    hash: str
    blocks: list[dict[str, Any]] = Field(default_factory=list)
    title: dict[str, Any] | None = None
    submit: dict[str, Any] | None = None
    close: dict[str, Any] | None = None
    callback_id: str = ""
    private_metadata: str = ""
    external_id: str = ""
    clear_on_close: bool = False
    notify_on_close: bool = False
    root_view_id: str | None = None
    previous_view_id: str | None = None
    bot_id: str | None = None
    state_values: dict[str, dict[str, Any]] = Field(default_factory=dict)
    errors: dict[str, str] = Field(default_factory=dict)  # response_action=errors, by input block_id

    def to_slack(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "team_id": self.team_id,
            "type": self.type,
            "blocks": self.blocks,
            "private_metadata": self.private_metadata,
            "callback_id": self.callback_id,
            "state": {"values": self.state_values},
            "hash": self.hash,
            "title": self.title,
            "clear_on_close": self.clear_on_close,
            "notify_on_close": self.notify_on_close,
            "close": self.close,
            "submit": self.submit,
            "previous_view_id": self.previous_view_id,
            "root_view_id": self.root_view_id or self.id,
            "app_id": APP_ID,
            "external_id": self.external_id,
            "app_installed_team_id": self.team_id,
            "bot_id": self.bot_id,
        }
        if self.type == "home":
            out["title"] = self.title or {"type": "plain_text", "text": "View Title"}
        return out


class ApiCall(BaseModel):
    """One Web API request the bot made, as recorded for tests."""

    method: str
    params: dict[str, Any]
    token: str | None
    at: float = Field(default_factory=time.time)
    status: int = 200
    response: dict[str, Any] = Field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.response.get("ok"))


class DeliveryAttempt(BaseModel):
    retry_num: int = 0
    status: int | None = None
    error: str | None = None  # connection_failed | http_timeout | http_error | no_bot_url
    detail: str = ""
    elapsed_s: float = 0.0


class DeliveryResult(BaseModel):
    """What happened when one request was sent to the bot (after any retries)."""

    kind: str  # e.g. "event_callback:app_mention", "block_actions", "view_submission", "slash_command"
    event_id: str | None = None
    payload: dict[str, Any] = Field(default_factory=dict)
    status: int | None = None
    body: str = ""
    content_type: str = ""
    error: str | None = None
    detail: str = ""
    elapsed_s: float = 0.0
    attempts: list[DeliveryAttempt] = Field(default_factory=list)
    retrying: bool = False  # Slack's retries of this event are still to come (they update this result)

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def ack_json(self) -> Any:
        """The bot's response body parsed as JSON, or None when empty/not JSON."""
        if not self.body.strip():
            return None
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def friendly_error(self) -> str | None:
        """One sentence for a person, or None when the bot answered with 2xx."""
        if self.ok:
            return None
        if self.error == "no_bot_url":
            return "No bot is connected to this workspace (no bot URL set)."
        retry = " Slack will send it again." if self.retrying else ""
        if self.error == "connection_failed":
            return f"The bot did not answer ({self.detail or 'connection failed'}) — is it running?{retry}"
        if self.error == "http_timeout":
            return f"The bot did not answer within 3 seconds (Slack would show a timeout).{retry}"
        return f"The bot answered HTTP {self.status}{': ' + self.detail if self.detail else ''}.{retry}"
