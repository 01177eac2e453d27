"""The hash-chained audit log on a real Redis (store/audit.py)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis.asyncio as redis_asyncio
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry

from store.audit import (
    GENESIS_HASH,
    AuditEntry,
    AuditGroup,
    AuditLog,
    read_jsonl,
    verify_entries,
)

TEAM = "T0001"


async def _fill(log: AuditLog, count: int, team: str = TEAM) -> list[AuditEntry]:
    return [
        await log.append(team, "request", actor="slack:T0001:U1", subject=f"req-{i}", data={"i": i})
        for i in range(count)
    ]


def _independent_hash(entry: AuditEntry) -> str:
    """The documented contract, recomputed without our helpers: sha256 of sorted compact JSON."""
    body = entry.model_dump(mode="json", exclude={"hash"})
    body["at"] = entry.at.astimezone(UTC).isoformat(timespec="milliseconds")
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


async def test_appended_entries_form_a_sha256_chain(redis: redis_asyncio.Redis) -> None:
    log = AuditLog(redis)
    first = await log.append(
        TEAM, "request", actor="slack:T0001:U1", subject="req-1", data={"tool": "refund"}
    )
    second = await log.append(
        TEAM, "settlement", actor="slack:T0001:U2", subject="req-1", data={"outcome": "approved"}
    )

    assert (first.seq, second.seq) == (1, 2)
    assert first.prev_hash == GENESIS_HASH
    assert second.prev_hash == first.hash
    assert first.hash == _independent_hash(first)
    assert second.hash == _independent_hash(second)
    assert first.at <= second.at
    assert abs(first.at - datetime.now(UTC)) < timedelta(seconds=5)
    assert await log.entries(TEAM) == [first, second]
    head = await log.head(TEAM)
    assert head is not None and (head.seq, head.hash) == (2, second.hash)


async def test_fifty_concurrent_appends_from_several_replicas_make_one_valid_chain(
    redis: redis_asyncio.Redis, redis_url: str
) -> None:
    # Five "replicas", each with its own connection pool, ten appends each, all at once.
    clients = [redis_asyncio.Redis.from_url(redis_url, decode_responses=False) for _ in range(5)]
    try:
        logs = [AuditLog(client) for client in clients]
        appended = await asyncio.gather(
            *(logs[i % 5].append(TEAM, "execution", subject=f"call-{i}", data={"i": i}) for i in range(50))
        )
    finally:
        for client in clients:
            await client.aclose()

    assert sorted(entry.seq for entry in appended) == list(range(1, 51))
    stored = await AuditLog(redis).entries(TEAM, limit=None)
    assert [entry.seq for entry in stored] == list(range(1, 51))
    assert sorted(entry.data["i"] for entry in stored) == list(range(50))
    for previous, entry in zip(stored, stored[1:], strict=False):
        assert entry.prev_hash == previous.hash
        assert entry.at >= previous.at
    report = await AuditLog(redis).verify(TEAM)
    assert report.ok, report.problems
    assert (report.entries, report.last_seq, report.last_hash) == (50, 50, stored[-1].hash)


def _group(n: int, *, at_ms: int = 1_000) -> AuditGroup:
    """The audit entries of a session's event ``n`` (its stream id: ``<at_ms>-<n>``)."""
    return AuditGroup(event_id=f"{at_ms}-{n}",
                      entries=[("settlement", "slack:T0001:U1", f"req-{n}", {"n": n}),
                               ("grant", "slack:T0001:U1", f"req-{n}", {"n": n})])


async def test_groups_from_replicas_writing_in_turns_make_one_valid_chain(
    redis: redis_asyncio.Redis, redis_url: str
) -> None:
    # each replica remembers the head it wrote last: when the other wrote since, its guess is stale and
    # must be caught (a wrong prev_hash or seq would break the chain)
    other = redis_asyncio.Redis.from_url(redis_url, decode_responses=False)
    try:
        mine, theirs = AuditLog(redis), AuditLog(other)
        for n in range(6):
            await (mine if n % 2 else theirs).append_groups(TEAM, "s1", [_group(n)])
        await mine.append(TEAM, "policy.change", subject="refund_charge")  # the single-entry path too
        await asyncio.gather(*(log.append_groups(TEAM, f"s{i + 2}", [_group(10 + i)]) for i, log in
                               enumerate([mine, theirs, mine, theirs])))
    finally:
        await other.aclose()
    stored = await AuditLog(redis).entries(TEAM, limit=None)
    assert [e.seq for e in stored] == list(range(1, 22))
    assert [e.kind for e in stored[:2]] == ["settlement", "grant"]
    server_now = datetime.fromtimestamp(float((await redis.time())[0]), UTC)
    assert all(abs(e.at - server_now) < timedelta(seconds=5) for e in stored)  # the server's clock
    report = await AuditLog(redis).verify(TEAM)
    assert report.ok, report.problems


