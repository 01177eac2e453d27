"""A long-running bot's heap: what its start built is left out of the garbage collector's scans.

A started bot holds ~100,000 objects that live as long as the process (modules, pydantic schemas, Bolt's
app, the tool registry). CPython's cyclic collector walks all of them again in every full collection, and
runs a young collection every 700 allocations. Freezing what the start built and collecting the young
generation less often halved the collector's time per approve cycle and took ~10 % off the process's CPU
per cycle (docs/PERFORMANCE.md, "The contract's events, the garbage collector and the keeper"). Objects
made later are collected as before; objects whose last reference goes are freed at once, frozen or not
(only a start-time object dropped later inside a reference cycle would never be reclaimed: the start's
objects are the process's own for its whole life).

For the process that serves (``python -m bot run``), not for a library caller: a test suite that starts
many bots in one process would keep the cycles of every earlier one.
"""

from __future__ import annotations

import gc

# young objects allocated (net) between two young collections: CPython's default is 700; a cycle allocates
# tens of thousands, so the young generation was collected dozens of times per approve cycle
YOUNG_THRESHOLD = 10_000


def settle_after_start() -> None:
    """Freeze the objects alive now (no collection first: a started bot leaves ~40 unreachable ones, and a
    full collection would add ~45 ms to the start) and collect the young generation less often."""
    gc.freeze()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(YOUNG_THRESHOLD, young), middle, old)
