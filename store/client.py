"""Opening the Redis connection the bot runs on (DESIGN §9).

``REDIS_URL`` set → a client on that server (``redis://``, ``rediss://``, ``unix://``; Redis Cluster when
asked). Unset → a private embedded Valkey in a data directory, owned by the returned handle; or, for the
CLI beside a running bot (``join=True``), a client on the server that bot shares (``share=True``).

Every client is built to ride out a blip and a burst:

- Bounded waits. Every connect has a timeout (``CONNECT_TIMEOUT_S``) and every try of a command or
  pipeline one deadline (``SOCKET_TIMEOUT_S``, set by ``BoundedRetry``), so no call made before a Slack
  ack can hang. What runs outside a try (a pooled connection's handshake) keeps the socket timeout.
- Retries on a fresh connection. On a ``ConnectionError`` or ``TimeoutError`` (a restart, a pooled
  connection the server or a load balancer dropped: "Connection closed by server") redis-py drops the
  connection, reconnects and sends the command again, up to ``RETRIES`` times with jittered exponential
  backoff: 0.7-1.4 s in all, which spans a restart. ``BoundedRetry`` caps the time spent retrying, as
  redis-py nests its retries. Connections idle for ``HEALTH_CHECK_INTERVAL_S`` are PINGed before use, so
  a dead one is found by a PING (safe to repeat) rather than by the command.
- A pool that waits. Non-cluster clients use a pool of ``MAX_CONNECTIONS`` (``WaitingPool``): a burst
  waits up to ``POOL_TIMEOUT_S`` for a free connection instead of raising ``MaxConnectionsError``.
  redis-py's cluster client cannot wait; its cap per node is set high instead.
- A failover ridden out (``REDIS_CLUSTER=1``). The cluster client follows MOVED and ASK and waits out
  TRYAGAIN itself; on a connection error, a timeout or CLUSTERDOWN it refreshes the slot map and sends
  the command again, ``CLUSTER_RETRIES`` times with the same jittered backoff capped at 1 s: 4.2-8.4 s in
  all, which spans the promotion of a replica when the cluster's ``cluster-node-timeout`` is at most ~3 s
  (tests/test_cluster.py kills a master with 1 s). Its node connections do not retry on their own (the
  cluster client owns retries), so ``BoundedRetry``'s budget does not apply there.

Values in the URL's query string win over these defaults (``?max_connections=128&timeout=10``).

Retried writes. When a connection fails after a command was sent and before its reply was read, the
whole command (or pipeline) is sent again, so a write may reach the server twice. The engine's writes
that would change meaning when repeated (commit, settle, tool start, message record, inbox take) are
``replay_safe`` scripts (store/turn_scripts.py): a resent copy gets the first answer back and applies
nothing (tests/test_store_replay.py loses a reply on purpose). The rest are idempotent on replay
(SET/HSET/ZADD/ZREM/DEL/PEXPIRE, token-checked lease renew/release and outbox unlock) or only delay
work when repeated (a lease or post claim's SET NX answers "taken", which lapses with its TTL); failure
counters (INCR/HINCRBY) may count one extra failure, and a resent audit append finds its session's audit
progress moved and is refused (store/audit_events.py).
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias, TypeVar
from urllib.parse import urlsplit

import hiredis
import redis.asyncio as redis_asyncio
from redis.asyncio.retry import Retry
from redis.backoff import AbstractBackoff, EqualJitterBackoff
from redis.exceptions import ClusterDownError, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from store.embedded import DataDirInUse, EmbeddedValkey, shared_server

DEFAULT_DATA_DIR = Path(".data/redis")
# The store cannot be reached (down, hung, a cluster without a master for a slot): what a caller may
# answer "try again" to, as nothing was recorded
UNREACHABLE: tuple[type[Exception], ...] = (RedisConnectionError, RedisTimeoutError, ClusterDownError)
# Any error a store call may raise (Redis's own, UNREACHABLE's among them): what code outside store/ catches,
# so that it imports no Redis library
StoreError = RedisError
SUPPORTED_SCHEMES = ("redis", "rediss", "unix")
_PASSWORD_IN_URL = re.compile(r"(//[^/@:]*:)[^@/]*@")

# Connecting to Redis takes milliseconds; 2 s still covers one lost SYN (retransmitted after 1 s).
CONNECT_TIMEOUT_S = 2.0
# Our commands are short scripts and O(1) reads answering in milliseconds, and none blocks (no BLPOP,
# no XREAD BLOCK). The longest a healthy server stalls is the ~2 s write delay of appendfsync everysec
# on a slow disk; 3 s never cuts that off (a cut-off write would be resent), while one try on a hung
# server ends in about the time Slack gives us to ack. (Slack's 3 s cannot bound a hung server anyway:
# we never ack what is not recorded. The budget below makes such a command fail in ~6 s, not ~50 s.)
SOCKET_TIMEOUT_S = 3.0
# After this long idle, a pooled connection is PINGed before use: a dead one costs a harmless PING
# and a reconnect instead of the command.
HEALTH_CHECK_INTERVAL_S = 10
# Backoff before retry n is between half and all of min(cap, base * 2**n): 0.1-0.2, 0.2-0.4 and 0.4-0.8 s.
# The guaranteed ~0.7 s spans a restart of the server (embedded Valkey is back in well under 0.1 s); the
# ~1.4 s at most keeps a click within Slack's 3 s; the jitter keeps replicas from reconnecting in step.
RETRIES = 3
RETRY_BACKOFF_BASE_S = 0.1
RETRY_BACKOFF_CAP_S = 1.0
# No retry starts later than one socket timeout plus the whole backoff schedule after a command's first
# try: every retry fits after failures that are quick (refused, closed), one fits after a timeout (a
# half-open connection), and a server that accepts but never answers fails a command in about two
# socket timeouts instead of the ~16 that redis-py's nested retries would otherwise add up to.
RETRY_BUDGET_EXTRA_S = 1.5
# Connections per process. Connections open on demand; a burst beyond this waits for a free one (in
# milliseconds, as commands are short) for up to POOL_TIMEOUT_S, then fails rather than hanging forever.
MAX_CONNECTIONS = 64
POOL_TIMEOUT_S = 5.0
# redis-py's cluster client cannot wait for a connection (it raises at its cap), so its cap per node is
# high enough that a burst is bounded by our own concurrency instead. Still far below Redis' maxclients.
CLUSTER_MAX_CONNECTIONS_PER_NODE = 512
# A master that dies is declared failed after the cluster's cluster-node-timeout, then a replica is elected
# (about a second more); meanwhile its slots answer "connection refused", then CLUSTERDOWN. Ten retries with
# the backoff above capped at 1 s wait 4.2-8.4 s before giving up: a failover with cluster-node-timeout up to
# ~3 s is invisible to callers (redis's default, 15 s, is not: lower it for the bot's cluster).
CLUSTER_RETRIES = 10

RedisClient: TypeAlias = redis_asyncio.Redis | redis_asyncio.RedisCluster
_T = TypeVar("_T")
# When the outermost retrying call of the current task must stop retrying (see BoundedRetry).
_retry_deadline: ContextVar[float | None] = ContextVar("redis_retry_deadline", default=None)
# Set while a try runs under BoundedRetry's deadline: its connection then arms no timeout of its own.
_in_bounded_try: ContextVar[bool] = ContextVar("redis_in_bounded_try", default=False)


class BoundedRetry(Retry):
    """redis-py's Retry, with a time budget and one deadline per try.

    The budget: no retry starts later than ``budget_s`` after the first try. redis-py nests retries (a
    command's retry reconnects, the reconnect retries, the health check's PING retries, each with this
    policy), so against a server that accepts and never answers the tries multiply: 16 of
    ``SOCKET_TIMEOUT_S`` each. The budget is set by the outermost call in the task and shared by the calls
    nested in it.

    The deadline: each try (a command, or a whole pipeline, with its health check) ends after
    ``try_s`` as a ``TimeoutError`` that is retried on a fresh connection (redis-py drops a connection
    whose read or write was cut off). It replaces the connections' socket timeout inside the try
    (``_DeadlineBound``): redis-py arms that per write, as a task on Python 3.11 (``asyncio.wait_for``), and
    per reply read, ~50 µs of CPU a round trip where one deadline costs ~10 (docs/PERFORMANCE.md).
    """

    def __init__(self, backoff: AbstractBackoff, retries: int, *, budget_s: float, try_s: float) -> None:
        super().__init__(backoff, retries)
        self.budget_s = budget_s
        self.try_s = try_s

    async def call_with_retry(
        self, do: Callable[[], Awaitable[_T]], fail: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> _T:
        loop = asyncio.get_running_loop()
        deadline, token = _retry_deadline.get(), None
        if deadline is None:
            deadline = loop.time() + self.budget_s
            token = _retry_deadline.set(deadline)

        async def one_try() -> _T:
            bounded = _in_bounded_try.set(True)
            try:
                async with asyncio.timeout(self.try_s):
                    return await do()
            except TimeoutError as exc:  # the deadline's (builtin): a Redis timeout, retried and caught as one
                raise RedisTimeoutError(f"Redis did not answer within {self.try_s:g} s") from exc
            finally:
                _in_bounded_try.reset(bounded)

        async def fail_within_budget(error: Exception, *failures: int) -> None:
            await fail(error, *failures)  # redis-py's clean-up: drop the broken connection
            if loop.time() >= deadline:
                raise error

        try:
            return await super().call_with_retry(one_try, fail_within_budget, *args, **kwargs)
        finally:
            if token is not None:
                _retry_deadline.reset(token)


class _DeadlineBound:
    """A connection that arms no socket timeout of its own inside a ``BoundedRetry`` try (whose deadline
    bounds the write and every read), and its socket timeout outside one (a pooled connection's
    handshake, made before the command's try begins)."""

    socket_timeout: float | None
    is_connected: bool

    async def connect(self) -> None:
        # the pool asks this of every connection it lends; redis-py answers a connected one only after a
        # pass through the retry policy (a deadline armed and cancelled for nothing)
        if not self.is_connected:
            await super().connect()  # type: ignore[misc]

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not _in_bounded_try.get():
            return await super().send_packed_command(command, check_health)  # type: ignore[misc]
        # the connection is this try's alone until it is released, so the swap is seen by no one else
        timeout, self.socket_timeout = self.socket_timeout, None
        try:
            return await super().send_packed_command(command, check_health)  # type: ignore[misc]
        finally:
            self.socket_timeout = timeout

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        encoder = self.encoder  # type: ignore[attr-defined]
        self._hiredis_packs = encoder.encoding.lower() in ("utf-8", "utf8") and encoder.encoding_errors == "strict"

    def pack_command(self, *args: Any) -> list[bytes]:
        # hiredis packs str (as strict UTF-8), bytes, memoryview, int and float (as repr) itself, as redis-py
        # would; redis-py first encodes every argument in Python (~6 × the cost of the packing). What hiredis
        # refuses (bool, None, bytearray) and a command name with a space in it ("CONFIG GET") go to redis-py's
        # packer: its encoding, its DataError.
        name = args[0]
        if self._hiredis_packs and not (" " in name if isinstance(name, str) else b" " in name):
            try:
                return [hiredis.pack_command(args)]
            except TypeError:
                pass
        return super().pack_command(*args)  # type: ignore[misc]

    def exchanges(self) -> bool:
        """Whether :meth:`exchange` reads its replies as redis-py's pipeline would: bytes (no decoding to
        skip for a command that asks for none), the protocol the client asked for (no RESP2 fallback to
        pick other callbacks for), and inside our retry's tries (their deadline is the only bound on its
        reads)."""
        return (not self.encoder.decode_responses and not self._resp2_fallback  # type: ignore[attr-defined]
                and isinstance(self.retry, BoundedRetry))  # type: ignore[attr-defined]

    async def exchange(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Send ``commands`` in one write and read their replies as the parser gives them (an error reply is
        its exception, as a value), inside a ``BoundedRetry`` try: its deadline bounds the whole exchange.
        redis-py's pipeline reads each reply through six layers (a timeout, observability, protocol checks),
        ~30 % of a round trip's instructions (``benchmarks.redis_client``). A failure leaves the connection
        as redis-py's own read would: dropped, so no later caller reads another's replies. (The parser's
        own read, like redis-py's, handles a RESP3 push message arriving between two replies.)"""
        packed: list[bytes] = []
        for args in commands:  # each command whole (redis-py's pack_commands re-slices them into buffers)
            packed += self.pack_command(*args)
        await self.send_packed_command(packed)  # type: ignore[attr-defined]
        parser = self._parser  # type: ignore[attr-defined]
        replies: list[Any] = []
        try:
            for _ in commands:
                replies.append(await parser.read_response())
        except OSError as exc:
            await self.disconnect(nowait=True)  # type: ignore[attr-defined]
            raise RedisConnectionError(f"Error while reading from Redis: {exc.args}") from exc
        except BaseException:
            await self.disconnect(nowait=True)  # type: ignore[attr-defined]
            raise
        return replies

    async def read_response(self, disable_decoding: bool = False, timeout: float | None = None,  # noqa: ASYNC109 - redis-py's signature
                            **kwargs: Any) -> Any:
        if timeout is None and _in_bounded_try.get():
            timeout = math.inf  # redis-py's "no timeout of the read's own"
        return await super().read_response(disable_decoding, timeout, **kwargs)  # type: ignore[misc]


class _Connection(_DeadlineBound, redis_asyncio.Connection):
    pass


class _SSLConnection(_DeadlineBound, redis_asyncio.SSLConnection):
    pass


class _UnixConnection(_DeadlineBound, redis_asyncio.UnixDomainSocketConnection):
    pass


class WaitingPool(redis_asyncio.ConnectionPool):
    """redis-py's pool, where a burst beyond ``max_connections`` waits up to ``timeout`` for a connection to
    come free ("No connection available." after that), as with its ``BlockingConnectionPool``; but a free
    connection is taken at once: that pool arms a timer and takes a condition for every command, ~15 µs of
    CPU a round trip (``python -m benchmarks.redis_client``)."""

    def __init__(self, *, timeout: float = POOL_TIMEOUT_S, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.timeout = timeout
        self._free = asyncio.Semaphore(self.max_connections)
        self._lent: set[Any] = set()  # what get_connection handed out (only those give a place back)

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        if self._free.locked():
            try:
                async with asyncio.timeout(self.timeout):
                    await self._free.acquire()
            except TimeoutError as exc:
                raise RedisConnectionError("No connection available.") from exc
        else:
            await self._free.acquire()  # (a free place: taken without waiting)
        try:
            if self._available_connections:  # an idle one: taken as redis-py would, less its bookkeeping
                connection = self.get_available_connection()
                try:
                    await self.ensure_connection(connection)  # connected, and no unread data left on it
                except BaseException:
                    await super().release(connection)
                    raise
            else:
                connection = await super().get_connection(*args, **kwargs)
        except BaseException:
            self._free.release()
            raise
        self._lent.add(connection)
        return connection

    async def release(self, connection: Any) -> None:
        try:
            if connection in self._in_use_connections and not connection.should_reconnect():
                # back to the idle list, as redis-py's release does (all of it between two awaits, so its
                # lock is not needed), without its observability counters and released-connection event,
                # neither of which this bot uses (no OpenTelemetry through redis-py, no re-auth listeners)
                self._in_use_connections.remove(connection)
                self._available_connections.append(connection)
            else:
                await super().release(connection)
        finally:
            if connection in self._lent:
                self._lent.discard(connection)
                self._free.release()


_CONNECTION_BY_SCHEME: dict[str, type[redis_asyncio.connection.AbstractConnection]] = {
    "redis": _Connection, "rediss": _SSLConnection, "unix": _UnixConnection,
}


@dataclass
class RedisHandle:
    """A connected client, plus the embedded server behind it when we started one."""

    client: RedisClient
    url: str
    server: EmbeddedValkey | None = None
    owner_pid: int | None = None  # the running bot whose embedded server we joined (it stops it, not us)

    async def close(self) -> None:
        """Close the client, then stop the embedded server if this handle owns one."""
        try:
            await self.client.aclose()
        finally:
            if self.server is not None:
                await self.server.stop()


async def open_redis(
    url: str | None,
    *,
    cluster: bool = False,
    data_dir: Path | None = None,
    max_connections: int = MAX_CONNECTIONS,
    socket_timeout: float = SOCKET_TIMEOUT_S,
    share: bool = False,
    join: bool = False,
) -> RedisHandle:
    """Connect to ``url`` (the value of REDIS_URL), or start an embedded server in ``data_dir`` when None.

    The client uses ``decode_responses=False`` (keys and values are bytes), socket timeouts, retries on
    a fresh connection and a pool of ``max_connections`` that waits when all are busy (see the module
    docstring). Connecting to an external server is lazy: use :func:`ping` to check it answers. A
    malformed url raises ``ValueError`` naming REDIS_URL; a busy data dir raises
    ``store.embedded.DataDirInUse``.

    ``share``: the embedded server we start lets other processes join it (the running bot's).
    ``join``: when a live process serves ``data_dir`` and shares it, use its server (``owner_pid`` set,
    and ``close`` leaves the server running) instead of failing on the busy directory.
    """
    options = _connection_options(socket_timeout)
    if url is not None and url.strip():
        client = _client_for_url(
            url.strip(), cluster=cluster, max_connections=max_connections, options=options
        )
        return RedisHandle(client=client, url=url.strip())
    if cluster:
        raise ValueError("REDIS_CLUSTER=1 needs REDIS_URL to point at a Redis Cluster node")
    server = EmbeddedValkey(data_dir if data_dir is not None else DEFAULT_DATA_DIR, shared=share)
    try:
        server_url = await server.start()
    except DataDirInUse:
        if not join or (running := await shared_server(server.data_dir)) is None:
            raise
        client = _pooled_client(running.url, max_connections=max_connections, options=options)
        return RedisHandle(client=client, url=running.url, owner_pid=running.owner_pid)
    try:
        client = _pooled_client(server_url, max_connections=max_connections, options=options)
    except BaseException:
        await server.stop()
        raise
    return RedisHandle(client=client, url=server_url, server=server)


async def ping(client: RedisClient, *, within_s: float = 2.0) -> bool:
    """True when the server answers PING within ``within_s`` seconds; never raises for a dead server."""
    try:
        async with asyncio.timeout(within_s):
            return bool(await client.ping())
    except (RedisError, OSError, TimeoutError):
        return False


def _connection_options(socket_timeout: float) -> dict[str, Any]:
    """What every connection we open is configured with (each connection gets its own copy of retry)."""
    return {
        "decode_responses": False,
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
        "retry": BoundedRetry(_backoff(), RETRIES, budget_s=socket_timeout + RETRY_BUDGET_EXTRA_S,
                              try_s=socket_timeout),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
    }


def _backoff() -> AbstractBackoff:
    return EqualJitterBackoff(cap=RETRY_BACKOFF_CAP_S, base=RETRY_BACKOFF_BASE_S)


def _pooled_client(url: str, *, max_connections: int, options: dict[str, Any]) -> redis_asyncio.Redis:
    pool = WaitingPool.from_url(
        url, max_connections=max_connections, timeout=POOL_TIMEOUT_S,
        connection_class=_CONNECTION_BY_SCHEME[urlsplit(url).scheme], **options,
    )
    return redis_asyncio.Redis.from_pool(pool)  # the client owns the pool: aclose() closes it


def _client_for_url(
    url: str, *, cluster: bool, max_connections: int = MAX_CONNECTIONS, options: dict[str, Any] | None = None
) -> RedisClient:
    """A client on ``url``; ``max_connections`` sizes the waiting pool (not the cluster client's)."""
    _validate_url(url, cluster=cluster)
    options = options if options is not None else _connection_options(SOCKET_TIMEOUT_S)
    try:
        if cluster:
            return redis_asyncio.RedisCluster.from_url(
                url, max_connections=CLUSTER_MAX_CONNECTIONS_PER_NODE,
                **{**options, "retry": Retry(_backoff(), CLUSTER_RETRIES)},
            )
        return _pooled_client(url, max_connections=max_connections, options=options)
    except (ValueError, TypeError, RedisError) as exc:
        raise ValueError(f"REDIS_URL {_redacted(url)!r} is not a valid Redis URL: {exc}") from exc


def _validate_url(url: str, *, cluster: bool) -> None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a non-numeric or out-of-range port
    except ValueError as exc:
        raise ValueError(f"REDIS_URL {_redacted(url)!r} is not a valid URL: {exc}") from None
    if parts.scheme not in SUPPORTED_SCHEMES:
        raise ValueError(f"REDIS_URL must start with redis://, rediss:// or unix://, got {_redacted(url)!r}")
    if parts.scheme == "unix":
        if not parts.path:
            raise ValueError(f"REDIS_URL {_redacted(url)!r} has no socket path (unix:///path/to/redis.sock)")
        if cluster:
            raise ValueError("REDIS_URL must be redis:// or rediss:// with REDIS_CLUSTER=1 (no unix sockets)")
    elif not parts.hostname:
        raise ValueError(f"REDIS_URL {_redacted(url)!r} has no host (redis://host:6379/0)")


def _redacted(url: str) -> str:
    """The url without its password, safe for error messages and logs."""
    return _PASSWORD_IN_URL.sub(r"\1***@", url)
