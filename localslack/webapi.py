"""Slack's Web API (``POST|GET /api/<method>``) over the in-memory workspace.

Accepts what slack_sdk sends: JSON bodies, form bodies (blocks/view as JSON strings in a field), query
parameters, ``Authorization: Bearer`` or a ``token`` parameter, HTTP Basic for ``oauth.v2.access``.
Answers with Slack's shapes and error codes; every call is recorded for tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from localslack import methods
from localslack.ai_apps import AiAppMethods
from localslack.api_base import MethodGroup
from localslack.api_chat import ChatMethods
from localslack.api_conversations import ConversationMethods
from localslack.api_request import Handler, MessageHook, Params, read_params, require_scope
from localslack.api_views import ViewMethods
from localslack.errors import ApiError
from localslack.models import APP_ID, ApiCall
from localslack.ratelimit import RateLimits
from localslack.token_rotation import refresh_bot_token, rotate_bot_token
from localslack.workspace import Workspace

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


class WebApi(MethodGroup):
    """Dispatches ``/api/<method>`` to handlers; records calls; injects faults. Answers ``auth.test``,
    ``team.info``, ``bots.info``, ``apps.connections.open`` and ``oauth.v2.access`` itself; every other
    method belongs to its family (chat, views, conversations, AI apps)."""

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
        super().__init__(workspace, on_bot_message=on_bot_message)
        # how long every call waits before it is handled (Slack's own latency, for benchmarks); 0 = none
        self.answer_delay_s = answer_delay_s
        self.rate_limits = rate_limits or RateLimits(enabled=False)
        self.app_token = app_token
        self.open_socket_url = open_socket_url
        self.client_id = client_id
        self.client_secret = client_secret
        self.calls: list[ApiCall] = []
        self.faults: dict[str, list[Fault]] = {}
        self.holds: dict[str, list[Hold]] = {}
        # the families post through ``self._notify``, so a hook set later on this object is honoured
        families = (ChatMethods, ViewMethods, ConversationMethods, AiAppMethods)
        self.handlers: dict[str, Handler] = {
            "api.test": self.api_test,
            "auth.test": self.auth_test,
            "team.info": self.team_info,
            "bots.info": self.bots_info,
            "oauth.v2.access": self.oauth_v2_access,
        }
        for family in families:
            self.handlers.update(family(workspace, on_bot_message=self._notify).handlers())
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
            values, token, warnings = await read_params(request)
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
        if p.text("grant_type") == "refresh_token":
            return self._refresh(p.text("refresh_token") or "")
        code = self.ws.oauth_codes.pop(p.text("code") or "", None)
        if code is None:
            raise ApiError("invalid_code")
        redirect_uri = p.text("redirect_uri")
        if code.redirect_uri and redirect_uri and redirect_uri != code.redirect_uri:
            raise ApiError("bad_redirect_uri")
        authed_user: dict[str, Any] = {"id": code.user_id} if code.user_id else {}
        if code.team_id in self.ws.enterprises:  # an org-wide install (api.slack.com/enterprise/apps/reference)
            self.ws.install_org(code.team_id, scopes=list(code.scopes))
        else:
            self.ws.install(code.team_id, scopes=list(code.scopes))
        return {"authed_user": authed_user, **self._bot_grant(code.team_id)}

    def _bot_grant(self, installation_id: str, *, refresh: bool = False) -> dict[str, Any]:
        """The bot half of an ``oauth.v2.access`` answer for a workspace or org (``E…``). With token rotation
        the access token expires (``expires_in``) and comes with a ``refresh_token``."""
        org = self.ws.enterprises.get(installation_id)
        holder = org if org is not None else self.ws.team(installation_id)
        rotating: dict[str, Any] = {}
        if self.ws.rotation.enabled and not refresh:
            token, refresh_token, expires_in = rotate_bot_token(self.ws, installation_id)
            rotating = {"refresh_token": refresh_token, "expires_in": expires_in}
        scopes = self.ws.tokens[holder.bot_token].scopes if holder.bot_token in self.ws.tokens else None
        out: dict[str, Any] = {
            "app_id": APP_ID,
            "scope": ",".join(scopes or []),
            "token_type": "bot",
            "access_token": holder.bot_token,
            "bot_user_id": holder.bot_user_id,
            **rotating,
        }
        if org is not None:
            return {**out, "team": None, "enterprise": org.ref(), "is_enterprise_install": True}
        team_org = self.ws.enterprise_of(installation_id)
        return {**out, "team": {"id": holder.id, "name": holder.name},
                "enterprise": team_org.ref() if team_org else None, "is_enterprise_install": False}

    def _refresh(self, refresh_token: str) -> dict[str, Any]:
        """``grant_type=refresh_token``: a new access token and a new refresh token (the old one is used up)."""
        token, new_refresh, expires_in, installation_id = refresh_bot_token(self.ws, refresh_token)
        answer = self._bot_grant(installation_id, refresh=True)
        return {**answer, "access_token": token, "refresh_token": new_refresh, "expires_in": expires_in}


def _raw_channel(values: dict[str, Any]) -> str | None:
    channel = values.get("channel")
    return str(channel) if channel else None


