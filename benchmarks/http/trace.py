"""One approve cycle of the project under Redis MONITOR: which commands it sends, and in which stretch.

The app is idle before the cycle and between its steps, so every command the server sees in a
stretch belongs to it. Stretches: the mention's two deliveries until both are acknowledged; from the
ack until the model server sees the first request; from there until the card is in Slack (and the app
is idle); the click until its ack; from the ack until the cycle has ended (and the app is idle).
MONITOR marks commands run inside scripts (client ``lua``); they are listed apart from what the app
sends itself. MONITOR slows the server down, so this cycle is not timed.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from .drive import Side
from .model import BenchModel


@dataclass
class Stretch:
    name: str
    start: float  # time.time()
    end: float = 0.0
    sent: list[str] = field(default_factory=list)  # command names the app sent, in order
    in_scripts: Counter[str] = field(default_factory=Counter)


@dataclass
class Trace:
    stretches: list[Stretch]
    slack: list[list[str]]  # Slack methods called in each stretch

    def lines(self) -> list[str]:
        total_sent = sum(len(s.sent) for s in self.stretches)
        total_lua = sum(s.in_scripts.total() for s in self.stretches)
        out = [f"- One cycle under MONITOR (not timed): the app sent {total_sent} commands and its scripts ran "
               f"{total_lua} more; Slack calls {sum(len(c) for c in self.slack)}. By stretch:"]
        for stretch, calls in zip(self.stretches, self.slack, strict=True):
            scripts = (f"; inside scripts {stretch.in_scripts.total()} ("
                       + ", ".join(f"{k} {v}" for k, v in stretch.in_scripts.most_common(6)) + ")"
                       if stretch.in_scripts else "")
            slack = f"; Slack: {', '.join(calls)}" if calls else ""
            out.append(f"  - {stretch.name} ({1000 * (stretch.end - stretch.start):.0f} ms under MONITOR): "
                       f"{len(stretch.sent)} sent{scripts}{slack}. Sent: {_runs(stretch.sent)}")
        return out


def _runs(names: list[str], limit: int = 60) -> str:
    """``GET ×3, SET`` for GET GET GET SET; the first ``limit`` runs."""
    runs: list[list[Any]] = []
    for name in names:
        if runs and runs[-1][0] == name:
            runs[-1][1] += 1
        else:
            runs.append([name, 1])
    shown = ", ".join(f"{n} ×{k}" if k > 1 else n for n, k in runs[:limit])
    return (shown + f", … ({len(runs) - limit} more)" if len(runs) > limit else shown) or "nothing"


async def _listen(redis: Redis, seen: list[dict[str, Any]], ready: asyncio.Event) -> None:
    async with redis.monitor() as monitor:
        ready.set()
        async for entry in monitor.listen():
            seen.append(entry)


async def trace_cycle(side: Side, redis_url: str, model: BenchModel) -> Trace:
    redis = Redis.from_url(redis_url)
    seen: list[dict[str, Any]] = []
    ready = asyncio.Event()
    listener = asyncio.create_task(_listen(redis, seen, ready))
    await ready.wait()
    await side.idle()
    calls_before = len(side.slack.calls)
    marks: list[tuple[str, float, int]] = []

    def mark(name: str) -> None:
        marks.append((name, time.time(), len(side.slack.calls)))

    tag = f"{side.key}{side.started}"  # the tag mention() gives this thread
    model.on_first = lambda seen: mark("first model request") if seen == tag else None
    mark("mention sent")
    thread = await side.mention(side.channel())
    mark("both events acked")
    await side.await_card(thread)
    await side.idle()
    model.on_first = None
    mark("card in Slack, app idle")
    await side.click(thread)
    mark("click acked")
    await side.await_end(thread)
    await side.idle()
    mark("reply in Slack, card updated, app idle")
    await asyncio.sleep(0.2)  # MONITOR lines still in flight
    listener.cancel()
    await asyncio.gather(listener, return_exceptions=True)
    await redis.aclose()
    return _split(marks, seen, [c.method for c in side.slack.calls[calls_before:]], calls_before)


def _split(marks: list[tuple[str, float, int]], seen: list[dict[str, Any]], methods: list[str],
           calls_before: int) -> Trace:
    marks.sort(key=lambda m: m[1])
    stretches = [Stretch(f"{a} → {b}", start, end) for (a, start, _), (b, end, _) in zip(marks, marks[1:], strict=False)]
    slack = [methods[a - calls_before:b - calls_before] for (_, _, a), (_, _, b) in zip(marks, marks[1:], strict=False)]
    for entry in seen:
        name = entry["command"].split(" ", 1)[0].upper()
        if name in ("MONITOR", "INFO", "PING"):
            continue
        for stretch in stretches:
            if stretch.start <= entry["time"] < stretch.end:
                if entry["client_type"] == "lua":
                    stretch.in_scripts[name] += 1
                else:
                    stretch.sent.append(name)
                break
    return Trace(stretches, slack)
