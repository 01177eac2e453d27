"""The per-workspace audit log: an append-only, hash-chained Redis Stream (DESIGN §1, §9).

Every governance event of a workspace (requests, candidates, settlements, grants, policy changes,
refused edits, executions) is one :class:`AuditEntry`. Each entry carries the sha256 of its own
canonical JSON (every field but ``hash``, including ``prev_hash``), and ``prev_hash`` is the hash of
the entry before it (``"0" * 64`` for the first), so editing, removing or reordering entries breaks the
chain and :func:`verify_entries` reports where. What an entry is and how the chain verifies:
store/audit_chain.py; reading, export and verification of a stored log: store/audit_read.py (both named
here too, so ``from store.audit import …`` keeps working).

Keys (all of one workspace in one Cluster hash slot, tagged ``{ws:<team>}``):

- ``hitl:{ws:T1}:audit`` — the Stream. Entry ids are ``<at in ms>-<seq>``, so time-range reads use the
  stream index; fields ``seq``, ``hash`` and ``e`` (the entry's JSON).
- ``hitl:{ws:T1}:audit:head`` — a small hash (``seq``, ``hash``, ``ms``) naming the last entry. It is
  the source of the next ``prev_hash``/``seq`` and a witness: entries cut from the end of the stream
  are noticed by :meth:`AuditLog.verify` and leave a gap that the next append cannot hide.

Appending is an optimistic compare-and-set: Lua has no sha256, so Python computes the hash for the
head it read, and a Lua script adds the entry only if the head is still that one (otherwise it hands
back the new head and we retry). ``at`` comes from the Redis server's clock, never the caller's, and
never goes backwards within a workspace.

What the chain proves: accidental or naive tampering (an edited field, a deleted or moved entry) is
detected. Someone who can write to Redis can still rewrite the whole chain from the edited entry on;
export the log (or note :meth:`AuditLog.head`) somewhere else to anchor it.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

from pydantic import ConfigDict
from pydantic_core import to_jsonable_python
from redis.exceptions import ResponseError

from bot.deferred import DeferredModel
from store.audit_chain import (
    GENESIS_HASH,
    KEY_PREFIX,
    AuditEntry,
    AuditHead,
    VerifyReport,
    _floor_ms,
    _ms_to_datetime,
    _text,
    canonical_body,
    entry_hash,
    read_jsonl,
    verify_entries,
    workspace_key,
    workspace_tag,
)
from store.audit_read import AuditReader
from store.client import RedisClient
from store.pipelined import Command, evalsha, pipelined
from store.replay import REPLAY_MARK_MS, replay_mark, replay_safe

__all__ = [
    "AUDIT_PROGRESS_SECONDS", "GENESIS_HASH", "KEY_PREFIX", "AuditContention", "AuditEntry", "AuditError",
    "AuditGroup", "AuditHead", "AuditLog", "GuardedWrite", "SessionAppend", "VerifyReport", "VersionConflict",
    "canonical_body", "entry_hash", "read_jsonl", "stream_id_after", "verify_entries", "workspace_key",
    "workspace_tag",
]

# Contention is resolved by retrying; each losing round still lets one writer through.
_MAX_APPEND_ATTEMPTS = 500
AUDIT_PROGRESS_SECONDS = 30 * 24 * 3600  # a session's audit progress: renewed with each of its appends


class AuditError(RuntimeError):
    """The audit log could not be written as asked."""


class AuditContention(AuditError):
    """Too many concurrent writers kept winning; the entry was not appended."""


class VersionConflict(AuditError):
    """The guarded document changed since it was read; nothing was written (re-read and retry)."""

    def __init__(self, key: str, expected: int, current: int) -> None:
        super().__init__(f"{key} is at version {current}, not {expected}")
        self.key = key
        self.expected = expected
        self.current = current


class GuardedWrite(DeferredModel):
    """A versioned document replaced in the same atomic step as an audit append.

    ``key`` is a Redis hash (fields ``doc`` and ``version``) in the workspace's hash slot. The append
    happens only if its ``version`` is still ``expected_version`` (a missing key is version 0); then
    ``doc`` becomes ``value`` and ``version`` becomes ``expected_version + 1``. Otherwise
    :class:`VersionConflict` is raised and nothing is written.
    """

    key: str
    expected_version: int
    value: str


# Lua: the current head of a workspace's log, from the head key, else (head key lost) from the
# stream's last entry, else the genesis.
_HEAD_LUA = f"""
local function current_head()
  local h = redis.call('HMGET', KEYS[2], 'seq', 'hash', 'ms')
  if h[1] then return h[1], h[2], h[3] end
  local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
  if #last == 0 then return '0', '{GENESIS_HASH}', '0' end
  local fields = last[1][2]
  local seq, hash = '0', '{GENESIS_HASH}'
  for i = 1, #fields, 2 do
    if fields[i] == 'seq' then seq = fields[i + 1] elseif fields[i] == 'hash' then hash = fields[i + 1] end
  end
  return seq, hash, string.match(last[1][1], '^(%d+)-')
