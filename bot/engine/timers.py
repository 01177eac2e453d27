"""Deadlines (DESIGN §12, Time): requests that expire or remind, fired once by whichever replica sweeps.

A request made with ``expires_at`` or ``remind_at`` puts a timer in Redis in the same round trip as
the commit that creates it (``hitl:timers``, by due time). Every replica's recovery sweep claims the
due ones atomically (a claim pushes the timer one lease ahead, so two replicas never fire the same
one, and a replica that dies mid-fire leaves it to the next sweep) and removes each once fired.
Firing is idempotent, so a timer fired twice after a crash changes nothing:

- **expire**: the request is settled ``expired`` through the one settle path (first writer wins, so
  an answer a moment earlier keeps its outcome); the card says so, the audit log records it, and the
  turn goes on with "nobody answered in time" as the call's result.
- **remind**: an ``input.reminded`` event, appended only while the request is open and only once
  (the request record remembers it); the Slack frontend reminds the people who may answer.
- **escalate**: the people on the request's ``escalate_to`` approver list, as it reads at that moment,
  are stored on the request (once) and may answer too (``bot.engine.settle``); an ``input.escalated`` event
  tells the frontend, which updates the card and tells them.

Time comes from ``RuntimeSettings.clock``, so tests move it forward instead of waiting.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from bot.engine.installed import NotInstalled
from bot.engine.parts import Parts
from bot.engine.settle import Settler
from bot.engine.turn_commands import AmendRequest, RequestsRead, Sweep
from bot.governance import listed_people
from bot.ops.metrics import TIMERS_FIRED
from bot.protocol import InputEscalated, InputReminded, RequestRecord, UnknownRequest

log = logging.getLogger(__name__)

TIMER_KINDS = frozenset({"expire", "remind", "escalate", "schedule"})


class Timers:
    def __init__(self, parts: Parts, settler: Settler, *,
                 on_schedule: Callable[[str], Awaitable[None]] | None = None):
        self.p = parts
        self.settler = settler
        self.on_schedule = on_schedule  # fires a schedule's tick

    async def sweep(self, *, limit: int = 100) -> int:
        """Fire the timers that are due; returns how many fired (or were found moot)."""
        now_ms = int(self.p.settings.clock() * 1000)
        fired = 0
        for member, claim in (await self.p.store.sweep(Sweep("timers", now_ms, limit))).timers:
            kind, _, request_id = member.partition(":")
            try:
                await self._fire(kind, request_id)
            except NotInstalled as exc:  # left claimed: it fires after a lease, once the app is back
                log.info("timer %s waits: %s", member, exc)
                continue
            except UnknownRequest:
                pass  # its session ended and the request is gone: nothing to do
            except Exception:  # noqa: BLE001 - left claimed: the next sweep after a lease tries again
                log.exception("timer %s could not fire; it will be tried again", member)
                continue
            await self.p.store.sweep(Sweep("timer_done", member=member, claim=claim))
            TIMERS_FIRED.labels(kind if kind in TIMER_KINDS else "other").inc()
            fired += 1
        return fired

    async def _fire(self, kind: str, request_id: str) -> None:
        if kind == "schedule":  # not a request's: a scheduled turn's tick (``bot.engine.schedules``)
            if self.on_schedule is not None:
                await self.on_schedule(request_id)
            return
        [record] = await self.p.store.requests(RequestsRead((request_id,), must_exist=True))
        if record.status != "open":
            return
        await self.p.installed.require(record.team_id)  # an uninstalled workspace's deadlines wait
        if kind == "expire":
            if await self.settler.resolve_unanswered(record, "expired", ended_by="expiry"):
                log.info("request %s expired unanswered", request_id)
        elif kind == "remind":
            event = InputReminded(session_id=record.session_id, turn_id=record.turn_id, request_id=request_id)
            if await self.p.store.amend(AmendRequest(record, "remind", event)):
                self.p.outbox.kick(record.session_id)
        elif kind == "escalate":
            await self._escalate(record)
        else:
            log.warning("unknown timer kind %r for %s; dropped", kind, request_id)

    async def _escalate(self, record: RequestRecord) -> None:
        req = record.request
        if not req.escalate_to or not record.team_id:
            return
        people = await listed_people(self.p.policies, record.team_id, req.escalate_to)  # raises: tried again next sweep
        asker = req.principal
        people = [p for p in people if asker is None or not p.same_as(asker)]
        if not people:
            log.warning("request %s: nobody on %s to escalate to", record.request_id, req.escalate_to)
            return
        event = InputEscalated(session_id=record.session_id, turn_id=record.turn_id,
                               request_id=record.request_id, people=people)
        if await self.p.store.amend(AmendRequest(record, "escalate", event, people)):
            self.p.outbox.kick(record.session_id)
