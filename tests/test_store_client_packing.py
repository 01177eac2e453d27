"""The store's clients pack commands through hiredis without redis-py's per-argument encoding, and read a round
trip's replies whole (``store.pipelined``): what reaches Redis, what is refused and what comes back is what
redis-py itself sends, refuses and gives."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as redis_asyncio
from redis.exceptions import DataError, ResponseError

from store.client import RedisClient, open_redis
from store.pipelined import Command, evalsha, pipelined

COUNT_SCRIPT = "return redis.call('INCR', KEYS[1])"


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[RedisClient]:
    handle = await open_redis(redis_url)
    await handle.client.flushdb()
    try:
        yield handle.client
    finally:
        await handle.close()


@pytest.mark.parametrize(("value", "stored"), [
    (0.1, b"0.1"), (1e20, b"1e+20"), (1.5e-7, b"1.5e-07"), (3.0, b"3.0"), (-0.0, b"-0.0"),
    (2**70, b"1180591620717411303424"), (-5, b"-5"),
    ("caf\u00e9 \u2713", "caf\u00e9 \u2713".encode()), (b"\x00\xff", b"\x00\xff"),
    (bytearray(b"ba"), b"ba"), (memoryview(b"mv"), b"mv"),
])
async def test_a_value_is_stored_as_redis_py_would_write_it(client: RedisClient, value: object,
                                                            stored: bytes) -> None:
    await client.set("k", value)  # type: ignore[arg-type]
    assert await client.get("k") == stored


@pytest.mark.parametrize("value", [True, False, None, [1], {"a": 1}])
async def test_a_value_redis_py_refuses_is_refused_with_its_data_error(client: RedisClient, value: object) -> None:
    with pytest.raises(DataError, match="Invalid input of type"):
        await client.set("k", value)  # type: ignore[arg-type]
    assert await client.exists("k") == 0


async def test_a_pipeline_and_a_command_name_of_two_words_reach_redis(client: RedisClient) -> None:
    pipe = client.pipeline(transaction=False)
    pipe.hset("h", mapping={"f": 1.25, "g": "x"})
    pipe.zadd("z", {"m": 7})
    pipe.hgetall("h")
    pipe.zscore("z", "m")
    *_, fields, score = await pipe.execute()
    assert fields == {b"f": b"1.25", b"g": b"x"}
    assert score == 7.0
    assert "maxmemory" in {k.decode() if isinstance(k, bytes) else k for k in await client.config_get("maxmemory")}


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


async def test_a_pooled_connection_left_with_unread_replies_is_not_lent_as_it_is(client: RedisClient) -> None:
    """Whoever returned a connection with replies still to read (a bug, a cut-off caller): the pool checks
    it before lending it and reconnects, as redis-py's pool does."""
    pool: Any = client.connection_pool
    connection = await pool.get_connection()
    await connection.send_command("SET", "k", b"stale")
    await asyncio.sleep(0.05)  # its reply is in the socket, unread
    await pool.release(connection)
    assert await pipelined(client, [("get", ("k",)), ("incr", ("n",))], []) == [b"stale", 1]
