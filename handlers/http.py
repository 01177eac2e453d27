"""The HTTP side: one endpoint for events, commands and interactivity, plus health and OAuth routes.

Bolt verifies signatures and dispatches; this wrapper turns a body Bolt cannot parse into a 400
(instead of a 500 that Slack would retry) and logs it without its content.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"


def web_app(
    slack: AsyncApp, *, ready: Callable[[], Awaitable[bool]], client_max_size: int = 4 * 1024 * 1024
) -> web.Application:
    app = web.Application(client_max_size=client_max_size)

    async def events(request: web.Request) -> web.Response:
        try:
            bolt_request = await to_bolt_request(request)
        except ValueError as exc:  # JSON or form payload Bolt cannot read
            log.warning("rejected a malformed Slack request (%s)", type(exc).__name__)
            return web.json_response({"error": "malformed payload"}, status=400)
        return await to_aiohttp_response(await slack.async_dispatch(bolt_request))

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def readyz(request: web.Request) -> web.Response:
        if await ready():
            return web.json_response({"ok": True, "redis": "up"})
        return web.json_response({"ok": False, "redis": "down"}, status=503)

    app.router.add_post(EVENTS_PATH, events)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    flow = slack.oauth_flow
    if flow is not None:

        async def install(request: web.Request) -> web.Response:
            return await to_aiohttp_response(await flow.handle_installation(await to_bolt_request(request)))

        async def callback(request: web.Request) -> web.Response:
            return await to_aiohttp_response(await flow.handle_callback(await to_bolt_request(request)))

        app.router.add_get(flow.install_path, install)
        app.router.add_get(flow.redirect_uri_path, callback)
    return app
