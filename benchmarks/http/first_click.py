"""``python -m benchmarks.http.first_click [--parked 0,10000] [--restarts 5]``: start fast.

The restart part of ``python -m benchmarks.http`` alone, for the project and the durable floor, without
the minutes of cycles before it: a fresh ``python -m bot run`` after a kill -9, with one real turn parked
and ``--parked`` copies of it beside; the clock starts when the process is spawned. Printed per population:
until the first click's HTTP 200 (what the full bench records) and until that click's turn ended (its
tool ran and the reply is in the thread: "kill -9 → first click's tool run" in the issue). Nothing here
asserts; docs/PERFORMANCE.md ("Start fast") quotes what it printed.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from redis.asyncio import Redis

from ..server import open_server
from .__main__ import SECRET, db_url, open_slack
from .drive import Side
from .model import BenchModel
from .restart import ProjectRestarts, first_click, floor_launch, project_launch


async def timed_once(restarts: ProjectRestarts, side: Side) -> tuple[float, float]:
    """(spawn → first click acked, spawn → that click's turn ended), then park the next turn and kill."""
    assert restarts.thread is not None
    thread = restarts.thread
    began = time.monotonic()
    acked = await first_click(restarts.launch, thread)
    await side.await_end(thread)
    ended = time.monotonic() - began
    await restarts._park_next()
    await restarts.launch.kill()
    return acked, ended


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:7.1f} ms (min {min(values) * 1000:.1f}, max {max(values) * 1000:.1f})"


async def run(parked: list[int], count: int) -> None:
    server = await open_server()
    model = BenchModel()
    await model.start()
    tmp = Path(tempfile.mkdtemp(prefix="hitl-first-click-"))
    slacks = [await open_slack(), await open_slack()]
    try:
        for population, db in zip(parked, server.dbs[1:], strict=False):
            url = db_url(server.url, db)
            redis = Redis.from_url(url)
            data = tmp / f"parked-{population}"
            data.mkdir()
            project = Side("project", "p", slacks[0], None, redis, replies=True)
            floor = Side("durable floor", "d", slacks[1], None, redis, replies=True)
            contenders = [(project, ProjectRestarts(project_launch(project, SECRET, model.base_url, url, data), redis)),
                          (floor, ProjectRestarts(floor_launch(floor, SECRET, model.base_url, url, data), redis))]
            copied = await contenders[0][1].prepare(population)
            await contenders[1][1].prepare(0)
            seen = await contenders[0][1].parked()
            print(f"{population:,} other turns parked ({seen:,} open requests in the index; copies written in "
                  f"{copied:.1f} s):", flush=True)
            times: dict[str, list[tuple[float, float]]] = {}
            for turn in range(count):
                for side, restarts in contenders[turn % 2:] + contenders[: turn % 2]:
                    times.setdefault(side.name, []).append(await timed_once(restarts, side))
            for name, samples in times.items():
                print(f"  {name:14} first click acked {_ms([a for a, _ in samples])}; "
                      f"its turn ended {_ms([e for _, e in samples])}", flush=True)
            await redis.flushdb()
            await redis.aclose()
    finally:
        for slack in slacks:
            await slack.stop()
        await model.stop()
        await server.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.http.first_click", description=__doc__.split("\n")[0])
    parser.add_argument("--parked", default="0,10000", help="other parked turns, at most two populations (default 0,10000)")
    parser.add_argument("--restarts", type=int, default=5, help="restarts per contender and population (default 5)")
    args = parser.parse_args(argv)
    parked = [int(x) for x in args.parked.split(",") if x.strip()][:2]
    asyncio.run(run(parked, args.restarts))


if __name__ == "__main__":
    main(sys.argv[1:])
