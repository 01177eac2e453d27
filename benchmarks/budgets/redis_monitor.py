"""Redis's own ``MONITOR`` for tests that assert which commands a flow costs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis.asyncio import Redis


class Monitored:
    """The commands Redis ran while recording, each as a tuple of its words, with when (Redis's clock) and
    who ran it (``client_type``: "lua" for a script's own commands, else the app's)."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, ...]] = []
        self.times: list[float] = []
        self.kinds: list[str] = []

    def naming(self, fragment: str) -> list[tuple[str, ...]]:
        return [c for c in self.commands if any(fragment in word for word in c[1:])]

    def times_naming(self, fragment: str) -> list[float]:
        return [t for c, t in zip(self.commands, self.times, strict=True) if any(fragment in w for w in c[1:])]

    def by_kind(self) -> list[tuple[str, str]]:
        """(client type, the command as one string), in order."""
        return [(kind, " ".join(c)) for kind, c in zip(self.kinds, self.commands, strict=True)]


@asynccontextmanager
async def monitored(redis_url: str) -> AsyncIterator[Monitored]:
    seen = Monitored()
    client = Redis.from_url(redis_url)
    ready = asyncio.Event()

    async def listen() -> None:
        async with client.monitor() as monitor:
            ready.set()
            async for command in monitor.listen():
                seen.commands.append(tuple(str(command["command"]).split()))
                seen.times.append(float(command["time"]))
                seen.kinds.append(str(command.get("client_type", "")))

    task = asyncio.create_task(listen())
    await asyncio.wait_for(ready.wait(), 5)
    await asyncio.sleep(0.05)  # MONITOR is registered server-side
    try:
        yield seen
    finally:
        await asyncio.sleep(0.1)  # the last commands reach the monitor
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.aclose()