end
"""

# KEYS[1] stream, KEYS[2] head → {seq, hash, ms, server seconds, server microseconds}
_READ_HEAD_LUA = (
    _HEAD_LUA
    + """
local seq, hash, ms = current_head()
local t = redis.call('TIME')
return {seq, hash, ms, t[1], t[2]}
"""
)

# KEYS[1] stream, KEYS[2] head, KEYS[3] optional guarded document
# ARGV: expected head seq, new seq, new hash, at ms, entry json, [expected doc version, doc value]
# → {'ok'} | {'head', seq, hash, ms, sec, usec} | {'version', current}
# The XADD goes first: it is the only call that can fail, and a failed script must leave nothing behind.
_APPEND_LUA = (
    _HEAD_LUA
    + """
local seq, hash, ms = current_head()
if seq ~= ARGV[1] then
  local t = redis.call('TIME')
  return {'head', seq, hash, ms, t[1], t[2]}
end
if #KEYS >= 3 then
  local version = redis.call('HGET', KEYS[3], 'version') or '0'
  if version ~= ARGV[6] then return {'version', version} end
end
redis.call('XADD', KEYS[1], ARGV[4] .. '-' .. ARGV[2], 'seq', ARGV[2], 'hash', ARGV[3], 'e', ARGV[5])
if #KEYS >= 3 then
  redis.call('HSET', KEYS[3], 'doc', ARGV[7], 'version', tostring(tonumber(ARGV[6]) + 1))
end
redis.call('HSET', KEYS[2], 'seq', ARGV[2], 'hash', ARGV[3], 'ms', ARGV[4])
return {'ok'}
"""
)


# A session's audited events at once, each at most once: ``KEYS[3]`` is the session's audit progress (the
# stream id of its last audited event, in the workspace's slot), read and moved by this script, so a batch
# that starts at or before it (offered again after a crash, or by a stale reader) is refused whole and
# re-offered without what is in. A thread revived after its retention has a new events stream whose ids (the
# server's clock) come after the old one's, so its events are past the old progress. The batch goes against
# the head the caller believes current, with an ``at`` it estimated from the server's clock.
# KEYS[1] stream, KEYS[2] head, KEYS[3] progress
# ARGV: expected head seq, progress seconds, allowed clock skew ms, first event id, last event id, then per
# entry: seq, hash, at ms, json → {'ok'} | {'seen', progress} | {'head', seq, hash, ms, sec, usec}
_APPEND_SESSION_LUA = (
    _HEAD_LUA
    + """
