"""CPU of one Redis round trip by the bot's client: ``python -m benchmarks.redis_client --trips 4000``.

The round trip is the shape of a checkpoint's: a script (EVALSHA) and four index commands in one
pipeline, on the bench's server (embedded valkey-server, or ``REDIS_URL``'s). Three clients take turns
in rounds, in this process, so machine noise hits all alike:

- **ours**: ``store.client.open_redis``'s client (bounded retries, one deadline per try);
- **socket timeout**: redis-py with the same socket timeout and no deadline of ours, which is what the bot's
  client was before: redis-py arms it per write (a task, ``asyncio.wait_for``, on Python 3.11) and per
  reply read;
- **bare**: redis-py with no timeout at all, the least a round trip costs (and what the bench's floor and
  ladder contenders use).

Each round of each client runs in a child process of its own: a client's cast-off timers stay in its event
loop's heap for the length of the timeout and slow every other timer of the loop, so clients sharing one
loop would be charged for each other's. Prints CPU per round trip (``time.process_time``: the client's own
work, as the server is another process), the best round of each.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time

import redis.asyncio as redis_asyncio

from store.client import SOCKET_TIMEOUT_S, open_redis
from store.pipelined import evalsha, pipelined

from .server import open_server

SCRIPT = "redis.call('SET', KEYS[1], ARGV[1]) return redis.call('INCR', KEYS[2])"


async def _round(client: redis_asyncio.Redis, script: object, trips: int) -> float:
    commands = [evalsha(script, [b"bench:rc:state", b"bench:rc:seq"], [b"x" * 200]),  # type: ignore[arg-type]
                ("zadd", (b"bench:rc:active", {b"s1": 1})), ("zrem", (b"bench:rc:outbox", b"s1")),
                ("get", (b"bench:rc:cancel",)), ("lrange", (b"bench:rc:inbox", 0, -1))]
    started = time.process_time()
    for _ in range(trips):
        await pipelined(client, commands, [script])  # type: ignore[list-item]
    return (time.process_time() - started) / trips


async def _client(kind: str, url: str) -> redis_asyncio.Redis:
    if kind == "ours":
        return (await open_redis(url)).client  # type: ignore[return-value]
    return redis_asyncio.Redis.from_url(url, socket_timeout=SOCKET_TIMEOUT_S if kind == "socket timeout" else None)


async def _child(kind: str, url: str, trips: int) -> float:
    client = await _client(kind, url)
    try:
        script = client.register_script(SCRIPT)
        await _round(client, script, 200)  # warm-up: connection open, script loaded
        return await _round(client, script, trips)
    finally:
        await client.aclose()


async def main(args: argparse.Namespace) -> None:
    server = await open_server()
    best = dict.fromkeys(KINDS, float("inf"))
    per_round = max(1, args.trips // args.rounds)
    try:
        for _ in range(args.rounds):
            for kind in KINDS:
                child = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "benchmarks.redis_client", "--child", kind, "--url", server.url,
                    "--trips", str(per_round), stdout=subprocess.PIPE)
                out, _ = await child.communicate()
                best[kind] = min(best[kind], float(out))
    finally:
        await server.close()
    print(f"CPU per round trip (EVALSHA + 4 commands in one pipeline), best of {args.rounds} rounds of {per_round}:")
    for kind, seconds in best.items():
        print(f"  {kind:15} {seconds * 1e6:6.1f} µs  ({seconds / best['bare']:.2f} × bare)")


KINDS = ("ours", "socket timeout", "bare")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.redis_client", description=__doc__.split("\n")[0])
    parser.add_argument("--trips", type=int, default=4000, help="round trips per client (default 4000)")
    parser.add_argument("--rounds", type=int, default=8, help="rounds the trips are split into (default 8)")
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.child:
        print(asyncio.run(_child(parsed.child, parsed.url, parsed.trips)))
    else:
        asyncio.run(main(parsed))
