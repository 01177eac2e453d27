"""The tracked task groups shutdown drains and cancels (``bot.ops.background``): the engine's and the listeners'."""

from __future__ import annotations

import asyncio
import logging

import pytest

from bot.ops.background import Background


async def test_waiting_for_idle_waits_for_work_started_meanwhile():
    tasks, done = Background(), []

    async def second() -> None:
        await asyncio.sleep(0.01)
        done.append("second")

    async def first() -> None:
        await asyncio.sleep(0.01)
        tasks.spawn(second(), what="second")  # a note that starts another (a settle, then the resume)
        done.append("first")

    tasks.spawn(first(), what="first")
    await tasks.wait_idle()
    assert done == ["first", "second"] and not tasks.busy()


async def test_abandoning_cancels_what_still_runs_and_says_how_much():
    tasks, stuck = Background(), asyncio.Event()
    waiting = tasks.spawn(stuck.wait(), what="waits forever")
    finished = tasks.spawn(asyncio.sleep(0), what="ends at once")
    await finished
    assert await tasks.abandon(within_s=1.0) == 1
    assert waiting.cancelled() and not tasks.busy()


async def test_one_failure_is_logged_with_what_it_was_and_stops_nothing_else(caplog: pytest.LogCaptureFixture):
    tasks = Background()

    async def fails() -> None:
        raise RuntimeError("slack said no")

    other = tasks.spawn(asyncio.sleep(0.02, result="sent"), what="another note")
    tasks.spawn(fails(), what="a private note to U1")
    with caplog.at_level(logging.ERROR):
        await tasks.wait_idle()
    assert other.result() == "sent"
    assert [r.getMessage() for r in caplog.records] == ["background task failed: a private note to U1"]
