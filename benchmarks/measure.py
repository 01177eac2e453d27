"""The engine's three measurements, each returning plain figures."""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass, field

from redis.asyncio import Redis

from bot.engine.turns import AnswerResult

from .population import Cloner, read_template
from .scenario import Bench
from .server import RoundTrips

# --- 1. round trips --------------------------------------------------------------------------------


@dataclass
class RoundTripFigures:
    settle: list[int]  # answer(resume=False) per parked approval
    settle_commands: str  # what those round trips carried (the most common sequence)
    settle_with_record: list[int]  # answer(resume=False, record=...) when the caller read the record
    full: list[int]  # answer(resume=True): settle + resume to turn.completed
    full_commands: str
    new_connections: int  # connections opened during the counted calls (0: nothing hidden in a handshake)


async def count_round_trips(bench: Bench, counter: RoundTrips, samples: int) -> RoundTripFigures:
    # warm up: scripts loaded on the server, the pool's connection open
    _ref, request_id = await bench.park()
    await bench.approve(request_id)
    opened = counter.connections
    settle, with_record, full = [], [], []
    settle_logs: Counter[str] = Counter()
    full_logs: Counter[str] = Counter()
    for _ in range(samples):
        ref, request_id = await bench.park()
        sent, log = await _counted(counter, bench.approve(request_id, resume=False))
        settle.append(sent)
        settle_logs[log] += 1
        await bench.runtime.drive(ref.session_id)  # the caller resumes after acknowledging the click

        ref, request_id = await bench.park()
        record = await bench.store.get_request(request_id)  # what the Slack click handler reads first
        sent, _ = await _counted(
            counter, bench.runtime.answer(bench.approval(request_id), resume=False, record=record)
        )
        with_record.append(sent)
        await bench.runtime.drive(ref.session_id)

        ref, request_id = await bench.park()
        sent, log = await _counted(counter, bench.approve(request_id, resume=True))
        if ref.session_id not in bench.channel.completed_at:
            raise RuntimeError("the resumed turn did not complete")
        bench.channel.completed_at.pop(ref.session_id)
        full.append(sent)
        full_logs[log] += 1
    return RoundTripFigures(
        settle=settle,
        settle_commands=settle_logs.most_common(1)[0][0],
        settle_with_record=with_record,
        full=full,
        full_commands=full_logs.most_common(1)[0][0],
        new_connections=counter.connections - opened,
    )


async def _counted(counter: RoundTrips, work: Awaitable[AnswerResult]) -> tuple[int, str]:
    counter.log.clear()
    counter.logging = True
    before = counter.sent
    try:
        result = await work
    finally:
        counter.logging = False
    if result.state != "settled":
        raise RuntimeError(f"the bench approval was not settled: {result}")
    return counter.sent - before, " → ".join(counter.log)


# --- 2. bytes per parked turn ----------------------------------------------------------------------


@dataclass
class KeyFigure:
    suffix: str
    kind: str
    memory: int  # MEMORY USAGE … SAMPLES 0
    payload: int  # bytes of the data it holds (values, or fields and values)
    detail: str = ""


@dataclass
class BytesFigures:
    keys: list[KeyFigure]
    state_json: int  # GET <session>:state
    record_json: int  # RequestRecord.model_dump_json(exclude_none=True)

    @property
    def memory(self) -> int:
        return sum(k.memory for k in self.keys)

    @property
    def serialized(self) -> int:
        return self.state_json + self.record_json

    @property
    def budget(self) -> float:
        return 1.5 * self.serialized + 1024


async def bytes_per_parked_turn(bench: Bench) -> BytesFigures:
    ref, request_id = await bench.park()
    redis, store = bench.redis, bench.store
    keys = set(await store.session_keys(ref.session_id)) | {store.request_key(request_id).encode()}
    prefix = store.key(ref.session_id, "")
    figures = []
    for key in sorted(keys):
        kind = (await redis.type(key)).decode()
        memory = int(await redis.memory_usage(key, samples=0) or 0)
        payload, detail = await _payload(redis, key, kind)
        figures.append(KeyFigure(key.decode()[len(prefix) :], kind, memory, payload, detail))
    state = await redis.get(store.key(ref.session_id, "state"))
    record = await store.get_request(request_id)
    return BytesFigures(figures, len(state), len(record.model_dump_json(exclude_none=True)))


async def _payload(redis: Redis, key: bytes, kind: str) -> tuple[int, str]:
    if kind == "string":
        value = await redis.get(key)
        ttl = await redis.ttl(key)
        return len(value), (f"TTL {ttl} s" if ttl > 0 else "")
    if kind == "hash":
        fields = await redis.hgetall(key)
        encoding = (await redis.object("encoding", key)).decode()
        return sum(len(f) + len(v) for f, v in fields.items()), f"{len(fields)} fields, {encoding}"
    if kind == "stream":
        entries = await redis.xrange(key)
        size = sum(len(f) + len(v) for _id, fields in entries for f, v in fields.items())
        return size, f"{len(entries)} entries"
    if kind == "set":
        members = await redis.smembers(key)
        return sum(len(m) for m in members), f"{len(members)} members"
    if kind == "list":
        items = await redis.lrange(key, 0, -1)
        return sum(len(i) for i in items), f"{len(items)} items"
    return 0, ""


