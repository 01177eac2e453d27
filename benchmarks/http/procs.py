"""Contender processes as the bench holds them: start, ask for CPU time, wait for idle, stop or kill -9."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import aiohttp

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 60.0


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without anything that configures the app (a developer's SLACK_APP_TOKEN would
    switch it to Socket Mode), plus the repository on the path and ``extra``."""
    kept = {k: v for k, v in os.environ.items()
            if not k.startswith(("SLACK_", "BOT_", "OPENAI_", "REDIS_", "LOCALSLACK_")) and k not in ("MODEL", "HOST", "PORT")}
    return {**kept, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", **(extra or {})}


@dataclass
class Child:
    """One contender process started with ``python -m <module>``; it prints one JSON line when ready."""

    process: asyncio.subprocess.Process
    url: str
    control: str
    log: IO[Any]
    _http: aiohttp.ClientSession

    @classmethod
    async def start(cls, module: str, args: list[str], log_path: Path, env: dict[str, str] | None = None, *,
                    under: list[str] = (), ready_timeout_s: float = READY_TIMEOUT_S) -> Child:  # type: ignore[assignment]
        """``under``: a command the interpreter runs under (``valgrind …``: benchmarks.http.instructions)."""
        log = log_path.open("ab")
        process = await asyncio.create_subprocess_exec(
            *under, sys.executable, "-m", module, *args, cwd=log_path.parent, env=child_env(env),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=log)
        assert process.stdout is not None
        try:
            line = await asyncio.wait_for(process.stdout.readline(), ready_timeout_s)
            ready = json.loads(line)
        except (TimeoutError, ValueError) as exc:
            process.kill()
            await process.wait()
            raise RuntimeError(f"{module} did not start; see {log_path}") from exc
        return cls(process, ready["url"], ready["control"], log, aiohttp.ClientSession())

    async def _get(self, path: str) -> dict[str, Any]:
        async with self._http.get(f"{self.control}{path}", timeout=aiohttp.ClientTimeout(total=120)) as answer:
            answer.raise_for_status()
            return await answer.json()

    async def cpu_s(self) -> float:
        return float((await self._get("/cpu"))["cpu_s"])

    async def idle(self) -> None:
        await self._get("/idle")

    async def profile(self, on: bool, to: Path | None = None) -> None:
        await self._get("/profile/on" if on else f"/profile/off?to={to}")

    async def stop(self) -> None:
        await self._http.close()
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 15)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        self.log.close()
