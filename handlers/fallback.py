"""Acknowledge everything else Slack sends, so nothing 404s or 500s into Slack's retries (DESIGN §10).

Registered last (Bolt runs the first listener that matches): clicks, attachment actions and
``workflow_step_edit`` (``app.action``), submissions and closes of views we do not own, options requests
(an empty menu: no element of ours loads its options from the app), shortcuts, slash commands we do not
own and events are acknowledged and nothing else. A request no listener matches at all (an unknown
``type``, ``app_rate_limited``…) is answered 200 by :func:`on_error` and logged by its type alone: Bolt's
own warning for it quotes what a person typed, which ``LOG_CONTENT`` keeps out of the logs.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.error import BoltUnhandledRequestError
from slack_bolt.response import BoltResponse

from handlers.metering import payload_type
from handlers.outage import Spawn, answer_store_down
from handlers.shared.deps import EventInProgress, SlackDeps

log = logging.getLogger(__name__)

ANYTHING = re.compile(".*")
NO_OPTIONS: list[dict[str, Any]] = []


def register(app: AsyncApp, deps: SlackDeps) -> None:
    """Register last: Bolt runs the first listener that matches."""

    async def ack_only(ack: Any) -> None:
        await ack()

    async def no_options(ack: Any) -> None:
        await ack(options=NO_OPTIONS)  # a valid, empty menu (block_suggestion and dialog_suggestion)

    async def ignore() -> None:
        return None

    app.action(ANYTHING)(ack_only)
    app.view(ANYTHING)(ack_only)
    app.view_closed(ANYTHING)(ack_only)
    app.options(ANYTHING)(no_options)
    app.shortcut(ANYTHING)(ack_only)
    app.command(ANYTHING)(ack_only)
    app.event(ANYTHING)(ignore)

    async def errors(error: Exception, body: Any, client: Any) -> BoltResponse | None:
        return await on_error(error, body, client, deps.tasks.spawn)

    app.error(errors)


async def on_error(error: Exception, body: Any, client: Any, spawn: Spawn) -> BoltResponse | None:
    """Bolt's error handler (the app is built with ``raise_error_for_unhandled_request``)."""
    if (answered := answer_store_down(error, body, client, spawn)) is not None:
        return answered  # a person's click while Redis is unreachable: 200 and "try again" (handlers.outage)
    if isinstance(error, EventInProgress):
        # a redelivery while its first delivery acts, or after that one died mid-act: Slack retries later,
        # when the claim has lapsed (store.slack_events), and that retry acts
        log.info("event %s: another delivery is acting on it, or died doing so; Slack will retry", error)
        return BoltResponse(status=503, body="")
    if isinstance(error, BoltUnhandledRequestError):
        # Slack sent something nobody here handles: acknowledge it (a 404 would be retried or shown as an
        # error), and log its type only, never its fields (they hold what people typed)
        kind = body.get("type") if isinstance(body, dict) else None
        log.info("acknowledged a Slack request no listener handles (%s, type %.40r)", payload_type(body), kind)
        return BoltResponse(status=200, body="")
    # a listener failed: Bolt answers 500 (events are retried by Slack); logged as Bolt's default does
    log.error("a Slack listener failed on a %s request (%s)", payload_type(body), type(error).__name__,
              exc_info=error)
    return None
