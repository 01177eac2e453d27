"""Reading a workspace's audit log as stored: filtered reads, a JSONL export, and the verification that
only Redis can add to the chain's (stream ids that do not match their entry, a head that does not match the
last entry). :class:`store.audit.AuditLog` appends besides.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any, TextIO

from store.audit_chain import (
    AuditEntry,
    VerifyReport,
    _ceil_ms,
    _ChainChecker,
    _floor_ms,
    _text,
    workspace_key,
)
from store.client import RedisClient

_READ_BATCH = 500


class AuditReader:
    """Read, export and verify one workspace's audit log. If Redis is unreachable the methods raise
    ``redis.exceptions.ConnectionError``."""

    def __init__(self, redis: RedisClient) -> None:
        self._redis = redis

    @staticmethod
    def stream_key(team_id: str) -> str:
        return workspace_key(team_id, "audit")

    @staticmethod
    def head_key(team_id: str) -> str:
        return workspace_key(team_id, "audit", "head")

    async def _raw_entries(
        self,
        team_id: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        reverse: bool = False,
    ) -> AsyncIterator[tuple[str, dict[bytes, bytes]]]:
        """(stream id, fields) oldest first (newest first with ``reverse``), read in batches."""
        stream = self.stream_key(team_id)
        low = "-" if since is None else str(_ceil_ms(since))
        high = "+" if until is None else str(_floor_ms(until))
        while True:
            if reverse:
                batch = await self._redis.xrevrange(stream, max=high, min=low, count=_READ_BATCH)
            else:
                batch = await self._redis.xrange(stream, min=low, max=high, count=_READ_BATCH)
            for raw_id, fields in batch:
                yield _text(raw_id), fields
            if len(batch) < _READ_BATCH:
                return
            last_id = _text(batch[-1][0])
            # Exclusive continuation from the last id read.
            if reverse:
                high = "(" + last_id
            else:
                low = "(" + last_id

    async def iter_entries(
        self,
        team_id: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        kind: str | None = None,
        actor: str | None = None,
        subject: str | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> AsyncIterator[AuditEntry]:
        """Entries matching every given filter (``since``/``until`` inclusive), oldest first."""
        if limit is not None and limit <= 0:
            return
        yielded = 0
        async for _, fields in self._raw_entries(team_id, since=since, until=until, reverse=newest_first):
            entry = AuditEntry.model_validate_json(fields[b"e"])
            if kind is not None and entry.kind != kind:
                continue
            if actor is not None and entry.actor != actor:
                continue
            if subject is not None and entry.subject != subject:
                continue
            yield entry
            yielded += 1
            if limit is not None and yielded >= limit:
                return

    async def entries(
        self,
        team_id: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        kind: str | None = None,
        actor: str | None = None,
        subject: str | None = None,
        limit: int | None = 1000,
        newest_first: bool = False,
    ) -> list[AuditEntry]:
        """Like :meth:`iter_entries`, as a list (at most ``limit``; None = all)."""
        return [
            entry
            async for entry in self.iter_entries(
                team_id,
                since=since,
                until=until,
                kind=kind,
                actor=actor,
                subject=subject,
                limit=limit,
                newest_first=newest_first,
            )
        ]

    async def export_jsonl(self, team_id: str, out: TextIO, **filters: Any) -> int:
        """Write matching entries to ``out`` as JSON lines, oldest first; returns how many.

        Takes the filters of :meth:`iter_entries`. An unfiltered export verifies offline with
        ``verify_entries(read_jsonl(open(path)))``.
        """
        count = 0
        async for entry in self.iter_entries(team_id, **filters):
            out.write(entry.model_dump_json() + "\n")
            count += 1
        return count

    async def verify(self, team_id: str) -> VerifyReport:
        """Check the whole chain as stored, plus what only Redis can show: stream ids that do not
        match their entry, and a head that does not match the last entry (entries cut from the end).
        """
        checker = _ChainChecker()
        async for stream_id, fields in self._raw_entries(team_id):
            try:
                entry = AuditEntry.model_validate_json(fields[b"e"])
            except (KeyError, ValueError) as exc:
                checker.note(f"stream id {stream_id}: unreadable entry ({type(exc).__name__})")
                continue
            expected_id = f"{_floor_ms(entry.at)}-{entry.seq}"
            if stream_id != expected_id:
                checker.note(
                    f"seq {entry.seq}: stored under stream id {stream_id}, not {expected_id} (moved)"
                )
            if fields.get(b"hash", b"").decode() != entry.hash:
                checker.note(f"seq {entry.seq}: stream field hash differs from the entry's hash")
            checker.feed(entry)
        witness = await self._redis.hmget(self.head_key(team_id), "seq", "hash")
        report = checker.report()
        if witness[0] is not None:
            head_seq, head_hash = int(witness[0]), _text(witness[1])
            if report.last_seq != head_seq or report.last_hash != head_hash:
                checker.note(
                    f"head says seq {head_seq} but the last entry is seq {report.last_seq} "
                    "(entries removed from the end, or the head was edited)"
                )
                report = checker.report()
        elif report.entries:
            checker.note("the head key is missing")
            report = checker.report()
        return report