local function after(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if not bm then return true end
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am > bm or (am == bm and as > bs)
end
local upto = redis.call('GET', KEYS[3])
if upto and not after(ARGV[4], upto) then return {'seen', upto} end
local seq, hash, ms = current_head()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local at, skew = tonumber(ARGV[8]), tonumber(ARGV[3])
-- never before the last entry (a server clock stepped back is waited out), else near the server's clock
if seq ~= ARGV[1] or at < tonumber(ms) or at > math.max(now, tonumber(ms)) + skew or at < now - skew then
  return {'head', seq, hash, ms, t[1], t[2]}
end
for i = 6, #ARGV, 4 do
  redis.call('XADD', KEYS[1], ARGV[i + 2] .. '-' .. ARGV[i], 'seq', ARGV[i], 'hash', ARGV[i + 1], 'e', ARGV[i + 3])
end
redis.call('HSET', KEYS[2], 'seq', ARGV[#ARGV - 3], 'hash', ARGV[#ARGV - 2], 'ms', ARGV[#ARGV - 1])
redis.call('SET', KEYS[3], ARGV[5], 'EX', ARGV[2])
return {'ok'}
"""
)
# How far a batch's ``at`` (estimated from the server clock's offset at the last read) may be from the
# server's clock when it lands; further (a clock stepped, a stale estimate), the head is read again.
_BATCH_CLOCK_SKEW_MS = 500


def stream_id_after(a: str, b: str | None) -> bool:
    """Whether stream id ``a`` ("<ms>-<n>") comes after ``b`` (None: nothing, so yes)."""
    if b is None:
        return True
    (am, _, an), (bm, _, bn) = a.partition("-"), b.partition("-")
    return (int(am), int(an or 0)) > (int(bm), int(bn or 0))


class AuditGroup(DeferredModel):
    """The entries of one session event, audited together or not at all, once: ``event_id`` (the event's
    id in its session's stream) orders it; the session's audit progress moves past it with them."""

    event_id: str
    entries: list[tuple[str, str | None, str | None, dict[str, Any]]]  # kind, actor, subject, data


class SessionAppend(DeferredModel):
    """A session's groups, chained after the head this process knows, as the one command that appends them
    (:meth:`AuditLog.session_append`); it rides a pipeline of the caller's, and :meth:`AuditLog.settle`
    reads its reply."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    team_id: str
    session_id: str
    groups: list[AuditGroup]
    entries: list[AuditEntry]
    offset_ms: float
    command: tuple[str, tuple[Any, ...]]


class _Head(DeferredModel):
    seq: int
    hash: str
    ms: int
    server_ms: int

    @classmethod
    def parse(cls, raw: list[Any]) -> _Head:
        seq, hash_, ms, sec, usec = (_text(x) for x in raw)
        return cls(seq=int(seq), hash=hash_, ms=int(ms), server_ms=int(sec) * 1000 + int(usec) // 1000)


def _jsonable_data(data: dict[str, Any] | None) -> dict[str, Any]:
    """Plain JSON values only, so the entry hashes the same after a round trip through JSON."""
    jsonable = to_jsonable_python(data or {})
    if not isinstance(jsonable, dict):
        raise TypeError("audit data must be a mapping")
    # Round trip once: tuples become lists, non-string keys become strings, NaN is refused.
    return json.loads(json.dumps(jsonable, allow_nan=False))


class AuditLog(AuditReader):
    """Append to, read, export and verify one workspace's audit log.

    Every method needs Redis: if it is unreachable they raise ``redis.exceptions.ConnectionError``
    (callers must fail closed: an action that cannot be audited should not happen).
    """

    def __init__(self, redis: RedisClient) -> None:
        super().__init__(redis)
        self._read_head = redis.register_script(_READ_HEAD_LUA)
        self._append = redis.register_script(replay_safe(_APPEND_LUA))
        # not replay_safe: a resent copy finds the session's progress moved and is refused ('seen')
        self._append_session = redis.register_script(_APPEND_SESSION_LUA)
        self._locks: dict[str, asyncio.Lock] = {}
        # team → (the head after this process's last batch, server clock minus ours in ms): a batch in a
        # quiet workspace then needs no read first; another writer's entry costs one retry
        self._known_heads: dict[str, tuple[_Head, float]] = {}

    async def append(
        self,
        team_id: str,
        kind: str,
        *,
        actor: str | None = None,
        subject: str | None = None,
        data: dict[str, Any] | None = None,
        guarded_write: GuardedWrite | None = None,
    ) -> AuditEntry:
        """Append one entry atomically (safe under any number of concurrent writers and replicas).

        With ``guarded_write`` the entry and the document change land together or not at all
        (:class:`VersionConflict` when the document moved on).
        """
        if not kind:
            raise ValueError("audit kind must not be empty")
        stream, head_key = self.stream_key(team_id), self.head_key(team_id)
        keys: list[str] = [stream, head_key]
        if guarded_write is not None:
            if workspace_tag(team_id) not in guarded_write.key:
                raise ValueError(f"{guarded_write.key} is not in the hash slot of team {team_id}")
            keys.append(guarded_write.key)
        jsonable = _jsonable_data(data)
        # Appends from this process queue up locally, so the compare-and-set only races other replicas.
        async with self._lock_for(team_id):
            return await self._append_cas(team_id, kind, actor, subject, jsonable, keys, guarded_write)

    @staticmethod
    def progress_key(team_id: str, session_id: str) -> str:
        """Where a session's audit has got to: the stream id of its last audited event."""
        return workspace_key(team_id, "audit", "upto", session_id)

    def lock(self, team_id: str) -> asyncio.Lock:
        """Held around a session append and its reply: this process's appends to a workspace then chain
        one after another, and only another replica's entry can make one retry."""
        return self._lock_for(team_id)

    def progress_reads(self, team_id: str, session_id: str) -> list[Command]:
        """Commands for a caller's pipeline that read a session's audit progress, and the workspace's head
        when this process knows none yet; :meth:`progress_from` reads their replies."""
        reads: list[Command] = [("get", (self.progress_key(team_id, session_id),))]
        if team_id not in self._known_heads:
            reads.append(evalsha(self._read_head, [self.stream_key(team_id), self.head_key(team_id)], []))
        return reads

    def progress_from(self, team_id: str, replies: list[Any]) -> str | None:
        """The progress read by :meth:`progress_reads` (None: nothing audited yet, or forgotten)."""
        if len(replies) > 1 and not isinstance(replies[1], BaseException):
            self._remember(team_id, replies[1])
        progress = replies[0]
        return None if progress is None or isinstance(progress, BaseException) else _text(progress)

    async def session_append(self, team_id: str, session_id: str, groups: list[AuditGroup]) -> SessionAppend | None:
        """The command appending a session's groups (in event order) after the head this process knows,
        reading the head first only if it knows none; None when no group has entries. Hold :meth:`lock`
        until :meth:`settle` has read the reply."""
        groups = [g.model_copy(update={"entries": [(k, a, s, _jsonable_data(d)) for k, a, s, d in g.entries]})
                  for g in groups if g.entries]
        if not groups:
            return None
        if team_id not in self._known_heads:
            self._remember(team_id, await self._read_head(keys=[self.stream_key(team_id), self.head_key(team_id)]))
        return self._prepare(team_id, session_id, groups)

    def _prepare(self, team_id: str, session_id: str, groups: list[AuditGroup]) -> SessionAppend:
        head, offset_ms = self._known_heads[team_id]
        server = _Head(seq=head.seq, hash=head.hash, ms=head.ms, server_ms=int(time.time() * 1000 + offset_ms))
        entries = self._chain(server, team_id, [e for g in groups for e in g.entries])
        args: list[Any] = [str(head.seq), AUDIT_PROGRESS_SECONDS, _BATCH_CLOCK_SKEW_MS,
                           groups[0].event_id, groups[-1].event_id]
        for entry in entries:
            args += [str(entry.seq), entry.hash, str(_floor_ms(entry.at)), entry.model_dump_json()]
        keys = [self.stream_key(team_id), self.head_key(team_id), self.progress_key(team_id, session_id)]
        return SessionAppend(team_id=team_id, session_id=session_id, groups=groups, entries=entries,
                             offset_ms=offset_ms, command=evalsha(self._append_session, keys, args))

    @property
    def scripts(self) -> list[Any]:
        """The scripts the commands of :meth:`progress_reads` and :meth:`session_append` run."""
        return [self._read_head, self._append_session]

    async def settle(self, pending: SessionAppend, reply: Any) -> list[AuditEntry]:
        """Read the reply to ``pending``'s command; when another replica appended first (or a stale read
        offered events already in), append again in round trips of its own. Returns the entries written
        (none: all were in already); raises what the write raised, or :class:`AuditContention`."""
        team_id = pending.team_id
        for attempt in range(_MAX_APPEND_ATTEMPTS):
            if isinstance(reply, BaseException):
                raise reply
            status, groups = _text(reply[0]), pending.groups
            if status == "ok":
                last = pending.entries[-1]
                at_ms = _floor_ms(last.at)
                self._known_heads[team_id] = (_Head(seq=last.seq, hash=last.hash, ms=at_ms, server_ms=at_ms),
                                              pending.offset_ms)
                return pending.entries
            if status == "seen":  # some (or all: a resent copy of our own) are in: offer the rest
                progress = _text(reply[1])
                groups = [g for g in groups if stream_id_after(g.event_id, progress)]
                if not groups:
                    return []
            else:
                self._remember(team_id, reply[1:])
                if attempt >= 8:  # heavy contention: spread the retries out a little
                    await asyncio.sleep(random.uniform(0, 0.001 * min(attempt, 50)))
            pending = self._prepare(team_id, pending.session_id, groups)
            [reply] = await pipelined(self._redis, [pending.command], [self._append_session], raise_on_error=False)
        raise AuditContention(f"could not append to {self.stream_key(team_id)} after {_MAX_APPEND_ATTEMPTS} attempts")

    async def append_groups(self, team_id: str, session_id: str, groups: list[AuditGroup]) -> list[AuditEntry]:
        """Append a session's groups (in event order) in one write (usually one round trip), skipping those
        at or before the session's audit progress; returns the entries written. All or nothing."""
        async with self.lock(team_id):
            pending = await self.session_append(team_id, session_id, groups)
            if pending is None:
                return []
            [reply] = await pipelined(self._redis, [pending.command], [self._append_session], raise_on_error=False)
            return await self.settle(pending, reply)

    def _remember(self, team_id: str, raw: list[Any]) -> tuple[_Head, float]:
        head = _Head.parse(raw)
        known = (head, head.server_ms - time.time() * 1000)
        self._known_heads[team_id] = known
        return known

    def _chain(self, head: _Head, team_id: str,
               items: list[tuple[str, str | None, str | None, dict[str, Any]]]) -> list[AuditEntry]:
        """Entries for ``items`` following ``head``, all at one instant."""
        out: list[AuditEntry] = []
        for kind, actor, subject, data in items:
            entry = self._next_entry(head, team_id, kind, actor, subject, data)
            at_ms = _floor_ms(entry.at)
            head = _Head(seq=entry.seq, hash=entry.hash, ms=at_ms, server_ms=at_ms)
            out.append(entry)
        return out

    def _lock_for(self, team_id: str) -> asyncio.Lock:
        lock = self._locks.get(team_id)
        if lock is None:
            lock = self._locks[team_id] = asyncio.Lock()
        return lock

    async def _append_cas(
        self,
        team_id: str,
        kind: str,
        actor: str | None,
        subject: str | None,
        jsonable: dict[str, Any],
        keys: list[str],
        guarded_write: GuardedWrite | None,
    ) -> AuditEntry:
        stream = keys[0]
        guard_args: list[str] = []
        if guarded_write is not None:
            guard_args = [str(guarded_write.expected_version), guarded_write.value]
        head = _Head.parse(await self._read_head(keys=keys[:2]))
        for attempt in range(_MAX_APPEND_ATTEMPTS):
            entry = self._next_entry(head, team_id, kind, actor, subject, jsonable)
            at_ms = _floor_ms(entry.at)
            args = [
                str(head.seq),
                str(entry.seq),
                entry.hash,
                str(at_ms),
                entry.model_dump_json(),
                *guard_args,
            ]
            try:
                reply = await self._append(keys=[*keys, replay_mark(keys)], args=[*args, REPLAY_MARK_MS])
            except ResponseError as exc:
                if "equal or smaller than the target stream top" in str(exc):
                    raise AuditError(
                        f"audit stream {stream} has entries past its head key (tampered?): {exc}"
                    ) from exc
                raise
            status = _text(reply[0])
            if status == "ok":
                return entry
            if status == "version":
                assert guarded_write is not None
                raise VersionConflict(guarded_write.key, guarded_write.expected_version, int(_text(reply[1])))
            head = _Head.parse(reply[1:])
            if attempt >= 8:  # heavy contention: spread the retries out a little
                await asyncio.sleep(random.uniform(0, 0.001 * min(attempt, 50)))
        raise AuditContention(f"could not append to {stream} after {_MAX_APPEND_ATTEMPTS} attempts")

    @staticmethod
    def _next_entry(
        head: _Head,
        team_id: str,
        kind: str,
        actor: str | None,
        subject: str | None,
        data: dict[str, Any],
    ) -> AuditEntry:
        # Never before the previous entry, even if the server clock stepped back.
        at = _ms_to_datetime(max(head.server_ms, head.ms))
        seq = head.seq + 1
        fields: dict[str, Any] = dict(
            seq=seq,
            at=at,
            team_id=team_id,
            kind=kind,
            actor=actor,
            subject=subject,
            data=data,
            prev_hash=head.hash,
        )
        return AuditEntry(**fields, hash=entry_hash(**fields))

    async def head(self, team_id: str) -> AuditHead | None:
        """The last entry's seq and hash (None for an empty log)."""
        head = _Head.parse(await self._read_head(keys=[self.stream_key(team_id), self.head_key(team_id)]))
        if head.seq == 0:
            return None
        return AuditHead(seq=head.seq, hash=head.hash, at=_ms_to_datetime(head.ms))