# --- 3. settle → resume latency --------------------------------------------------------------------


@dataclass
class Population:
    """One database holding ``size`` parked turns at the start of each round."""

    bench: Bench
    counter: RoundTrips
    size: int
    role: str = ""  # e.g. "control"

    @property
    def label(self) -> str:
        return f"{self.size:,} parked" + (f" ({self.role})" if self.role else "")

    fill_seconds: float = 0.0
    memory_per_clone: float = 0.0  # growth of data_memory() per parked turn written (bytes)
    pending_index_per_turn: float = 0.0  # MEMORY USAGE of the pending zset / its entries
    clones_checked: int = 0
    settle_seconds: float = 0.0  # waited after filling for the server's background AOF rewrite to end
    resume: list[float] = field(default_factory=list)  # seconds
    resume_round_trips: list[int] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)  # seconds for GET + SET on the same db


async def fill(pop: Population, per_round: int, check: int = 3) -> None:
    """Park one real turn, clone it up to ``size - per_round`` parked turns, resume a few clones."""
    bench = pop.bench
    redis = bench.redis
    before = await data_memory(redis, bench.db)
    ref, request_id = await bench.park()
    template = await read_template(bench.store, ref.session_id, ref.channel["thread_ts"], request_id)
    cloner = Cloner(redis, template)
    clones = pop.size - per_round - 1 + check  # the template is one of them; the checked ones go away
    pop.fill_seconds = await cloner.write(1, clones)
    after = await data_memory(redis, bench.db)
    pop.memory_per_clone = (after - before) / (clones + 1)
    pending = cloner.pending_key
    pop.pending_index_per_turn = int(await redis.memory_usage(pending, samples=0)) / await redis.zcard(
        pending
    )
    pop.settle_seconds = await quiet_server(redis)
    for n in range(1, check + 1):  # the copies are real parked turns: resume some to the end
        result = await bench.approve(cloner.request_id(n))
        if result.state != "settled" or bench.channel.completed_at.pop(cloner.session_id(n), None) is None:
            raise RuntimeError(f"cloned turn {n} did not resume to turn.completed: {result}")
        pop.clones_checked += 1


async def data_memory(redis: Redis, db: int) -> int:
    """Bytes the server holds for data: MEMORY STATS ``dataset.bytes`` (all databases; client
    buffers, script caches and the AOF buffer excluded) plus this database's key tables."""
    stats = await redis.memory_stats()
    tables = stats.get(f"db.{db}") or {}
    return int(stats["dataset.bytes"]) + sum(int(v) for v in tables.values())


async def quiet_server(redis: Redis, limit_s: float = 120.0) -> float:
    """Wait until no AOF rewrite or snapshot runs (a fill can trigger one); returns the seconds waited."""
    started = time.perf_counter()
    while time.perf_counter() - started < limit_s:
        info = await redis.info("persistence")
        if not info.get("aof_rewrite_in_progress") and not info.get("rdb_bgsave_in_progress"):
            break
        await asyncio.sleep(0.2)
    return time.perf_counter() - started


async def measure_latency(pops: list[Population], rounds: int, per_round: int) -> None:
    """Each round: park ``per_round`` real turns in each database, then resume them in turn (one per
    database, round-robin), so every population sees the same machine noise."""
    for round_number in range(rounds):
        batches = [[await pop.bench.park() for _ in range(per_round)] for pop in pops]
        shift = round_number % len(pops)  # who goes first changes every round
        order = pops[shift:] + pops[:shift]
        for index in range(per_round):
            for pop in order:
                ref, request_id = batches[pops.index(pop)][index]
                pop.baseline.append(await _get_set(pop.bench.redis))
                before = pop.counter.sent
                started = time.perf_counter()
                result = await pop.bench.approve(request_id)
                done = pop.bench.channel.completed_at.pop(ref.session_id, None)
                if result.state != "settled" or done is None:
                    raise RuntimeError(f"resume in {pop.bench.db_label} did not complete: {result}")
                pop.resume.append(done - started)
                pop.resume_round_trips.append(pop.counter.sent - before)
        for pop in pops:
            pop.bench.model.requests.clear()  # the scripted model keeps every request it saw
        await asyncio.sleep(0)


async def _get_set(redis: Redis) -> float:
    started = time.perf_counter()
    await redis.get("bench:baseline")
    await redis.set("bench:baseline", "x" * 64)
    return time.perf_counter() - started


def percentile(samples: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]
