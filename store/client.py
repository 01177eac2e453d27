"""Opening the Redis connection the bot runs on (DESIGN §9).

``REDIS_URL`` set → a client on that server (``redis://``, ``rediss://``, ``unix://``; Redis Cluster when
asked). Unset → a private embedded Valkey in a data directory, owned by the returned handle.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias
from urllib.parse import urlsplit

import redis.asyncio as redis_asyncio
from redis.exceptions import RedisError

from store.embedded import EmbeddedValkey

DEFAULT_DATA_DIR = Path(".data/redis")
SUPPORTED_SCHEMES = ("redis", "rediss", "unix")
_PASSWORD_IN_URL = re.compile(r"(//[^/@:]*:)[^@/]*@")

RedisClient: TypeAlias = redis_asyncio.Redis | redis_asyncio.RedisCluster


@dataclass
class RedisHandle:
    """A connected client, plus the embedded server behind it when we started one."""

    client: RedisClient
    url: str
    server: EmbeddedValkey | None = None

    async def close(self) -> None:
        """Close the client, then stop the embedded server if this handle owns one."""
        try:
            await self.client.aclose()
        finally:
            if self.server is not None:
                await self.server.stop()


async def open_redis(url: str | None, *, cluster: bool = False, data_dir: Path | None = None) -> RedisHandle:
    """Connect to ``url`` (the value of REDIS_URL), or start an embedded server in ``data_dir`` when None.

    The client uses ``decode_responses=False`` (keys and values are bytes). Connecting to an external
    server is lazy: use :func:`ping` to check it answers. A malformed url raises ``ValueError`` naming
    REDIS_URL; a busy data dir raises ``store.embedded.DataDirInUse``.
    """
    if url is not None and url.strip():
        return RedisHandle(client=_client_for_url(url.strip(), cluster=cluster), url=url.strip())
    if cluster:
        raise ValueError("REDIS_CLUSTER=1 needs REDIS_URL to point at a Redis Cluster node")
    server = EmbeddedValkey(data_dir if data_dir is not None else DEFAULT_DATA_DIR)
    server_url = await server.start()
    try:
        client = redis_asyncio.Redis.from_url(server_url, decode_responses=False)
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


def _client_for_url(url: str, *, cluster: bool) -> RedisClient:
    _validate_url(url, cluster=cluster)
    try:
        if cluster:
            return redis_asyncio.RedisCluster.from_url(url, decode_responses=False)
        return redis_asyncio.Redis.from_url(url, decode_responses=False)
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
