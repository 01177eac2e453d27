"""The audit log's entries, their hash chain and its verification (store/audit.py writes them).

Each :class:`AuditEntry` carries the sha256 of its own canonical JSON (every field but ``hash``, including
``prev_hash``), and ``prev_hash`` is the hash of the entry before it (``"0" * 64`` for the first), so
editing, removing or reordering entries breaks the chain and :func:`verify_entries` reports where. Pure:
no Redis here (store/audit_read.py reads a stored log).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ConfigDict, Field, ValidationError

from bot.deferred import DeferredModel

GENESIS_HASH = "0" * 64
KEY_PREFIX = "hitl"
_MAX_REPORTED_PROBLEMS = 200
_TEAM_ID = re.compile(r"^[A-Za-z0-9_.:-]+$")


def workspace_tag(team_id: str) -> str:
    """The Cluster hash tag shared by every key of one workspace."""
    if not team_id or not _TEAM_ID.match(team_id):
        raise ValueError(f"not a usable team id: {team_id!r}")
    return f"{{ws:{team_id}}}"


def workspace_key(team_id: str, *parts: str) -> str:
    """``hitl:{ws:<team>}:<parts…>`` — one workspace's key, in its hash slot."""
    return ":".join((KEY_PREFIX, workspace_tag(team_id), *parts))


class AuditEntry(DeferredModel):
    """One line of the audit log. ``hash`` = sha256 hex of :func:`canonical_body` of the other fields."""

    model_config = ConfigDict(frozen=True)

    seq: int
    at: datetime
    team_id: str
    kind: str  # "request", "candidate", "settlement", "grant", "policy.change", "policy.refused", "execution", …
    actor: str | None = None  # principal id of who did it
    subject: str | None = None  # request id or resource it is about
    data: dict[str, Any] = Field(default_factory=dict)
    prev_hash: str
    hash: str

    def computed_hash(self) -> str:
        """The hash this entry's content should carry."""
        return entry_hash(
            seq=self.seq,
            at=self.at,
            team_id=self.team_id,
            kind=self.kind,
            actor=self.actor,
            subject=self.subject,
            data=self.data,
            prev_hash=self.prev_hash,
        )


class AuditHead(DeferredModel):
    """The last entry of a workspace's log: publish it elsewhere to anchor the chain."""

    seq: int
    hash: str
    at: datetime


class VerifyReport(DeferredModel):
    ok: bool
    entries: int
    problems: list[str] = Field(default_factory=list)
    last_seq: int | None = None
    last_hash: str | None = None
    noted_head_seq: int | None = None  # the seq of the entry whose hash was given as the noted head


EXPORT_HEAD_FIELD = "export_head"  # an export's last line: {"export_head": {…}}


class ExportHead(DeferredModel):
    """The record that ends an unfiltered export: how many entries it holds and the last one's seq and
    hash, chained to that entry (``hash`` covers them). Without it, entries cut from the end of a file leave
    a chain that still verifies; a verifier refuses an export that lacks it or disagrees with it. Anyone can
    recompute it for a cut file, so the head noted elsewhere when exporting (``verify --head``) is the anchor
    that also catches a forged one."""

    team_id: str
    entries: int
    last_seq: int
    last_hash: str
    hash: str

    def computed_hash(self) -> str:
        return _export_head_hash(self.team_id, self.entries, self.last_seq, self.last_hash)


def _export_head_hash(team_id: str, entries: int, last_seq: int, last_hash: str) -> str:
    body = {"kind": EXPORT_HEAD_FIELD, "team_id": team_id, "entries": entries, "last_seq": last_seq,
            "last_hash": last_hash}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def export_head(team_id: str, last: AuditEntry | None, count: int) -> ExportHead:
    """The head record of an export of ``count`` entries ending with ``last`` (none: an empty log)."""
    last_seq, last_hash = (last.seq, last.hash) if last is not None else (0, GENESIS_HASH)
    return ExportHead(team_id=team_id, entries=count, last_seq=last_seq, last_hash=last_hash,
                      hash=_export_head_hash(team_id, count, last_seq, last_hash))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


def _utc(at: datetime) -> datetime:
    """Aware UTC; a naive datetime is taken to be UTC already."""
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def _floor_ms(at: datetime) -> int:
    return (_utc(at) - _EPOCH) // _ONE_MS


