"""The Redis client rides out blips and bursts, against real valkey-server processes.

Each test sets the client from ``open_redis`` beside a plain ``redis.asyncio.Redis.from_url`` client in
the same situation, so it shows what the settings in store/client.py change for a caller.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as redis_asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError
from redis.exceptions import TimeoutError as RedisTimeoutError

from store.client import RETRY_BUDGET_EXTRA_S, open_redis
from store.embedded import EmbeddedValkey
from store.pipelined import pipelined

KEY = b"parked:turn-1"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # A short path keeps the unix socket in the data dir, so a restarted server listens where it did.
    path = Path(tempfile.mkdtemp(prefix="hitl-rc-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def server(short_dir: Path) -> AsyncIterator[EmbeddedValkey]:
    valkey = EmbeddedValkey(short_dir)
    await valkey.start()
    yield valkey
    await valkey.stop()


async def _start_after(server: EmbeddedValkey, delay_s: float) -> str:
    await asyncio.sleep(delay_s)
    return await server.start()


class SilentProxy:
    """A TCP front for the server that can drop its connections without telling the clients.

    After :meth:`drop_connections` the server side of every open connection is gone (as when the server
    behind a load balancer or NAT restarts), but a client learns of it only when it next sends: then
    its connection is closed in its face, "Connection closed by server". New connections work.

    After :meth:`stall_after` each open connection passes on ``n`` more bytes of replies, then holds the
    rest for ``hold_s`` (a server stuck in a long fsync, a network path gone quiet); new ones are not held.
    """

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.port = 0
        self._dropped: set[asyncio.StreamWriter] = set()
        self._upstreams: set[asyncio.StreamWriter] = set()
        self._budgets: dict[asyncio.StreamWriter, int] = {}  # per client: bytes before a stall (-1: none)
        self.hold_s = 0.0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        self.drop_connections()

    def stall_after(self, n: int, hold_s: float) -> None:
        self.hold_s = hold_s
        for writer in self._budgets:
            self._budgets[writer] = n

    def drop_connections(self) -> None:
        for upstream in self._upstreams:
            self._dropped.add(upstream)
            upstream.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, upstream = await asyncio.open_unix_connection(self.socket_path)
        self._upstreams.add(upstream)
        self._budgets[writer] = -1

        async def to_client() -> None:
            while data := await up_reader.read(65536):
                budget = self._budgets.get(writer, -1)
                if 0 <= budget < len(data):
                    writer.write(data[:budget])
                    self._budgets[writer] = 0
                    await asyncio.sleep(self.hold_s)
                    writer.write(data[budget:])
                else:
                    writer.write(data)
                    if budget > 0:
                        self._budgets[writer] = budget - len(data)
                await writer.drain()
            # the server side is gone: say nothing to the client

        answering = asyncio.create_task(to_client())
        try:
            while (data := await reader.read(65536)) and upstream not in self._dropped:
                upstream.write(data)
                await upstream.drain()
        except ConnectionError:
            pass
        finally:
            answering.cancel()
            upstream.close()
            writer.close()
            self._upstreams.discard(upstream)
            self._budgets.pop(writer, None)


@pytest.mark.parametrize("embedded", [False, True], ids=["REDIS_URL", "embedded"])
async def test_a_command_sent_while_the_server_restarts_waits_for_it(short_dir: Path, embedded: bool) -> None:
    if embedded:  # open_redis(None) starts and owns the server; restart that one
        handle = await open_redis(None, data_dir=short_dir)
        server = handle.server
        assert server is not None
    else:
        server = EmbeddedValkey(short_dir)
        handle = await open_redis(await server.start())
    plain = redis_asyncio.Redis.from_url(handle.url)
    try:
        await handle.client.set(KEY, b"state")
        assert await plain.get(KEY) == b"state"  # both now hold a pooled connection

        await server.stop()
        restart = asyncio.create_task(_start_after(server, 0.3))
        with pytest.raises(RedisConnectionError):  # the plain client gives up at once
            await plain.get(KEY)
        started = time.monotonic()
        assert await handle.client.get(KEY) == b"state"  # ours waits for the server, which kept the data
        assert time.monotonic() - started < 2.0
        assert await restart == handle.url  # back on the same socket, where the client reconnects
    finally:
        await plain.aclose()
        await handle.close()
        await server.stop()


async def test_a_pooled_connection_the_server_dropped_is_replaced(server: EmbeddedValkey) -> None:
    proxy = SilentProxy(server.url.removeprefix("unix://"))
    await proxy.start()
    url = f"redis://127.0.0.1:{proxy.port}/0"
    handle = await open_redis(url)
    plain = redis_asyncio.Redis.from_url(url)
    try:
        await handle.client.set(KEY, b"state")
        assert await plain.get(KEY) == b"state"

        proxy.drop_connections()
        with pytest.raises(RedisConnectionError, match="Connection closed by server"):
            await plain.get(KEY)
        assert await handle.client.get(KEY) == b"state"
        # a second drop is survived as well (each command gets its own retries)
        proxy.drop_connections()
        assert await handle.client.get(KEY) == b"state"
    finally:
        await plain.aclose()
        await handle.close()
        await proxy.stop()


async def test_a_burst_larger_than_the_pool_waits_for_free_connections(server: EmbeddedValkey) -> None:
    handle = await open_redis(server.url, max_connections=4)
    plain = redis_asyncio.Redis.from_url(server.url, max_connections=4)
    admin = redis_asyncio.Redis.from_url(server.url)
    count_once = "return redis.call('INCR', KEYS[1])"
    try:
        results = await asyncio.gather(*(handle.client.eval(count_once, 1, b"ours") for _ in range(200)))
        assert sorted(results) == list(range(1, 201))  # every command ran, and ran once
        assert len(await admin.client_list()) <= 4 + 1  # ours kept to its 4 connections (+ admin)

        plain_results = await asyncio.gather(
            *(plain.eval(count_once, 1, b"plain") for _ in range(200)), return_exceptions=True
        )
        assert any(isinstance(r, MaxConnectionsError) for r in plain_results)
    finally:
        await plain.aclose()
        await admin.aclose()
        await handle.close()


async def test_a_server_that_never_answers_fails_the_command_in_bounded_time() -> None:
    async def accept_and_never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(65536):
            pass
        writer.close()

    silent = await asyncio.start_server(accept_and_never_answer, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    timeout_s = 0.2
    handle = await open_redis(f"redis://127.0.0.1:{port}/0", socket_timeout=timeout_s)
    try:
        started = time.monotonic()
        with pytest.raises(RedisTimeoutError):
            await handle.client.get(KEY)
        elapsed = time.monotonic() - started
        # the retry budget (one timeout plus the backoff schedule), plus the tries in flight at its end
        assert timeout_s <= elapsed < timeout_s + RETRY_BUDGET_EXTRA_S + 3 * timeout_s + 0.5, elapsed
    finally:
        await handle.close()
        silent.close()


async def test_a_reply_that_stalls_halfway_is_cut_off_and_never_read_by_the_next_command(
    server: EmbeddedValkey,
) -> None:
    """A pipeline whose first reply came and whose second stalls: the try ends at the round trip's
    deadline, its half-read connection is dropped, and the retry on a fresh one gets every reply; the
    stalled bytes arriving later are read by no one (a reused connection would hand them to the next
    command as its own reply)."""
    proxy = SilentProxy(server.url.removeprefix("unix://"))
    await proxy.start()
    timeout_s = 0.2
    handle = await open_redis(f"redis://127.0.0.1:{proxy.port}/0", socket_timeout=timeout_s)
    try:
        await handle.client.set(KEY, b"before")  # a pooled connection, then held mid-reply
        proxy.stall_after(len(b"+OK\r\n"), hold_s=3 * timeout_s)
        started = time.monotonic()
        pipe = handle.client.pipeline(transaction=False)
        pipe.set(KEY, b"after")
        pipe.get(KEY)
        assert await pipe.execute() == [True, b"after"]
        assert timeout_s <= time.monotonic() - started < timeout_s + RETRY_BUDGET_EXTRA_S
        await asyncio.sleep(3 * timeout_s)  # the stalled GET reply ("before"?) is sent now, to a closed socket
        assert await handle.client.get(KEY) == b"after"
        assert await handle.client.incr(b"counter") == 1
    finally:
        await handle.close()
        await proxy.stop()


async def test_a_round_trip_on_a_healthy_server_starts_no_task(server: EmbeddedValkey) -> None:
    """One deadline bounds each round trip (``BoundedRetry``'s), instead of redis-py's socket timeout,
    which on Python 3.11 starts a task per write (``asyncio.wait_for``) and arms a timer per reply read:
    ~50 µs of CPU a round trip, ~10 round trips an approve cycle (docs/PERFORMANCE.md)."""
    handle = await open_redis(server.url)
    loop = asyncio.get_running_loop()
    started: list[str] = []

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        started.append(getattr(coro, "__qualname__", repr(coro)))
        return asyncio.Task(coro, loop=loop, **kwargs)

    try:
        await handle.client.set(KEY, b"state")  # connected (its handshake is not what is counted)
        loop.set_task_factory(counting)
        try:
            pipe = handle.client.pipeline(transaction=False)
            pipe.get(KEY)
            pipe.incr(b"counter")
            assert await pipe.execute() == [b"state", 1]
            assert await handle.client.get(KEY) == b"state"
        finally:
            loop.set_task_factory(None)
        assert started == []
    finally:
        await handle.close()


async def test_a_command_waits_for_a_busy_pool_then_fails_naming_why(server: EmbeddedValkey) -> None:
    """With every connection lent out, a command waits for one to come free (and then runs), or fails
    "No connection available." after the pool's timeout (``?timeout=`` in REDIS_URL), never hangs."""
    handle = await open_redis(f"{server.url}?timeout=0.3", max_connections=1)
    pool = handle.client.connection_pool
    try:
        held = await pool.get_connection()
        started = time.monotonic()
        with pytest.raises(RedisConnectionError, match="No connection available"):
            await handle.client.get(KEY)
        assert 0.3 <= time.monotonic() - started < 1.5

        waiting = asyncio.create_task(handle.client.set(KEY, b"state"))
        await asyncio.sleep(0.1)
        assert not waiting.done()  # still waiting for the one connection
        await pool.release(held)
        assert await waiting is True
        assert await handle.client.get(KEY) == b"state"
    finally:
        await handle.close()


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
