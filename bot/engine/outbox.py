"""The outbox (DESIGN §12): frontends consume the events a turn committed; the audit log rides along.

A turn never waits on Slack. Every event is appended to the session's Redis stream inside the
commit (or settle) script, and the session is put on the outbox list in the same round trip. A
deliverer — the committing process at once (within ``kick_later``'s delay for events nobody waits on),
or any replica's sweep if that process died — hands the events to each consumer in order and moves
that consumer's cursor past each one it handled. So:

- an event is delivered at least once (a crash between delivering and moving the cursor repeats
  only that event, and consumers make repeats harmless: Slack posts are claimed and looked up);
- order is kept per session and consumer (one deliverer at a time holds a short lock);
- a pass over a session costs two round trips whatever the number of consumers and events: one reads
  every consumer's cursor and the events after them, one saves the cursors and lets go (a long backlog
  also saves every third of the lock's life). A consumer that can take several events at once
  (:class:`bot.ports.BatchChannel`) gets them in one call. The drive's checkpoints whose events go out
  at once begin their pass in their own round trip (:meth:`Outbox.open_pass`): the pass then costs one;
- a consumer may let an event's delivery land while the next ones' begin (:class:`bot.ports.LandingChannel`:
  Slack edits a settled card while the answer after it is posted); its cursor moves past an event only
  once that has landed, and the pass ends when all have;
- the audit log is no consumer: the store reads the session's audit progress with the begin and appends
  the pass's auditable events in the round trip of its end (store/audit_events.py), so it lands a few ms
  after what the pass showed, and a pass with nothing to audit sends nothing for it;
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
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.ports import Channel, RetryLater, Undeliverable, as_batch, as_landing
from bot.protocol import Event
from bot.session import SessionRef

log = logging.getLogger(__name__)

RETRY_BASE_MS = 500
RETRY_MAX_MS = 5 * 60_000
BUSY_RECHECK_MS = 1_000  # another deliverer holds the session: look again soon, in case it just finished
ALL = 2**63  # a kick whose events' seq is not known: look again whatever the last pass read


@dataclass
class OutboxPass:
    """What one delivery pass over a session starts from (``OutboxStore.outbox_begin``)."""

    ref: SessionRef
    cursors: dict[str, str]  # consumer → the stream id of the last event it handled ("0-0": none)
    holds: dict[str, int]  # consumer → epoch ms before which it is not to be tried (0: never held)
    entries: list[tuple[str, Event]]  # (stream id, event) after the lowest cursor of the consumers not held
    claim: int  # the session's score on the outbox list while this pass runs
    full: bool  # the read stopped at its count: there may be more


@dataclass
class PassOpening:
    """A delivery pass that a checkpoint opens (:meth:`Outbox.open_pass`): the process that commits events and
    delivers them at once asks, in the checkpoint's own round trip, for what ``OutboxStore.outbox_begin`` would
    answer (the deliverer lock taken with ``token``, the same reads), so its pass starts without a begin of its
    own. The store sets ``begun`` when it took the lock (else the pass begins as usual: another pass holds it,
    or the store opens no pass); whoever commits calls :meth:`opened` once the checkpoint returned or failed."""

    token: str
    consumers: list[str]
    ready: asyncio.Future[OutboxPass | None]
    team_id: str | None = None  # the session's workspace (its audit progress is read with the begin)
    count: int = 100
    begin: Any = None  # what the outbox's store gives the checkpoint to send (``begin_with_checkpoint``)
    begun: OutboxPass | None = None

    def opened(self) -> None:
        """Let the pass go on from what the checkpoint's round trip read (idempotent)."""
        if not self.ready.done():
            self.ready.set_result(self.begun)


