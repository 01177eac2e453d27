"""The store's clients pack commands through hiredis without redis-py's per-argument encoding: what reaches
Redis, and what is refused, is what redis-py itself sends and refuses."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.exceptions import DataError

from store.client import RedisClient, open_redis


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
