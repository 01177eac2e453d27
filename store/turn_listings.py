"""What a session's turns list for people and operators (store/turns.py's reads that span sessions): a
workspace's open requests ("waiting on you", App Home, ``bot pending``), and, by SCAN, keys by kind, the
oldest pending request and a session's keys (``bot check``, measurements; never on a hot path).
"""

from __future__ import annotations

from datetime import UTC, datetime

from bot.protocol import RequestRecord
from bot.session import session_slot
from store.requests import RequestReads
from store.session_keys import prefix


class TurnListings(RequestReads):
    """Listings across sessions: open requests by workspace, and inspection by SCAN."""

    async def pending_for_team(self, team_id: str | None, *, limit: int = 200) -> list[RequestRecord]:
        """Open requests of a workspace, oldest first; drops index entries that are settled."""
        key = self.pending_key(team_id)
        ids = [r.decode() for r in await self.redis.zrange(key, 0, limit - 1)]
        records = [r for r in await self.get_requests(ids) if r.status == "open"]
        # a request whose turn is gone cannot be approved (its click closes it): never offer it
        pipe = self.redis.pipeline(transaction=False)
        for r in records:
            pipe.exists(self.key(r.session_id, "state"))
        alive = await pipe.execute() if records else []
        open_records = [r for r, live in zip(records, alive, strict=True) if live]
        stale = set(ids) - {r.request_id for r in records}
        if stale:
            await self.redis.zrem(key, *stale)
        return open_records

    async def teams_with_pending(self) -> list[str | None]:
        """Workspaces that have a pending-requests index (None: sessions without a workspace)."""
        teams: set[str | None] = set()
        async for key in self.redis.scan_iter(match="hitl:{ws:*}:pending", count=1000):
            team = key.decode()[len("hitl:{ws:") : -len("}:pending")]
            teams.add(None if team == "-" else team)
        return sorted(teams, key=lambda t: t or "")

    async def key_counts(self, *, limit: int = 1_000_000) -> dict[str, int]:
        """Keys by kind (state, events, requests, markers, …), by SCAN: for `bot check`, not for hot paths."""
        counts: dict[str, int] = {}
        seen = 0
        async for key in self.redis.scan_iter(match="hitl:{*}:*", count=1000):
            parts = key.decode(errors="replace").split(":")
            kind = parts[2] if len(parts) > 2 and not parts[1].startswith("{ws:") else "workspace"
            counts[kind] = counts.get(kind, 0) + 1
            seen += 1
            if seen >= limit:
                break
        return dict(sorted(counts.items()))

    async def oldest_pending(self) -> datetime | None:
        """When the oldest request still in a pending index was asked."""
        oldest: float | None = None
        async for key in self.redis.scan_iter(match="hitl:{ws:*}:pending", count=1000):
            first = await self.redis.zrange(key, 0, 0, withscores=True)
            if first and (oldest is None or first[0][1] < oldest):
                oldest = first[0][1]
        return datetime.fromtimestamp(oldest, UTC) if oldest is not None else None

    async def session_keys(self, session_id: str) -> list[bytes]:
        """Every key of a session (for measurements and tests; uses SCAN)."""
        pattern = f"{prefix(session_slot(session_id))}:*"
        return [k async for k in self.redis.scan_iter(match=pattern, count=1000)]
