"""The gauges of ``/metrics`` read from Redis at scrape time (``bot.ops.metrics.StoreGauges`` caches them).

Nothing on the hot path writes anything for them: they are sizes of indexes that already exist
(store/session_keys.py). A read costs, at most every ``bot.ops.metrics.GAUGE_CACHE_S`` per replica:

- every ``WORKSPACES_TTL_S``, one SCAN pass for the workspaces' pending indexes (``hitl:{ws:*}:pending``;
  O(keyspace) on the server, so it is kept rare; a workspace new since then shows at the next pass);
- one round trip: ZCARD of ``hitl:active``, ``hitl:outbox``, ``hitl:timers`` and of each pending index,
  and the ids of the oldest open requests, at most ``READ_LIMIT`` of them in all;
- one round trip: HMGET of those requests' status, kind and turn (bounded by ``READ_LIMIT``).

Open requests are counted by kind from the records read; any beyond ``READ_LIMIT`` are reported
with kind ``unread`` (so the sum stays right). Index entries whose request already settled (the index
is cleaned when the resolution is delivered) are not counted.
"""

from __future__ import annotations

import json
import time
from typing import Any

from redis.asyncio import Redis, RedisCluster

from bot.ops.metrics import StoreCounts
from store.session_keys import ACTIVE, OUTBOX, TIMERS, SessionRedis

WORKSPACES_TTL_S = 300.0
READ_LIMIT = 1000
PENDING_PATTERN = "hitl:{ws:*}:pending"


class GaugeReader:
    def __init__(
        self,
        redis: Redis | RedisCluster,
        *,
        read_limit: int = READ_LIMIT,
        workspaces_ttl_s: float = WORKSPACES_TTL_S,
    ):
        self.redis = redis
        self.read_limit = read_limit
        self.workspaces_ttl_s = workspaces_ttl_s
        self._pending_keys: list[bytes] = []
        self._scanned_at = float("-inf")

    async def read(self) -> StoreCounts:
        keys = await self._workspace_keys()
        pipe = self.redis.pipeline(transaction=False)
        for key in (ACTIVE, OUTBOX, TIMERS, *keys):
            pipe.zcard(key)
        for key in keys:  # each workspace's oldest first; the total is cut to the limit below
            pipe.zrange(key, 0, self.read_limit - 1)
        replies = await pipe.execute()
        active, outbox, timers = (int(n) for n in replies[:3])
        indexed = sum(int(n) for n in replies[3 : 3 + len(keys)])
        ids: list[str] = []
        for members in replies[3 + len(keys) :]:
            ids.extend(m.decode() for m in members[: self.read_limit - len(ids)])
        by_kind, turns = await self._open_records(ids)
        counts = StoreCounts(
            open_requests=by_kind,
            parked_turns=len(turns),
            active_sessions=active,
            outbox_sessions=outbox,
            timers=timers,
            workspaces=len(keys),
        )
        if indexed > len(ids):
            counts.open_requests["unread"] = indexed - len(ids)
        return counts

    async def _workspace_keys(self) -> list[bytes]:
        if time.monotonic() - self._scanned_at >= self.workspaces_ttl_s:
            self._pending_keys = sorted(
                {k async for k in self.redis.scan_iter(match=PENDING_PATTERN, count=1000)}
            )
            self._scanned_at = time.monotonic()
        return self._pending_keys

    async def _open_records(self, ids: list[str]) -> tuple[dict[str, int], set[tuple[str, str]]]:
        by_kind: dict[str, int] = {}
        turns: set[tuple[str, str]] = set()
        if not ids:
            return by_kind, turns
        pipe = self.redis.pipeline(transaction=False)
        for rid in ids:
            pipe.hmget(SessionRedis.request_key(rid), "status", "session_id", "turn_id", "request")
        for status, session_id, turn_id, request in await pipe.execute():
            if request is None or status not in (None, b"open"):
                continue  # settled (or gone) since the index saw it
            kind = _kind(request)
            by_kind[kind] = by_kind.get(kind, 0) + 1
            turns.add(((session_id or b"").decode(), (turn_id or b"").decode()))
        return by_kind, turns


def _kind(request_json: bytes) -> str:
    try:
        kind: Any = json.loads(request_json).get("kind")
    except (ValueError, AttributeError):
        return "unknown"
    return kind if isinstance(kind, str) and len(kind) <= 32 else "unknown"
