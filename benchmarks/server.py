"""The Redis the bench measures (REDIS_URL or a private embedded Valkey) and a round-trip counter."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as redis_asyncio
from redis.asyncio.connection import ConnectionPool

from store.embedded import EmbeddedValkey


@dataclass
class RoundTrips:
    """Counts writes to the server socket: one command or one whole pipeline is one round trip."""

    sent: int = 0
    connections: int = 0  # connections opened (their handshake commands are counted in ``sent`` too)
    log: list[str] = field(default_factory=list)  # what each round trip carried, e.g. "HGETALL+SMEMBERS"
    logging: bool = False

    def record(self, packed: Any) -> None:
        self.sent += 1
        if self.logging:
            self.log.append("+".join(command_names(packed)))


def counting_client(url: str, db: int | None = None) -> tuple[redis_asyncio.Redis, RoundTrips]:
    """A client whose pool's connections count every ``send_packed_command`` (redis-py funnels
    ``send_command`` and each pipeline's single write through it)."""
    counter = RoundTrips()
    pool = ConnectionPool.from_url(url)
    if db is not None:  # set after parsing: a db in the URL would win over a from_url() argument
        pool.connection_kwargs["db"] = db
    base: type[Any] = pool.connection_class

    class CountingConnection(base):  # type: ignore[valid-type, misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            counter.connections += 1

        async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            counter.record(command)
            await super().send_packed_command(command, check_health)

    pool.connection_class = CountingConnection
    return redis_asyncio.Redis(connection_pool=pool), counter


DATABASES = 3  # the 100-turn population, its control twin, the large population


@dataclass
class BenchServer:
    """Where the bench runs: consecutive logical databases of one server, one per population."""

    url: str
    dbs: list[int]
    embedded: EmbeddedValkey | None = None
    tmp_dir: Path | None = None
    clients: list[redis_asyncio.Redis] = field(default_factory=list)

    def client(self, db: int) -> tuple[redis_asyncio.Redis, RoundTrips]:
        made, counter = counting_client(self.url, db)
        self.clients.append(made)
        return made, counter

    def describe(self) -> str:
        if self.embedded is not None:
            return "embedded valkey-server (unix socket, private temp dir)"
        return f"REDIS_URL {redacted(self.url)}, databases {', '.join(map(str, self.dbs))}"

    async def close(self) -> None:
        for made in self.clients:
            await made.aclose()
        if self.embedded is not None:
            await self.embedded.stop()
        if self.tmp_dir is not None:
            shutil.rmtree(self.tmp_dir, ignore_errors=True)


async def open_server() -> BenchServer:
    """REDIS_URL's database n and the next ones (all must be empty), else a private embedded server."""
    url = os.environ.get("REDIS_URL", "").strip()
    if url and os.environ.get("REDIS_CLUSTER", "").strip() == "1":
        raise SystemExit(
            "bench: REDIS_CLUSTER=1 is not supported (the bench uses several databases of one server)"
        )
    if not url:
        tmp_dir = Path(tempfile.mkdtemp(prefix="hitl-bench-"))
        embedded = EmbeddedValkey(tmp_dir / "data")
        return BenchServer(await embedded.start(), list(range(DATABASES)), embedded=embedded, tmp_dir=tmp_dir)
    probe = redis_asyncio.Redis.from_url(url)
    try:
        first = int(probe.connection_pool.connection_kwargs.get("db") or 0)
    finally:
        await probe.aclose()
    server = BenchServer(url, list(range(first, first + DATABASES)))
    for number in server.dbs:
        sized, _ = counting_client(url, number)
        try:
            if await sized.dbsize():
                raise SystemExit(
                    f"bench: REDIS_URL database {number} is not empty; the bench fills databases "
                    f"{', '.join(map(str, server.dbs))} and flushes them afterwards. Point REDIS_URL at "
                    f"database n where n … n+{DATABASES - 1} are all empty."
                )
        finally:
            await sized.aclose()
    return server


async def server_version(client: redis_asyncio.Redis) -> str:
    info = await client.info("server")
    if "valkey_version" in info:
        return f"valkey {info['valkey_version']}"
    return f"{info.get('server_name') or 'redis'} {info.get('redis_version')}"


def redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def command_names(packed: Any) -> list[str]:
    """The command names in a RESP-packed write (one for a command, several for a pipeline)."""
    data = (
        packed
        if isinstance(packed, bytes)
        else packed.encode()
        if isinstance(packed, str)
        else b"".join(packed)
    )
    names: list[str] = []
    pos = 0
    while pos < len(data) and data[pos : pos + 1] == b"*":
        end = data.index(b"\r\n", pos)
        parts = int(data[pos + 1 : end])
        pos = end + 2
        for index in range(parts):
            end = data.index(b"\r\n", pos)
            size = int(data[pos + 1 : end])
            if index == 0:
                names.append(data[end + 2 : end + 2 + size].decode(errors="replace").upper())
            pos = end + 2 + size + 2
    return names
