"""Standing approvals ("don't ask again") in Redis (DESIGN §6, §9, §12).

A requester grant is one record here, its end (``expires_at``) in it: the grant and its listing are
the same write, made once the settle counted (lost in a crash before it: not in force, not listed).

A conversation grant is in force while its approval key is in its session's ``P:grants`` set (which
the turn loop reads with the rest of the session) and the session has not ended; the settle script writes
it together with its record ``P:granted`` (what is listed), so both have the session's one lifetime
(``store.turns``: a session whose end has passed is gone, whether or not it is retired yet). Since that
slot is not the workspace's, the workspace keeps an index of them, written *before* the settle: an
entry whose settle never came, or whose grant has lapsed or was revoked, is never shown — the listing
is derived from the grants themselves and trimmed as it is read.

  hitl:{ws:<team>}:grants   hash grant id → ``Grant`` JSON (grant id: ``<scope>|<holder>|<approval key>``)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from redis.asyncio import Redis

from bot.principals import Principal
from bot.protocol import Grant, grant_id
from store.pipelined import Command, pipelined

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
                            now: datetime) -> dict[str, Grant]:
        """This requester's unexpired grants among ``keys``, by approval key (one command)."""
        wanted = sorted(set(keys))
        if not wanted:
            return {}
        ids = [grant_id("requester", requester.principal_id, k) for k in wanted]
        raws = await self.redis.hmget(self.key(team_id), ids)
        grants = {key: _parsed(raw) for key, raw in zip(wanted, raws, strict=True)}
        return {key: g for key, g in grants.items() if g is not None and _live(g, now)}

    async def in_conversation(self, session_id: str, approval_key: str) -> Grant | None:
        """The record of a conversation grant (who gave it, where), as its settle wrote it."""
        raw = await self.redis.hget(self._session_key(session_id, "granted"),
                                    grant_id("conversation", session_id, approval_key))
        return _parsed(raw)

    async def list(self, team_id: str | None, now: datetime) -> list[Grant]:
        """Every grant of the workspace in force, newest first; the rest are dropped on the way."""
        raws = await self.redis.hgetall(self.key(team_id))
        indexed = {field: _parsed(raw) for field, raw in raws.items()}
        here = [(field, g) for field, g in indexed.items() if g is not None and g.scope == "conversation"]
        held = await self._conversation_grants([g for _, g in here])
        grants: list[Grant] = []
        gone: list[bytes] = []
        for field, grant in indexed.items():
            if grant is not None and grant.scope == "conversation":
                grant = held.get(field.decode())
            if grant is not None and _live(grant, now):
                grants.append(grant)
            else:
                gone.append(field)
        if gone:
            await self.redis.hdel(self.key(team_id), *gone)
        return sorted(grants, key=lambda g: g.granted_at, reverse=True)

    async def _conversation_grants(self, indexed: list[Grant]) -> dict[str, Grant]:
        """Those of ``indexed`` in force (their key in the session's grants, the session not ended), as their
        session recorded them (one round trip). A grant without a record (written before records were) is
        listed as indexed."""
        if not indexed:
            return {}
        pipe = self.redis.pipeline(transaction=False)
        for g in indexed:
            pipe.sismember(self._session_key(g.session_id or "", "grants"), g.approval_key)
            pipe.hget(self._session_key(g.session_id or "", "granted"), g.grant_id)
            pipe.get(self._session_key(g.session_id or "", "end"))
        replies = await pipe.execute()
        held: dict[str, Grant] = {}
        for g, in_force, raw, ends in zip(indexed, replies[::3], replies[1::3], replies[2::3], strict=True):
            if g.session_id and in_force and not session_ended(ends):
                held[g.grant_id] = _parsed(raw) or g
        return held

    async def get(self, team_id: str | None, grant_id_: str) -> Grant | None:
        return _parsed(await self.redis.hget(self.key(team_id), grant_id_))

    async def revoke(self, grant: Grant) -> bool:
        """Remove a grant (a conversation grant from its session too); False if it was already gone.
        The grant goes before its index entry: a crash between leaves an entry that lists nothing."""
        commands: list[Command] = []
        if grant.scope == "conversation" and grant.session_id:
            commands += [("srem", (self._session_key(grant.session_id, "grants"), grant.approval_key)),
                         ("hdel", (self._session_key(grant.session_id, "granted"), grant.grant_id))]
        commands.append(("hdel", (self.key(grant.team_id), grant.grant_id)))
        *_, removed = await pipelined(self.redis, commands, [])  # in this order, on a Cluster too
        return bool(removed)


def _parsed(raw: bytes | None) -> Grant | None:
    if raw is None:
        return None
    try:
        return Grant.model_validate_json(raw)
    except ValueError:  # unreadable: no grant (asking again is the safe side)
        log.warning("ignoring an unreadable grant: %.200r", raw)
        return None


def session_ended(raw_end: bytes | str | None) -> bool:
    """Whether a session's end (``P:end``, epoch ms, as ``store.turns`` writes it) has passed: the session
    is then gone (the conversation over, its grants lapsed), retired or not yet."""
    return raw_end is not None and int(raw_end) <= time.time() * 1000


def _live(grant: Grant, now: datetime) -> bool:
    return grant.expires_at is None or grant.expires_at > now.astimezone(UTC)
