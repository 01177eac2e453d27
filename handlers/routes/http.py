"""The HTTP side: one endpoint for events, commands and interactivity, plus health, metrics and OAuth routes.

Every request to the endpoint goes through the same gate, in this order (fail closed, never a 5xx
for input: Slack retries those):

1. the signature and timestamp are checked on the raw bytes, before anything is parsed; unsigned,
   badly signed or stale requests get 401 (Bolt's own check is switched off in ``bot.app``, so this
   is the one place it happens);
2. the body is parsed as Bolt parses it (an interaction's ``payload=`` decoded first, to the same
   result: :func:`interaction_json`); a signed body that does not parse, or whose shape our
   listeners cannot read (``handlers.envelope``), gets 400 and is logged without its content;
3. Bolt dispatches it.

A client cannot hold a connection by sending slowly (``ClientLimits``): every route's body must arrive
within a bound once its head is in (else 408 and the connection closes), and be at most 4 MB (else 413);
``bot.app`` serves with the head's bound too.
"""

from __future__ import annotations

import asyncio
import binascii
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.signature import SignatureVerifier

from bot.ops.metrics import CONTENT_TYPE
from handlers.envelope import problem

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
METRICS_PATH = "/metrics"  # Prometheus text format (bot.ops.metrics)


@dataclass(frozen=True)
class ClientLimits:
    """How long a client may take to send its request, and how big the body may be. Slack sends each request
    at once (and gives up after 3 s); a client that trickles bytes, by accident or on purpose, would
    otherwise hold its connection (and the memory of a half-read request) for as long as it likes."""

    # request line and headers, from the connection's opening or the last answer on it: aiohttp's keep-alive
    # timer, so also how long an idle connection stays open; longer than the idle timeout of the proxies
    # in front of the bot (60 s for AWS's load balancers and nginx's upstreams), which would otherwise
    # send a request on a connection the bot is closing
    head_s: float = 75.0
    body_s: float = 10.0  # the body, once the head is in
    linger_s: float = 1.0  # after an early answer (408, 413), unread body is drained this long, then the close
    max_body: int = 4 * 1024 * 1024

    def server_args(self) -> dict[str, Any]:
        """For ``web.AppRunner``: aiohttp's keep-alive timer runs from a connection's opening and from each
        answer, and closes the connection if no complete request head has arrived by then (an idle keep-alive
        connection is the same case: no head yet), so it is the head's bound."""
        return {"keepalive_timeout": self.head_s, "lingering_time": self.linger_s}


# a '%' that does not start an escape of two hex digits (URL-encoding's only other special is '+')
_CUT_ESCAPE = re.compile(rb"%(?![0-9A-Fa-f]{2})")


def interaction_json(raw: bytes) -> str | None:
    """An interaction's JSON, out of the ``payload=<URL-encoded JSON>`` body Slack posts every interaction
    as; None leaves the body to Bolt's own parser (and its errors).

    Bolt decodes it with ``urllib.parse``, a Python loop over every ``%`` escape, and a card's click
    carries the whole card: thousands of escapes, ~3 % of an approve cycle's instructions
    (``python -m benchmarks.http.instructions``). Here it is decoded in C: '+' is a space and ``%XX``
    is quoted-printable's ``=XX``, which ``binascii`` decodes. Only a body made of URL-encoding's own
    characters is taken (no '&', raw '=' or line break, every '%' an escape), so the result is Bolt's."""
    if not raw.startswith(b"payload="):
        return None
    value = raw[8:]
    if not value or b"&" in value or b"=" in value or b"\n" in value or b"\r" in value or _CUT_ESCAPE.search(value):
        return None
    try:
        return binascii.a2b_qp(value.replace(b"+", b" ").replace(b"%", b"=")).decode("utf-8")
    except UnicodeDecodeError:  # Bolt reads it with replacement characters: its path, its result
        return None


def signed_by_slack(verifier: SignatureVerifier | None, body: bytes, headers: Mapping[str, str]) -> bool:
    """Slack's v0 signature over the raw bytes, within five minutes; any oddity means no."""
    if verifier is None:  # Socket Mode without a signing secret: nothing over HTTP is Slack's
        return False
    try:
        return verifier.is_valid_request(body, dict(headers))
    except (ValueError, TypeError, OverflowError):  # a non-numeric timestamp, non-ASCII signature…
        return False


def web_app(
    slack: AsyncApp | None,
    *,
    signing_secret: str | None,
    ready: Callable[[], Awaitable[bool]],
    limits: ClientLimits = ClientLimits(),
    metrics: Callable[[], Awaitable[bytes]] | None = None,
) -> web.Application:
    app = web.Application(client_max_size=limits.max_body, middlewares=[_body_within(limits.body_s)])
    verifier = SignatureVerifier(signing_secret) if signing_secret else None

    async def events(request: web.Request) -> web.Response:
        raw = await request.read()
        if not signed_by_slack(verifier, raw, request.headers):
            return web.json_response({"error": "invalid signature"}, status=401)
        headers = dict(request.headers)
        if (payload := interaction_json(raw)) is not None:  # Bolt then reads JSON, as it reads the Events API's
            headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
            headers["Content-Type"] = "application/json"
        try:
            bolt_request = AsyncBoltRequest(body=raw.decode("utf-8") if payload is None else payload,
                                            query=request.query_string, headers=headers)  # type: ignore[arg-type]
        except (ValueError, TypeError, AttributeError, KeyError) as exc:  # not JSON, not a form, odd shape
            return _malformed(type(exc).__name__)
        if (why := problem(bolt_request.body)) is not None:
            return _malformed(why)
        return await to_aiohttp_response(await slack.async_dispatch(bolt_request))

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def readyz(request: web.Request) -> web.Response:
        if await ready():
            return web.json_response({"ok": True, "redis": "up"})
        return web.json_response({"ok": False, "redis": "down"}, status=503)

    if slack is not None:  # None: a worker process (bot.engine.roles) serves health and metrics only
        app.router.add_post(EVENTS_PATH, events)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if metrics is not None:

        async def scrape(request: web.Request) -> web.Response:
            # unauthenticated, as Prometheus expects: only counts, no ids and no text (bot.ops.metrics)
            return web.Response(body=await metrics(), headers={"Content-Type": CONTENT_TYPE})

        app.router.add_get(METRICS_PATH, scrape)
    flow = slack.oauth_flow if slack is not None else None
    if flow is not None:

        async def install(request: web.Request) -> web.Response:
            return await to_aiohttp_response(await flow.handle_installation(await to_bolt_request(request)))

        async def callback(request: web.Request) -> web.Response:
            return await to_aiohttp_response(await flow.handle_callback(await to_bolt_request(request)))

        app.router.add_get(flow.install_path, install)
        app.router.add_get(flow.redirect_uri_path, callback)
    return app


def _body_within(seconds: float) -> Any:
    """Read every request's body within ``seconds`` before its handler runs (``request.read()`` keeps it, so
    the handler's own read returns it at once): a body still coming after that is answered 408, and the
    connection closes."""

    @web.middleware
    async def body_within(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                          ) -> web.StreamResponse:
        if request.can_read_body:
            try:
                async with asyncio.timeout(seconds):
                    await request.read()
            except TimeoutError:
                log.warning("closed a connection whose request body took over %s s (%s)", seconds, request.path)
                response = web.json_response({"error": "request body too slow"}, status=408)
                response.force_close()
                return response
        return await handler(request)

    return body_within


def _malformed(why: str) -> web.Response:
    log.warning("rejected a malformed signed Slack request (%s)", why)
    return web.json_response({"error": "malformed request"}, status=400)
