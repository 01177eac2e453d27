"""``python -m benchmarks.http [--quick] [--write-doc]``: the app over real HTTP beside bare Bolt and raw aiohttp.

Four contenders (the project, bare Bolt, raw aiohttp and the durable floor), each its own process, each
behind its own LocalSlack (signed deliveries, real Web API, rate limits off), all calling one model
server on loopback; the bench process holds the LocalSlacks, the model and the load. Contenders take turns in small batches (the first one rotates),
so machine noise hits all alike. Nothing here asserts: it prints (and with ``--write-doc`` records in
docs/PERFORMANCE.md) what it measured, goals marked met or not.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.asyncio import Redis
from slack_sdk.web.async_client import AsyncWebClient

from localslack.delivery import SLACK_TIMEOUT_S
from localslack.seed import ALICE, BOT_TOKEN
from localslack.server import LocalSlack

from ..server import BenchServer, open_server, server_version
from .bare import RAW_ACTION, approve_card
from .drive import CHANNELS, Samples, Side, Thread, burst_batch, light_batch, throughput_batch
from .langgraph_app import available as langgraph_available
from .model import BenchModel
from .procs import Child
from .report import DOC, Condition, Restarts, Run, render, write_doc
from .restart import (
    ProjectRestarts,
    bolt_restarts,
    floor_launch,
    langgraph_launch,
    project_launch,
    raw_restarts,
)
from .trace import trace_cycle

SECRET = "bench-http-signing-secret"
# the project without pacing of its own (the setting for apps with raised limits): LocalSlack runs without
# rate limits, so bare Bolt calls Slack as fast as it likes; paced, the project would be measured waiting
UNPACED = {"SLACK_PACING": "off"}


def _delays(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.http", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (< 60 s): few samples of every figure")
    parser.add_argument("--write-doc", action="store_true", help=f"record the figures in {DOC.name}")
    parser.add_argument("--slack-delay-ms", default="0,100",
                        help="Slack's Web API answers after this long; a list = one condition each (default 0,100)")
    parser.add_argument("--model-delay-ms", default="0,100",
                        help="the model answers after this long; paired with --slack-delay-ms (default 0,100)")
    parser.add_argument("--clicks", type=int, help="clicks at 5/s per contender and condition (default 100; quick 10)")
    parser.add_argument("--burst-clicks", type=int, help="clicks at 50/s per contender (default 100; quick 20)")
    parser.add_argument("--cycles", type=int, help="cycles at 32 concurrent per contender and condition "
                                                   "(default 192; quick 32)")
    parser.add_argument("--concurrency", type=int, default=32, help="threads at once for the cycle rate (default 32)")
    parser.add_argument("--restarts", type=int, help="restarts per contender and population (default 5; quick 1)")
    parser.add_argument("--parked", default="0,1000", help="other parked turns at the restarts (default 0,1000)")
    parser.add_argument("--no-peer", action="store_true",
                        help="leave out the LangGraph peer (it runs when the bench extra is installed)")
    parser.add_argument("--batch", type=int, default=10, help="clicks at 5/s in a row per contender (default 10)")
    args = parser.parse_args(argv)
    quick = args.quick
    args.clicks = args.clicks or (10 if quick else 100)
    args.burst_clicks = args.burst_clicks or (20 if quick else 100)
    args.cycles = args.cycles or (32 if quick else 192)
    args.restarts = args.restarts or (1 if quick else 5)
    slack, model = _delays(args.slack_delay_ms), _delays(args.model_delay_ms)
    if len(slack) != len(model) and 1 not in (len(slack), len(model)):
        parser.error("--slack-delay-ms and --model-delay-ms need as many values (or one of them a single value)")
    count = max(len(slack), len(model))
    args.conditions = [Condition(slack[min(i, len(slack) - 1)], model[min(i, len(model) - 1)]) for i in range(count)]
    args.parked = [int(x) for x in args.parked.split(",") if x.strip()]
    if len(args.parked) > 2:
        parser.error("--parked takes at most two populations (the bench has two spare databases)")
    return args


_BEGAN = time.monotonic()


def _say(text: str) -> None:
    print(f"bench http [{time.monotonic() - _BEGAN:5.1f} s]: {text}", file=sys.stderr, flush=True)


def db_url(url: str, db: int) -> str:
    """``url`` pointing at database ``db`` (``?db=`` for unix sockets, the path for redis://)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        query = [(k, v) for k, v in parse_qsl(parts.query) if k != "db"] + [("db", str(db))]
        # spelled out: urlunsplit drops the "//" of an empty host, and redis-py ≥ 8.2 refuses "unix:/…"
        return f"unix://{parts.path}?{urlencode(query)}"
    return urlunsplit(parts._replace(path=f"/{db}"))


def rotated(sides: list[Side], turn: int) -> Iterator[Side]:
    for index in range(len(sides)):
        yield sides[(turn + index) % len(sides)]


# ---- setting up ------------------------------------------------------------------------------------------


async def open_slack(delivery_timeout_s: float = SLACK_TIMEOUT_S) -> LocalSlack:
    slack = LocalSlack(bot_url=None, signing_secret=SECRET, rate_limits=False, delivery_timeout_s=delivery_timeout_s)
    await slack.start()
    for channel in CHANNELS:
        slack.add_channel(channel, channel.lower(), members=[ALICE])
    return slack


async def start_sides(model: BenchModel, redis_url: str, tmp: Path, peer: bool = True) -> list[Side]:
    slacks = [await open_slack() for _ in range(5 if peer else 4)]
    project = await Child.start("benchmarks.http.project", [
        "--secret", SECRET, "--token", BOT_TOKEN, "--slack-url", slacks[0].api_url, "--model-url", model.base_url,
        "--redis-url", redis_url, "--data-dir", str(tmp / "project")], tmp / "project.log",
        env=UNPACED)
    bolt = await Child.start("benchmarks.http.bare", [
        "bolt", "--secret", SECRET, "--token", BOT_TOKEN, "--slack-url", slacks[1].api_url,
        "--model-url", model.base_url], tmp / "bolt.log")
    raw = await Child.start("benchmarks.http.bare", ["raw", "--secret", SECRET], tmp / "raw.log")
    floor = await Child.start("benchmarks.http.durable", [
        "--secret", SECRET, "--token", BOT_TOKEN, "--slack-url", slacks[3].api_url, "--model-url", model.base_url,
        "--redis-url", redis_url], tmp / "durable.log")
    sides = [Side("project", "p", slacks[0], project, Redis.from_url(redis_url), replies=True),
             Side("bare Bolt", "b", slacks[1], bolt), Side("raw aiohttp", "r", slacks[2], raw),
             Side("durable floor", "d", slacks[3], floor, Redis.from_url(redis_url), replies=True)]
    if peer:
        if langgraph_available():
            graph = await Child.start("benchmarks.http.langgraph_app", [
                "--secret", SECRET, "--token", BOT_TOKEN, "--slack-url", slacks[4].api_url,
                "--model-url", model.base_url, "--data-dir", str(tmp / "langgraph")], tmp / "langgraph.log")
            sides.append(Side("LangGraph", "l", slacks[4], graph, replies=True))
        else:
            _say("LangGraph peer skipped: the bench extra is not installed (pip install -e '.[dev,bench]'; make bench does)")
    for side in sides:
        side.slack.set_bot_url(side.child.url if side.child else None)
    sides[2].fixed = await raw_card(sides[2].slack)
    return sides


async def raw_card(slack: LocalSlack) -> Thread:
    """The card raw aiohttp's clicks go to: posted once by the bench, as the bot (raw aiohttp posts nothing)."""
    posted = await AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url).chat_postMessage(
        channel=CHANNELS[0], text="Approve?", blocks=approve_card(RAW_ACTION))
    return Thread(CHANNELS[0], posted["ts"], "", card_ts=posted["ts"], action_id=RAW_ACTION)


