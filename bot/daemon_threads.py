"""Daemon threads for user code the loop must not wait on past its bound (sync policies, sync previews).

Not ``asyncio.to_thread``: a function that hangs forever would keep a thread of the loop's default
executor, which also resolves host names for Redis connections, and would hold up interpreter exit
(executor threads are joined). A daemon thread per call avoids both; a cap stops a function that hangs
on every call from piling up threads without end. The caller bounds the wait (``asyncio.timeout``).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import Any


class DaemonThreads:
    """At most ``limit`` calls of ``what`` (for messages: "policy", "preview") running at once."""

    def __init__(self, limit: int, what: str) -> None:
        self.limit = limit
        self.what = what
        self._lock = threading.Lock()
        self._alive = 0

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        context = contextvars.copy_context()  # like asyncio.to_thread: the function sees our contextvars
        with self._lock:
            if self._alive >= self.limit:
                raise RuntimeError(f"{self._alive} {self.what} evaluations are still running; refusing another")
            self._alive += 1
        thread = threading.Thread(target=self._work, args=(loop, future, context, fn, args),
                                  name=f"{self.what}:{getattr(fn, '__name__', type(fn).__name__)}", daemon=True)
        thread.start()
        return await future

    def _work(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any],
              context: contextvars.Context, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            outcome: tuple[bool, Any] = (True, context.run(fn, *args))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting caller
            if not isinstance(exc, Exception) or isinstance(exc, StopIteration):
                # a future can't carry StopIteration, and SystemExit must not surface in the loop
                exc = RuntimeError(f"the {self.what} raised {exc!r}")
            outcome = (False, exc)
        finally:
            with self._lock:
                self._alive -= 1
        try:
            loop.call_soon_threadsafe(_deliver, future, *outcome)
        except RuntimeError:
            pass  # the loop closed while it ran: nobody waits for the answer any more


def _deliver(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():  # the caller timed out or was cancelled meanwhile
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)
