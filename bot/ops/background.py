"""A tracked set of background tasks: work that runs after an ack, waited for or cancelled at shutdown.

The engine keeps one (``Runtime.spawn``: turns, deliveries, settles) and the Slack listeners keep their own
(``handlers.shared.deps.SlackDeps.tasks``: private notes, modals, App Home), both built by the composition root,
which drains and then cancels each at shutdown (``bot.app.BotApp.close``), so none outlives the connections
it uses. Plain asyncio tasks in a set, not a ``TaskGroup``: one failed note must not cancel its neighbours,
and a failure is logged with what the task was, never lost silently.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class Background:
    """Tasks started by :meth:`spawn`, each kept until it ends."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], *, what: str) -> asyncio.Task[Any]:
        """Run ``coro`` in a tracked task; its failure is logged with ``what``."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("background task failed: %s", what, exc_info=t.exception())

        task.add_done_callback(done)
        return task

    def busy(self) -> bool:
        return bool(self._tasks)

    async def wait_idle(self) -> None:
        """Wait until no task is left, those started meanwhile included."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def abandon(self, *, within_s: float = 2.0) -> int:
        """Cancel the tasks still running and wait up to ``within_s`` for them to stop; how many there were."""
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=within_s)
        return len(tasks)
