"""Pacing Slack calls (handlers/delivery/pacing.py): bursts go at once, then one per interval, per key."""

from __future__ import annotations

import pytest

from bot.ports import RetryLater
from handlers.delivery.pacing import Pacer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds


async def test_a_burst_goes_at_once_then_one_call_per_interval() -> None:
    clock = Clock()
    pacer = Pacer(interval_s=1.0, burst=3, clock=clock, sleep=clock.sleep)
    for _ in range(5):
        await pacer.wait("C1", max_wait_s=10)
    assert clock.slept == [1.0, 1.0]  # calls 4 and 5 each wait for the next free second
    clock.now += 10  # an idle channel earns its burst back
    clock.slept.clear()
    for _ in range(3):
        await pacer.wait("C1", max_wait_s=10)
    assert clock.slept == []


async def test_channels_are_paced_independently() -> None:
    clock = Clock()
    pacer = Pacer(interval_s=1.0, burst=1, clock=clock, sleep=clock.sleep)
    await pacer.wait("C1")
    await pacer.wait("C2")
    assert clock.slept == []


async def test_a_long_wait_is_handed_back_without_taking_a_slot() -> None:
    clock = Clock()
    pacer = Pacer(interval_s=1.0, burst=1, clock=clock, sleep=clock.sleep)
    # three callers at the same instant queue up: now, in 1 s, in 2 s
    assert [pacer.reserve("C1") for _ in range(3)] == [0.0, 1.0, 2.0]
    with pytest.raises(RetryLater) as raised:
        await pacer.wait("C1", max_wait_s=2.5)  # its slot would be 3 s away: come back later
    assert raised.value.delay_s == 3.0
    assert clock.slept == []
    assert pacer.reserve("C1") == 3.0  # the refused caller took no slot
