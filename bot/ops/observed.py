"""What the outbox delivers to the frontend, watched: a log line per turn event, delivery lag, ids in logs.

:class:`ObservedChannel` wraps the frontend consumer (Slack). It reads nothing from Redis: everything
it says comes from the event being delivered and the session it belongs to. It speaks after the
frontend took the event, so an event offered again (Slack was down) is told once, when it lands.

The lines are for a person watching ``make run``: ``turn 3f2a9c… started in #general by @alice``,
``waiting for approval of refund_charge (request 64af…)``, ``approved by @bob``, ``tool refund_charge
completed``, ``turn completed``. What people and the model wrote is left out unless ``LOG_CONTENT=1``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime

from bot.ops import logs, tracing
from bot.ops.metrics import DELIVERY_LAG, TURN_EVENTS
from bot.ports import Channel, as_landing
from bot.principals import Principal
from bot.protocol import (
    ActionResult,
    ActionStarted,
    ApprovalCandidate,
    ApprovalSettled,
    Event,
    InputEscalated,
    InputReminded,
    InputRequest,
    InputRequested,
    InputResolved,
    MessageCompleted,
    TurnFailed,
    TurnStarted,
)
from bot.session import SessionRef

log = logging.getLogger("bot.events")
# the counter's child for each event type (prometheus_client takes a lock and re-checks the labels on every call)
_events_of = functools.lru_cache(maxsize=None)(TURN_EVENTS.labels)

Names = Callable[[str], str | None]  # a Slack user or channel id → its name, when the frontend knows it


class ObservedChannel:
    """A ``Channel`` that delivers through ``inner`` and then tells what happened."""

    def __init__(self, inner: Channel, *, names: Names | None = None):
        self.inner = inner
        self.names = names or (lambda _id: None)

    async def deliver(self, event: Event, session: SessionRef) -> None:
        if (landing := await self.start_delivery(event, session)) is not None:
            await landing

    async def start_delivery(self, event: Event, session: SessionRef) -> Awaitable[None] | None:
        """``bot.ports.LandingChannel``: the inner channel's, told once it has landed."""
        with self._bound(event, session):
            if (inner := as_landing(self.inner)) is None:
                await self.inner.deliver(event, session)
            elif (landing := await inner.start_delivery(event, session)) is not None:
                return self._landed(landing, event, session)
            self._observe(event, session)
        return None

    async def _landed(self, landing: Awaitable[None], event: Event, session: SessionRef) -> None:
        await landing
        with self._bound(event, session):
            self._observe(event, session)

    @staticmethod
    def _bound(event: Event, session: SessionRef) -> AbstractContextManager[None]:
        return logs.bound(session_id=session.session_id, turn_id=event.turn_id, team_id=session.team_id,
                          request_id=getattr(event, "request_id", None))

    def _observe(self, event: Event, session: SessionRef) -> None:
        DELIVERY_LAG.observe(max((datetime.now(UTC) - event.at).total_seconds(), 0.0))
        _events_of(event.type).inc()
        if isinstance(event, TurnStarted) and event.turn_id:  # the root of the turn's trace (bot.ops.tracing)
            tracing.turn_started(event.turn_id, session.session_id, session.team_id, event.at.timestamp())
        if log.isEnabledFor(logging.INFO):  # the lines cost more than the rest: only when shown
            for line in self.describe(event, session):
                log.info(line, extra={"event": event.type})

    # --- the lines -------------------------------------------------------------------------------

    def describe(self, event: Event, session: SessionRef) -> list[str]:
        """What a person watching would want to read about ``event`` (nothing for the bookkeeping ones)."""
        if isinstance(event, TurnStarted):
            where = self._channel(session)
            by = f" by {self._who(event.principal)}" if event.principal else ""
            return [f"turn {_short(event.turn_id)} started{where}{by}"]
        if isinstance(event, MessageCompleted):
            return [f"agent replied: {logs.content(event.text)}"]
        if isinstance(event, ActionStarted):
            return [f"tool {event.tool_name} started"]
        if isinstance(event, ActionResult):
            error = f": {logs.content(event.error)}" if event.error else ""
            return [f"tool {event.tool_name} {event.status}{error}"]
        if isinstance(event, InputRequested):
            return [_waiting(req) for req in event.requests]
        if isinstance(event, ApprovalSettled):
            return [f"{event.outcome} by {self._who(event.responder)} (request {_short(event.request_id)})"]
        if isinstance(event, ApprovalCandidate) and event.outcome != "pending":
            reason = f": {event.reason}" if event.reason else ""
            return [
                f"answer by {self._who(event.responder)} to request {_short(event.request_id)} "
                f"{event.outcome}{reason}"
            ]
        if isinstance(event, InputResolved):
            return [
                f"request {_short(r.request_id)} {r.outcome}"
                + (f" by {self._who(r.response.principal)}" if r.response and r.response.principal else "")
                for r in event.resolutions
                if r.kind != "tool-approval" or r.outcome not in ("approved", "denied")
            ]
        if isinstance(event, InputReminded):
            return [f"reminded people of request {_short(event.request_id)}"]
        if isinstance(event, InputEscalated):
            return [f"request {_short(event.request_id)} escalated to {len(event.people)} more people"]
        if isinstance(event, TurnFailed):
            return [f"turn {_short(event.turn_id)} failed: {event.reason}"]
        if event.type in ("turn.completed", "turn.cancelled"):
            return [f"turn {_short(event.turn_id)} {event.type.split('.')[1]}"]
        return []  # turn.waiting, session.waiting, approval.candidate pending: said by the lines around them

    def _who(self, principal: Principal | None) -> str:
        if principal is None:
            return "someone"
        user = principal.slack_user_id
        if user is None:
            return principal.principal_id
        return f"@{self.names(user) or user}"

    def _channel(self, session: SessionRef) -> str:
        channel = session.channel.get("channel_id")
        if not channel:
            return ""
        return f" in #{self.names(channel) or channel}"


def _waiting(req: InputRequest) -> str:
    rid = _short(req.request_id)
    if req.kind == "tool-approval" and req.action is not None:
        return f"waiting for approval of {req.action.tool_name} (request {rid})"
    if req.kind == "external-result" and req.action is not None:
        return f"waiting for the result of {req.action.tool_name}, run elsewhere (request {rid})"
    if req.kind == "session-limit":
        return f"waiting: the turn used its budget; continue or stop? (request {rid})"
    return f"waiting for an answer to a {req.kind.replace('-', ' ')} (request {rid})"


def _short(some_id: str | None) -> str:
    """``turn_3f2a9c1b2d4e`` → ``3f2a9c…``: enough to tell turns apart in a terminal (JSON logs carry it whole)."""
    if not some_id:
        return "?"
    tail = some_id.rsplit("_", 1)[-1].rsplit(".", 1)[-1]
    return f"{tail[:6]}…" if len(tail) > 6 else tail
