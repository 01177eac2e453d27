"""Schedules in Redis (DESIGN §12, Time; ``bot.engine.schedules``).

  hitl:{ws:<team>}:schedules          hash schedule id → ``Schedule`` JSON
  hitl:{ws:<team>}:sched:<id>:<tick>  the thread a tick started (``SessionRef`` JSON; first writer wins)
  hitl:timers                         ``schedule:<team>|<id>|<tick ms>`` by tick (shared with deadlines)
  hitl:configured-schedules           set of workspaces holding schedules from BOT_SCHEDULES

A tick's timer is written with its schedule and replaced by the next one when it fires; the recovery
sweep of any replica claims it (``store.turns``'s timer claim: one claimer at a time). Moving a
schedule on is a compare-and-set on its stored JSON (``advance``), so an edit made while a tick was
held is never overwritten, and the held tick's next timer (put in first) finds it is not current.
"""

from __future__ import annotations

from datetime import datetime

from redis.asyncio import Redis

from bot.engine.schedules import Schedule, reconcile, timer_member
from bot.session import SessionRef

TIMERS = b"hitl:timers"
CONFIGURED = b"hitl:configured-schedules"  # workspaces with file-defined schedules (to find removed ones)
TICK_MEMORY_S = 7 * 86400  # how long a tick's thread is remembered (re-fires come within a lease)


# Replace (or, given "", delete) a schedule only if it is still exactly the one the caller read: an
# atomic compare-and-set on its stored text, so a tick held through an edit cannot write the old one back.
_SWAP = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
if ARGV[3] == '' then redis.call('HDEL', KEYS[1], ARGV[1]) else redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) end
return 1
"""


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


class ScheduleStore:
    def __init__(self, redis: Redis):
        self.redis = redis
        self._swap = redis.register_script(_SWAP)

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
        """The schedule as stored now; it remembers the stored text, so :meth:`advance` can tell whether it
        is still the current one."""
        raw = await self.redis.hget(self.key(team_id), schedule_id)
        return Schedule.stored(raw) if raw is not None else None

    async def list(self, team_id: str | None) -> list[Schedule]:
        raws = await self.redis.hvals(self.key(team_id))
        return sorted((Schedule.stored(r) for r in raws), key=lambda s: s.next_at)

    async def remove(self, schedule: Schedule) -> bool:
        """Forget a schedule and its next tick; False if it was already gone."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hdel(self.key(schedule.team_id), schedule.schedule_id)
        pipe.zrem(TIMERS, timer_member(schedule.team_id, schedule.schedule_id, _ms(schedule.next_at)))
        removed, _ = await pipe.execute()
        return bool(removed)

    async def advance(self, schedule: Schedule, after: datetime, following: datetime | None) -> bool:
        """After tick ``after`` fired: put the next tick in, or forget a schedule that does not repeat —
        only if ``schedule`` (as :meth:`get` read it) is still the stored one. An edit or a removal made
        while the tick was held wins: its own timer is the only chain (no second one from this tick).
        False when it lost.

        The next tick's timer goes in first: a crash before the schedule is moved on then leaves the
        tick itself to fire again (harmlessly), and a timer whose schedule has moved elsewhere finds
        it is not the current tick and does nothing (``bot.engine.schedules.fire``)."""
        key = self.key(schedule.team_id)
        expected = schedule.stored_as or schedule.model_dump_json()
        if following is None:
            return bool(await self._swap(keys=[key], args=[schedule.schedule_id, expected, ""]))
        moved = schedule.model_copy(update={"next_at": following})
        await self.redis.zadd(TIMERS, {timer_member(schedule.team_id, schedule.schedule_id, _ms(following)):
                                       _ms(following)})
        return bool(await self._swap(keys=[key], args=[schedule.schedule_id, expected, moved.model_dump_json()]))

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
