"""``LocalSlack``: the local workspace as one aiohttp server (Web API, Socket Mode, response_url, OAuth, UI)."""

from __future__ import annotations

import asyncio
import html
import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlencode

from aiohttp import web

from localslack import manifest, payloads, ui
from localslack.actions import LocalSlackError
from localslack.ai_apps import AiAppActions
from localslack.command_actions import CommandActions
from localslack.credentials import RESPONSE_URL_MAX_USES, RESPONSE_URL_TTL_S, TRIGGER_TTL_S
from localslack.delivery import RETRY_DELAYS_S, SLACK_TIMEOUT_S, Deliverer
from localslack.errors import ApiError
from localslack.models import (
    ApiCall,
    Channel,
    DeliveryResult,
    Ephemeral,
    Message,
    Team,
    User,
    View,
)
from localslack.persistence import DEFAULT_SAVE_DELAY_S, Persister
from localslack.ratelimit import RateLimits
from localslack.seed import TEAM_ID, Seed
from localslack.socket_mode import SOCKET_ROUTE, DisconnectReason, SocketModeServer
from localslack.view_actions import ViewActions
from localslack.webapi import Hold, WebApi
from localslack.workspace import Workspace

T = TypeVar("T")
DEFAULT_CLIENT_ID = "1111111111.2222222222"
DEFAULT_CLIENT_SECRET = "localslack-client-secret"
DEFAULT_APP_TOKEN = "xapp-local-A0LOCAL"


