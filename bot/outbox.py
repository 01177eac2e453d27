"""The outbox (DESIGN §12): frontends and the audit log consume the events a turn committed.

A turn never waits on Slack. Every event is appended to the session's Redis stream inside the
commit (or settle) script, and the session is put on the outbox list in the same round trip. A
deliverer — the committing process at once, or any replica's sweep if that process died — hands the
events to each consumer in order and moves that consumer's cursor past each one it handled. So:

- an event is delivered at least once (a crash between delivering and moving the cursor repeats
  only that event, and consumers make repeats harmless: Slack posts are claimed and looked up, audit
  entries are keyed by event);
- order is kept per session and consumer (one deliverer at a time holds a short lock);
- a consumer that fails (Slack down) is retried with per-session backoff, so one dead channel never
  delays another session's cards; a rate-limited one (:class:`bot.ports.RetryLater`) waits exactly as
  long as it was asked to, and only that session waits;
- an event a consumer can never deliver (the channel is gone) is skipped with a log line, and the
  consumer is told through :class:`bot.ports.Undeliverable`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any, Protocol

from bot.ports import Channel, RetryLater, Undeliverable
from bot.protocol import Event
from bot.session import SessionRef

log = logging.getLogger(__name__)

RETRY_BASE_MS = 500
RETRY_MAX_MS = 5 * 60_000
BUSY_RECHECK_MS = 1_000  # another deliverer holds the session: look again soon, in case it just finished


class OutboxStore(Protocol):
    async def outbox_due(self, *, limit: int = 100) -> list[str]: ...
    async def outbox_schedule(self, session_id: str, *, delay_ms: int) -> None: ...
    async def outbox_claim(self, session_id: str) -> int: ...
    async def outbox_release(self, session_id: str, claim: int) -> None: ...
    async def outbox_lock(self, session_id: str, consumer: str, token: str) -> bool: ...
    async def outbox_unlock(self, session_id: str, consumer: str, token: str) -> None: ...
    async def outbox_read(
        self, session_id: str, consumer: str, *, count: int = 100
    ) -> tuple[SessionRef | None, list[tuple[str, Event]], int]: ...
    async def outbox_hold(self, session_id: str, consumer: str, until_ms: int) -> None: ...
    async def outbox_advance(self, session_id: str, consumer: str, entry_id: str, *,
                             renew: bool = True) -> None: ...
    async def outbox_failures(self, session_id: str, consumer: str, *, failed: bool) -> int: ...


Spawn = Callable[..., "asyncio.Task[Any]"]


class Outbox:
    """Delivers committed events to named consumers ("frontend", "audit", …)."""

    def __init__(self, store: OutboxStore, consumers: dict[str, Channel], spawn: Spawn):
        self.store = store
        self.consumers = dict(consumers)
        self._spawn = spawn
        self._running: dict[str, asyncio.Task[Any]] = {}
        self._again: set[str] = set()

    def kick(self, session_id: str) -> None:
        """Deliver a session's new events soon, in the background (coalesced per session)."""
        if session_id in self._running:
            self._again.add(session_id)  # the running flush looks again before it ends
            return
        self._running[session_id] = self._spawn(self._flush_until_quiet(session_id),
                                                what=f"deliver events of {session_id}")

    async def _flush_until_quiet(self, session_id: str) -> None:
        try:
            while True:
                self._again.discard(session_id)
                await self.flush(session_id)
                if session_id not in self._again:
                    return
        finally:
            # no await between the last look at _again and this: a kick either lands before it
            # (and is seen) or after it (and starts a new flush)
            self._running.pop(session_id, None)

    async def sweep(self, *, limit: int = 100) -> int:
        """Deliver for sessions whose deliverer died or whose retry is due; returns how many were looked at."""
        due = await self.store.outbox_due(limit=limit)
        for session_id in due:
            if session_id not in self._running:
                await self.flush(session_id)
        return len(due)

    async def flush(self, session_id: str) -> bool:
        """Deliver every consumer's pending events; True when nothing is left to deliver."""
        # the session stays on the list while we deliver (a kill -9 mid-delivery must not strand its
        # events); it leaves only if nobody re-scheduled it meanwhile (a commit after our last look)
        claim = await self.store.outbox_claim(session_id)
        delays = [d for name, channel in self.consumers.items()
                  if (d := await self._flush_consumer(session_id, name, channel)) is not None]
        if delays:  # due again when the soonest consumer may be tried
            await self.store.outbox_schedule(session_id, delay_ms=min(delays))
            return False
        await self.store.outbox_release(session_id, claim)
        return True

    async def _flush_consumer(self, session_id: str, name: str, channel: Channel) -> int | None:
        """None when the consumer is up to date; else the delay before trying again."""
        token = secrets.token_hex(8)
        if not await self.store.outbox_lock(session_id, name, token):
            return BUSY_RECHECK_MS
        # the lock and the cursor's retention are renewed at the end of each batch, and within one only
        # when a third of the lock's life has gone by (a cursor move alone is one command)
        renew_every_s = getattr(self.store, "lease_ms", 30_000) / 3000
        renewed_at = time.monotonic()
        held = False  # a failure or a wait was recorded (a hold is set with each): clear it once through
        try:
            while True:
                ref, entries, hold_until_ms = await self.store.outbox_read(session_id, name)
                held = held or hold_until_ms > 0
                if not entries:
                    return None
                if (wait_ms := hold_until_ms - _now_ms()) > 0:
                    return wait_ms  # backing off, or Slack said to wait: a new commit does not change that
                ref = ref or SessionRef(session_id=session_id)
                for index, (entry_id, event) in enumerate(entries):
                    try:
                        await channel.deliver(event, ref)
                    except RetryLater as exc:  # rate limited: wait as asked, without counting a failure
                        log.info("%s waits %.1fs before showing %s of session %s (%s)",
                                 name, exc.delay_s, event.type, session_id, exc)
                        return await self._hold(session_id, name, max(int(exc.delay_s * 1000), RETRY_BASE_MS))
                    except Undeliverable as exc:
                        log.warning("%s cannot show %s of session %s: %s; skipping it",
                                    name, event.type, session_id, exc)
                    except Exception as exc:  # noqa: BLE001 - retried later; nothing is lost
                        return await self._backoff(session_id, name, event, exc)
                    renew = index == len(entries) - 1 or time.monotonic() - renewed_at > renew_every_s
                    await self.store.outbox_advance(session_id, name, entry_id, renew=renew)
                    if renew:
                        renewed_at = time.monotonic()
                if held:
                    await self.store.outbox_failures(session_id, name, failed=False)
                    held = False
        finally:
            await self.store.outbox_unlock(session_id, name, token)

    async def _backoff(self, session_id: str, name: str, event: Event, exc: Exception) -> int:
        failures = await self.store.outbox_failures(session_id, name, failed=True)
        delay = min(RETRY_BASE_MS * 2 ** min(failures - 1, 20), RETRY_MAX_MS)
        log.warning("%s could not show %s of session %s (%s: %s); attempt %d, retrying in %.1fs",
                    name, event.type, session_id, type(exc).__name__, exc, failures, delay / 1000)
        return await self._hold(session_id, name, delay)

    async def _hold(self, session_id: str, name: str, delay_ms: int) -> int:
        await self.store.outbox_hold(session_id, name, _now_ms() + delay_ms)
        return delay_ms


def _now_ms() -> int:
    return int(time.time() * 1000)