async def stop_sides(sides: list[Side]) -> None:
    for side in sides:
        if side.child is not None:
            await side.child.stop()
            side.child = None
        if side.redis is not None:
            await side.redis.aclose()
            side.redis = None


# ---- the load phases -------------------------------------------------------------------------------------


async def interleaved(sides: list[Side], rounds: int, batch: Callable[[Side, Samples], Awaitable[None]],
                      label: str) -> None:
    for turn in range(rounds):
        for side in rotated(sides, turn):
            await batch(side, side.samples.setdefault(label, Samples()))


async def measure_condition(sides: list[Side], model: BenchModel, cond: Condition, args: argparse.Namespace,
                            first: bool) -> None:
    for side in sides:
        side.slack.api.answer_delay_s = cond.slack_ms / 1000
    model.delay_s = cond.model_ms / 1000
    cyclers = [s for s in sides if s.has_cycle]
    _say(f"{cond.label}: warming up …")
    await interleaved(cyclers, 1, lambda s, x: throughput_batch(s, x, args.concurrency, 1), "warm-up")
    await interleaved(sides, 1, lambda s, x: light_batch(s, x, model, 3, 20.0), "warm-up")
    _say(f"{cond.label}: {args.clicks} clicks at 5/s per contender …")
    size = min(args.batch, args.clicks)
    await interleaved(sides, math.ceil(args.clicks / size), lambda s, x: light_batch(s, x, model, size, 5.0),
                      cond.label)
    if first:
        _say(f"{cond.label}: {args.burst_clicks} clicks at 50/s per contender …")
        size = min(50, args.burst_clicks)
        await interleaved(sides, math.ceil(args.burst_clicks / size), lambda s, x: burst_batch(s, x, size, 50.0),
                          cond.label)
    per_batch = args.concurrency * max(1, min(2, args.cycles // args.concurrency))
    _say(f"{cond.label}: {args.cycles} cycles at {args.concurrency} concurrent per contender …")
    await interleaved(cyclers, math.ceil(args.cycles / per_batch),
                      lambda s, x: throughput_batch(s, x, args.concurrency, per_batch // args.concurrency),
                      cond.label)


# ---- restarts ----------------------------------------------------------------------------------------------


async def measure_restarts(sides: list[Side], model: BenchModel, server: BenchServer, args: argparse.Namespace,
                           tmp: Path) -> Restarts:
    restarts = Restarts()
    for side in sides:
        side.slack.api.answer_delay_s = 0.0
    model.delay_s = 0.0
    by_key = {side.key: side for side in sides}
    for parked, db in zip(args.parked, server.dbs[1:], strict=False):
        url = db_url(server.url, db)
        redis = Redis.from_url(url)
        data = tmp / f"restart-{parked}"
        data.mkdir()
        launches = ProjectRestarts(project_launch(by_key["p"], SECRET, model.base_url, url, data), redis)
        floor = ProjectRestarts(floor_launch(by_key["d"], SECRET, model.base_url, url, data), redis)
        _say(f"restarts with {parked:,} other turns parked: preparing …")
        restarts.copy_s[parked] = await launches.prepare(parked)
        await floor.prepare(0)  # the floor never looks at other parked turns: no copies of its own
        contenders = {"p": launches, "b": bolt_restarts(by_key["b"], SECRET, model.base_url, data),
                      "r": raw_restarts(by_key["r"], SECRET, model.base_url, data), "d": floor}
        if "l" in by_key:  # like the floor, the peer never looks at other parked turns: its own one is parked
            contenders["l"] = ProjectRestarts(langgraph_launch(by_key["l"], SECRET, model.base_url, data), redis)
            await contenders["l"].prepare(0)
        _say(f"restarts with {parked:,} other turns parked: {args.restarts} per contender …")
        for turn in range(args.restarts):
            for side in rotated([s for s in sides if s.key in contenders], turn):
                took = await contenders[side.key].once()
                restarts.seconds.setdefault((side.key, parked), []).append(took)
        restarts.pending_seen[parked] = await launches.parked()
        await redis.aclose()
    return restarts


def langgraph_rows(db: Path, sides: list[Side]) -> float:
    """Rows the LangGraph peer's checkpointer wrote per thread it ran (every thread ran a whole cycle)."""
    peer = next((side for side in sides if side.key == "l"), None)
    if peer is None or not peer.started or not db.exists():
        return math.nan
    with sqlite3.connect(db) as conn:
        rows = sum(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in ("checkpoints", "writes"))
    return rows / peer.started


# ---- the run -----------------------------------------------------------------------------------------------


async def run(args: argparse.Namespace, argv: list[str]) -> str:
    started, load, began = datetime.now(UTC), os.getloadavg(), time.perf_counter()
    server = await open_server()
    tmp = Path(tempfile.mkdtemp(prefix="hitl-bench-http-"))
    model = BenchModel()
    await model.start()
    sides: list[Side] = []
    try:
        redis_url = db_url(server.url, server.dbs[0])
        probe = Redis.from_url(redis_url)
        redis_name = f"{await server_version(probe)} ({server.describe()})"
        await probe.aclose()
        sides = await start_sides(model, redis_url, tmp, peer=not args.no_peer)
        for index, cond in enumerate(args.conditions):
            await measure_condition(sides, model, cond, args, first=index == 0)
        for side in sides:
            side.slack.api.answer_delay_s = 0.0
        model.delay_s = 0.0
        sqlite_rows = langgraph_rows(tmp / "langgraph" / "langgraph.sqlite", sides)
        _say("one cycle under MONITOR …")
        trace = await trace_cycle(sides[0], redis_url, model)
        await stop_sides(sides)
        restarts = await measure_restarts(sides, model, server, args, tmp) if args.parked else Restarts()
    finally:
        await stop_sides(sides)
        for side in sides:
            await side.slack.stop()
        await model.stop()
        if server.embedded is None:  # REDIS_URL: the databases were empty when we started
            for db in server.dbs:
                cleaner = Redis.from_url(db_url(server.url, db))
                await cleaner.flushdb()
                await cleaner.aclose()
        await server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    record = Run(command=" ".join([".venv/bin/python -m benchmarks.http", *argv]), started=started, load_at_start=load,
                 redis=redis_name, conditions=args.conditions, sides={s.key: s for s in sides}, restarts=restarts,
                 args={"clicks": args.clicks, "burst clicks": args.burst_clicks, "cycles": args.cycles,
                       "restarts": args.restarts}, trace=trace, seconds=time.perf_counter() - began,
                 sqlite_rows=sqlite_rows)
    return render(record)


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
