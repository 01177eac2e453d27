"""``python -m benchmarks.roundtrips``: Redis round trips of one approve cycle, by the line that sends them.

The app runs in this process behind LocalSlack (Slack's pacing off, a scripted model), as in
``benchmarks.cycle``. redis-py's ``Redis.execute_command`` and ``Pipeline.execute``, and the store's own
round trip (``store.client``'s connections' ``exchange``, which ``store.pipelined`` sends its pipelines through),
are wrapped to record each round trip with the project's frames that sent it (a pipeline is one), while
``--cycles`` cycles run one at a time after a warm-up. It prints round trips per cycle, the commands
Redis ran per cycle (``INFO commandstats``: those inside scripts too), and a table by caller, most
first. Nothing here asserts: it is how docs/PERFORMANCE.md counts round trips.

``--replies``: also the reply elements the client parsed per cycle (a list counts as one, plus its
items; redis-py's parser costs ~3 µs of CPU each), by caller. ``--server-time``: also the server's own
time per cycle, by command and by the store's script (SLOWLOG with every command logged during the
counted cycles; the server's setting is put back afterwards).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import tempfile
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis.asyncio.client as redis_client
from redis.asyncio import Redis
from redis.exceptions import NoScriptError

import store.client as store_client
from bot.app import start_bot
from bot.config import Settings
from localslack.seed import ALICE, BOT_TOKEN
from localslack.server import LocalSlack

from . import cycle
from .server import open_server

ROOT = str(Path(__file__).resolve().parents[1]) + "/"
ROOMS = tuple(ROOT + room for room in ("bot/", "store/", "handlers/"))
PLUMBING = ("store/pipelined.py", "store/client.py")  # how a round trip is sent, not who sends it
# round trips a fresh process makes once, loading the store's scripts (tests leave them out)
SCRIPT_LOADING = ("SCRIPT LOAD", "NOSCRIPT")


def elements(reply: Any) -> int:
    """The RESP elements of a parsed reply: one for a value, one for a list or map plus its items."""
    if isinstance(reply, list | tuple | set):
        return 1 + sum(elements(item) for item in reply)
    if isinstance(reply, dict):
        return 1 + sum(elements(k) + elements(v) for k, v in reply.items())
    return 1


class RoundTrips:
    """Counts round trips by caller while ``on`` (with ``replies``, reply elements instead)."""

    def __init__(self, depth: int, *, replies: bool = False) -> None:
        self.depth = depth
        self.on = False
        self.replies = replies
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()

    def caller(self) -> str:
        frames = [f"{f.filename[len(ROOT):]}:{f.lineno} {f.name}" for f in reversed(traceback.extract_stack())
                  if f.filename.startswith(ROOMS) and not f.filename.endswith(PLUMBING)]
        return " < ".join(frames[: self.depth]) or "?"

    def install(self) -> None:
        execute_command, execute = redis_client.Redis.execute_command, redis_client.Pipeline.execute
        exchange = store_client._DeadlineBound.exchange
        counter = self

        async def counted_command(self: Any, *args: Any, **kwargs: Any) -> Any:
            on, caller = counter.on, counter.caller() if counter.on else ""
            reply = await execute_command(self, *args, **kwargs)
            if on:
                counter.counts[(caller, str(args[0]))] += elements(reply) if counter.replies else 1
            return reply

        async def counted_pipeline(self: Any, *args: Any, **kwargs: Any) -> Any:
            on, caller = counter.on, counter.caller() if counter.on else ""
            names = ",".join(sorted({str(c[0][0]) for c in self.command_stack}))
            replies = await execute(self, *args, **kwargs)
            if on:
                counter.counts[(caller, f"pipeline[{names}]")] += elements(replies) - 1 if counter.replies else 1
            return replies

        async def counted_exchange(self: Any, commands: list[tuple[Any, ...]]) -> Any:
            on, caller = counter.on, counter.caller() if counter.on else ""
            names = ",".join(sorted({str(c[0]).upper() for c in commands}))
            replies = await exchange(self, commands)
            if on:  # one the server answered NOSCRIPT is sent again once the scripts are loaded: told apart
                name = "NOSCRIPT" if any(isinstance(r, NoScriptError) for r in replies) else f"pipeline[{names}]"
                counter.counts[(caller, name)] += elements(replies) - 1 if counter.replies else 1
            return replies

        redis_client.Redis.execute_command = counted_command  # type: ignore[method-assign]
        redis_client.Pipeline.execute = counted_pipeline  # type: ignore[method-assign]
        store_client._DeadlineBound.exchange = counted_exchange  # type: ignore[method-assign]
        self._originals = (execute_command, execute, exchange)

    def uninstall(self) -> None:
        execute_command, execute, exchange = self._originals
        redis_client.Redis.execute_command, redis_client.Pipeline.execute = execute_command, execute  # type: ignore[method-assign]
        store_client._DeadlineBound.exchange = exchange  # type: ignore[method-assign]

    def sent_by(self, *functions: str) -> int:
        """Round trips sent from inside every one of ``functions`` (within ``depth`` frames of the send)."""
        def inside(caller: str, function: str) -> bool:
            return any(frame.endswith(f" {function}") for frame in caller.split(" < "))
        return sum(n for (caller, _), n in self.counts.items() if all(inside(caller, f) for f in functions))


@contextmanager
def counting(depth: int = 6) -> Iterator[RoundTrips]:
    """Count this process's round trips by caller while the block runs (tests assert on them)."""
    trips = RoundTrips(depth)
    trips.install()
    trips.on = True
    try:
        yield trips
    finally:
        trips.on = False
        trips.uninstall()


