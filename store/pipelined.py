"""A Lua script between a few other commands, in order: one pipeline on Redis, one by one on a Cluster.

The store sends a script with the index writes that go with it (``ZADD hitl:active``…) or the reads
that follow it in one pipeline: one round trip on a single server, which the benchmarks show is worth
keeping (docs/PERFORMANCE.md). A Redis Cluster cannot do that: the other commands touch keys in other
slots (the global indexes), and redis-py's cluster pipeline either refuses EVALSHA (redis-py 5.2) or
sends each node's share in parallel (8.x), which loses the order the callers rely on (release the
lease, then read what arrived meanwhile). On a ``RedisCluster`` the commands are therefore sent one
after another, in the same order, each routed and retried by the cluster client on its own (MOVED,
ASK, TRYAGAIN, a failover: store/client.py). A process that dies between two of them leaves the
script's write without the advisory index entries after it; the sweeps re-check records, never
indexes alone (DESIGN, Redis layout).

A command is ``(client method name, arguments)``; :func:`evalsha` makes the one that runs a script.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

from redis.asyncio import RedisCluster
from redis.client import EMPTY_RESPONSE, NEVER_DECODE
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, RedisError, ResponseError

from store.client import RedisClient

Command: TypeAlias = tuple[str, tuple[Any, ...]]
# options redis-py's command methods give its read (and its client-side cache), not the reply's callback
_READ_OPTIONS = frozenset({"keys", EMPTY_RESPONSE, NEVER_DECODE})


def evalsha(script: AsyncScript, keys: Sequence[Any], args: Sequence[Any]) -> Command:
    """The command running ``script`` (registered with ``register_script``) on ``keys`` and ``args``."""
    return ("evalsha", (script.sha, len(keys), *keys, *args))


async def pipelined(client: RedisClient, commands: Sequence[Command], scripts: Sequence[AsyncScript], *,
                    raise_on_error: bool = True) -> list[Any]:
    """Run ``commands`` in order and return their replies; ``scripts``: those their EVALSHAs run. With
    ``raise_on_error`` False a command's error is its reply (the exception) and the others still run.

    A redis-py ``Script`` in a pipeline would first send SCRIPT EXISTS on every execute (one more round
    trip), so scripts are loaded only when the server says it lacks them (first use, a flush, a
    failover to a replica that never saw them)."""
    # (by its class: redis-py's client classes have typing's Protocol metaclass, whose isinstance costs ~4 × this)
    if issubclass(type(client), RedisCluster):
        replies = []
        for command in commands:
            try:
                replies.append(await _one_by_one(client, command, scripts))
            except RedisError as exc:
                if raise_on_error:
                    raise
                replies.append(exc)
        return replies
    return await _one_round_trip(client, commands, scripts, raise_on_error)


async def _one_round_trip(client: RedisClient, commands: Sequence[Command], scripts: Sequence[AsyncScript],
                          raise_on_error: bool) -> list[Any]:
    for attempt in (1, 2):
        pipe = client.pipeline(transaction=False)
        for name, args in commands:
            getattr(pipe, name)(*args)
        try:
            replies = await _execute(client, pipe, raise_on_error)
        except NoScriptError:
            replies = None
        if replies is not None and not any(isinstance(r, NoScriptError) for r in replies):
            return replies
        # the other commands ran; resending them is harmless (the callers send idempotent ones)
        if attempt == 2:
            raise NoScriptError("a script stayed unknown to the server after loading it")
        for script in scripts:
            await client.script_load(script.script)
    raise AssertionError("unreachable")


async def _one_by_one(client: RedisCluster, command: Command, scripts: Sequence[AsyncScript]) -> Any:
    name, args = command
    try:
        return await getattr(client, name)(*args)
    except NoScriptError:
        # EVAL of the body, routed like the EVALSHA to the slot's node, runs it and caches it there. (SCRIPT
        # LOAD goes to every master, and fails while one of them is down: during the very failover that
        # brought a replica without the script up.) NOSCRIPT means nothing ran, so this runs it once.
        sha, *rest = args
        script = next(s for s in scripts if s.sha == sha)
        return await client.eval(script.script, *rest)


async def _execute(client: Any, pipe: Any, raise_on_error: bool) -> list[Any]:
    """The pipeline's commands in one exchange on a connection of ours (``store.client``), each reply through
    redis-py's response callback with its command's options, as its pipeline would; any other connection
    runs redis-py's own ``execute``."""
    pool = client.connection_pool
    conn = await pool.get_connection()
    if not getattr(conn, "exchanges", bool)():
        await pool.release(conn)
        return await pipe.execute(raise_on_error=raise_on_error)
    stack = pipe.command_stack
    try:
        raw = await conn.retry.call_with_retry(lambda: conn.exchange([args for args, _ in stack]),
                                               lambda error, *_: conn.disconnect(error=error))
    finally:
        await pool.release(conn)
    callbacks = client.response_callbacks
    replies = []
    for (args, options), reply in zip(stack, raw, strict=True):
        if isinstance(reply, ResponseError):
            replies.append(options.get(EMPTY_RESPONSE, reply))
            continue
        callback = callbacks.get(args[0])
        if callback is not None:
            reply = callback(reply, **{k: v for k, v in options.items() if k not in _READ_OPTIONS})
        replies.append(reply)
    if raise_on_error:
        pipe.raise_first_error(stack, replies)
    return replies