def _ceil_ms(at: datetime) -> int:
    return -((_EPOCH - _utc(at)) // _ONE_MS)


def _ms_to_datetime(ms: int) -> datetime:
    return _EPOCH + ms * _ONE_MS


def _iso_ms(at: datetime) -> str:
    return _utc(at).isoformat(timespec="milliseconds")


def canonical_body(
    *,
    seq: int,
    at: datetime,
    team_id: str,
    kind: str,
    actor: str | None,
    subject: str | None,
    data: dict[str, Any],
    prev_hash: str,
) -> bytes:
    """The bytes that are hashed: sorted-key compact JSON of every field but ``hash``.

    ``at`` is written as UTC ISO-8601 with milliseconds, so an entry read back from JSON (any
    timezone notation) hashes the same.
    """
    body = {
        "seq": seq,
        "at": _iso_ms(at),
        "team_id": team_id,
        "kind": kind,
        "actor": actor,
        "subject": subject,
        "data": data,
        "prev_hash": prev_hash,
    }
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8")


def entry_hash(**fields: Any) -> str:
    return hashlib.sha256(canonical_body(**fields)).hexdigest()


class _ChainChecker:
    """Walks entries oldest first and notes every break in the chain."""

    def __init__(self) -> None:
        self.count = 0
        self.problems: list[str] = []
        self._dropped = 0
        self._prev: AuditEntry | None = None
        self.team_id: str | None = None

    def note(self, problem: str) -> None:
        if len(self.problems) < _MAX_REPORTED_PROBLEMS:
            self.problems.append(problem)
        else:
            self._dropped += 1

    def feed(self, entry: AuditEntry) -> None:
        self.count += 1
        try:
            edited = entry.computed_hash() != entry.hash
        except ValueError:  # e.g. NaN smuggled into data: it could never have been appended
            edited = True
        if edited:
            self.note(f"seq {entry.seq}: hash does not match its content (entry edited)")
        if self.team_id is None:
            self.team_id = entry.team_id
        elif entry.team_id != self.team_id:
            self.note(f"seq {entry.seq}: belongs to team {entry.team_id}, not {self.team_id}")
        prev = self._prev
        if prev is None:
            if entry.seq != 1:
                self.note(f"log starts at seq {entry.seq}, not 1 (first entries removed)")
            if entry.seq == 1 and entry.prev_hash != GENESIS_HASH:
                self.note("seq 1: prev_hash is not the genesis hash")
        else:
            if entry.seq == prev.seq + 1:
                pass
            elif entry.seq > prev.seq + 1:
                self.note(f"seq {prev.seq + 1}..{entry.seq - 1} missing (entries removed)")
            else:
                self.note(f"seq {entry.seq} follows seq {prev.seq} (entries reordered or duplicated)")
            if entry.prev_hash != prev.hash:
                self.note(
                    f"seq {entry.seq}: prev_hash does not match the hash of seq {prev.seq} "
                    "(entries removed, inserted or reordered)"
                )
        if prev is not None and entry.at < prev.at:
            self.note(f"seq {entry.seq}: time goes backwards from seq {prev.seq}")
        self._prev = entry

    def report(self) -> VerifyReport:
        problems = list(self.problems)
        if self._dropped:
            problems.append(f"… and {self._dropped} more problems")
        last = self._prev
        return VerifyReport(
            ok=not problems,
            entries=self.count,
            problems=problems,
            last_seq=last.seq if last else None,
            last_hash=last.hash if last else None,
        )


def verify_entries(entries: Iterable[AuditEntry]) -> VerifyReport:
    """Check a complete log (oldest first), e.g. a JSONL export read back with
    ``AuditEntry.model_validate_json(line)``. A filtered export has gaps and will not verify.
    """
    checker = _ChainChecker()
    for entry in entries:
        checker.feed(entry)
    return checker.report()


def verify_export(lines: Iterable[str], *, noted_head: str | None = None) -> VerifyReport:
    """Check an export's lines: the chain, and the head record that must end it; with ``noted_head`` (the
    last hash noted elsewhere when it was exported, or any later one), also that the export reaches it."""
    checker = _ChainChecker()
    head: ExportHead | None = None
    noted_seq: int | None = None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            parsed = json.loads(line)
            if isinstance(parsed, dict) and EXPORT_HEAD_FIELD in parsed:
                if head is not None:
                    checker.note(f"line {number}: a second head record")
                head = ExportHead.model_validate(parsed[EXPORT_HEAD_FIELD])
                continue
            entry = AuditEntry.model_validate(parsed)
        except (ValueError, ValidationError):
            checker.note(f"line {number}: not an audit entry")
            continue
        if head is not None:
            checker.note(f"line {number}: an entry after the head record")
        checker.feed(entry)
        if entry.hash == noted_head:
            noted_seq = entry.seq
    _check_head(checker, head)
    if noted_head is not None and noted_seq is None:
        checker.note(f"the noted head {noted_head} is not in this export (entries removed from the end, "
                     "or another workspace's log)")
    return checker.report().model_copy(update={"noted_head_seq": noted_seq})


def _check_head(checker: _ChainChecker, head: ExportHead | None) -> None:
    if head is None:
        checker.note("no head record at its end: entries may have been cut from the end (export it again, "
                     "or verify against the head noted when it was exported with --head)")
        return
    so_far = checker.report()
    last_seq, last_hash = so_far.last_seq or 0, so_far.last_hash or GENESIS_HASH
    if head.hash != head.computed_hash():
        checker.note("the head record does not match its content (edited)")
    if checker.team_id is not None and head.team_id != checker.team_id:
        checker.note(f"the head record is of team {head.team_id}, not {checker.team_id}")
    if (head.entries, head.last_seq) != (checker.count, last_seq):
        checker.note(f"head says {head.entries} entries up to seq {head.last_seq}, but the export has "
                     f"{checker.count} up to seq {last_seq} (entries removed from the end, or added)")
    elif head.last_hash != last_hash:
        checker.note(f"head's last hash is not the hash of seq {last_seq} (entries replaced)")


def read_jsonl(lines: Iterable[str]) -> Iterable[AuditEntry]:
    """Entries of a JSONL export (blank lines and the head record skipped), for :func:`verify_entries`."""
    for line in lines:
        if line.strip() and not line.lstrip().startswith('{"export_head"'):
            yield AuditEntry.model_validate_json(line)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
