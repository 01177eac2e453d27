"""``python -m benchmarks [--quick] [--write-doc]``: print the engine's figures (see docs/PERFORMANCE.md)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from collections.abc import Awaitable
from datetime import UTC, datetime

from redis.asyncio import Redis

from .measure import BytesFigures, Population, bytes_per_parked_turn, count_round_trips, fill, measure_latency
from .report import DOC, SERVER_DEFAULTS, RunInfo, render, write_doc
from .scenario import make_bench
from .server import open_server, server_version


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run (< 30 s): 10,000 instead of 100,000 parked turns, fewer samples",
    )
    parser.add_argument("--write-doc", action="store_true", help=f"rewrite the figures table in {DOC.name}")
    parser.add_argument("--large", type=int, help="parked turns in the large population (default 100,000)")
    parser.add_argument("--rounds", type=int, help="latency rounds (default 50; --quick 3)")
    parser.add_argument(
        "--per-round",
        type=int,
        default=20,
        help="real turns parked and resumed per population and round (default 20)",
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="CONFIG SET on the server before measuring, to try a setting "
        "(e.g. stream-node-max-bytes=2048); the figures say so",
    )
    args = parser.parse_args(argv)
    args.large = args.large or (10_000 if args.quick else 100_000)
    args.rounds = args.rounds or (3 if args.quick else 50)
    args.small = 100
    if not 0 < args.per_round < args.small:
        parser.error("--per-round must be between 1 and 99")
    if args.large < args.small:
        parser.error("--large must be at least 100")
    for setting in args.config:
        if "=" not in setting:
            parser.error(f"--config wants NAME=VALUE, got {setting!r}")
    return args


async def run(args: argparse.Namespace, argv: list[str]) -> str:
    record = RunInfo(
        argv=argv, started=datetime.now(UTC), server="", version="", load_at_start=os.getloadavg()
    )
    began = time.perf_counter()
    server = await open_server()
    try:
        clients = [server.client(db) for db in server.dbs]
        first_redis, first_counter = clients[0]
        record.server, record.version = server.describe(), await server_version(first_redis)
        for setting in args.config:
            name, _, value = setting.partition("=")
            await first_redis.config_set(name.strip(), value.strip())
            record.config.append(f"{name.strip()} {value.strip()}")
        benches = [make_bench(redis, db) for (redis, _), db in zip(clients, server.dbs, strict=True)]
        _say("round trips per answer …")
        trips = await count_round_trips(benches[0], first_counter, samples=5 if args.quick else 20)
        await first_redis.flushdb()  # the measured populations start empty
        _say("bytes per parked turn …")
        sizes = await bytes_per_parked_turn(benches[0])
        untuned = (
            await _on_server_defaults(first_redis, bytes_per_parked_turn(benches[0]))
            if server.embedded
            else None
        )
        await first_redis.flushdb()
        # the second population is a control: the same size as the first, so it differs only by noise
        shapes = [(args.small, ""), (args.small, "control"), (args.large, "")]
        pops = [
            Population(bench, counter, size, role)
            for bench, (_, counter), (size, role) in zip(benches, clients, shapes, strict=True)
        ]
        for pop in pops:
            _say(f"filling {pop.bench.db_label}: {pop.label} …")
            await fill(pop, args.per_round)
        _say(f"latency: {args.rounds} rounds × {args.per_round} resumes per population …")
        await measure_latency(pops, args.rounds, args.per_round)
        record.seconds = time.perf_counter() - began
        return render(record, trips, sizes, pops, untuned)
    finally:
        if server.embedded is None:  # REDIS_URL: the databases were empty when we started
            for number in server.dbs:
                cleaner, _ = server.client(number)
                await cleaner.flushdb()
        await server.close()


async def _on_server_defaults(redis: Redis, work: Awaitable[BytesFigures]) -> BytesFigures:
    """Run ``work`` with the memory settings at Redis/Valkey defaults (as on an untuned external
    server), then put back what the embedded server was started with."""
    saved = {name: (await redis.config_get(name))[name] for name in SERVER_DEFAULTS}
    try:
        for name, value in SERVER_DEFAULTS.items():
            await redis.config_set(name, value)
        return await work
    finally:
        for name, value in saved.items():
            await redis.config_set(name, value)


def _say(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    figures = asyncio.run(run(args, argv))
    print(figures)
    if args.write_doc:
        write_doc(figures)
        _say(f"figures written to {DOC}")


if __name__ == "__main__":
    main()
