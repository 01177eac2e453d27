"""The turn lease's keeper: renews the lease while a drive works, and passes on a stop asked meanwhile.

The lease's token fences every commit and every tool start (DESIGN §12, Fencing), so the lease must
never outlive the work it guards: the keeper is stopped by a flag, with bounded waits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

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

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._stop.set()
        task = self._task
        if task is None:
            return
        done, _ = await asyncio.wait({task}, timeout=STOP_WAIT_S)
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=STOP_WAIT_S)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        renewed_at = loop.time()
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), min(self.interval, STOP_POLL_S))
                return
            except TimeoutError:
                pass
            if loop.time() - renewed_at < self.interval and not self._busy():
                continue  # (a wake-up without Redis: only to notice a tool started)
            while not self._stop.is_set():
                try:
                    ok, cancel = await asyncio.wait_for(self.store.renew_lease(self.session_id, self.token),
                                                        self.interval)
                except Exception as exc:  # noqa: BLE001 - a blip: retry until the lease would lapse
                    if loop.time() - renewed_at > self.lease_s:
                        log.warning("could not renew the lease of %s (%r); it lapsed", self.session_id, exc)
                        self.lost = True
                        return
                    await asyncio.sleep(RENEW_RETRY_S)
                    continue
                if not ok:
                    self.lost = True
                    return
                renewed_at = loop.time()
                if cancel is not None and self._told is not None:
                    self._told(cancel)
                break