class OutboxStore(Protocol):
    lease_ms: int

    async def outbox_due(self, *, limit: int = 100) -> list[str]: ...
    async def outbox_schedule(self, session_id: str, *, delay_ms: int) -> None: ...
    async def outbox_begin(self, session_id: str, consumers: list[str], token: str, *,
                           count: int = 100) -> OutboxPass | None: ...
    async def outbox_checkpoint(self, session_id: str, token: str, cursors: dict[str, str],
                                cleared: list[str]) -> None: ...
    async def outbox_end(self, session_id: str, token: str, cursors: dict[str, str], cleared: list[str], *,
                         claim: int, again_in_ms: int | None) -> None: ...
    async def outbox_hold(self, session_id: str, consumer: str, until_ms: int) -> None: ...
    def begin_with_checkpoint(self, session_id: str, opening: PassOpening) -> Any: ...
    async def outbox_failures(self, session_id: str, consumer: str, *, failed: bool) -> int: ...


Spawn = Callable[..., "asyncio.Task[Any]"]


def _stream_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


@dataclass
class _Progress:
    """What a pass has done so far, saved at its end (and at checkpoints)."""

    cursors: dict[str, str] = field(default_factory=dict)
    cleared: list[str] = field(default_factory=list)  # consumers whose failures and hold are over
    waits: list[int] = field(default_factory=list)  # ms until a waiting consumer may be tried again

    def take(self) -> tuple[dict[str, str], list[str]]:
        cursors, cleared = self.cursors, self.cleared
        self.cursors, self.cleared = {}, []
        return cursors, cleared


