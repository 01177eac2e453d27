"""``python -m bot audit export|verify``: a workspace's audit log as JSON lines, and its hash-chain check.

- ``audit export --team T [--kind K] [--actor A] [--subject S] [--since ISO] [--until ISO] [--out FILE]``
  writes matching entries oldest first (stdout by default). An unfiltered export ends with a head record
  (count, last seq and hash, chained to the last entry) and verifies offline; the head is also printed, to
  be noted elsewhere.
- ``audit verify --team T`` checks the chain as stored in Redis; ``audit verify --file export.jsonl
  [--head HASH]`` checks an export, which must end with its head record, and with ``--head`` that it
  reaches the head noted elsewhere. Exit 0 when intact, 1 with every problem listed (edited, removed,
  reordered entries, entries cut from the end), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from bot.config import ConfigError, Settings
from store.audit import AuditLog, VerifyReport
from store.audit_chain import EXPORT_HEAD_FIELD, export_head, verify_export
from store.client import open_redis, ping

OK, PROBLEMS, USAGE = 0, 1, 2


def parse_time(value: str | None, name: str) -> datetime | None:
    """ISO-8601 (``2026-01-31``, ``2026-01-31T12:00:00Z``); naive times are UTC."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError(f"--{name}: not an ISO-8601 time: {value!r}") from exc
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed


async def audit_command(settings: Settings, args: argparse.Namespace) -> int:
    try:
        if args.audit_command == "export":
            return await export(settings, args)
        if args.audit_command == "verify":
            return await verify(settings, args)
    except ConfigError as exc:
        print(f"audit: {exc}", file=sys.stderr)
        return USAGE
    print(f"audit: unknown subcommand {args.audit_command!r}", file=sys.stderr)
    return USAGE


async def export(settings: Settings, args: argparse.Namespace) -> int:
    filters = {
        "kind": getattr(args, "kind", None),
        "actor": getattr(args, "actor", None),
        "subject": getattr(args, "subject", None),
        "since": parse_time(getattr(args, "since", None), "since"),
        "until": parse_time(getattr(args, "until", None), "until"),
    }
    filtered = any(v is not None for v in filters.values())
    count, last = 0, None
    async with _audit_log(settings) as log:
        with _output(getattr(args, "out", None) or "-") as out:
            async for last in log.iter_entries(args.team, **filters):
                out.write(last.model_dump_json() + "\n")
                count += 1
            if not filtered:  # the end of the chain, so a file cut short no longer verifies
                head = export_head(args.team, last, count)
                out.write(json.dumps({EXPORT_HEAD_FIELD: head.model_dump(mode="json")}) + "\n")
    if filtered:
        print(f"exported {count} entries of {args.team} (filtered: this export will not verify as a whole "
              "chain)", file=sys.stderr)
    else:
        print(f"exported {count} entries of {args.team}; head: seq {head.last_seq} {head.last_hash} (note it "
              "elsewhere: `audit verify --file … --head <hash>` then shows no entry was cut)", file=sys.stderr)
    return OK


async def verify(settings: Settings, args: argparse.Namespace) -> int:
    path, team = getattr(args, "file", None), getattr(args, "team", None)
    noted = getattr(args, "head", None)
    if bool(path) == bool(team):
        raise ConfigError("verify needs exactly one of --team (the log in Redis) or --file (an export)")
    if noted is not None and not path:
        raise ConfigError("--head checks an export: use it with --file")
    if noted is not None and not re.fullmatch(r"[0-9a-f]{64}", noted):
        raise ConfigError(f"--head: not an entry's hash (64 hex digits): {noted!r}")
    if path:
        report = verify_file(Path(path), noted)
        where = path
    else:
        async with _audit_log(settings) as log:
            report = await log.verify(team)
        where = f"the audit log of {team}"
    return print_report(report, where)


def verify_file(path: Path, noted_head: str | None = None) -> VerifyReport:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"--file: cannot read {path}: {exc.strerror}") from exc
    return verify_export(lines, noted_head=noted_head)


def print_report(report: VerifyReport, where: str) -> int:
    if report.ok:
        head = f", last seq {report.last_seq} ({report.last_hash})" if report.entries else ""
        noted = f"; it reaches the noted head (seq {report.noted_head_seq})" if report.noted_head_seq else ""
        print(f"ok: {report.entries} entries in {where} verify{head}{noted}")
        return OK
    print(f"FAILED: {where} has {len(report.problems)} problem(s) in {report.entries} entries:")
    for problem in report.problems:
        print(f"  - {problem}")
    return PROBLEMS


@asynccontextmanager
async def _audit_log(settings: Settings) -> AsyncIterator[AuditLog]:
    """An AuditLog on the configured Redis, closed afterwards (embedded server stopped if we started one)."""
    # beside a running bot, its embedded server (read-only use: export and verify never write)
    handle = await open_redis(settings.redis_url, cluster=settings.redis_cluster,
                              data_dir=Path(settings.data_dir) / "redis", join=True)
    try:
        if not await ping(handle.client):
            raise ConfigError("REDIS_URL: no Redis answered")
        yield AuditLog(handle.client)
    finally:
        await handle.close()


@contextmanager
def _output(out: str) -> Iterator[TextIO]:
    if out == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    try:
        with open(out, "w", encoding="utf-8") as handle:
            yield handle
    except OSError as exc:
        raise ConfigError(f"--out: cannot write {out}: {exc.strerror}") from exc
