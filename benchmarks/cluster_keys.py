"""``python -m benchmarks.cluster_keys [--cycles 300]``: where an approve cycle's Redis commands land on a Cluster.

The whole app (``REDIS_CLUSTER=1``) runs against the test cluster (tests/cluster.py: 3 masters, 1 replica
each) behind a LocalSlack, and does ``--cycles`` approve cycles (mention → card → click → reply, as
benchmarks/cycle.py). MONITOR on every master records each command with its first key; the figures are
commands per cycle by kind of key (the global indexes ``hitl:active``/``hitl:outbox``/``hitl:timers``, the
workspace's ``{ws:…}`` keys, a session's ``{slot}`` keys), split into those the app sends and those its
Lua scripts run, and each master's share of all of them. The recovery sweep is off during the cycles
(it is measured apart, idle, at its production interval). Nothing asserts: docs/PERFORMANCE.md records it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import redis as redis_sync

from bot.app import RECOVERY_INTERVAL_SECONDS, start_bot
from bot.config import Settings
from localslack.seed import ALICE, BOT_TOKEN
from localslack.server import LocalSlack
from tests.cluster import Node, ValkeyCluster

from .cycle import CHANNELS, Contender, _script, one_cycle, refund_charge, without_pacing

SECRET = "bench-cluster-secret"
TEAM = "T0LOCAL"
WORKSPACE = "workspace {ws:…}"
GLOBAL = {"hitl:active": "hitl:active", "hitl:outbox": "hitl:outbox", "hitl:timers": "hitl:timers"}
SCRIPTS = ("EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO")
LATENCY_CYCLES = 100  # timed before MONITOR goes on
_SESSION = re.compile(r"^hitl:\{[0-9a-f]{16}\}")


def kind_of(key: str) -> str:
    """The kind of key a command touches: one global index, a workspace's keys, a session's, or other."""
    if key in GLOBAL:
        return key
    if key.startswith("hitl:{ws:"):
        return WORKSPACE
    if _SESSION.match(key):
        return "session {slot}"
    return "other"


def first_key(args: list[str]) -> str | None:
    """The first key of a command as MONITOR shows it (a script's after its sha and key count)."""
    name = args[0].upper()
    if name in SCRIPTS:
        return args[3] if len(args) > 3 and args[2] != "0" else None
    return args[1] if len(args) > 1 else None


class Monitor:
    """MONITOR on one node in a thread: counts (kind of key, sent by the app or run in a script)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.counts: Counter[tuple[str, str]] = Counter()
        self.total = 0
        self.counting = False
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.ident is None:
            return  # never started
        self._stop = True
        with self.node.client() as client:
            client.ping()  # wakes the listener up, which then sees the flag
        self._thread.join(timeout=5)

    def _run(self) -> None:
        client = redis_sync.Redis(host="127.0.0.1", port=self.node.port, decode_responses=True, socket_timeout=None)
        with client.monitor() as monitor:
            for entry in monitor.listen():
                if self._stop:
                    return
                if not self.counting:
                    continue
                # redis-py joins the arguments with spaces: the first ones (name, sha, count, key) have none
                args = entry["command"].split(" ")
                key = first_key(args)
                if key is None or not key.startswith("hitl:"):
                    continue
                source = "in scripts" if entry.get("client_type") == "lua" else "sent"
                self.counts[(kind_of(key), source)] += 1
                self.total += 1


async def run(cycles: int, idle_s: float) -> list[str]:
    with ValkeyCluster() as cluster:
        masters = [n for n in cluster.running() if cluster.topology()[n.name][0] == "master"]
        owners = {name: cluster.master_of(name).name for name in GLOBAL}
        owners[WORKSPACE] = cluster.master_of(f"hitl:{{ws:{TEAM}}}:audit").name  # LocalSlack's one workspace
        monitors = [Monitor(node) for node in masters]
        slack = LocalSlack(bot_url=None, signing_secret=SECRET, rate_limits=False)
        await slack.start()
        for channel in CHANNELS:
            slack.add_channel(channel, channel.lower(), members=[ALICE])
        settings = Settings(_env_file=None, SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET=SECRET,  # type: ignore[call-arg]
                            SLACK_API_URL=slack.api_url, REDIS_URL=cluster.url, REDIS_CLUSTER=True, BOT_TOOLS="",
                            BOT_DATA_DIR=tempfile.mkdtemp(prefix="hitl-ckeys-"))
        # Slack's pacing off (as benchmarks/cycle.py's unpaced app): it only adds waiting, not commands
        bot = await start_bot(without_pacing(settings), model=_script(), tools=[refund_charge], host="127.0.0.1", port=0,
                              recovery_interval=0)
        who = Contender("app", f"{bot.url}/slack/events")
        slack.set_bot_url(who.url)
        timed = Contender("app, timed", who.url)
        try:
            await one_cycle(slack, who, 0)  # warm-up: scripts loaded, connections open
            await bot.wait_idle()
            # latency first, with no MONITOR on (it slows every node down)
            for n in range(1, min(cycles, LATENCY_CYCLES) + 1):
                await one_cycle(slack, timed, 10_000 + n)
            await bot.wait_idle()
            for monitor in monitors:
                monitor.start()
            time.sleep(0.5)  # the monitors are connected
            _count(monitors, True)
            started = time.perf_counter()
            for n in range(1, cycles + 1):  # one at a time: the scripted model serves one conversation
                await one_cycle(slack, who, n)
            await bot.wait_idle()  # its audit log and deliveries belong to the cycles
            elapsed = time.perf_counter() - started
            _count(monitors, False)
            cycle_counts = _snapshot(monitors)
            sweep_counts = await _idle_sweeps(bot, monitors, idle_s)
        finally:
            await bot.close()
            await slack.stop()
            for monitor in monitors:
                monitor.stop()
    return [*_latency(timed), "", *_report(cycles, elapsed, cycle_counts, sweep_counts, idle_s, owners, masters)]


def _latency(timed: Contender) -> list[str]:
    def pct(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return [f"On the cluster, {len(timed.cycles)} approve cycles one after another (no MONITOR): click → HTTP ack "
            f"p50 {pct(timed.acks, 0.5):.1f} ms, p99 {pct(timed.acks, 0.99):.1f} ms; full cycle (mention → card → "
            f"click → reply) p50 {pct(timed.cycles, 0.5):.1f} ms, p99 {pct(timed.cycles, 0.99):.1f} ms."]


async def _idle_sweeps(bot, monitors: list[Monitor], idle_s: float) -> list[Counter[tuple[str, str]]]:
    """What one replica's recovery sweep costs with nothing to do, at its production interval."""
    _reset(monitors)
    _count(monitors, True)
    deadline = time.monotonic() + idle_s
    while time.monotonic() < deadline:
        await bot.runtime.recover()
        await asyncio.sleep(RECOVERY_INTERVAL_SECONDS)
    _count(monitors, False)
    return _snapshot(monitors)


def _count(monitors: list[Monitor], on: bool) -> None:
    time.sleep(0.2)  # MONITOR lines arrive a moment after the commands
    for monitor in monitors:
        monitor.counting = on


def _reset(monitors: list[Monitor]) -> None:
    for monitor in monitors:
        monitor.counts = Counter()
        monitor.total = 0


def _snapshot(monitors: list[Monitor]) -> list[Counter[tuple[str, str]]]:
    return [Counter(m.counts) for m in monitors]


def _report(cycles: int, elapsed: float, per_node: list[Counter[tuple[str, str]]],
            sweeps: list[Counter[tuple[str, str]]], idle_s: float, owners: dict[str, str], masters: list[Node]) -> list[str]:
    total: Counter[tuple[str, str]] = sum(per_node, Counter())
    kinds = sorted({k for k, _ in total}, key=lambda k: (k not in GLOBAL, k))
    all_commands = sum(total.values())
    lines = [f"{cycles} approve cycles, one after another, in {elapsed:.1f} s; "
             f"{all_commands / cycles:.1f} commands per cycle on hitl:* keys in all.", "",
             "| keys | sent per cycle | in scripts per cycle | share of all | on |",
             "| --- | ---: | ---: | ---: | --- |"]
    for kind in kinds:
        sent, inner = total[(kind, "sent")], total[(kind, "in scripts")]
        where = owners.get(kind, "spread by slot")
        lines.append(f"| `{kind}` | {sent / cycles:.2f} | {inner / cycles:.2f} | "
                     f"{100 * (sent + inner) / all_commands:.1f} % | {where} |")
    lines += ["", "| master | commands per cycle | share | holds |", "| --- | ---: | ---: | --- |"]
    for node, counts in zip(masters, per_node, strict=True):
        held = ", ".join(k for k, owner in owners.items() if owner == node.name) or "—"
        n = sum(counts.values())
        lines.append(f"| {node.name} | {n / cycles:.1f} | {100 * n / all_commands:.1f} % | {held} |")
    idle = sum(sweeps, Counter())
    per_s = {kind: (idle[(kind, "sent")] + idle[(kind, "in scripts")]) / idle_s for kind in GLOBAL}
    lines += ["", f"Idle recovery sweep of one replica (every {RECOVERY_INTERVAL_SECONDS:g} s, {idle_s:g} s measured): "
              + ", ".join(f"`{k}` {v:.2f}/s" for k, v in per_s.items()) + "."]
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster_keys", description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=300, help="approve cycles (default 300)")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle sweeps measured (default 10)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"`.venv/bin/python -m benchmarks.cluster_keys --cycles {args.cycles}`\n")
    print("\n".join(asyncio.run(run(args.cycles, args.idle))))
    print(f"\n({Path(__file__).name}: MONITOR on each master; a command counts once, by its first key)")
