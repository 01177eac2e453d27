"""The small interfaces the engine needs from the outside world (DESIGN §2).

The engine never imports Slack, Bolt or our store package: ``bot/app.py`` hands it objects that
satisfy these Protocols.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Protocol, runtime_checkable

from bot.deferred import DeferredModel
from bot.models.base import RestartableText
from bot.principals import Principal
from bot.protocol import Event
from bot.session import SessionRef

log = logging.getLogger(__name__)


class Undeliverable(Exception):  # noqa: N818 - a verdict, not a bug
    """A frontend can never show this event (its channel is gone, the app was removed): skip it."""


class RetryLater(Exception):  # noqa: N818 - a request, not a bug
    """Not now, and not a failure: the far side asked us to wait (Slack's 429 with Retry-After)."""

    def __init__(self, delay_s: float, reason: str = ""):
        super().__init__(reason or f"asked to wait {delay_s:.1f}s")
        self.delay_s = delay_s


class PostedMessage(DeferredModel):
    """A message a tool posted (``ctx.workspace.post``): where it went, and a link when the frontend has one."""

    channel: str  # the conversation's id
    ts: str = ""
    permalink: str | None = None


class WorkspaceError(Exception):
    """The workspace refused what a tool asked (``channel_not_found``, ``not_in_channel``…): the message
    says what to do, and the tool can pass it to the model."""


class Workspace(Protocol):
    """What tools may do in a workspace, given by the frontend (Slack, the console). The runtime binds
    it to the session's workspace: a tool never chooses the tenant."""

    async def post_message(self, team_id: str | None, channel: str, text: str, *,
                           asked_by: Principal | None = None, approved_by: Principal | None = None) -> PostedMessage:
        """Post ``text`` (plain text: nothing in it pings anyone) to ``channel`` (an id or a #name), saying
        who asked for it (the turn's requester) and who approved it (the call's principal)."""


class Channel(Protocol):
    """A consumer of a session's committed events, in order (see ``bot.engine.outbox``).

    Raising from ``deliver`` means "not now": the same event is offered again later, with backoff,
    so a frontend must make a repeat harmless. Raise :class:`Undeliverable` for an event that can
    never be shown (it is skipped), :class:`RetryLater` to be offered it again after a given delay.
    """

    async def deliver(self, event: Event, session: SessionRef) -> None: ...


class LiveText(Protocol):
    """What the model has written so far in a step, for a frontend that shows answers as they are written
    (Slack streams them). Not durable and not an event: the committed ``message.completed`` stays the
    source of truth, and a frontend must show the answer whole from it whether or not this was called.

    Called on every text delta with the whole text so far, inside the model's read loop: it must return at
    once and never raise (batch and send in the background). ``step`` numbers the turn's model steps (the
    ``step`` of that step's ``message.completed``), the same again when a replica re-runs the step;
    ``owner`` is the person the turn serves (Slack streams to a recipient). When the model's request is
    retried after a broken stream the text starts over: it no longer extends what was handed before."""

    def text_so_far(self, session: SessionRef, turn_id: str, step: int, text: str,
                    owner: Principal | None) -> None: ...


class StepText(RestartableText):
    """One model step's text, handed to a :class:`LiveText` whole as it grows; a retried request (after a
    broken stream) starts it over. Showing text early is a courtesy: a failure is logged, never raised."""

    def __init__(self, live: LiveText, session: SessionRef, turn_id: str, step: int, owner: Principal | None):
        self.live, self.session, self.turn_id, self.step, self.owner = live, session, turn_id, step, owner
        self.parts: list[str] = []

    async def __call__(self, delta: str) -> None:
        self.parts.append(delta)
        try:
            self.live.text_so_far(self.session, self.turn_id, self.step, "".join(self.parts), self.owner)
        except Exception:  # noqa: BLE001 - the answer is committed anyway
            log.exception("live text failed in %s", self.session.session_id)

    def restart(self) -> None:
        self.parts.clear()


@runtime_checkable
class LandingChannel(Protocol):
    """A consumer whose delivery of an event may still be landing when the next one's begins: two messages
    edited or posted side by side, rather than one Slack round trip after the other.

    ``start_delivery`` does, in order, everything of the event that later events may rely on, and returns
    what is still landing (a call to the far side that nothing after it waits on), or None when it is done.
    The outbox moves the consumer's cursor past an event only once it has landed, so one that fails is
    offered again with everything after it (a repeat the consumer makes harmless, as always), and the
    pass ends only when all have landed. ``deliver`` is both: start, then wait for it to land."""

    async def deliver(self, event: Event, session: SessionRef) -> None: ...

    async def start_delivery(self, event: Event, session: SessionRef) -> Awaitable[None] | None: ...


@runtime_checkable
class BatchChannel(Protocol):
    """A consumer that takes several events at once, all or nothing (the audit log: one write for a
    turn's worth of events). Raising means none of them was handled: the same batch comes again."""

    async def deliver(self, event: Event, session: SessionRef) -> None: ...

    async def deliver_batch(self, events: list[Event], session: SessionRef) -> None: ...


# What ``isinstance(channel, LandingChannel)`` and ``isinstance(channel, BatchChannel)`` decide for a Channel (it
# has ``deliver``): whether it has the other method, not set to None. Asked per consumer and per event of every
# pass, so by one attribute lookup: the runtime Protocol check walks the Protocol's members each time (~5–10 µs).
def as_landing(channel: Channel) -> LandingChannel | None:
    """``channel`` if it is a :class:`LandingChannel`, else None."""
    return channel if getattr(channel, "start_delivery", None) is not None else None  # type: ignore[return-value]


def as_batch(channel: Channel) -> BatchChannel | None:
    """``channel`` if it is a :class:`BatchChannel`, else None."""
    return channel if getattr(channel, "deliver_batch", None) is not None else None  # type: ignore[return-value]


class NullChannel:
    """A channel that shows nothing (CLI tools, benchmarks)."""

    async def deliver(self, event: Event, session: SessionRef) -> None:
        return None
