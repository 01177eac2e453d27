"""The serving process's heap settling (bot.ops.heap): the start's objects leave the collector's scans, and
garbage made afterwards is still reclaimed."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from bot.ops.heap import settle_after_start


@pytest.fixture
def settled() -> Iterator[None]:
    threshold = gc.get_threshold()
    settle_after_start()
    try:
        yield
    finally:
        gc.unfreeze()
    assert gc.get_threshold() == threshold  # how often the collector runs is CPython's, as before


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_what_was_alive_at_the_start_is_left_out_of_every_collection(settled: None) -> None:
    assert gc.get_freeze_count() > 1_000  # this process's modules and test machinery, at least


def test_a_cycle_made_after_the_start_is_still_reclaimed(settled: None) -> None:
    a, b = Node(), Node()
    a.other, b.other = b, a  # unreachable only as a cycle: refcounts alone never free it
    gone = weakref.ref(a)
    del a, b
    assert gone() is not None
    gc.collect()
    assert gone() is None
