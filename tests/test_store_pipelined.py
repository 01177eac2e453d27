"""The store's round trips (``store.pipelined``) on its own clients: each reply is what redis-py's pipeline
would give, and no failure, stall or cancellation leaves a reply on a pooled connection for the next caller.

Against real valkey-server processes; ``SilentProxy`` (tests/test_store_client.py) holds replies back."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as redis_asyncio
from redis.exceptions import ResponseError

from store.client import RedisClient, open_redis
from store.embedded import EmbeddedValkey
from store.pipelined import Command, evalsha, pipelined
from tests.test_store_client import SilentProxy

COUNT_SCRIPT = "return redis.call('INCR', KEYS[1])"


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[RedisClient]:
    handle = await open_redis(redis_url)
    await handle.client.flushdb()
    try:
        yield handle.client
    finally:
        await handle.close()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hitl-pl-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def server(short_dir: Path) -> AsyncIterator[EmbeddedValkey]:
    valkey = EmbeddedValkey(short_dir)
    await valkey.start()
    yield valkey
    await valkey.stop()


COMMANDS: list[Command] = [
    ("set", ("s", b"v")), ("set", ("s", b"w", None, None, True)),  # NX on a key that exists: None
    ("get", ("s",)), ("get", ("missing",)), ("mget", (["s", "missing"],)),
    ("hset", ("h", None, None, {"f": 1.25, "g": "x"})), ("hgetall", ("h",)), ("hmget", ("h", ["f", "nope"])),
    ("zadd", ("z", {"a": 1, "b": 2.5})), ("zrange", ("z", 0, -1, False, True)), ("zscore", ("z", "b")),
    ("sadd", ("members", "x", "y")), ("smembers", ("members",)), ("exists", ("s", "h", "missing")),
    ("pexpire", ("s", 60_000)), ("incrby", ("n", 5)), ("delete", ("members",)), ("type", ("z",)),
]


async def test_a_round_trip_replies_as_redis_py_s_own_pipeline(client: RedisClient, redis_url: str) -> None:
    """Each reply through redis-py's response callback, with the options its command method gave it
    (``withscores``, ``NX``…): the callers read dicts, floats, sets and booleans, as from redis-py."""
    pool: Any = client.connection_pool
    lent = await pool.get_connection()
    assert lent.exchanges()  # the store's connections read a round trip's replies whole
    await pool.release(lent)
    ours = await pipelined(client, COMMANDS, [])
    plain = redis_asyncio.Redis.from_url(redis_url)
    try:
        await plain.flushdb()
        pipe = plain.pipeline(transaction=False)
        for name, args in COMMANDS:
            getattr(pipe, name)(*args)
        assert ours == await pipe.execute()
    finally:
        await plain.aclose()
    assert ours[1] is None and ours[6] == {b"f": b"1.25", b"g": b"x"} and ours[9] == [(b"a", 1.0), (b"b", 2.5)]


async def test_an_error_reply_is_its_command_s_alone_unless_the_caller_asks_to_raise(client: RedisClient) -> None:
    await client.set("text", b"not a number")
    commands: list[Command] = [("incr", ("text",)), ("incr", ("n",)), ("get", ("n",))]
    failed, counted, read = await pipelined(client, commands, [], raise_on_error=False)
    assert isinstance(failed, ResponseError) and "not an integer" in str(failed)
    assert (counted, read) == (1, b"1")
    with pytest.raises(ResponseError, match=r"Command # 1 \(INCRBY text 1\) of pipeline caused error"):
        await pipelined(client, commands, [])
    assert await client.get("n") == b"2"  # the commands after the error ran all the same


async def test_a_script_the_server_forgot_is_loaded_again_and_runs_once(client: RedisClient) -> None:
    script = client.register_script(COUNT_SCRIPT)
    await client.script_load(COUNT_SCRIPT)
    assert await pipelined(client, [evalsha(script, ["count"], []), ("get", ("count",))], [script]) == [1, b"1"]
    await client.script_flush()  # a restart without persistence, a failover to a replica that never saw it
    replies = await pipelined(client, [evalsha(script, ["count"], []), ("get", ("count",))], [script])
    assert replies == [2, b"2"]


async def test_a_round_trip_cancelled_before_its_replies_came_leaves_them_to_no_one(server: EmbeddedValkey) -> None:
    """Cancelled after its write (a Slack ack's deadline, a stop): the replies still on their way must not
    be read by the next round trip on that connection as its own."""
    proxy = SilentProxy(server.url.removeprefix("unix://"))
    await proxy.start()
    handle = await open_redis(f"redis://127.0.0.1:{proxy.port}/0", max_connections=1)
    client = handle.client
    try:
        await pipelined(client, [("set", ("k", b"first")), ("set", ("other", b"x"))], [])
        proxy.stall_after(0, hold_s=0.5)
        late = asyncio.create_task(pipelined(client, [("get", ("other",)), ("get", ("k",))], []))
        await asyncio.sleep(0.1)  # written, its replies held
        late.cancel()
        with pytest.raises(asyncio.CancelledError):
            await late
        assert await pipelined(client, [("get", ("k",)), ("incr", ("n",))], []) == [b"first", 1]
        await asyncio.sleep(0.6)  # the held replies arrive now
        assert await pipelined(client, [("get", ("k",)), ("incr", ("n",))], []) == [b"first", 2]
    finally:
        await handle.close()
        await proxy.stop()


async def test_a_reply_that_stalls_halfway_is_cut_off_and_the_round_trip_retried_whole(
    server: EmbeddedValkey,
) -> None:
    proxy = SilentProxy(server.url.removeprefix("unix://"))
    await proxy.start()
    timeout_s = 0.2
    handle = await open_redis(f"redis://127.0.0.1:{proxy.port}/0", socket_timeout=timeout_s)
    client = handle.client
    try:
        await pipelined(client, [("set", ("k", b"before"))], [])  # a pooled connection, then held mid-reply
        proxy.stall_after(len(b"+OK\r\n"), hold_s=3 * timeout_s)
        assert await pipelined(client, [("set", ("k", b"after")), ("get", ("k",))], []) == [True, b"after"]
        await asyncio.sleep(3 * timeout_s)  # the stalled reply is sent now, to a closed socket
        assert await pipelined(client, [("get", ("k",)), ("incr", ("n",))], []) == [b"after", 1]
    finally:
        await handle.close()
        await proxy.stop()


async def test_a_pooled_connection_left_with_unread_replies_is_not_lent_as_it_is(client: RedisClient) -> None:
    """Whoever returned a connection with replies still to read (a bug, a cut-off caller): the pool checks
    it before lending it and reconnects, as redis-py's pool does."""
    pool: Any = client.connection_pool
    connection = await pool.get_connection()
    await connection.send_command("SET", "k", b"stale")
    await asyncio.sleep(0.05)  # its reply is in the socket, unread
    await pool.release(connection)
    assert await pipelined(client, [("get", ("k",)), ("incr", ("n",))], []) == [b"stale", 1]
