"""Pacing Slack calls so that we stay inside Slack's rate limits instead of bouncing off them.

Slack allows about one message per second per channel (short bursts are fine) and rates ``chat.update``
per workspace (Tier 3, 50+ a minute). A :class:`Pacer` spaces calls per key with the generic cell rate
algorithm: ``burst`` calls go at once, then one every ``interval_s``. Each caller reserves its slot
before it sleeps, so concurrent callers queue in order. The pacing is per process (replicas do not
share it); a 429 that still happens is honoured by the outbox (``bot.ports.RetryLater``).

``SLACK_PACING=off`` (bot.config) swaps every pacer for :class:`Unpaced`: no waiting of our own, for apps
whose limits Slack raised and for benchmarks; a 429's Retry-After is still honoured, as it is not ours.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Literal

from slack_sdk.errors import SlackApiError

from bot.ports import RetryLater

PacingMode = Literal["slack", "off"]  # bot.config.Settings.slack_pacing

PRUNE_ABOVE = 10_000  # keys remembered before idle ones are forgotten
MAX_WAIT_S = 2.0  # longer waits are handed back to the outbox, which offers the event again later


class Pacer:
    def __init__(
        self,
        interval_s: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        if interval_s <= 0 or burst < 1:
            raise ValueError("a pacer needs interval_s > 0 and burst >= 1")
        self.interval_s = interval_s
        self.tolerance_s = (burst - 1) * interval_s
        self._clock = clock
        self._sleep = sleep
        self._due: dict[str, float] = {}  # key → theoretical arrival time of the next call

    def reserve(self, key: str, *, max_wait_s: float = float("inf")) -> float:
        """Take the next slot for ``key`` and return how long to wait before using it; when that is longer
        than ``max_wait_s``, take nothing and return the wait (the caller comes back later)."""
        now = self._clock()
        due = max(self._due.get(key, now), now)
        delay = max(0.0, due - self.tolerance_s - now)
        if delay > max_wait_s:
            return delay
        self._due[key] = due + self.interval_s
        if len(self._due) > PRUNE_ABOVE:
            self._due = {k: t for k, t in self._due.items() if t > now}
        return delay

    async def wait(self, key: str, *, max_wait_s: float = MAX_WAIT_S) -> None:
        """Wait for ``key``'s next slot; raise RetryLater when it is further off than ``max_wait_s`` (a
        deliverer must not sleep for long while it holds a session's delivery lock)."""
        delay = self.reserve(key, max_wait_s=max_wait_s)
        if delay > max_wait_s:
            raise RetryLater(delay, f"pacing {key}")
        if delay > 0:
            await self._sleep(delay)


class Unpaced(Pacer):
    """A pacer that never waits (``SLACK_PACING=off``): every call's slot is now."""

    def __init__(self) -> None:
        super().__init__(interval_s=1.0, burst=1)

    def reserve(self, key: str, *, max_wait_s: float = float("inf")) -> float:
        return 0.0


def pacer(mode: PacingMode, interval_s: float, burst: int) -> Pacer:
    """Slack's rate for ``mode="slack"``; none of our own for ``"off"``."""
    return Unpaced() if mode == "off" else Pacer(interval_s=interval_s, burst=burst)


class SlackPacing:
    """The pacers one Slack frontend uses."""

    def __init__(self, mode: PacingMode = "slack") -> None:
        self.mode = mode
        self.posts = pacer(mode, interval_s=1.0, burst=4)  # per channel
        self.updates = pacer(mode, interval_s=1.0, burst=20)  # per workspace: chat.update is Tier 3


def retry_after(exc: SlackApiError) -> float:
    """Slack's Retry-After (seconds) on a 429; a second when it is missing or odd."""
    headers = exc.response.headers or {}
    raw = headers.get("Retry-After") or headers.get("retry-after")
    if isinstance(raw, list):
        raw = raw[0] if raw else None
    try:
        return min(max(float(raw), 0.0), 3600.0) if raw is not None else 1.0
    except (TypeError, ValueError):
        return 1.0