async def _by_name(redis: Redis) -> collections.Counter[str]:
    stats = await redis.info("commandstats")
    return collections.Counter({k.removeprefix("cmdstat_").upper(): v["calls"] for k, v in stats.items()
                                if k != "cmdstat_info"})


def _script_names(redis: Redis) -> dict[str, str]:
    """The SHA-1 of each script the store registers → its owner's attribute (``RedisTurns._commit``…)."""
    from store.audit import AuditLog
    from store.outbox import RedisOutbox
    from store.turns import RedisTurns

    names = {}
    for owner in (RedisTurns(redis), RedisOutbox(redis), AuditLog(redis)):
        for attribute, value in vars(owner).items():
            if hasattr(value, "sha") and hasattr(value, "script"):
                names[value.sha] = f"{type(owner).__name__}.{attribute}"
    return names


async def _server_time(redis: Redis, cycles: int) -> list[str]:
    """The SLOWLOG's entries (every command, since the counted cycles began) per cycle, by command or script."""
    names = _script_names(redis)
    spent: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    for entry in await redis.slowlog_get(1_000_000):
        command = entry["command"].split()
        name = command[0].decode().upper()
        if name == "EVALSHA" and len(command) > 1:
            name = f"EVALSHA {names.get(command[1].decode(), command[1].decode()[:12])}"
        if name in ("SLOWLOG", "CONFIG", "INFO"):
            continue
        spent[name] += entry["duration"]
        calls[name] += 1
    lines = ["", f"server time per cycle (SLOWLOG): {sum(spent.values()) / cycles:.0f} µs", "",
             "| µs per cycle | calls per cycle | µs per call | command |", "| ---: | ---: | ---: | --- |"]
    for name, micros in spent.most_common():
        lines.append(f"| {micros / cycles:.1f} | {calls[name] / cycles:.2f} | {micros / calls[name]:.1f} | {name} |")
    return lines


async def main(args: argparse.Namespace) -> list[str]:
    trips = RoundTrips(args.depth, replies=args.replies)
    trips.install()
    server = await open_server()
    slack = LocalSlack(bot_url=None, signing_secret=cycle.SECRET, rate_limits=False)
    await slack.start()
    for channel in cycle.CHANNELS:
        slack.add_channel(channel, channel.lower(), members=[ALICE])
    settings = Settings(_env_file=None, SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET=cycle.SECRET,  # type: ignore[call-arg]
                        SLACK_API_URL=slack.api_url, REDIS_URL=server.url, BOT_TOOLS="",
                        BOT_DATA_DIR=tempfile.mkdtemp(prefix="hitl-roundtrips-"))
    bot = await start_bot(cycle.without_pacing(settings), model=cycle._script(), tools=[cycle.refund_charge],
                          host="127.0.0.1", port=0, recovery_interval=0)
    redis = Redis.from_url(server.url)
    who = cycle.Contender("app", f"{bot.url}/slack/events")
    slack.set_bot_url(who.url)
    try:
        for n in range(3):  # warm-up: scripts loaded, connections open
            await cycle.one_cycle(slack, who, n)
        await bot.wait_idle()
        await asyncio.sleep(0.6)  # anything deferred (bot.engine.outbox.DELIVER_UNHURRIED_S) is done
        before = await cycle._commands(redis)
        before_by_name = await _by_name(redis)
        if args.server_time:
            slowlog = await redis.config_get("slowlog-*")
            await redis.config_set("slowlog-max-len", 1_000_000)
            await redis.config_set("slowlog-log-slower-than", 0)
            await redis.slowlog_reset()
        trips.on = True
        try:
            for n in range(args.cycles):
                await cycle.one_cycle(slack, who, 100 + n)
                await bot.wait_idle()
        finally:
            trips.on = False
            if args.server_time:
                server_lines = await _server_time(redis, args.cycles)
                for setting, value in slowlog.items():
                    await redis.config_set(setting, value)
        commands = (await cycle._commands(redis) - before) / args.cycles
        by_name = await _by_name(redis)
        by_name.subtract(before_by_name)
    finally:
        await bot.close()
        await slack.stop()
        await redis.aclose()
        await server.close()
    total = sum(trips.counts.values()) / args.cycles
    counted = "reply elements parsed" if args.replies else "round trips"
    lines = [f"{counted} per approve cycle: {total:.1f}; commands Redis ran per cycle (scripts' own included): "
             f"{commands:.1f}", "by command: " + ", ".join(
                 f"{name} {count / args.cycles:.1f}" for name, count in by_name.most_common() if count > 0),
             "", "| per cycle | sent | by |", "| ---: | --- | --- |"]
    for (caller, sent), count in trips.counts.most_common():
        lines.append(f"| {count / args.cycles:.1f} | {sent} | {caller} |")
    return lines + (server_lines if args.server_time else [])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.roundtrips", description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=10, help="approve cycles counted (default 10)")
    parser.add_argument("--depth", type=int, default=2, help="the project's frames shown per caller (default 2)")
    parser.add_argument("--replies", action="store_true", help="count reply elements parsed instead of round trips")
    parser.add_argument("--server-time", action="store_true", help="also the server's time per cycle (SLOWLOG)")
    logging.basicConfig(level=logging.WARNING)
    print("\n".join(asyncio.run(main(parser.parse_args()))))
