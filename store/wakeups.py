"""The hand-over from web processes to workers (``bot.engine.roles``).

  hitl:wake   list of wake-ups, pushed on the left, taken from the right (oldest first)

A wake-up only says "look at this session now": the sorted sets ``hitl:active`` and ``hitl:outbox``
(``store.turns``) stay the source of truth of what is due, and every record or settle already put its
session there in its own round trip. So a wake-up that is lost (a web process dies before it pushes, a
worker after it took one) only delays the work until a worker's sweep; it never loses it. One worker
takes each wake-up (a list, not pub/sub: N workers do not all race for the same lease).
"""

from __future__ import annotations

from typing import Any

WAKE = b"hitl:wake"
# with no worker running the list would grow by a wake-up per message and click; past this the oldest go
# (the sweep still finds their sessions)
WAKE_CAP = 10_000


class WakeQueue:
    """``bot.engine.roles.WakePort`` on Redis: LPUSH + LTRIM in one round trip, BRPOP to wait."""

    def __init__(self, redis: Any):
        self.redis = redis

    async def push(self, wake: str) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.lpush(WAKE, wake)
        pipe.ltrim(WAKE, 0, WAKE_CAP - 1)
        await pipe.execute()

    async def pop(self, timeout_s: float) -> str | None:
        """The oldest wake-up, waiting up to ``timeout_s`` (whole seconds or more: keep it under the
        client's socket timeout); None when none came."""
        got = await self.redis.brpop([WAKE], timeout=timeout_s)
        if not got:
            return None
        value = got[1]
        return value.decode() if isinstance(value, bytes) else str(value)
