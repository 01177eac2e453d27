"""``python -m benchmarks.http.ladder_bench [--quick]``: the guarantees ladder beside the floor and the project.

The project's goal is an approve cycle that costs ≤ 1.5 × the durable floor's CPU; the floor leaves out most of
what the product promises. The ladder (``ladder.py``) adds the product's guarantees to the floor one
rung at a time, written as plainly as possible. This runs the durable floor, each rung and the project
in ONE run, each its own process behind its own LocalSlack, all on one model server and one Redis,
taking turns in batches (the first rotates) of whole cycles at ``--concurrency`` threads at once, and
prints per contender: CPU per cycle, cycles/s, Redis commands per cycle (INFO commandstats; the
contenders never run at once, so the server-wide count is the running one's), Redis server CPU and
Slack calls per cycle; the rungs ÷ the floor, and the project ÷ the top rung.

Every thread of every contender is checked afterwards in its LocalSlack's call log: one card, one
card update, one reply (and, from rung 1 on, one session status): a contender that posts twice or
drops a post makes the run fail (its figures would mean nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import shutil
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from redis.asyncio import Redis

from localslack.models import ApiCall
from localslack.seed import BOT_TOKEN

from ..server import open_server, server_version
from .__main__ import SECRET, UNPACED, db_url, interleaved, open_slack, stop_sides
from .drive import BenchError, Side, throughput_batch
from .ladder import RUNGS, leftovers
from .model import BenchModel
from .procs import Child
from .report import _markdown, _value, percentile_ms

_BEGAN = time.monotonic()


def _say(text: str) -> None:
    print(f"bench ladder [{time.monotonic() - _BEGAN:5.1f} s]: {text}", file=sys.stderr, flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.http.ladder_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 32 cycles per contender")
    parser.add_argument("--cycles", type=int, help="cycles per contender (default 256; quick 32)")
    parser.add_argument("--concurrency", type=int, default=32, help="threads at once (default 32)")
    parser.add_argument("--rungs", default=",".join(map(str, RUNGS)), help="the rungs to run (default all)")
    parser.add_argument("--no-project", action="store_true", help="leave the project out")
    args = parser.parse_args(argv)
    args.cycles = args.cycles or (32 if args.quick else 256)
    args.rungs = [int(x) for x in args.rungs.split(",") if x.strip()]
    if unknown := set(args.rungs) - set(RUNGS):
        parser.error(f"no such rung: {sorted(unknown)}")
    return args


async def start_sides(model: BenchModel, redis_url: str, tmp: Path, rungs: list[int], project: bool) -> list[Side]:
    common = ["--secret", SECRET, "--token", BOT_TOKEN, "--model-url", model.base_url, "--redis-url", redis_url]

    async def add(name: str, key: str, module: str, args: list[str], env: dict[str, str] | None = None) -> Side:
        slack = await open_slack()
        child = await Child.start(module, [*args, "--slack-url", slack.api_url], tmp / f"{key}.log", env=env)
        return Side(name, key, slack, child, Redis.from_url(redis_url), replies=True)

    starts = [add("durable floor", "d", "benchmarks.http.durable", common)]
    starts += [add(f"rung {rung}", f"L{rung}", "benchmarks.http.ladder", ["--rung", str(rung), *common])
               for rung in rungs]
    if project:
        starts.append(add("project", "p", "benchmarks.http.project", [*common, "--data-dir", str(tmp / "project")],
                          UNPACED))
    started = await asyncio.gather(*starts, return_exceptions=True)  # at once: their imports overlap
    sides = [s for s in started if isinstance(s, Side)]
    if failed := next((s for s in started if isinstance(s, BaseException)), None):
        await stop_sides(sides)
        for side in sides:
            await side.slack.stop()
        raise failed
    for side in sides:
        side.slack.set_bot_url(side.child.url if side.child else None)
    return sides


def once_each(calls: list[ApiCall], threads: int, statuses_too: bool = True) -> list[str]:
    """What is wrong with a contender's ``threads`` threads, by its LocalSlack's call log (``calls``): each has
    one card, one update of that card and one reply; and (``statuses_too``) one session status."""
    posts: Counter[tuple[str, str]] = Counter()
    updates: Counter[tuple[str, str]] = Counter()
    statuses: Counter[tuple[str, str]] = Counter()
    cards: dict[tuple[str, str], str] = {}
    for call in calls:
        p = call.params
        if not call.ok:
            return [f"{call.method} failed: {call.response.get('error')}"]
        if call.method == "chat.postMessage":
            posts[(p["channel"], p["thread_ts"])] += 1
            if '"Approve"' in str(p.get("blocks")) or "'Approve'" in str(p.get("blocks")):  # the card (list or JSON)
                cards[(p["channel"], p["thread_ts"])] = call.response["ts"]
        elif call.method == "chat.update":
            updates[(p["channel"], p["ts"])] += 1
        elif call.method == "agents.sessions.setStatus":
            statuses[(p["channel_id"], p["thread_ts"])] += 1
    problems = [f"{thread}: {n} posts, not 2 (card, reply)" for thread, n in posts.items() if n != 2]
    problems += [f"{thread}: card updated {updates[(thread[0], ts)]} times" for thread, ts in cards.items()
                 if updates[(thread[0], ts)] != 1]
    if statuses_too:
        problems += [f"{thread}: {statuses[thread]} session statuses, not 1" for thread in posts
                     if statuses[thread] != 1]
    if len(posts) != threads:
        problems.append(f"{threads} threads begun, {len(posts)} answered")
    return problems[:5]


HANDSHAKE = {"hello", "client|setinfo", "client|setname", "select"}  # per connection opened, not per cycle


def _commands(side: Side) -> Counter[str]:
    return Counter({c: n for c, n in side.samples["cycles"].counts.redis.items() if c not in HANDSHAKE})


def thread_calls(calls: list[ApiCall], problem: str) -> list[str]:
    """The methods called about the thread a problem of :func:`once_each` names (its first words)."""
    channel, thread_ts = problem.split("'")[1], problem.split("'")[3]
    card = {c.response.get("ts") for c in calls if c.method == "chat.postMessage"
            and c.params.get("thread_ts") == thread_ts}
    return [c.method for c in calls if (c.params.get("channel") or c.params.get("channel_id")) == channel
            and (c.params.get("thread_ts") == thread_ts or c.params.get("ts") in card)]


def _per(side: Side, value: float) -> float:
    samples = side.samples["cycles"]
    return value / samples.cycles if samples.cycles else math.nan


def _rate(side: Side) -> float:
    samples = side.samples["cycles"]
    return samples.cycles / samples.cycle_wall_s if samples.cycle_wall_s else math.nan


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f} ×" if b and not (math.isnan(a) or math.isnan(b)) else "—"


def render(sides: list[Side], args: argparse.Namespace, started: datetime, load: tuple[float, ...], redis_name: str,
           seconds: float, command: str) -> str:
    cpu = {s.key: 1000 * _per(s, s.samples["cycles"].counts.cpu_s) for s in sides}
    rate = {s.key: _rate(s) for s in sides}
    cmds = {s.key: _per(s, _commands(s).total()) for s in sides}
    scripts = {s.key: _per(s, sum(n for c, n in _commands(s).items() if c in ("evalsha", "eval"))) for s in sides}
    server = {s.key: 1000 * _per(s, s.samples["cycles"].counts.redis_cpu_s) for s in sides}
    slack = {s.key: _per(s, s.samples["cycles"].counts.slack.total()) for s in sides}
    floor = "d"
    rows = [
        ["CPU per cycle (the contender's process)", *(_value(cpu[s.key], "ms") for s in sides)],
        [f"cycles/s, {args.concurrency} threads at once", *(_value(rate[s.key], "/s") for s in sides)],
        ["Redis commands per cycle (INFO commandstats)", *(_value(cmds[s.key], "") for s in sides)],
        ["… of them script calls (EVALSHA)", *(_value(scripts[s.key], "") for s in sides)],
        ["Redis server CPU per cycle", *(_value(server[s.key], "ms") for s in sides)],
        ["Slack calls per cycle", *(_value(slack[s.key], "") for s in sides)],
        *([f"the tool's result → the reply's Slack call, {name}, {args.concurrency} at once", *(
            _value(percentile_ms(getattr(s.samples["cycles"], part), q), "ms") for s in sides)]
          for part, what in (("result_to_reply", ""), ("result_to_model", " … → the model call with it"),
                             ("model_to_reply", " … that model call → the reply"))
          for q, name in ((0.5, f"p50{what}"), (0.99, f"p99{what}"))),
        ["CPU ÷ the floor's", *(_ratio(cpu[s.key], cpu[floor]) for s in sides)],
        ["cycles/s ÷ the floor's", *(_ratio(rate[s.key], rate[floor]) for s in sides)],
        ["Redis commands ÷ the floor's", *(_ratio(cmds[s.key], cmds[floor]) for s in sides)],
    ]
    rungs = [s for s in sides if s.key.startswith("L")]
    project = next((s for s in sides if s.key == "p"), None)
    lines = [
        f"Recorded {started:%Y-%m-%d %H:%M} UTC with `{command}` (took {seconds:.0f} s; {args.cycles} cycles per "
        f"contender at {args.concurrency} at once, in batches taking turns).",
        "",
        f"Machine: load average at start {' '.join(f'{x:.2f}' for x in load)}; {redis_name}.",
        "",
        *_markdown(["per approve cycle", *(s.name for s in sides)], rows, ["---", *("---:" for _ in sides)]),
    ]
    if rungs and project is not None:
        top = rungs[-1]
        lines += ["", f"The project ÷ the top rung ({top.name}): CPU {_ratio(cpu['p'], cpu[top.key])}, cycles/s "
                  f"{_ratio(rate['p'], rate[top.key])}, Redis commands {_ratio(cmds['p'], cmds[top.key])}, Redis server "
                  f"CPU {_ratio(server['p'], server[top.key])}. The top rung ÷ the floor: CPU "
                  f"{_ratio(cpu[top.key], cpu[floor])}, cycles/s {_ratio(rate[top.key], rate[floor])}."]
    lines += [""]
    for side in sides:
        counts, n = side.samples["cycles"].counts, side.samples["cycles"].cycles
        redis = ", ".join(f"{c.upper()} {k / n:.1f}" for c, k in _commands(side).most_common()) if n else "none"
        calls = ", ".join(f"{c} {k / n:.1f}" for c, k in counts.slack.most_common()) if n else "none"
        lines.append(f"- {side.name}: Redis {redis}; Slack {calls}.")
    return "\n".join(lines)


async def run(args: argparse.Namespace, argv: list[str]) -> str:
    started, load, began = datetime.now(UTC), tuple(__import__("os").getloadavg()), time.perf_counter()
    server = await open_server()
    tmp = Path(tempfile.mkdtemp(prefix="hitl-bench-ladder-"))
    model = BenchModel()
    await model.start()
    sides: list[Side] = []
    notes: list[str] = []
    try:
        redis_url = db_url(server.url, server.dbs[0])
        probe = Redis.from_url(redis_url)
        redis_name = f"{await server_version(probe)} ({server.describe()})"
        await probe.aclose()
        _say("starting the contenders …")
        sides = await start_sides(model, redis_url, tmp, args.rungs, not args.no_project)
        _say("warming up …")
        await interleaved(sides, 1, lambda s, x: throughput_batch(s, x, args.concurrency, 1), "warm-up")
        per_batch = args.concurrency * max(1, min(2, args.cycles // args.concurrency))
        _say(f"{args.cycles} cycles at {args.concurrency} concurrent per contender …")
        await interleaved(sides, math.ceil(args.cycles / per_batch),
                          lambda s, x: throughput_batch(s, x, args.concurrency, per_batch // args.concurrency),
                          "cycles")
        for side in sides:
            problems = once_each(side.slack.calls, side.started, statuses_too=side.key != "d")
            if side.key == "p":  # the project's own suite tests its deliveries: here its other calls are a note
                if problems:  # (a step slower than its status delay, 1.5 s, adds the status calls it shows)
                    notes.append(f"- project, a thread that did not have exactly card, update, reply, status: "
                                 f"{problems[0]}; its calls: {', '.join(thread_calls(side.slack.calls, problems[0]))}.")
                continue
            if side.key.startswith("L") and side.redis is not None:
                problems += await leftovers(side.redis, int(side.key[1:]), side.started)
            if problems:
                raise BenchError(f"{side.name} did not do the cycle once per thread: {'; '.join(problems)}")
    except BaseException:
        for log in sorted(tmp.glob("*.log")):  # what the contenders said, before their directory goes
            if text := log.read_text(errors="replace").strip():
                _say(f"{log.name}:\n{text[-3000:]}")
        raise
    finally:
        await stop_sides(sides)
        for side in sides:
            await side.slack.stop()
        await model.stop()
        if server.embedded is None:
            for db in server.dbs:
                cleaner = Redis.from_url(db_url(server.url, db))
                await cleaner.flushdb()
                await cleaner.aclose()
        await server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    command = " ".join([".venv/bin/python -m benchmarks.http.ladder_bench", *argv])
    return "\n".join([render(sides, args, started, load, redis_name, time.perf_counter() - began, command), *notes])


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.WARNING)
    print(asyncio.run(run(parse_args(argv), argv)))


if __name__ == "__main__":
    main()