async def test_events_already_audited_are_skipped_and_the_rest_written(redis: redis_asyncio.Redis) -> None:
    log = AuditLog(redis)
    await log.append_groups(TEAM, "s1", [_group(1)])
    # a crash after the write but before the outbox cursor moved: the same events come again, with more
    written = await AuditLog(redis).append_groups(TEAM, "s1", [_group(1), _group(2), _group(3)])
    assert [(e.subject, e.seq) for e in written] == [("req-2", 3), ("req-2", 4), ("req-3", 5), ("req-3", 6)]
    stored = await log.entries(TEAM, limit=None)
    assert [e.subject for e in stored] == ["req-1", "req-1", "req-2", "req-2", "req-3", "req-3"]
    assert (await log.verify(TEAM)).ok
    assert await log.append_groups(TEAM, "s1", [_group(1), _group(2)]) == []
    # another session's events are its own: the same ids are not "already audited" there
    assert len(await log.append_groups(TEAM, "s2", [_group(1)])) == 2
    assert await redis.get(AuditLog.progress_key(TEAM, "s1")) == b"1000-3"


async def test_a_revived_threads_events_are_audited_although_their_numbers_start_again(
    redis: redis_asyncio.Redis,
) -> None:
    log = AuditLog(redis)
    await log.append_groups(TEAM, "s1", [_group(7, at_ms=1_000)])
    # the session's keys lapsed and its thread was used again: a new events stream, later ids, seq from 1
    written = await log.append_groups(TEAM, "s1", [_group(1, at_ms=5_000)])
    assert [e.subject for e in written] == ["req-1", "req-1"]


async def test_two_replicas_offering_the_same_events_at_once_audit_them_once(
    redis: redis_asyncio.Redis, redis_url: str
) -> None:
    other = redis_asyncio.Redis.from_url(redis_url, decode_responses=False)
    try:
        logs = [AuditLog(redis), AuditLog(other)]
        await logs[1].append(TEAM, "policy.change", subject="warm")  # both know a head, which then moves
        for n in range(1, 6):
            await asyncio.gather(*(log.append_groups(TEAM, "s1", [_group(2 * n), _group(2 * n + 1)]) for log in logs))
    finally:
        await other.aclose()
    stored = await AuditLog(redis).entries(TEAM, kind="settlement", limit=None)
    assert sorted(e.data["n"] for e in stored) == list(range(2, 12))
    assert (await AuditLog(redis).verify(TEAM)).ok


async def test_a_batch_is_written_whole_or_not_at_all(redis: redis_asyncio.Redis) -> None:
    log = AuditLog(redis)
    bad = AuditGroup(event_id="1000-2", entries=[("settlement", None, "r", {"x": float("nan")})])
    with pytest.raises(ValueError):
        await log.append_groups(TEAM, "s1", [_group(1), bad])
    assert await log.entries(TEAM) == []
    assert await redis.get(AuditLog.progress_key(TEAM, "s1")) is None


async def test_workspaces_have_separate_chains_in_one_slot_each(redis: redis_asyncio.Redis) -> None:
    log = AuditLog(redis)
    a = await log.append("TA", "grant", actor="slack:TA:U1")
    b = await log.append("TB", "grant", actor="slack:TB:U1")
    assert a.seq == b.seq == 1
    assert [e.team_id for e in await log.entries("TA")] == ["TA"]
    assert key_slot(log.stream_key("TA").encode()) == key_slot(log.head_key("TA").encode())
    assert "{ws:TA}" in log.stream_key("TA")
    with pytest.raises(ValueError):
        await log.append("T{1}", "grant")


