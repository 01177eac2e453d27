"""Schedules in Redis (DESIGN §12, Time; ``bot.schedules``).

  hitl:{ws:<team>}:schedules          hash schedule id → ``Schedule`` JSON
  hitl:{ws:<team>}:sched:<id>:<tick>  the thread a tick started (``SessionRef`` JSON; first writer wins)
  hitl:timers                         ``schedule:<team>|<id>|<tick ms>`` by tick (shared with deadlines)
  hitl:configured-schedules           set of workspaces holding schedules from BOT_SCHEDULES

A tick's timer is written with its schedule and replaced by the next one when it fires; the recovery
sweep of any replica claims it (``store.sessions``'s timer claim: one claimer at a time).
"""

from __future__ import annotations

from datetime import datetime

from redis.asyncio import Redis

from bot.schedules import Schedule, reconcile, timer_member
from bot.session import SessionRef

TIMERS = b"hitl:timers"
CONFIGURED = b"hitl:configured-schedules"  # workspaces with file-defined schedules (to find removed ones)
TICK_MEMORY_S = 7 * 86400  # how long a tick's thread is remembered (re-fires come within a lease)


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


class ScheduleStore:
    def __init__(self, redis: Redis):
        self.redis = redis

    @staticmethod
    def key(team_id: str | None) -> str:
        return f"hitl:{{ws:{team_id or '-'}}}:schedules"

    async def add(self, schedule: Schedule) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(self.key(schedule.team_id), schedule.schedule_id, schedule.model_dump_json())
        pipe.zadd(TIMERS, {timer_member(schedule.team_id, schedule.schedule_id, _ms(schedule.next_at)):
                           _ms(schedule.next_at)})
        await pipe.execute()

    async def get(self, team_id: str | None, schedule_id: str) -> Schedule | None:
        raw = await self.redis.hget(self.key(team_id), schedule_id)
        return Schedule.model_validate_json(raw) if raw is not None else None

    async def list(self, team_id: str | None) -> list[Schedule]:
        raws = await self.redis.hvals(self.key(team_id))
        return sorted((Schedule.model_validate_json(r) for r in raws), key=lambda s: s.next_at)

    async def remove(self, schedule: Schedule) -> bool:
        """Forget a schedule and its next tick; False if it was already gone."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hdel(self.key(schedule.team_id), schedule.schedule_id)
        pipe.zrem(TIMERS, timer_member(schedule.team_id, schedule.schedule_id, _ms(schedule.next_at)))
        removed, _ = await pipe.execute()
        return bool(removed)

    async def advance(self, schedule: Schedule, after: datetime, following: datetime | None) -> None:
        """After tick ``after`` fired: put the next tick in, or forget a schedule that does not repeat. A
        schedule removed meanwhile stays removed."""
        if following is None:
            await self.redis.hdel(self.key(schedule.team_id), schedule.schedule_id)
            return
        if await self.get(schedule.team_id, schedule.schedule_id) is None:
            return
        await self.add(schedule.model_copy(update={"next_at": following}))

    async def apply_file(self, wanted: list[Schedule]) -> tuple[int, int]:
        """Make the file-defined schedules in Redis those of ``wanted`` (every replica does this at start;
        the outcome is the same whoever goes first). Returns (added or changed, removed)."""
        teams = {s.team_id or "-" for s in wanted}
        teams |= {t.decode() for t in await self.redis.smembers(CONFIGURED)}
        stored = [s for team in sorted(teams) for s in await self.list(None if team == "-" else team)]
        add, remove = reconcile(wanted, stored)
        for schedule in remove:
            await self.remove(schedule)
        for schedule in add:
            await self.add(schedule)
        if wanted:
            await self.redis.sadd(CONFIGURED, *sorted({s.team_id or "-" for s in wanted}))
        return len(add), len(remove)

    async def thread_of(self, schedule: Schedule, tick_ms: int, ref: SessionRef | None) -> SessionRef | None:
        """The thread tick ``tick_ms`` started; with ``ref``, record it unless one is recorded already."""
        key = f"hitl:{{ws:{schedule.team_id or '-'}}}:sched:{schedule.schedule_id}:{tick_ms}"
        if ref is not None:
            await self.redis.set(key, ref.model_dump_json(), nx=True, ex=TICK_MEMORY_S)
        raw = await self.redis.get(key)
        return SessionRef.model_validate_json(raw) if raw is not None else None
