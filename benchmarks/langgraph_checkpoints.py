"""``python -m benchmarks.langgraph_checkpoints``: one LangGraph interrupt → resume cycle, by checkpointer.

The graph of tests/test_langgraph_checkpoints.py (prepare → approve, which calls ``interrupt`` → pay) runs
``--cycles`` times, each on a new thread: ``ainvoke`` until it asks, then ``ainvoke(Command(resume=…))``.
With store/langgraph_checkpoints.py's ``RedisCheckpointSaver`` on a private embedded Valkey it prints the
Redis round trips per cycle (benchmarks.roundtrips' counter: a pipeline is one), the commands Redis ran
(``INFO commandstats``) and the time; with ``langgraph-checkpoint-sqlite``'s ``AsyncSqliteSaver`` on a file
(the ``bench`` extra) the SQL statements per cycle (sqlite's trace callback) and the time. Not part of
``make bench``; nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import tempfile
import time
from pathlib import Path
from typing import Any

from langgraph.types import Command

from benchmarks.roundtrips import counting
from store.client import open_redis
from store.langgraph_checkpoints import RedisCheckpointSaver
from tests.test_langgraph_checkpoints import refund_graph, thread


async def cycles(saver: Any, count: int) -> float:
    """Run ``count`` interrupt → resume cycles on new threads; the seconds they took."""
    graph = refund_graph(collections.Counter()).compile(checkpointer=saver)
    started = time.perf_counter()
    for n in range(count):
        config = thread(f"bench-{n}-{time.monotonic_ns()}")
        await graph.ainvoke({"amount": n, "log": []}, config)
        await graph.ainvoke(Command(resume="yes"), config)
    return time.perf_counter() - started


async def on_valkey(count: int, data_dir: Path) -> None:
    handle = await open_redis(None, data_dir=data_dir)
    try:
        saver = RedisCheckpointSaver(handle.client)
        await cycles(saver, 3)  # warm-up: scripts loaded, connections open
        before = await handle.client.info("commandstats")
        with counting() as trips:
            seconds = await cycles(saver, count)
        after = await handle.client.info("commandstats")
        ran = collections.Counter(
            {
                k.removeprefix("cmdstat_"): v["calls"] - before.get(k, {"calls": 0})["calls"]
                for k, v in after.items()
            }
        )
        ran.pop("info", None)
        by_kind = collections.Counter()
        for (_, kind), n in trips.counts.items():
            by_kind[kind] += n
        print(
            f"RedisCheckpointSaver (Valkey): {sum(trips.counts.values()) / count:.1f} round trips per cycle"
        )
        print("  by kind: " + ", ".join(f"{k} {n / count:.1f}" for k, n in by_kind.most_common()))
        print(
            "  Redis ran per cycle: " + ", ".join(f"{k} {n / count:.1f}" for k, n in ran.most_common() if n)
        )
        print(f"  {seconds / count * 1000:.2f} ms per cycle")
    finally:
        await handle.close()


async def on_sqlite(count: int, data_dir: Path) -> None:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(data_dir / "lg.sqlite")) as saver:
        await cycles(saver, 3)
        statements: collections.Counter[str] = collections.Counter()
        counted = False

        def trace(sql: str) -> None:
            if counted:
                statements[sql.split(None, 1)[0].upper()] += 1

        await saver.conn.set_trace_callback(trace)
        counted = True
        seconds = await cycles(saver, count)
        counted = False
        total = sum(statements.values())
        print(f"AsyncSqliteSaver (file): {total / count:.1f} SQL statements per cycle")
        print("  by kind: " + ", ".join(f"{k} {n / count:.1f}" for k, n in statements.most_common()))
        print(f"  {seconds / count * 1000:.2f} ms per cycle")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lg-bench-") as tmp:
        await on_valkey(args.cycles, Path(tmp) / "valkey")
        await on_sqlite(args.cycles, Path(tmp))


if __name__ == "__main__":
    asyncio.run(main())