async def test_entries_filter_by_kind_actor_subject_and_limit(redis: redis_asyncio.Redis) -> None:
    log = AuditLog(redis)
    await log.append(TEAM, "request", actor="slack:T0001:U1", subject="req-1")
    await log.append(TEAM, "candidate", actor="slack:T0001:U2", subject="req-1")
    await log.append(TEAM, "settlement", actor="slack:T0001:U2", subject="req-1")
    await log.append(TEAM, "request", actor="slack:T0001:U1", subject="req-2")

    assert [e.seq for e in await log.entries(TEAM, kind="request")] == [1, 4]
    assert [e.seq for e in await log.entries(TEAM, actor="slack:T0001:U2")] == [2, 3]
    assert [e.seq for e in await log.entries(TEAM, subject="req-1", kind="settlement")] == [3]
    assert [e.seq for e in await log.entries(TEAM, limit=2)] == [1, 2]
    assert [e.seq for e in await log.entries(TEAM, limit=2, newest_first=True)] == [4, 3]
    assert await log.entries(TEAM, kind="no-such-kind") == []
    assert await log.entries("T-EMPTY") == []


async def test_entries_filter_by_time_range_inclusive(redis: redis_asyncio.Redis) -> None:
    log = AuditLog(redis)
    first = await log.append(TEAM, "request")
    await asyncio.sleep(0.01)
    middle = await log.append(TEAM, "request")
    await asyncio.sleep(0.01)
    last = await log.append(TEAM, "request")
    assert first.at < middle.at < last.at

    assert [e.seq for e in await log.entries(TEAM, since=middle.at)] == [2, 3]
    assert [e.seq for e in await log.entries(TEAM, until=middle.at)] == [1, 2]
    assert [e.seq for e in await log.entries(TEAM, since=middle.at, until=middle.at)] == [2]
    just_after_first = first.at + timedelta(microseconds=500)
    assert [e.seq for e in await log.entries(TEAM, since=just_after_first, until=last.at)] == [2, 3]
    naive_utc = middle.at.astimezone(UTC).replace(tzinfo=None)
    assert [e.seq for e in await log.entries(TEAM, since=naive_utc)] == [2, 3]


async def test_reading_more_than_one_batch(redis: redis_asyncio.Redis) -> None:
    log = AuditLog(redis)
    await asyncio.gather(*(log.append(TEAM, "execution", data={"i": i}) for i in range(1203)))
    assert [e.seq for e in await log.entries(TEAM, limit=None)] == list(range(1, 1204))
    assert [e.seq for e in await log.entries(TEAM, limit=3, newest_first=True)] == [1203, 1202, 1201]
    assert len(await log.entries(TEAM, limit=None, newest_first=True)) == 1203
    assert (await log.verify(TEAM)).ok


async def test_data_is_stored_as_plain_json_and_still_verifies(redis: redis_asyncio.Redis) -> None:
    log = AuditLog(redis)
    when = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    entry = await log.append(TEAM, "grant", data={"until": when, "amounts": (1, 2.5), "note": "café ✓"})
    assert entry.data == {"until": "2025-01-02T03:04:05Z", "amounts": [1, 2.5], "note": "café ✓"}
    assert (await log.entries(TEAM))[0] == entry
    assert (await log.verify(TEAM)).ok
    with pytest.raises(ValueError):
        await log.append(TEAM, "grant", data={"x": float("nan")})


async def test_jsonl_export_verifies_offline_and_detects_tampering(
    redis: redis_asyncio.Redis, tmp_path: Path
) -> None:
    log = AuditLog(redis)
    await _fill(log, 6)
    path = tmp_path / "audit.jsonl"
    with path.open("w") as out:
        assert await log.export_jsonl(TEAM, out) == 6
    lines = path.read_text().splitlines()
    assert len(lines) == 6

    assert verify_entries(read_jsonl(lines)).ok

    edited = json.loads(lines[2])
    edited["data"]["i"] = 999
    report = verify_entries(read_jsonl([*lines[:2], json.dumps(edited), *lines[3:]]))
    assert not report.ok
    assert any("seq 3" in p and "edited" in p for p in report.problems)

    report = verify_entries(read_jsonl(lines[:3] + lines[4:]))
    assert not report.ok
    assert any("seq 4..4 missing" in p for p in report.problems)

    report = verify_entries(read_jsonl([lines[0], lines[2], lines[1], *lines[3:]]))
    assert not report.ok
    assert any("reordered" in p for p in report.problems)

    report = verify_entries(read_jsonl(lines[1:]))
    assert not report.ok
    assert any("first entries removed" in p for p in report.problems)


