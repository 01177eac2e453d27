"""Slack's Web API (``POST|GET /api/<method>``) over the in-memory workspace.

Accepts what slack_sdk sends: JSON bodies, form bodies (blocks/view as JSON strings in a field), query
parameters, ``Authorization: Bearer`` or a ``token`` parameter, HTTP Basic for ``oauth.v2.access``.
Answers with Slack's shapes and error codes; every call is recorded for tests.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from localslack import blockkit, methods
from localslack.models import APP_ID, ApiCall, Channel, Ephemeral, Message, Team
from localslack.ratelimit import RateLimits
from localslack.workspace import ApiError, Auth, Workspace, error_messages

POST_TEXT_MAX = 40_000
UPDATE_TEXT_MAX = 4_000
_JSON_FIELDS = ("blocks", "attachments", "view", "metadata")
_EMOJI_NAME = re.compile(r"^[a-z0-9_+'\-]+$")

Handler = Callable[["Params"], dict[str, Any]]
MessageHook = Callable[[str, Message, dict[str, Any] | None], None]
APP_TOKEN_METHODS = frozenset({"apps.connections.open"})  # the only methods an app-level token may call


@dataclass
class Fault:
    status: int
    retry_after: int
    error: str | None
    times: int


class Hold:
    """The next call of a method, held before Slack answers it (a slow Slack, for a test to act meanwhile):
    ``await hold.reached.wait()`` until the call is in, then ``hold.release()`` to let it be answered."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.released = asyncio.Event()

    def release(self) -> None:
        self.released.set()


class Params:
    """A method's arguments, however they arrived, with Slack-like coercions."""

    def __init__(self, values: dict[str, Any], auth: Auth | None) -> None:
        self.values = values
        self._auth = auth

    @property
    def auth(self) -> Auth:
        assert self._auth is not None  # methods that need a token are only called with one
        return self._auth

    def get(self, name: str, default: Any = None) -> Any:
        value = self.values.get(name, default)
        return default if value is None else value

    def text(self, name: str, *, required: bool = False) -> str | None:
        value = self.values.get(name)
        if value is None or value == "":
            if required:
                raise ApiError("invalid_arguments", extra=error_messages(f"missing required field: {name}"))
            return None
        return str(value)

    def flag(self, name: str) -> bool:
        value = self.values.get(name)
        return value is True or str(value).lower() in ("true", "1")

    def number(self, name: str, default: int) -> int:
        try:
            return int(self.values.get(name) or default)
        except (TypeError, ValueError):
            return default


