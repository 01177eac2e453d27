"""What every family of Web API methods looks up the same way: the conversation a call names (Slack's
rules for names, user ids and DMs), the workspace an org-wide token acts in, the message a ``ts`` names,
blocks checked as Slack checks them, the bot's profile on what it posts, and the hook told of the bot's
posts. ``WebApi`` and each method family (``api_chat``, ``api_views``, ``api_conversations``,
``ai_apps``) build on it."""

from __future__ import annotations

from typing import Any

from localslack import blockkit, methods
from localslack.api_request import Handler, MessageHook, Params, require_scope
from localslack.credentials import Auth
from localslack.errors import ApiError, error_messages
from localslack.models import Channel, Message, Team
from localslack.workspace import Workspace


class MethodGroup:
    """A family of Web API methods over one workspace; ``handlers()`` maps Slack's method names to them."""

    def __init__(self, ws: Workspace, *, on_bot_message: MessageHook | None = None) -> None:
        self.ws = ws
        self.on_bot_message = on_bot_message

    def handlers(self) -> dict[str, Handler]:
        return {}

    def _resolve_channel(self, p: Params, name: str = "channel", *, names_ok: bool = False) -> Channel:
        """The conversation a call names. Only chat.postMessage / chat.postEphemeral take a channel name or
        a user id ("An encoded ID or channel name", posting to a user id = the app's DM); every other method
        wants the conversation's id — chat.update: "For direct messages, ensure that this value is a DM ID
        (starts with D) instead of a User ID" — and answers channel_not_found otherwise."""
        channel_id = p.text(name)
        if channel_id is None:
            raise ApiError("channel_not_found")
        if names_ok and channel_id.startswith(("U", "W")) and channel_id in self.ws.users and p.auth.is_bot:
            user = self.ws.user(channel_id)
            team = user.team_id if p.auth.reaches(user.team_id) else p.auth.team_id
            return self.ws.dm_channel(channel_id, team)  # posting to a user id means the app's DM
        if names_ok and (channel_id.startswith("#") or channel_id not in self.ws.channels):
            if p.auth.is_enterprise_install:
                raise ApiError("team_not_found")  # "when using an org-wide token, the channel_name is passed"
            wanted = channel_id.lstrip("#")
            by_name = next(
                (
                    c
                    for c in self.ws.channels.values()
                    if c.name == wanted and any(p.auth.reaches(t) for t in (c.team_id, *c.connected_team_ids))
                ),
                None,
            )
            if by_name is not None:
                channel_id = by_name.id
        return self.ws.channel_for(p.auth, channel_id)

    def _channel_scope(self, p: Params, method: str, channel: Channel) -> None:
        """conversations.*: the scope for this conversation's type (channels:/groups:/im:/mpim:)."""
        needed = methods.spec(method).scope_for(channel.channel_type)
        if needed:
            require_scope(p.auth, needed)

    def _installation_team(self, p: Params, team_id: str | None) -> Team:
        """The workspace a call acts in: the token's own, or (org-wide token) ``team_id`` if it reaches it."""
        if team_id and p.auth.reaches(team_id):
            return self.ws.team(team_id)
        if p.auth.is_enterprise_install:
            raise ApiError("missing_argument", extra=error_messages("team_id is required for an org-wide token"))
        return self.ws.team(p.auth.team_id)

    def _check_blocks(self, p: Params) -> list[dict[str, Any]] | None:
        blocks = p.get("blocks")
        if blocks is None:
            return None
        errors = blockkit.validate_blocks(blocks)
        if errors:
            raise ApiError(
                "invalid_blocks",
                extra={"errors": errors, "response_metadata": {"messages": [f"[ERROR] {e}" for e in errors]}},
            )
        if blockkit.blocks_text_length(blocks) > blockkit.MESSAGE_BLOCKS_TEXT_MAX:
            raise ApiError("msg_blocks_too_long")
        return list(blocks)

    def _bot_profile(self, auth: Auth) -> dict[str, Any] | None:
        return self.ws.bot_profile(auth.team_id) if auth.is_bot else None

    def _author_team(self, p: Params, channel: Channel) -> str:
        """The ``team`` a posted message carries: the token's workspace (an org-wide token: the channel's)."""
        return channel.team_id if p.auth.is_enterprise_install else p.auth.team_id

    def _message(self, p: Params, channel_id: str, ts: str | None) -> Message:
        if not ts:
            raise ApiError("message_not_found")
        message = self.ws.find_message(channel_id, ts)
        if message is None or message.subtype == "tombstone":
            raise ApiError("message_not_found")
        return message

    def _notify(self, kind: str, message: Message, previous: dict[str, Any] | None = None) -> None:
        if self.on_bot_message is not None:
            self.on_bot_message(kind, message, previous)

    def _profile_for(self, message: Message) -> dict[str, Any] | None:
        if not message.bot_id:
            return None
        team = next((t for t in self.ws.teams.values() if t.bot_id == message.bot_id), None)
        return self.ws.bot_profile(team.id) if team else None