async def test_export_takes_the_same_filters(redis: redis_asyncio.Redis) -> None:
    log = AuditLog(redis)
    await log.append(TEAM, "request", actor="slack:T0001:U1")
    await log.append(TEAM, "policy.change", actor="slack:T0001:UADMIN")
    out = io.StringIO()
    assert await log.export_jsonl(TEAM, out, kind="policy.change") == 1
    (line,) = out.getvalue().splitlines()
    assert AuditEntry.model_validate_json(line).actor == "slack:T0001:UADMIN"


async def _rewrite_stream(
    redis: redis_asyncio.Redis, log: AuditLog, items: list[tuple[bytes, dict[bytes, bytes]]]
) -> None:
    """What someone with Redis access might do: rebuild the stream under the same ids."""
    stream = log.stream_key(TEAM)
    await redis.delete(stream)
    for stream_id, fields in items:
        await redis.xadd(stream, fields, id=stream_id)


async def test_verify_detects_an_entry_edited_in_redis(redis: redis_asyncio.Redis) -> None:
    log = AuditLog(redis)
    await _fill(log, 4)
    items = await redis.xrange(log.stream_key(TEAM))
    doc = json.loads(items[1][1][b"e"])
    doc["data"]["i"] = 42
    items[1] = (items[1][0], {**items[1][1], b"e": json.dumps(doc).encode()})
    await _rewrite_stream(redis, log, items)

    report = await log.verify(TEAM)
    assert not report.ok
    assert any("seq 2" in p and "edited" in p for p in report.problems)


async def test_verify_detects_a_removed_entry(redis: redis_asyncio.Redis) -> None:
    log = AuditLog(redis)
    await _fill(log, 4)
    second_id = (await redis.xrange(log.stream_key(TEAM)))[1][0]
    await redis.xdel(log.stream_key(TEAM), second_id)

    report = await log.verify(TEAM)
    assert not report.ok
    assert any("seq 2..2 missing" in p for p in report.problems)


async def test_verify_detects_reordered_entries(redis: redis_asyncio.Redis) -> None:
    log = AuditLog(redis)
    await _fill(log, 4)
    items = await redis.xrange(log.stream_key(TEAM))
    # Swap the contents of entries 2 and 3, keeping the stream ids in order.
    swapped = [items[0], (items[1][0], items[2][1]), (items[2][0], items[1][1]), items[3]]
    await _rewrite_stream(redis, log, swapped)

    report = await log.verify(TEAM)
    assert not report.ok
    assert any("reordered" in p for p in report.problems)


async def test_cutting_the_tail_is_detected_and_not_hidden_by_later_appends(
    redis: redis_asyncio.Redis,
) -> None:
    log = AuditLog(redis)
    await _fill(log, 3)
    last_id = (await redis.xrevrange(log.stream_key(TEAM), count=1))[0][0]
    await redis.xdel(log.stream_key(TEAM), last_id)

    report = await log.verify(TEAM)
    assert not report.ok
    assert any("head says seq 3" in p for p in report.problems)

    after = await log.append(TEAM, "request")
    assert after.seq == 4
    report = await log.verify(TEAM)
    assert not report.ok
    assert any("seq 3..3 missing" in p for p in report.problems)


async def test_empty_log_verifies(redis: redis_asyncio.Redis) -> None:
    report = await AuditLog(redis).verify(TEAM)
    assert report.ok and report.entries == 0
    assert await AuditLog(redis).head(TEAM) is None


async def test_unreachable_redis_raises_instead_of_dropping_the_entry(tmp_path: Path) -> None:
    client = redis_asyncio.Redis(unix_socket_path=str(tmp_path / "nothing.sock"), retry=Retry(NoBackoff(), 0))
    try:
        with pytest.raises(RedisConnectionError):
            await AuditLog(client).append(TEAM, "request")
        with pytest.raises(RedisConnectionError):
            await AuditLog(client).verify(TEAM)
    finally:
        await client.aclose()