class WebApi:
    """Dispatches ``/api/<method>`` to handlers; records calls; injects faults."""

    def __init__(
        self,
        workspace: Workspace,
        *,
        client_id: str,
        client_secret: str,
        on_bot_message: MessageHook | None = None,
        app_token: str | None = None,
        open_socket_url: Callable[[], str] | None = None,
        rate_limits: RateLimits | None = None,
        answer_delay_s: float = 0.0,
    ) -> None:
        self.ws = workspace
        # how long every call waits before it is handled (Slack's own latency, for benchmarks); 0 = none
        self.answer_delay_s = answer_delay_s
        self.rate_limits = rate_limits or RateLimits(enabled=False)
        self.app_token = app_token
        self.open_socket_url = open_socket_url
        self.client_id = client_id
        self.client_secret = client_secret
        self.on_bot_message = on_bot_message
        self.calls: list[ApiCall] = []
        self.faults: dict[str, list[Fault]] = {}
        self.holds: dict[str, list[Hold]] = {}
        self.handlers: dict[str, Handler] = {
            "api.test": self.api_test,
            "auth.test": self.auth_test,
            "chat.postMessage": self.chat_post_message,
            "chat.update": self.chat_update,
            "chat.postEphemeral": self.chat_post_ephemeral,
            "chat.delete": self.chat_delete,
            "chat.getPermalink": self.chat_get_permalink,
            "views.open": self.views_open,
            "views.push": self.views_push,
            "views.update": self.views_update,
            "views.publish": self.views_publish,
            "users.info": self.users_info,
            "users.list": self.users_list,
            "conversations.open": self.conversations_open,
            "conversations.info": self.conversations_info,
            "conversations.history": self.conversations_history,
            "conversations.replies": self.conversations_replies,
            "conversations.members": self.conversations_members,
            "conversations.list": self.conversations_list,
            "reactions.add": self.reactions_add,
            "reactions.remove": self.reactions_remove,
            "team.info": self.team_info,
            "bots.info": self.bots_info,
            "oauth.v2.access": self.oauth_v2_access,
            **_ai_app_methods(self),
        }
        if open_socket_url is not None:  # Socket Mode is on for this app
            self.handlers["apps.connections.open"] = self.apps_connections_open
        self._no_token_methods = {"api.test", "oauth.v2.access"}

    # ---- HTTP entry point ----------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        token: str | None = None
        values: dict[str, Any] = {}
        warnings: list[str] = []
        scope_headers: dict[str, str] = {}
        if self.answer_delay_s > 0:
            await asyncio.sleep(self.answer_delay_s)
        if self.holds.get(method):
            hold = self.holds[method].pop(0)
            hold.reached.set()
            await hold.released.wait()
        try:
            values, token, warnings = await _read_params(request)
            self._apply_fault(method)
            response = self._dispatch(method, values, token, scope_headers)
            status, headers = 200, {}
        except ApiError as exc:
            response = {"ok": False, "error": exc.error, **exc.extra}
            status, headers = exc.status, exc.headers
        headers = {**scope_headers, **headers}
        if warnings and response.get("ok"):
            response["warning"] = ",".join(warnings)
            response.setdefault("response_metadata", {})["warnings"] = warnings
        self.calls.append(
            ApiCall(method=method, params=values, token=token, status=status, response=response)
        )
        self.ws.touch()
        return web.json_response(response, status=status, headers=headers)

    def _dispatch(
        self, method: str, values: dict[str, Any], token: str | None, scope_headers: dict[str, str]
    ) -> dict[str, Any]:
        """Slack's order: method, token, rate limit, scope, then the method's own checks."""
        handler = self.handlers.get(method)
        if handler is None:
            raise ApiError("unknown_method", extra={"req_method": method})
        if method in APP_TOKEN_METHODS:
            self._check_app_token(token)
            self._rate_limit(method, "app", None)
            auth = None
        elif method in self._no_token_methods:
            auth = None
        elif token is not None and token == self.app_token:
            raise ApiError("not_allowed_token_type")
        else:
            auth = self.ws.auth_for(token)
            if auth.scopes is not None:
                scope_headers["X-OAuth-Scopes"] = ",".join(auth.scopes)
                accepted = methods.spec(method).scopes
                if accepted:
                    scope_headers["X-Accepted-OAuth-Scopes"] = ",".join(accepted)
            self._rate_limit(method, auth.team_id, _raw_channel(values) if method == "chat.postMessage" else None)
            needed = methods.spec(method).scopes
            if needed and not (auth.scopes is not None and any(s in auth.scopes for s in needed)):
                require_scope(auth, needed[0])  # any one of them will do; the refusal names the first
        result = handler(Params(values, auth))
        return {"ok": True, **result}

    def _rate_limit(self, method: str, workspace: str, channel: str | None) -> None:
        retry_after = self.rate_limits.check(method, workspace, channel)
        if retry_after is not None:
            raise ApiError("ratelimited", status=429, headers={"Retry-After": str(retry_after)})

    def _check_app_token(self, token: str | None) -> None:
        """Slack's answers: no token, an unknown ``xapp-`` token, or a bot/user token where an app-level one
        is required."""
        if not token:
            raise ApiError("not_authed")
        if self.app_token is not None and token == self.app_token:
            return
        if not token.startswith("xapp-") and token in self.ws.tokens:
            raise ApiError("not_allowed_token_type")
        raise ApiError("invalid_auth")

    def hold_next(self, method: str) -> Hold:
        hold = Hold()
        self.holds.setdefault(method, []).append(hold)
        return hold

    def fail_next(
        self,
        method: str,
        *,
        status: int = 429,
        retry_after: int = 1,
        error: str | None = None,
        times: int = 1,
    ) -> None:
        self.faults.setdefault(method, []).append(Fault(status, retry_after, error, times))

    def _apply_fault(self, method: str) -> None:
        queue = self.faults.get(method)
        if not queue:
            return
        fault = queue[0]
        fault.times -= 1
        if fault.times <= 0:
            queue.pop(0)
        if fault.error is not None:
            raise ApiError(fault.error, status=200 if fault.status == 429 else fault.status)
        if fault.status == 429:
            raise ApiError("ratelimited", status=429, headers={"Retry-After": str(fault.retry_after)})
        raise ApiError("fatal_error" if fault.status >= 500 else "request_failed", status=fault.status)

    # ---- helpers -------------------------------------------------------------------------------------

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

    # ---- methods -------------------------------------------------------------------------------------

    def api_test(self, p: Params) -> dict[str, Any]:
        return {"args": {k: v for k, v in p.values.items() if isinstance(v, str)}}

    def auth_test(self, p: Params) -> dict[str, Any]:
        """An org-wide token answers with the org (``team_id`` = the ``E…`` id) and
        ``is_enterprise_install: true``; a workspace token in a Grid org adds its ``enterprise_id``."""
        user = self.ws.user(p.auth.user_id)
        if p.auth.is_enterprise_install:
            org = self.ws.enterprise(p.auth.enterprise_id)
            name, team_id = org.name, org.id
        else:
            team = self.ws.team(p.auth.team_id)
            name, team_id = team.name, team.id
        out: dict[str, Any] = {
            "url": f"{self.ws.base_url}/",
            "team": name,
            "user": user.name,
            "team_id": team_id,
            "user_id": user.id,
        }
        if p.auth.is_bot:
            out["bot_id"] = p.auth.bot_id
        if p.auth.enterprise_id:
            out["enterprise_id"] = p.auth.enterprise_id
        out["is_enterprise_install"] = p.auth.is_enterprise_install
        return out

    def chat_post_message(self, p: Params) -> dict[str, Any]:
        channel = self._resolve_channel(p, names_ok=True)
        if channel.is_archived:
            raise ApiError("is_archived")
        if p.auth.user_id not in channel.members:
            raise ApiError("not_in_channel")
        text = p.text("text") or ""
        markdown_text = p.text("markdown_text")
        if markdown_text and (text or p.get("blocks") is not None):
            raise ApiError("markdown_text_conflict")
        text = text or markdown_text or ""
        if not text and p.get("blocks") is None and not p.get("attachments"):
            raise ApiError("no_text")
        if len(text) > POST_TEXT_MAX:
            raise ApiError("msg_too_long")
        blocks = self._check_blocks(p)
        message = Message(
            channel=channel.id,
            ts=self.ws.clock.next(),
            user=p.auth.user_id,
            team=self._author_team(p, channel),
            text=text,
            blocks=blocks,
            attachments=p.get("attachments") or None,
            bot_id=p.auth.bot_id,
            thread_ts=p.text("thread_ts"),
            metadata=p.get("metadata") or None,
        )
        if message.thread_ts and p.flag("reply_broadcast"):
            message.subtype = "thread_broadcast"
        self.ws.add_message(message)
        self._notify("posted", message)
        rendered = message.to_slack(self._bot_profile(p.auth))
        for key in (
            "reply_count",
            "reply_users",
            "reply_users_count",
            "latest_reply",
            "is_locked",
            "subscribed",
        ):
            rendered.pop(key, None)
        return {"channel": channel.id, "ts": message.ts, "message": rendered}

    def chat_update(self, p: Params) -> dict[str, Any]:
        channel = self._resolve_channel(p)
        if channel.is_archived:
            raise ApiError("is_inactive")  # "cannot be edited within a frozen, archived or deleted channel"
        message = self._message(p, channel.id, p.text("ts"))
        if message.user != p.auth.user_id:
            raise ApiError("cant_update_message")
        text = p.text("text")
        if text is None and p.get("blocks") is None and p.get("attachments") is None:
            raise ApiError("no_text")
        if text is not None and len(text) > UPDATE_TEXT_MAX:
            raise ApiError("msg_too_long")
        blocks = self._check_blocks(p)
        previous = message.to_slack()
        if text is not None:
            message.text = text
        if blocks is not None:  # omitted keeps the old blocks; [] removes them (Slack's rule)
            message.blocks = blocks or None
        if p.get("attachments") is not None:
            message.attachments = p.get("attachments") or None
        if p.get("metadata") is not None:
            message.metadata = p.get("metadata") or None
        message.edited = {"user": p.auth.user_id, "ts": self.ws.clock.next()}
        self.ws.touch()
        self._notify("changed", message, previous)
        rendered = message.to_slack(self._bot_profile(p.auth))
        rendered.pop("ts", None)
        return {"channel": channel.id, "ts": message.ts, "text": message.text, "message": rendered}

    def chat_post_ephemeral(self, p: Params) -> dict[str, Any]:
        channel = self._resolve_channel(p, names_ok=True)
        if channel.is_archived:
            raise ApiError("is_archived")
        user_id = p.text("user", required=True)
        self.ws.user(user_id)
        if p.auth.user_id not in channel.members:
            raise ApiError("not_in_channel")
        if user_id not in channel.members:
            raise ApiError("user_not_in_channel")
        text = p.text("text") or ""
        if not text and p.get("blocks") is None and not p.get("attachments"):
            raise ApiError("no_text")
        if len(text) > POST_TEXT_MAX:
            raise ApiError("msg_too_long")
        blocks = self._check_blocks(p)
        ephemeral = Ephemeral(
            channel=channel.id,
            ts=self.ws.clock.next(),
            user=str(user_id),
            text=text,
            blocks=blocks,
            attachments=p.get("attachments") or None,
            thread_ts=p.text("thread_ts"),
            bot_id=p.auth.bot_id,
            sender=p.auth.user_id,
            sender_name=self.ws.user(p.auth.user_id).name,
        )
        self.ws.add_ephemeral(ephemeral)
        return {"message_ts": ephemeral.ts}

    def chat_delete(self, p: Params) -> dict[str, Any]:
        channel = self._resolve_channel(p)
        message = self._message(p, channel.id, p.text("ts"))
        if message.user != p.auth.user_id:
            raise ApiError("cant_delete_message")
        previous = message.to_slack()
        self.ws.delete_message(message)
        self._notify("deleted", message, previous)
        return {"channel": channel.id, "ts": message.ts}

    def chat_get_permalink(self, p: Params) -> dict[str, Any]:
        channel = self._resolve_channel(p)
        message = self._message(p, channel.id, p.text("message_ts", required=True))
        link = f"{self.ws.base_url}/archives/{channel.id}/p{message.ts.replace('.', '')}"
        if message.is_reply:
            link += f"?thread_ts={message.thread_ts}&cid={channel.id}"
        return {"channel": channel.id, "permalink": link}

    def _checked_view(self, p: Params) -> dict[str, Any]:
        view = p.get("view")
        if view is None:
            raise ApiError("invalid_arguments", extra=error_messages("missing required field: view"))
        errors = blockkit.validate_view(view)
        if "view_too_large" in errors:
            raise ApiError("view_too_large")
        if errors:
            raise ApiError("invalid_arguments", extra=error_messages(*errors))
        return dict(view)

    def views_open(self, p: Params) -> dict[str, Any]:
        view = self._checked_view(p)
        if view.get("type") != "modal":
            raise ApiError(
                "invalid_arguments", extra=error_messages("must be modal [json-pointer:/view/type]")
            )
        trigger = self.ws.use_trigger(p.text("trigger_id"))
        team = self._installation_team(p, trigger.team_id)
        stored = self.ws.new_view(view, user_id=trigger.user_id, team=team)
        self.ws.open_modal(trigger.user_id, stored)
        return {"view": stored.to_slack()}

    def views_push(self, p: Params) -> dict[str, Any]:
        view = self._checked_view(p)
        if view.get("type") != "modal":
            raise ApiError(
                "invalid_arguments", extra=error_messages("must be modal [json-pointer:/view/type]")
            )
        trigger = self.ws.use_trigger(p.text("trigger_id"))
        if len(self.ws.modal_stack(trigger.user_id)) >= 3:
            raise ApiError("push_limit_reached")
        team = self._installation_team(p, trigger.team_id)
        stored = self.ws.new_view(view, user_id=trigger.user_id, team=team)
        self.ws.push_modal(trigger.user_id, stored)
        return {"view": stored.to_slack()}

    def views_update(self, p: Params) -> dict[str, Any]:
        view_id, external_id = p.text("view_id"), p.text("external_id")
        if not view_id and not external_id:
            raise ApiError("invalid_arguments", extra=error_messages("view_id or external_id is required"))
        view = self._checked_view(p)
        current = self.ws.find_view(view_id, external_id)
        if current is None or not p.auth.reaches(current.team_id) or not self.ws.is_open(current):
            raise ApiError("not_found")
        expected_hash = p.text("hash")
        if expected_hash and expected_hash != current.hash:
            raise ApiError("hash_conflict")
        if view.get("type") != current.type:
            raise ApiError(
                "invalid_arguments", extra=error_messages("view type cannot change [json-pointer:/view/type]")
            )
        updated = self.ws.replace_view(current, view, self.ws.team(current.team_id))
        return {"view": updated.to_slack()}

    def views_publish(self, p: Params) -> dict[str, Any]:
        user_id = p.text("user_id", required=True)
        user = self.ws.user(user_id)
        view = self._checked_view(p)
        if view.get("type") != "home":
            raise ApiError(
                "invalid_arguments", extra=error_messages("must be home [json-pointer:/view/type]")
            )
        team = self._installation_team(p, user.team_id if p.auth.is_enterprise_install else None)
        current = self.ws.home_view(user.id, team.id)
        expected_hash = p.text("hash")
        if expected_hash and current is not None and expected_hash != current.hash:
            raise ApiError("hash_conflict")
        stored = self.ws.publish_home(user.id, team, view)
        return {"view": stored.to_slack()}

    def users_info(self, p: Params) -> dict[str, Any]:
        user = self.ws.user(p.text("user", required=True))
        return {"user": user.to_slack(self.ws.base_url)}

    def users_list(self, p: Params) -> dict[str, Any]:
        team = self._installation_team(p, p.text("team_id"))  # an org-wide token must say which workspace
        members = [u for u in self.ws.users.values() if u.team_id == team.id or team.id in u.teams]
        start = _offset(p)
        limit = p.number("limit", 200) or 200
        page = members[start : start + limit]
        next_cursor = _cursor(start + limit) if start + limit < len(members) else ""
        return {
            "members": [u.to_slack(self.ws.base_url) for u in page],
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

    def _profile_for(self, message: Message) -> dict[str, Any] | None:
        if not message.bot_id:
            return None
        team = next((t for t in self.ws.teams.values() if t.bot_id == message.bot_id), None)
        return self.ws.bot_profile(team.id) if team else None

    def _reaction_target(self, p: Params) -> tuple[Message, str]:
        channel = self._resolve_channel(p)
        name = (p.text("name", required=True) or "").strip(":")
        if not _EMOJI_NAME.match(name):
            raise ApiError("invalid_name")
        timestamp = p.text("timestamp")
        if not timestamp:
            raise ApiError("no_item_specified")
        return self._message(p, channel.id, timestamp), name

    def reactions_add(self, p: Params) -> dict[str, Any]:
        if self._resolve_channel(p).is_archived:
            raise ApiError("is_archived")
        message, name = self._reaction_target(p)
        self.ws.add_reaction(message, name, p.auth.user_id)
        return {}

    def reactions_remove(self, p: Params) -> dict[str, Any]:
        message, name = self._reaction_target(p)
        self.ws.remove_reaction(message, name, p.auth.user_id)
        return {}

    def team_info(self, p: Params) -> dict[str, Any]:
        team = self._installation_team(p, p.text("team") or p.text("team_id"))
        out = team.to_slack(self.ws.base_url)
        org = self.ws.enterprise_of(team.id)
        if org is not None:
            out["enterprise_id"], out["enterprise_name"] = org.id, org.name
        return {"team": out}

    def bots_info(self, p: Params) -> dict[str, Any]:
        bot_id = p.text("bot") or p.auth.bot_id
        team = next((t for t in self.ws.teams.values() if t.bot_id == bot_id), None)
        if team is None:
            raise ApiError("bot_not_found")
        return {"bot": self.ws.bot_profile(team.id)}

    def apps_connections_open(self, p: Params) -> dict[str, Any]:
        assert self.open_socket_url is not None  # registered only with it
        return {"url": self.open_socket_url()}

    def oauth_v2_access(self, p: Params) -> dict[str, Any]:
        client_id, client_secret = p.text("client_id"), p.text("client_secret")
        if client_id is None or client_id != self.client_id:
            raise ApiError("invalid_client_id")
        if client_secret != self.client_secret:
            raise ApiError("bad_client_secret")
        code = self.ws.oauth_codes.pop(p.text("code") or "", None)
        if code is None:
            raise ApiError("invalid_code")
        redirect_uri = p.text("redirect_uri")
        if code.redirect_uri and redirect_uri and redirect_uri != code.redirect_uri:
            raise ApiError("bad_redirect_uri")
        authed_user: dict[str, Any] = {"id": code.user_id} if code.user_id else {}
        if code.team_id in self.ws.enterprises:  # an org-wide install (api.slack.com/enterprise/apps/reference)
            org = self.ws.install_org(code.team_id, scopes=list(code.scopes))
            return {
                "app_id": APP_ID,
                "authed_user": authed_user,
                "scope": ",".join(code.scopes),
                "token_type": "bot",
                "access_token": org.bot_token,
                "bot_user_id": org.bot_user_id,
                "team": None,
                "enterprise": org.ref(),
                "is_enterprise_install": True,
            }
        team = self.ws.install(code.team_id, scopes=list(code.scopes))
        org = self.ws.enterprise_of(team.id)
        return {
            "app_id": APP_ID,
            "authed_user": authed_user,
            "scope": ",".join(code.scopes),
            "token_type": "bot",
            "access_token": team.bot_token,
            "bot_user_id": team.bot_user_id,
            "team": {"id": team.id, "name": team.name},
            "enterprise": org.ref() if org else None,
            "is_enterprise_install": False,
        }


def _ai_app_methods(api: WebApi) -> dict[str, Handler]:
    from localslack.ai_apps import AiAppMethods  # it builds on this module's Params

    return AiAppMethods(api).handlers()


def require_scope(auth: Auth, scope: str) -> None:
    """Slack's refusal for a token without the scope a call needs (``needed`` / ``provided`` as Slack
    sends them, e.g. ``{"error": "missing_scope", "needed": "groups:history", "provided": "..."}``)."""
    if auth.scopes is None or scope in auth.scopes:
        return
    raise ApiError("missing_scope", extra={"needed": scope, "provided": ",".join(auth.scopes)})


def _raw_channel(values: dict[str, Any]) -> str | None:
    channel = values.get("channel")
    return str(channel) if channel else None


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


async def _read_params(request: web.Request) -> tuple[dict[str, Any], str | None, list[str]]:
    """Query + body (JSON or form) merged; JSON-string fields decoded; the token pulled out."""
    values: dict[str, Any] = dict(request.query)
    warnings: list[str] = []
    if request.method == "POST" and request.can_read_body:
        content_type = request.content_type
        if content_type == "application/json":
            if "charset" not in request.headers.get("Content-Type", "").lower():
                warnings.append("missing_charset")
            try:
                body = json.loads(await request.read() or b"{}")
            except ValueError as exc:
                raise ApiError("invalid_json") from exc
            if not isinstance(body, dict):
                raise ApiError("json_not_object")
            values.update(body)
        elif content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            form = await request.post()
            values.update({k: v for k, v in form.items() if isinstance(v, str)})
    for key in _JSON_FIELDS:
        if isinstance(values.get(key), str):
            try:
                values[key] = json.loads(values[key])
            except ValueError as exc:
                raise ApiError("invalid_blocks_format" if key == "blocks" else "invalid_arguments") from exc
    token = values.pop("token", None)
    authorization = request.headers.get("Authorization", "")
    if authorization.startswith("Bearer "):
        token = authorization.removeprefix("Bearer ").strip()
    elif authorization.startswith("Basic "):
        values.update(_basic_credentials(authorization))
    return values, token, warnings


def _basic_credentials(authorization: str) -> dict[str, str]:
    try:
        decoded = base64.b64decode(authorization.removeprefix("Basic ").strip()).decode()
    except (ValueError, binascii.Error):
        return {}
    client_id, _, client_secret = decoded.partition(":")
    return {"client_id": client_id, "client_secret": client_secret}
