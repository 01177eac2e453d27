"""Process roles that scale apart (DESIGN §13: the ack path is apart from turn work).

``python -m bot run --role web|worker|all`` (``BOT_ROLE``):

- **web** processes take Slack's requests: they record messages, settle answers and ack, and never call
  the model, run a tool or deliver to Slack from the outbox. Where a process of role ``all`` would drive
  a session or deliver its events itself, a web process hands the session over to a worker with a
  wake-up (:class:`WebRuntime`).
- **worker** processes drive turns (model calls, tools), deliver committed events to Slack, fire timers
  and run the recovery sweeps; they take wake-ups as they come (:class:`Wakeups`).
- **all** does both in one process, exactly as before roles existed (no wake-ups at all).

A wake-up is a hint, not the record: every record and settle already put its session on the sweep's
lists (``hitl:active``, ``hitl:outbox``) in its own round trip, so a lost wake-up delays work until a
worker's next sweep and never loses it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal, Protocol

from bot.engine.outbox import Outbox, OutboxStore, PassOpening
from bot.engine.turns import Runtime
from bot.models.base import Message, ModelError, ModelResponse, TextCallback, ToolSpec
from bot.ports import Channel

log = logging.getLogger(__name__)

Role = Literal["web", "worker", "all"]

DRIVE = "drive"  # move the session forward (a recorded message, the last answer of a parked step)
DELIVER = "deliver"  # deliver the session's committed events (a settle's card update)
WAIT_S = 1.0  # a worker's wait for a wake-up, in one blocking read (under the Redis client's socket timeout)
RETRY_S = 1.0  # after Redis failed to give a wake-up


class WakePort(Protocol):
    """The hand-over queue (``store.wakeups.WakeQueue``)."""

    async def push(self, wake: str) -> None: ...
    async def pop(self, timeout_s: float) -> str | None: ...


def wake(kind: str, session_id: str) -> str:
    return f"{kind}:{session_id}"


class NoModel:
    """A web process's model: it is never asked (a web process drives no turn), and says so if it is."""

    name = "none (web role)"

    async def complete(self, messages: list[Message], tools: list[ToolSpec], *,
                       on_text: TextCallback | None = None) -> ModelResponse:
        raise ModelError("this process has the web role: models are called by workers")


class HandedOverOutbox(Outbox):
    """A web process's outbox: what a settle committed is delivered by a worker, woken for it."""

    def __init__(self, outbox: Outbox, spawn: Any, hand_over: Any):
        super().__init__(outbox.store, outbox.consumers, spawn)
        self._hand_over = hand_over

    def kick(self, session_id: str, seq: int | None = None) -> None:
        self._hand_over(DELIVER, session_id)

    def kick_later(self, session_id: str, seq: int, delay_s: float) -> None:
        self._hand_over(DELIVER, session_id)

    def open_pass(self, session_id: str, team_id: str | None = None) -> PassOpening | None:
        return None  # a web process never takes a deliverer lock: its commits kick (hand over) as before

    async def sweep(self, *, limit: int = 100) -> int:
        return 0  # workers sweep

    async def flush(self, session_id: str) -> bool:
        self._hand_over(DELIVER, session_id)
        return False


class WebRuntime(Runtime):
    """The runtime of a web process: intake and settle as in any process; driving a session and delivering
    its events are handed over to workers (``drive`` pushes a wake-up and returns)."""

    drives_here = False  # its records and settles take no turn lease: a worker drives

    def __init__(self, *, wakeups: WakePort, **kwargs: Any):
        self.wakeups = wakeups  # first: the outbox the runtime builds hands over through it
        super().__init__(**kwargs)

    def _outbox(self, store: OutboxStore, channel: Channel) -> Outbox:
        # settle, intake and the timers reach it through the shared parts: none of them delivers here
        return HandedOverOutbox(super()._outbox(store, channel), self.spawn, self._hand_over)

    def _hand_over(self, kind: str, session_id: str) -> None:
        self.spawn(self._push(kind, session_id), what=f"hand {session_id} to a worker ({kind})")

    async def _push(self, kind: str, session_id: str) -> None:
        try:
            await self.wakeups.push(wake(kind, session_id))
        except Exception:  # noqa: BLE001 - the session is on the sweep's list already: a worker finds it
            log.warning("could not wake a worker for %s (%s); a worker's sweep will find it", session_id, kind,
                        exc_info=True)

    async def drive(self, session_id: str, held: Any = None) -> None:
        await self._push(DRIVE, session_id)

    async def recover(self) -> int:
        return 0  # workers sweep


class Wakeups:
    """A worker takes wake-ups one at a time, while it has room for another turn (``BOT_MAX_ACTIVE_TURNS``):
    a wake-up it cannot start now stays in the queue for another worker."""

    def __init__(self, runtime: Runtime, queue: WakePort):
        self.runtime = runtime
        self.queue = queue
        self._driving: set[str] = set()
        self._freed = asyncio.Event()

    async def serve(self) -> None:
        while True:
            await self._wait_for_room()
            try:
                item = await self.queue.pop(WAIT_S)
            except Exception:  # noqa: BLE001 - Redis away: the sweep covers meanwhile
                log.warning("could not read wake-ups; trying again in %ss", RETRY_S, exc_info=True)
                await asyncio.sleep(RETRY_S)
                continue
            if item is not None:
                self.take(item)

    def take(self, item: str) -> None:
        kind, _, session_id = item.partition(":")
        if not session_id:
            return
        if kind == DELIVER:
            self.runtime.outbox.kick(session_id)
        elif kind == DRIVE and session_id not in self._driving:  # (a drive running now re-checks before it ends)
            self._driving.add(session_id)
            task = self.runtime.spawn(self.runtime.drive(session_id), what=f"drive {session_id} (handed over)")
            task.add_done_callback(lambda _: self._done(session_id))

    def _done(self, session_id: str) -> None:
        self._driving.discard(session_id)
        self._freed.set()

    async def _wait_for_room(self) -> None:
        limit = max(1, self.runtime.settings.max_active_turns)
        while len(self._driving) >= limit:
            self._freed.clear()
            await self._freed.wait()