class Outbox:
    """Delivers committed events to named consumers ("frontend", "notify", …)."""

    def __init__(self, store: OutboxStore, consumers: dict[str, Channel], spawn: Spawn):
        self.store = store
        self.consumers = dict(consumers)
        self._spawn = spawn
        self._running: dict[str, asyncio.Task[Any]] = {}
        self._again: dict[str, int] = {}  # session → the last seq kicked while its flush ran (ALL: unknown)
        self._read_up_to: dict[str, int] = {}  # session → the highest seq its running flush has read
        self._later: dict[str, asyncio.Task[Any]] = {}  # session → a kick waiting for its moment (kick_later)
        self._later_seq: dict[str, int] = {}  # session → the highest seq that waiting kick is for

    def kick(self, session_id: str, seq: int | None = None) -> None:
        """Deliver a session's new events soon, in the background (coalesced per session). ``seq``: the
        last of the events just committed, when known: a pass that already read it need not be followed
        by another (without it, one more pass looks, in case the running one began before the commit)."""
        later_seq = self._later_seq.pop(session_id, 0)
        if (later := self._later.pop(session_id, None)) is not None:
            later.cancel()  # this kick's pass reads those events too
        if seq is not None:
            seq = max(seq, later_seq)
        if session_id in self._running:
            # the running flush looks again before it ends, unless its passes read up to ``seq``
            wanted = self._again.get(session_id, 0)
            self._again[session_id] = ALL if seq is None or wanted == ALL else max(wanted, seq)
            return
        self._running[session_id] = self._spawn(self._flush_until_quiet(session_id),
                                                what=f"deliver events of {session_id}")

    def open_pass(self, session_id: str, team_id: str | None = None) -> PassOpening | None:
        """A pass over the session that the next checkpoint's round trip begins (``PassOpening``), for events
        that go out at once; the pass waits for :meth:`PassOpening.opened`. None when a pass of this process
        runs already: then ``kick`` as before (the running pass looks again)."""
        if session_id in self._running:
            return None
        opening = PassOpening(secrets.token_hex(8), list(self.consumers), asyncio.get_running_loop().create_future(),
                              team_id=team_id)
        opening.begin = self.store.begin_with_checkpoint(session_id, opening)
        if (later := self._later.pop(session_id, None)) is not None:
            later.cancel()  # committed before this checkpoint: the pass it opens reads those events too
        self._later_seq.pop(session_id, None)
        self._running[session_id] = self._spawn(self._flush_until_quiet(session_id, opening),
                                                what=f"deliver events of {session_id}")
        return opening

    def kick_later(self, session_id: str, seq: int, delay_s: float) -> None:
        """Deliver in ``delay_s`` unless another kick comes first: events that need no hurry (a turn started)
        then go out in one pass with the step's next checkpoint (the card, the answer) when that comes
        soon. Already committed and on the outbox list, they are never left behind."""
        self._later_seq[session_id] = max(seq, self._later_seq.get(session_id, 0))
        if session_id in self._later:
            return  # the kick already waiting delivers these too, up to the highest seq
        self._later[session_id] = self._spawn(self._kick_after(session_id, delay_s),
                                              what=f"deliver events of {session_id} soon")

    async def _kick_after(self, session_id: str, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        if self._later.get(session_id) is asyncio.current_task():
            del self._later[session_id]
            self.kick(session_id, self._later_seq.pop(session_id, None))

    async def _flush_until_quiet(self, session_id: str, opening: PassOpening | None = None) -> None:
        try:
            first: tuple[str, OutboxPass] | None = None
            if opening is not None:
                # kicks meanwhile are kept for a pass the checkpoint began: another task's commit may have
                # come after its read (a begin from now reads them all)
                begun = await opening.ready
                first = (opening.token, begun) if begun is not None else None
            if first is None:
                self._again.pop(session_id, None)
            while True:
                await self.flush(session_id, first=first)
                first = None
                wanted = self._again.pop(session_id, None)
                if wanted is None or wanted <= self._read_up_to.get(session_id, 0):
                    return
        finally:
            # no await between the last look at _again and this: a kick either lands before it
            # (and is seen) or after it (and starts a new flush)
            self._running.pop(session_id, None)
            self._again.pop(session_id, None)
            self._read_up_to.pop(session_id, None)

    async def sweep(self, *, limit: int = 100) -> int:
        """Deliver for sessions whose deliverer died or whose retry is due; returns how many were looked at."""
        due = await self.store.outbox_due(limit=limit)
        for session_id in due:
            if session_id not in self._running:
                await self.flush(session_id)
        return len(due)

    async def flush(self, session_id: str, *, first: tuple[str, OutboxPass] | None = None) -> bool:
        """Deliver every consumer's pending events; True when nothing is left to deliver. ``first``: a pass
        already begun (its lock's token, what it read: ``open_pass``)."""
        # the session stays on the list while we deliver (a kill -9 mid-delivery must not strand its
        # events); it leaves only if nobody re-scheduled it meanwhile (a commit after our last look)
        while True:
            if first is not None:
                (token, begun), first = first, None
            else:
                token = secrets.token_hex(8)
                begun = await self.store.outbox_begin(session_id, list(self.consumers), token)
            if begun is None:
                await self.store.outbox_schedule(session_id, delay_ms=BUSY_RECHECK_MS)
                return False
            if begun.entries and session_id in self._running:
                seen = max(begun.entries[-1][1].seq or 0, self._read_up_to.get(session_id, 0))
                self._read_up_to[session_id] = seen
            progress, finished = _Progress(), False
            try:
                await self._pass(session_id, begun, token, progress)
                finished = True
            finally:
                cursors, cleared = progress.take()
                if not finished:  # it broke off (shutdown, Redis failed): due at once, for whoever sweeps next
                    progress.waits.append(0)
                again = min(progress.waits) if progress.waits else (0 if begun.full else None)
                await self.store.outbox_end(session_id, token, cursors, cleared, claim=begun.claim,
                                            again_in_ms=again)
            if progress.waits:
                return False
            if not begun.full:
                return True

    async def _pass(self, session_id: str, begun: OutboxPass, token: str, progress: _Progress) -> None:
        # the lock and the cursors are saved at the end of the pass, and within one only when a third of
        # the lock's life has gone by
        checkpoint_every_s = self.store.lease_ms / 3000
        saved_at = time.monotonic()
        now = _now_ms()
        for name in begun.cursors:
            if (wait_ms := begun.holds[name] - now) > 0:
                progress.waits.append(wait_ms)  # backing off, or Slack said to wait: a commit changes nothing
                continue
            cursor = _stream_id(begun.cursors[name])
            todo = [(entry_id, event) for entry_id, event in begun.entries if _stream_id(entry_id) > cursor]
            if not todo:
                if begun.holds[name]:
                    progress.cleared.append(name)
                continue
            if (wait := await self._deliver(session_id, name, begun, todo, progress)) is not None:
                progress.waits.append(wait)
            elif begun.holds[name]:
                progress.cleared.append(name)
            if time.monotonic() - saved_at > checkpoint_every_s:
                await self.store.outbox_checkpoint(session_id, token, *progress.take())
                saved_at = time.monotonic()

    async def _deliver(self, session_id: str, name: str, begun: OutboxPass, todo: list[tuple[str, Event]],
                       progress: _Progress) -> int | None:
        """Hand ``todo`` to one consumer, moving its cursor; None when it took them all, else the delay
        before it may be tried again."""
        channel = self.consumers[name]
        if (batch := as_batch(channel)) is not None:
            try:
                await batch.deliver_batch([event for _, event in todo], begun.ref)
            except Exception as exc:  # noqa: BLE001 - retried later; nothing is lost
                return await self._backoff(session_id, name, todo[0][1], exc)
            progress.cursors[name] = todo[-1][0]
            return None
        start = lands.start_delivery if (lands := as_landing(channel)) is not None else None
        landing: dict[int, asyncio.Future[None]] = {}  # index in todo → its delivery, still landing
        failed: tuple[int, Exception] | None = None  # the first event not delivered, and why
        try:
            for i, (entry_id, event) in enumerate(todo):
                try:
                    tail = await start(event, begun.ref) if start is not None else await channel.deliver(event, begun.ref)
                except Undeliverable as exc:
                    _skipping(name, event, session_id, exc)
                    tail = None
                except Exception as exc:  # noqa: BLE001 - offered again later; nothing is lost
                    failed = (i, exc)
                    break
                if tail is not None:
                    landing[i] = asyncio.ensure_future(tail)
                elif not landing:  # nothing before it is still landing: the cursor moves past it now
                    progress.cursors[name] = entry_id
            for i, tail in landing.items():  # every one, also after a failure: the pass ends once they landed
                try:
                    await tail
                except Undeliverable as exc:
                    _skipping(name, todo[i][1], session_id, exc)
                except Exception as exc:  # noqa: BLE001 - as above
                    if failed is None or i < failed[0]:
                        failed = (i, exc)
        finally:
            for tail in landing.values():
                tail.cancel()  # (a no-op once landed: only a pass that broke off leaves some in flight)
        # past the events handled in a row from the first: one that failed comes again with all after it
        if delivered := failed[0] if failed is not None else len(todo):
            progress.cursors[name] = todo[delivered - 1][0]
        if failed is None:
            return None
        event, exc = todo[failed[0]][1], failed[1]
        if isinstance(exc, RetryLater):  # rate limited: wait as asked, without counting a failure
            log.info("%s waits %.1fs before showing %s of session %s (%s)",
                     name, exc.delay_s, event.type, session_id, exc)
            return await self._hold(session_id, name, max(int(exc.delay_s * 1000), RETRY_BASE_MS))
        return await self._backoff(session_id, name, event, exc)

    async def _backoff(self, session_id: str, name: str, event: Event, exc: Exception) -> int:
        failures = await self.store.outbox_failures(session_id, name, failed=True)
        delay = min(RETRY_BASE_MS * 2 ** min(failures - 1, 20), RETRY_MAX_MS)
        log.warning("%s could not show %s of session %s (%s: %s); attempt %d, retrying in %.1fs",
                    name, event.type, session_id, type(exc).__name__, exc, failures, delay / 1000)
        return await self._hold(session_id, name, delay)

    async def _hold(self, session_id: str, name: str, delay_ms: int) -> int:
        await self.store.outbox_hold(session_id, name, _now_ms() + delay_ms)
        return delay_ms


def _skipping(name: str, event: Event, session_id: str, exc: Undeliverable) -> None:
    log.warning("%s cannot show %s of session %s: %s; skipping it", name, event.type, session_id, exc)


def _now_ms() -> int:
    return int(time.time() * 1000)
