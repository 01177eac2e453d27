"""What every contender process shares: announce where it listens, answer the bench's control calls, stop.

Imports only the standard library, aiohttp and ``bot.ops.heap`` (the garbage collector's settings), so a
bare contender started for the restart figure pays for nothing the bench itself needs.

Once it serves, every contender settles its heap as ``python -m bot run`` does (``bot.ops.heap``): the
figures compare the apps, not a process setting any of them could make.
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import os
import signal
import time
from collections.abc import Awaitable, Callable

from aiohttp import web


def cpu_seconds() -> float:
    """This process's CPU time so far, user + system (its threads included, its children not)."""
    times = os.times()
    return times.user + times.system


async def open_site(app: web.Application, port: int = 0) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    return runner, runner.addresses[0][1]


async def control_site(idle: Callable[[], Awaitable[None]]) -> tuple[web.AppRunner, int]:
    """``GET /cpu`` → this process's CPU seconds; ``GET /idle`` → answers once background work is done;
    ``GET /profile/on``, ``/profile/off?to=<file>``: cProfile between the two, its stats written to the file."""

    async def cpu(request: web.Request) -> web.Response:
        return web.json_response({"cpu_s": cpu_seconds()})

    async def wait_idle(request: web.Request) -> web.Response:
        await idle()
        return web.json_response({"ok": True})

    profiler: list[cProfile.Profile] = []

    async def profile_on(request: web.Request) -> web.Response:
        profiler[:] = [cProfile.Profile(time.process_time)]  # CPU time: not the waits of a shared machine
        profiler[0].enable()
        return web.json_response({"ok": True})

    async def profile_off(request: web.Request) -> web.Response:
        profiler[0].disable()
        profiler[0].dump_stats(request.query["to"])
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/cpu", cpu)
    app.router.add_get("/idle", wait_idle)
    app.router.add_get("/profile/on", profile_on)  # instructions --profile: where the Python time went, by function
    app.router.add_get("/profile/off", profile_off)  # ?to=<file>: its pstats
    return await open_site(app)


async def serve_until_stopped(url: str, idle: Callable[[], Awaitable[None]]) -> None:
    """Print where the app answers (one JSON line: the bench waits for it), then run until SIGTERM/SIGINT."""
    from bot.ops.heap import settle_after_start

    control, control_port = await control_site(idle)
    settle_after_start()
    print(json.dumps({"url": url, "control": f"http://127.0.0.1:{control_port}"}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await control.cleanup()
