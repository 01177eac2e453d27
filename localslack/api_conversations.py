"""Slack's ``conversations.*`` and ``users.*`` methods: the scope each conversation type needs, the
bot's membership, history and thread windows, and cursors."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from localslack import methods
from localslack.api_base import MethodGroup
from localslack.api_request import Handler, Params, require_scope
from localslack.errors import ApiError
from localslack.models import Channel, Message


class ConversationMethods(MethodGroup):
    """``conversations.*`` and ``users.*``: who and what the app can see, paged as Slack pages."""

    def handlers(self) -> dict[str, Handler]:
        return {
            "users.info": self.users_info,
            "users.list": self.users_list,
            "conversations.open": self.conversations_open,
            "conversations.info": self.conversations_info,
            "conversations.history": self.conversations_history,
            "conversations.replies": self.conversations_replies,
            "conversations.members": self.conversations_members,
            "conversations.list": self.conversations_list,
        }

    def users_info(self, p: Params) -> dict[str, Any]:
        """The top-level roles (``is_admin``…) are the person's in "the current workspace": a workspace token's.
        users.info takes no ``team_id``, so an org-wide token acts in no one workspace: it is shown the person's
        roles in their own workspace, and nothing in the answer says which workspace that is about."""
        user = self.ws.user(p.text("user", required=True))
        workspace = None if p.auth.is_enterprise_install else p.auth.team_id
        return {"user": user.to_slack(self.ws.base_url, workspace)}

    def users_list(self, p: Params) -> dict[str, Any]:
        team = self._installation_team(p, p.text("team_id"))  # an org-wide token must say which workspace
        members = [u for u in self.ws.users.values() if u.team_id == team.id or team.id in u.teams]
        start = _offset(p)
        limit = p.number("limit", 200) or 200
        page = members[start : start + limit]
        next_cursor = _cursor(start + limit) if start + limit < len(members) else ""
        return {
            "members": [u.to_slack(self.ws.base_url, team.id) for u in page],
            "cache_ts": 1767225600,
            "response_metadata": {"next_cursor": next_cursor},
        }

    def conversations_open(self, p: Params) -> dict[str, Any]:
        channel_id = p.text("channel")
        if channel_id:
            channel = self.ws.channel_for(p.auth, channel_id)
            self._channel_scope(p, "conversations.open", channel)
            return {"no_op": True, "already_open": True, "channel": _open_shape(channel, p)}
        users = [u for u in (p.text("users") or "").split(",") if u]
        if not users:
            raise ApiError("users_list_not_supplied")
        require_scope(p.auth, "im:write" if len(users) == 1 else "mpim:write")
        if len(users) > 1 or not p.auth.is_bot:
            raise ApiError("method_not_supported_for_channel_type")
        user = self.ws.user(users[0])
        if user.deleted:
            raise ApiError("user_disabled")
        team_id = user.team_id if p.auth.is_enterprise_install and p.auth.reaches(user.team_id) else p.auth.team_id
        existed = any(
            c.is_im and c.im_user == users[0] and c.team_id == team_id for c in self.ws.channels.values()
        )
        channel = self.ws.dm_channel(user.id, team_id)
        out: dict[str, Any] = {"channel": _open_shape(channel, p)}
        if existed:
            out = {"no_op": True, "already_open": True, **out}
        return out

    def conversations_info(self, p: Params) -> dict[str, Any]:
        channel = self._resolve_channel(p)
        self._channel_scope(p, "conversations.info", channel)
        return {"channel": channel.to_slack(p.auth.user_id)}

    def conversations_members(self, p: Params) -> dict[str, Any]:
        channel = self._resolve_channel(p)
        self._channel_scope(p, "conversations.members", channel)
        return {"members": list(channel.members), "response_metadata": {"next_cursor": ""}}

    def conversations_list(self, p: Params) -> dict[str, Any]:
        kinds = methods.conversation_types_scope(p.text("types"))
        for kind in kinds:
            needed = methods.spec("conversations.list").scope_for(kind)
            if needed:
                require_scope(p.auth, needed)
        team = self._installation_team(p, p.text("team_id"))  # an org-wide token must say which workspace
        channels = [
            c.to_slack(p.auth.user_id)
            for c in self.ws.channels.values()
            if not c.is_im
            and c.visible_to_team(team.id)
            and c.channel_type in kinds
            and (not c.is_private or p.auth.user_id in c.members)
        ]
        return {"channels": channels, "response_metadata": {"next_cursor": ""}}

    def conversations_history(self, p: Params) -> dict[str, Any]:
        channel = self._resolve_channel(p)
        self._channel_scope(p, "conversations.history", channel)
        if p.auth.user_id not in channel.members:
            raise ApiError("not_in_channel")
        messages = list(reversed(self._in_window(p, self.ws.top_level(channel.id))))
        start = _offset(p)
        limit = p.number("limit", 100) or 100
        page = messages[start : start + limit]
        has_more = start + limit < len(messages)
        out: dict[str, Any] = {
            "messages": [m.to_slack(self._profile_for(m)) for m in page],
            "has_more": has_more,
            "pin_count": 0,
            "channel_actions_ts": None,
            "channel_actions_count": 0,
        }
        if has_more:
            out["response_metadata"] = {"next_cursor": _cursor(start + limit)}
        return out

    def conversations_replies(self, p: Params) -> dict[str, Any]:
        """Like conversations.history it needs the *:history scope of the conversation's type, and a bot
        must be a member: those scopes only reach conversations the app is in (channels:history; Slack staff
        in slackapi/deno-slack-sdk#128: "this is a limitation / requirement of the channels:history scope")."""
        channel = self._resolve_channel(p)
        self._channel_scope(p, "conversations.replies", channel)
        if p.auth.is_bot and p.auth.user_id not in channel.members:
            raise ApiError("not_in_channel")
        ts = p.text("ts", required=True)
        message = self.ws.find_message(channel.id, ts)
        if message is None:
            raise ApiError("thread_not_found")
        root_ts = message.thread_ts if message.is_reply else message.ts
        thread = self.ws.thread(channel.id, root_ts or message.ts)
        root, replies = thread[:1], self._in_window(p, thread[1:])
        start = _offset(p)
        limit = p.number("limit", 1000) or 1000
        page = replies[start : start + limit]
        has_more = start + limit < len(replies)
        out: dict[str, Any] = {
            "messages": [m.to_slack(self._profile_for(m)) for m in root + page],
            "has_more": has_more,
        }
        if has_more:
            out["response_metadata"] = {"next_cursor": _cursor(start + limit)}
        return out

    @staticmethod
    def _in_window(p: Params, messages: list[Message]) -> list[Message]:
        oldest, latest, inclusive = p.text("oldest"), p.text("latest"), p.flag("inclusive")
        kept = []
        for m in messages:
            if oldest and (float(m.ts) < float(oldest) or (float(m.ts) == float(oldest) and not inclusive)):
                continue
            if latest and (float(m.ts) > float(latest) or (float(m.ts) == float(latest) and not inclusive)):
                continue
            kept.append(m)
        return kept


def _offset(p: Params) -> int:
    """The page offset encoded in a ``cursor`` argument (0 without one)."""
    cursor = p.text("cursor")
    if not cursor:
        return 0
    try:
        return int(base64.b64decode(cursor).decode().split(":", 1)[1])
    except (ValueError, IndexError, binascii.Error) as exc:
        raise ApiError("invalid_cursor") from exc


def _cursor(offset: int) -> str:
    return base64.b64encode(f"offset:{offset}".encode()).decode()


def _open_shape(channel: Channel, p: Params) -> dict[str, Any]:
    if p.flag("return_im"):
        return channel.to_slack(p.auth.user_id)
    return {"id": channel.id}
