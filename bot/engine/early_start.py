"""A turn's start, written alone only when its first checkpoint is slow to come (bot.engine.drive).

A new turn's start (``turn.started``, the queued messages it takes in, the state then) goes with the turn's
first checkpoint (the park, its calls' start, or its end): while the model thinks nothing needs to be
durable that the inbox does not keep. A model (or a request policy, a preview) that takes longer than
``RuntimeSettings.unhurried_seconds`` (as long as a start may wait to be delivered with the next checkpoint's events: the
frontends' status-line delay counts from the event's time, so it shows as it did) has the start written alone
meanwhile, so the status line and Slack's stop button come
while it thinks, as when every start was written at once; fenced by the lease token like any checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from bot.engine.parts import Parts
from bot.engine.turn_commands import CommitCommand
from bot.protocol import Event
from bot.state import SessionState


class EarlyStart:
    """Writes the turn's start after ``RuntimeSettings.unhurried_seconds`` unless the next checkpoint takes it along first."""

    def __init__(self, parts: Parts, session_id: str, token: str, state: SessionState, events: list[Event],
                 take: list[dict[str, Any]], *, as_it_is_then: bool = False):
        """``as_it_is_then``: write the state as it is when the time comes (serialized only if it does), for a
        state that changes only with writes (a framework's run); else as it is now."""
        self.p, self.session_id = parts, session_id
        self.events, self.take = list(events), list(take)
        self.writing = False
        self.task = asyncio.create_task(self._write_later(token, None if as_it_is_then else state.model_dump_json(),
                                                          state))

    async def _write_later(self, token: str, saved: str | None, state: SessionState) -> None:
        await asyncio.sleep(self.p.settings.unhurried_seconds)
        self.writing = True
        saved = saved if saved is not None else state.model_dump_json()
        committed, _, _ = await self.p.store.commit(CommitCommand(self.session_id, token, saved, self.events,
                                                                 ref=state.ref, take=self.take))
        if committed:  # it has waited its delivery delay already
            self.p.outbox.kick(self.session_id, committed[-1].seq)

    async def settle(self) -> bool:
        """For the next checkpoint: stop it unless it is writing; True when it wrote (raising what its write
        raised: LeaseLost, MessageTaken), so that its events and the messages it took are not written again."""
        if not self.writing:
            await self.stop()
            return False
        await self.task
        return True

    async def stop(self) -> None:
        """No checkpoint follows (the pass ends or starts over): stop it, writing or not (it is fenced)."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.task
