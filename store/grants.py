"""Standing approvals ("don't ask again") in Redis (DESIGN §6, §9).

A conversation grant lives in its session's ``P:grants`` set, which the turn loop reads with the rest
of the session (``store.sessions``); a requester grant lives here only. Both are listed here, per
workspace, so App Home can show them and the requester or an admin can revoke them:

  hitl:{ws:<team>}:grants   hash grant id → ``Grant`` JSON (grant id: ``<scope>|<holder>|<approval key>``)

Expired requester grants are ignored when read and dropped when listed. Losing a grant (a crash
between the settle and this write) only means the requester is asked again: it fails closed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from redis.asyncio import Redis

from bot.principals import Principal
from bot.protocol import Grant, grant_id

log = logging.getLogger(__name__)


class GrantStore:
    def __init__(self, redis: Redis, session_key: Callable[[str, str], str]):
        self.redis = redis
        self._session_key = session_key  # (session id, name) → that session's key

    @staticmethod
    def key(team_id: str | None) -> str:
        return f"hitl:{{ws:{team_id or '-'}}}:grants"

    async def add(self, grant: Grant) -> None:
        await self.redis.hset(self.key(grant.team_id), grant.grant_id, grant.model_dump_json())

    async def for_requester(self, team_id: str | None, requester: Principal, keys: Iterable[str],
                            now: datetime) -> set[str]:
        """The approval keys among ``keys`` this requester holds an unexpired grant for (one command)."""
        wanted = sorted(set(keys))
        if not wanted:
            return set()
        ids = [grant_id("requester", requester.principal_id, k) for k in wanted]
        raws = await self.redis.hmget(self.key(team_id), ids)
        held = set()
        for key, raw in zip(wanted, raws, strict=True):
            grant = _parsed(raw)
            if grant is not None and _live(grant, now):
                held.add(key)
        return held

    async def list(self, team_id: str | None, now: datetime) -> list[Grant]:
        """Every live grant of the workspace, newest first; expired ones are dropped on the way."""
        raws = await self.redis.hgetall(self.key(team_id))
        grants: list[Grant] = []
        expired: list[bytes] = []
        for field, raw in raws.items():
            grant = _parsed(raw)
            if grant is not None and _live(grant, now):
                grants.append(grant)
            else:
                expired.append(field)
        if expired:
            await self.redis.hdel(self.key(team_id), *expired)
        return sorted(grants, key=lambda g: g.granted_at, reverse=True)

    async def get(self, team_id: str | None, grant_id_: str) -> Grant | None:
        return _parsed(await self.redis.hget(self.key(team_id), grant_id_))

    async def revoke(self, grant: Grant) -> bool:
        """Remove a grant (a conversation grant from its session too); False if it was already gone."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hdel(self.key(grant.team_id), grant.grant_id)
        if grant.scope == "conversation" and grant.session_id:
            pipe.srem(self._session_key(grant.session_id, "grants"), grant.approval_key)
        removed, *_ = await pipe.execute()
        return bool(removed)


def _parsed(raw: bytes | None) -> Grant | None:
    if raw is None:
        return None
    try:
        return Grant.model_validate_json(raw)
    except ValueError:  # unreadable: no grant (asking again is the safe side)
        log.warning("ignoring an unreadable grant: %.200r", raw)
        return None


def _live(grant: Grant, now: datetime) -> bool:
    return grant.expires_at is None or grant.expires_at > now.astimezone(UTC)