class LocalSlack(ViewActions, CommandActions, AiAppActions):
    """A local Slack workspace: Web API at ``api_url``, signed delivery to ``bot_url``, browser UI at ``ui_url``.

    Use as ``async with LocalSlack(bot_url=..., signing_secret=...) as slack:`` or ``start()``/``stop()``.
    An app that connects with Socket Mode (``app_token`` → ``apps.connections.open``) gets every delivery over
    its socket instead of ``bot_url`` for as long as the socket is open.

    It refuses what Slack refuses (docs/LOCALSLACK.md lists every rule and its source):

    - ``scopes``: what the app's tokens may do; default ``"manifest"`` = ``oauth_config.scopes.bot`` of
      ``manifest.yml`` (a call needing another scope answers ``missing_scope``); a list = those scopes;
      ``None`` = not checked.
    - ``rate_limits``: Slack's tiers per method and workspace, and one post a second per channel (429 +
      ``Retry-After``); on by default. ``slack.rate_limits.enabled = False`` switches them off,
      ``slack.rate_limits.limit("chat.update", per_minute=2)`` tightens one method.
    - ``retry_delivery``: an event not answered 2xx within 3 s is sent again (up to 3 times, with
      ``X-Slack-Retry-Num`` / ``X-Slack-Retry-Reason``), as Slack does; on by default, after
      ``retry_delays_s`` (Slack: immediately, 1 min, 5 min; here seconds).
    - ``api_delay_s``: every Web API call waits this long before it is handled, as if Slack were that far
      away (benchmarks); 0 by default; ``slack.api.answer_delay_s`` changes it on a running workspace.
    - ``data_dir``: keep the workspace (channels, messages, threads, users, installs, open views) in
      ``<data_dir>/localslack.json`` so a restart shows the same workspace; ``None`` = in memory only.
    """

    def __init__(
        self,
        *,
        bot_url: str | None,
        signing_secret: str,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: Seed | None = None,
        retry_delivery: bool = True,
        retry_delays_s: tuple[float, ...] = RETRY_DELAYS_S,
        delivery_timeout_s: float = SLACK_TIMEOUT_S,
        trigger_ttl_s: float = TRIGGER_TTL_S,
        echo_bot_messages: bool = False,
        client_id: str = DEFAULT_CLIENT_ID,
        client_secret: str = DEFAULT_CLIENT_SECRET,
        app_token: str = DEFAULT_APP_TOKEN,
        scopes: Iterable[str] | Literal["manifest"] | None = "manifest",
        rate_limits: bool | RateLimits = True,
        data_dir: str | Path | None = None,
        save_delay_s: float = DEFAULT_SAVE_DELAY_S,
        api_delay_s: float = 0.0,
    ) -> None:
        self.host = host
        self.port = port
        self.signing_secret = signing_secret
        self._app_token = app_token
        granted = manifest.bot_scopes() if scopes == "manifest" else (None if scopes is None else list(scopes))
        self.ws = Workspace(seed, trigger_ttl_s=trigger_ttl_s, scopes=granted)
        self.persister = Persister(self.ws, data_dir, save_delay_s=save_delay_s) if data_dir else None
        if self.persister is not None:
            self.persister.load()
        self.rate_limits = rate_limits if isinstance(rate_limits, RateLimits) else RateLimits(enabled=rate_limits)
        self.socket_mode = SocketModeServer(on_change=self.ws.touch)
        self.deliverer = Deliverer(
            bot_url=bot_url,
            signing_secret=signing_secret,
            timeout_s=delivery_timeout_s,
            retry=retry_delivery,
            retry_delays_s=retry_delays_s,
            socket=self.socket_mode,
        )
        self.api = WebApi(
            self.ws,
            client_id=client_id,
            client_secret=client_secret,
            on_bot_message=self.echo_bot_message if echo_bot_messages else None,
            app_token=app_token,
            open_socket_url=lambda: self.socket_mode.issue_url(self.base_url),
            rate_limits=self.rate_limits,
            answer_delay_s=api_delay_s,
        )
        self._message_state: dict[tuple[str, ...], dict[str, dict[str, Any]]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None

    # ---- lifecycle -----------------------------------------------------------------------------------

    def build_app(self) -> web.Application:
        app = web.Application(client_max_size=8 * 1024 * 1024, middlewares=[self._durable_answers])
        app.router.add_route("*", "/api/{method}", self.api.handle)
        app.router.add_get(SOCKET_ROUTE, self.socket_mode.handle)
        app.router.add_post("/response_url/{hook_id}", self._response_url)
        app.router.add_get("/oauth/v2/authorize", self._oauth_authorize_page)
        app.router.add_post("/oauth/v2/authorize", self._oauth_authorize_allow)
        app.router.add_get("/archives/{channel_id}/{permalink}", self._archives)
        app.router.add_get("/healthz", self._healthz)
        ui.register(app, self)
        return app

    @web.middleware
    async def _durable_answers(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Answer only once what the request changed is on disk: a post Slack said ``ok`` to survives a
        kill -9 the next instant (else the bot's later reply finds no parent and lands at the top level)."""
        response = await handler(request)
        if self.persister is not None:
            await self.persister.durable()
        return response

    async def start(self) -> str:
        """Serve on host:port (port 0 = any free port); returns the base URL (``http://host:port``)."""
        if self._runner is not None:
            return self.base_url
        await self.deliverer.start()
        self._runner = web.AppRunner(
            self.build_app(), access_log=None, handle_signals=False, shutdown_timeout=1.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]
        self._base_url = f"http://{self.host}:{self.port}"
        self.ws.base_url = self._base_url
        return self._base_url

    async def stop(self) -> None:
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await ui.close_streams(self)
        await self.socket_mode.close()  # open sockets would hold the server's shutdown
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.deliverer.stop()
        if self.persister is not None:
            self.persister.save()  # whatever the debounce still held

    async def __aenter__(self) -> LocalSlack:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError("LocalSlack is not started")
        return self._base_url

    @property
    def api_url(self) -> str:
        """Give this to ``AsyncWebClient(base_url=...)`` / ``SLACK_API_URL``."""
        return f"{self.base_url}/api/"

    @property
    def ui_url(self) -> str:
        return f"{self.base_url}/"

    @property
    def oauth_authorize_url(self) -> str:
        """Give this to ``AuthorizeUrlGenerator(authorization_url=...)``."""
        return f"{self.base_url}/oauth/v2/authorize"

    @property
    def bot_url(self) -> str | None:
        return self.deliverer.bot_url

    def set_bot_url(self, url: str | None) -> None:
        self.deliverer.bot_url = url

    # ---- Socket Mode ---------------------------------------------------------------------------------

    @property
    def app_token(self) -> str:
        """The app-level token (``xapp-…``) that ``apps.connections.open`` accepts: ``SLACK_APP_TOKEN``."""
        return self._app_token

    @property
    def socket_connected(self) -> bool:
        """True while the app holds a Socket Mode connection (deliveries then use it, not ``bot_url``)."""
        return self.socket_mode.connected

    async def wait_for_socket(self, timeout_s: float = 10.0) -> None:
        """Wait until an app has connected over Socket Mode."""
        await self.wait_for(lambda: self.socket_mode.connected, timeout_s)

    async def disconnect_sockets(self, reason: DisconnectReason = "refresh_requested") -> int:
        """Ask every connected app to reconnect (Slack's ``disconnect`` message); returns how many were told."""
        return await self.socket_mode.disconnect(reason)

    # ---- workspace setup -----------------------------------------------------------------------------

    @property
    def bot_token(self) -> str:
        """The app's bot token (the default team's, else the first installed team's or org's)."""
        token = self.ws.teams[TEAM_ID].bot_token if TEAM_ID in self.ws.teams else None
        token = token or next((t.bot_token for t in self.ws.teams.values() if t.bot_token), None)
        if token is None:
            raise RuntimeError("the app is not installed in any workspace")
        return token

    def add_team(self, team_id: str, name: str, bot_token: str) -> Team:
        """Another workspace with the app installed (its bot user is ``U<id-without-T>BOT``)."""
        return self.ws.install(team_id, name, bot_token)

    def add_user(
        self,
        user_id: str,
        name: str,
        *,
        team_id: str = TEAM_ID,
        real_name: str | None = None,
        is_admin: bool = False,
        is_owner: bool = False,
        channels: tuple[str, ...] = (),
    ) -> User:
        user = User(
            id=user_id,
            team_id=team_id,
            name=name,
            real_name=real_name or name.title(),
            is_admin=is_admin,
            is_owner=is_owner,
        )
        self.ws.add_user(user)
        for channel_id in channels:
            self.ws.channel(channel_id).members.append(user_id)
        return user

    def add_channel(
        self,
        channel_id: str,
        name: str,
        *,
        team_id: str = TEAM_ID,
        members: list[str] | None = None,
        connected_team_ids: list[str] | None = None,
        is_private: bool = False,
        bot_member: bool = True,
        is_mpim: bool = False,
    ) -> Channel:
        """A channel (``is_mpim``: a group DM of ``members``, private like Slack's)."""
        team = self.ws.team(team_id)
        member_ids = list(members or [])
        if bot_member and team.bot_user_id and team.bot_user_id not in member_ids:
            member_ids.insert(0, team.bot_user_id)
        channel = Channel(
            id=channel_id,
            team_id=team_id,
            name=name,
            is_private=is_private or is_mpim,
            is_mpim=is_mpim,
            members=member_ids,
            connected_team_ids=list(connected_team_ids or []),
        )
        return self.ws.add_channel(channel)

    def invite(self, channel_id: str, user_id: str) -> Channel:
        """``/invite`` someone (or the app's bot user) into a channel."""
        channel = self.ws.channel(channel_id)
        self.ws.user(user_id)
        if user_id not in channel.members:
            channel.members.append(user_id)
            self.ws.touch()
        return channel

    def issue_oauth_code(
        self,
        team_id: str,
        *,
        user_id: str | None = None,
        scopes: list[str] | None = None,
        redirect_uri: str | None = None,
    ) -> str:
        """A one-time code that ``oauth.v2.access`` exchanges for ``team_id``'s bot token (installing the app
        there if it was not yet). An ``E…`` id installs the app org-wide on that Enterprise Grid org. The
        token gets ``scopes`` (default: what the manifest grants)."""
        granted = list(scopes) if scopes else list(self.ws.app_scopes or [])
        return self.ws.issue_oauth_code(team_id, user_id, granted, redirect_uri)

    # ---- what admins and people do to the workspace (Slack's refusals follow) ----------------------

    async def uninstall(self, team_id: str) -> list[DeliveryResult]:
        """Remove the app from a workspace (an ``E…`` id: from the whole org). Its token answers
        ``token_revoked`` from now on and the bot leaves its channels; the app gets ``tokens_revoked`` and
        ``app_uninstalled`` (Slack sends both, in no guaranteed order)."""
        org = self.ws.enterprises.get(team_id) or self.ws.enterprise_of(team_id)
        org_wide = team_id in self.ws.enterprises
        teams = [t.id for t in self.ws.teams.values() if t.enterprise_id == team_id] if org_wide else [team_id]
        revoked = self.ws.uninstall(team_id)
        results = []
        for event in (
            {"type": "tokens_revoked", "tokens": {"oauth": [], "bot": revoked}},
            {"type": "app_uninstalled"},
        ):
            envelope = payloads.lifecycle_envelope(event, team_id=None if org_wide else teams[0], org=org)
            results.append(await self.deliverer.send_event(envelope))
        return results

    def grant_scopes(self, *scopes: str, token: str | None = None) -> list[str] | None:
        """Give a token (default: the bot token) more scopes, as reinstalling with them would; returns what it
        has now (None: its scopes are not checked)."""
        auth = self.ws.auth_for(token or self.bot_token)
        if auth.scopes is not None:
            auth.scopes = [*auth.scopes, *(s for s in scopes if s not in auth.scopes)]
            self.ws.touch()
        return auth.scopes

    def revoke_token(self, token: str) -> None:
        """The token answers ``token_revoked`` from now on (as after ``auth.revoke``)."""
        self.ws.revoke_token(token)

    def deactivate_user(self, user_id: str) -> User:
        """Deactivate an account: ``deleted: true`` in users.info, ``user_disabled`` from conversations.open,
        and its tokens (the bot user's: the bot token) answer ``account_inactive``."""
        return self.ws.deactivate_user(user_id)

    def archive_channel(self, channel_id: str) -> Channel:
        """Archive a channel: posts answer ``is_archived``, edits ``is_inactive``, people cannot post."""
        return self.ws.archive_channel(channel_id, True)

    def unarchive_channel(self, channel_id: str) -> Channel:
        return self.ws.archive_channel(channel_id, False)

    def reset_rate_limits(self) -> None:
        """Full buckets again, as if no call had been made for a minute."""
        self.rate_limits.reset()

    def issue_trigger_id(self, user_id: str, team_id: str = TEAM_ID) -> str:
        """A fresh trigger_id for ``user_id`` (valid ``trigger_ttl_s`` seconds, once), for calling views.open."""
        return self.ws.issue_trigger(user_id, team_id)

    # ---- recording and inspection --------------------------------------------------------------------

    @property
    def calls(self) -> list[ApiCall]:
        return self.api.calls

    def calls_to(self, method: str) -> list[ApiCall]:
        return [c for c in self.api.calls if c.method == method]

    @property
    def deliveries(self) -> list[DeliveryResult]:
        """Every request sent to the bot, oldest first."""
        return self.deliverer.log

    async def wait_for_retries(self, timeout_s: float = 30.0) -> None:
        """Wait until Slack's pending retries of failed event deliveries have all been sent (each updates the
        ``DeliveryResult`` the first attempt returned)."""
        await self.deliverer.wait_retries(timeout_s)

    async def redeliver(self, result: DeliveryResult, *, reason: str = "http_timeout") -> DeliveryResult:
        """Slack sends an event again although the bot answered it (Slack did not see the 200 in time): same
        body and ``event_id``, with the next ``X-Slack-Retry-Num`` (``Deliverer.redeliver``)."""
        return await self.deliverer.redeliver(result, reason=reason)

    def fail_next(
        self,
        method: str,
        *,
        status: int = 429,
        retry_after: int = 1,
        error: str | None = None,
        times: int = 1,
    ) -> None:
        """Make the next ``times`` calls of ``method`` fail: HTTP 429 + Retry-After + ``ratelimited``, or
        (with ``error``) HTTP 200 ``{"ok": false, "error": error}``."""
        self.api.fail_next(method, status=status, retry_after=retry_after, error=error, times=times)

    def hold_next(self, method: str) -> Hold:
        """Hold the next call of ``method`` unanswered until the test releases it (``Hold.release``): a
        Slack that is slow just then, so the test can act while the bot waits on it."""
        return self.api.hold_next(method)

    def messages(self, channel: str, thread_ts: str | None = None) -> list[Message]:
        """Channel history oldest first (top level only), or with ``thread_ts`` the thread: root then replies."""
        if thread_ts is not None:
            return self.ws.thread(channel, thread_ts)
        return self.ws.top_level(channel)

    def message(self, channel: str, ts: str) -> Message | None:
        return self.ws.find_message(channel, ts)

    def ephemerals(self, user: str) -> list[Ephemeral]:
        return self.ws.ephemerals_for(user)

    def home_view(self, user: str) -> View | None:
        return self.ws.home_view(user)

    def open_views(self, user: str) -> list[View]:
        """The user's modal stack, bottom first (at most 3)."""
        return self.ws.modal_stack(user)

    def view(self, view_id: str) -> View | None:
        return self.ws.views.get(view_id)

    async def wait_for(self, condition: Callable[[], T], timeout_s: float = 5.0) -> T:
        """Wait until ``condition()`` is truthy (re-checked on every workspace change); return its value."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            version = self.ws.version
            value = condition()
            if value:
                return value
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"condition not met within {timeout_s}s")
            await self.ws.wait_changed(version, min(remaining, 0.25))

    async def wait_for_message(
        self,
        channel: str,
        *,
        thread_ts: str | None = None,
        predicate: Callable[[Message], bool] | None = None,
        timeout_s: float = 5.0,
    ) -> Message:
        """The newest message (in the thread, if given) matching ``predicate`` — waiting for it to appear."""

        def newest() -> Message | None:
            candidates = self.messages(channel, thread_ts)
            return next((m for m in reversed(candidates) if predicate is None or predicate(m)), None)

        return await self.wait_for(newest, timeout_s)

    # ---- delivery helpers for protocol tests ---------------------------------------------------------

    def sign(self, body: bytes | str, timestamp: int | None = None) -> dict[str, str]:
        """Slack's signature headers for ``body`` (``timestamp`` defaults to now)."""
        return self.deliverer.sign(body, timestamp)

    async def deliver_raw(self, body: bytes, headers: dict[str, str]) -> DeliveryResult:
        """POST exactly ``body`` with ``headers`` to the bot (no signing, no retries)."""
        return await self.deliverer.deliver_raw(body, headers)

    async def verify_url(self) -> DeliveryResult:
        """Send Slack's ``url_verification`` challenge; ``result.ack_json()["challenge"]`` should echo it."""
        envelope = {
            "token": "localslack-verification-token",
            "challenge": f"c{time.time_ns()}",
            "type": "url_verification",
        }
        body = json.dumps(envelope).encode()
        headers = {"Content-Type": "application/json", **self.sign(body)}
        return await self.deliverer.deliver_raw(body, headers)

    # ---- HTTP endpoints besides the Web API ----------------------------------------------------------

    async def _response_url(self, request: web.Request) -> web.Response:
        context = self.ws.response_urls.get(request.match_info["hook_id"])
        if context is None:
            return web.json_response({"ok": False, "error": "no_active_hooks"}, status=404)
        if time.time() - context.created_at > RESPONSE_URL_TTL_S:
            return web.json_response({"ok": False, "error": "expired_url"}, status=404)
        if context.uses >= RESPONSE_URL_MAX_USES:
            return web.json_response({"ok": False, "error": "used_url"}, status=404)
        try:
            body = await _json_or_payload(request)
        except ValueError:
            return web.json_response({"ok": False, "error": "invalid_payload"}, status=400)
        context.uses += 1
        try:
            self.apply_response(context, body)
        except ApiError as exc:
            return web.json_response({"ok": False, "error": exc.error, **exc.extra}, status=exc.status)
        return web.json_response({"ok": True})

    async def _oauth_authorize_page(self, request: web.Request) -> web.Response:
        query = request.query
        team = self.ws.teams.get(query.get("team") or TEAM_ID) or self.ws.teams[TEAM_ID]
        hidden = "".join(
            f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
            for k, v in query.items()
        )
        page = (
            "<!doctype html><meta charset=utf-8><title>Install agent</title>"
            '<link rel="stylesheet" href="/static/app.css"><body class="oauth">'
            f"<form method=post class=oauth-card><h1>agent is requesting permission to access "
            f"the {html.escape(team.name)} Slack workspace</h1>"
            f"<p>Scopes: <code>{html.escape(query.get('scope', ''))}</code></p>{hidden}"
            f'<input type="hidden" name="team" value="{html.escape(team.id)}">'
            '<button class="btn primary" type=submit>Allow</button></form></body>'
        )
        return web.Response(text=page, content_type="text/html")

    async def _oauth_authorize_allow(self, request: web.Request) -> web.Response:
        form = await request.post()
        redirect_uri = str(form.get("redirect_uri") or "")
        if not redirect_uri:
            return web.Response(status=400, text="redirect_uri is required")
        code = self.issue_oauth_code(
            str(form.get("team") or TEAM_ID),
            scopes=[s for s in str(form.get("scope") or "").split(",") if s] or None,
            redirect_uri=redirect_uri,
        )
        query = {"code": code}
        if form.get("state"):
            query["state"] = str(form["state"])
        separator = "&" if "?" in redirect_uri else "?"
        raise web.HTTPFound(f"{redirect_uri}{separator}{urlencode(query)}")

    async def _archives(self, request: web.Request) -> web.Response:
        channel_id = request.match_info["channel_id"]
        raise web.HTTPFound(f"/#{channel_id}")

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})


async def _json_or_payload(request: web.Request) -> dict[str, Any]:
    if request.content_type == "application/x-www-form-urlencoded":
        form = await request.post()
        body = json.loads(str(form.get("payload") or "{}"))
    else:
        body = json.loads(await request.text() or "{}")
    if not isinstance(body, dict):
        raise ValueError("body must be an object")
    return body


__all__ = ["LocalSlack", "LocalSlackError"]
