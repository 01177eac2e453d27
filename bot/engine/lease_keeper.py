"""The turn lease's keeper: renews the lease while a drive works, and passes on a stop asked meanwhile.

The lease's token fences every commit and every tool start (DESIGN §12, Fencing), so the lease must
never outlive the work it guards: the keeper is stopped by a flag, with bounded waits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from bot.engine.turn_commands import LeaseCommand

log = logging.getLogger(__name__)

RENEW_RETRY_S = 0.1
STOP_WAIT_S = 1.0
# while a tool runs, the lease is renewed this often: each renewal reads the cancel key, so a stop asked
# on another replica reaches the running tool within about this long (same process: at once)
STOP_POLL_S = 1.0


class LeaseKeeper:
    """Renews a turn lease while work runs. Redis errors are retried until the lease would lapse; a
    lost lease is remembered. Stopped by a flag, never by cancellation alone, with bounded waits.

    Each renewal also reads the session's cancel key (same script): a requested cancel is passed to
    ``told`` (the executor tells the turn's running tools). While ``busy()`` (a tool runs) it renews every
    :data:`STOP_POLL_S`, else every third of the lease; work shorter than that never renews."""

    def __init__(self, store: Any, session_id: str, token: str, lease_ms: int, *,
                 told: Callable[[str], None] | None = None, busy: Callable[[], bool] | None = None):
        self.store, self.session_id, self.token = store, session_id, token
        self.interval = max(lease_ms / 3000, 0.05)
        self.lease_s = lease_ms / 1000
        self.lost = False
        self._told = told
        self._busy = busy or (lambda: False)
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._first: asyncio.TimerHandle | None = None

    def start(self) -> None:
        # the renewing task begins at the first wake-up: most drives (a model step, a commit) end before it
        # and so cost no task
        loop = asyncio.get_running_loop()
        self._first = loop.call_later(self._wake_every(), self._begin, loop.time())

    def _begin(self, started_at: float) -> None:
        self._first = None
        if not self._stop.is_set():
            self._task = asyncio.create_task(self._run(started_at))

    def _wake_every(self) -> float:
        return min(self.interval, STOP_POLL_S)

    async def stop(self) -> None:
        self._stop.set()
        if self._first is not None:
            self._first.cancel()
            self._first = None
        task = self._task
        if task is None:
            return
        done, _ = await asyncio.wait({task}, timeout=STOP_WAIT_S)
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=STOP_WAIT_S)

    async def _run(self, renewed_at: float) -> None:
        loop = asyncio.get_running_loop()
        while not self._stop.is_set():  # woken: first by start()'s timer, then after each wait below
            # (a wake-up within the interval and with no tool running costs no Redis: it only notices one start)
            if loop.time() - renewed_at >= self.interval or self._busy():
                renewed = await self._renew(renewed_at)
                if renewed is None:
                    return
                renewed_at = renewed
            if await self._stopped_within(self._wake_every()):
                return

    async def _renew(self, renewed_at: float) -> float | None:
        """Renew until it works (then when), the lease would have lapsed or is gone (then None: lost), or
        the stop comes (then ``renewed_at`` as it was)."""
        loop = asyncio.get_running_loop()
        while not self._stop.is_set():
            try:
                async with asyncio.timeout(self.interval):
                    _, ok, cancel, _ = await self.store.lease(LeaseCommand(self.session_id, "renew", self.token))
            except Exception as exc:  # noqa: BLE001 - a blip: retry until the lease would lapse
                if loop.time() - renewed_at > self.lease_s:
                    log.warning("could not renew the lease of %s (%r); it lapsed", self.session_id, exc)
                    self.lost = True
                    return None
                await asyncio.sleep(RENEW_RETRY_S)
                continue
            if not ok:
                self.lost = True
                return None
            if cancel is not None and self._told is not None:
                self._told(cancel)
            return loop.time()
        return renewed_at

    async def _stopped_within(self, seconds: float) -> bool:
        """Whether the stop came within ``seconds`` (a deadline, not ``wait_for``: no task per wait)."""
        try:
            async with asyncio.timeout(seconds):
                await self._stop.wait()
        except TimeoutError:
            return False
        return True
