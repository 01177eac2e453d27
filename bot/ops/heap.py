"""A long-running bot's heap: what its start built is left out of the garbage collector's scans.

A started bot holds ~95,000 objects that live as long as the process (modules, pydantic schemas, Bolt's
app, the tool registry). CPython's cyclic collector walked all of them again in every full collection;
freezing them once the process serves halved the collector's time per approve cycle
(docs/PERFORMANCE.md, "The contract's events, the garbage collector and the keeper"). Objects made later
are collected as before, as often as before; objects whose last reference goes are freed at once, frozen
or not (only a start-time object dropped later inside a reference cycle would never be reclaimed: the
start's objects are the process's own for its whole life).

The young generation's threshold stays CPython's: collecting it less often looked cheaper by CPU time,
but counted it saves no instructions (fewer collections, each larger), and an idle process would keep
its cyclic garbage for as long as it stayed idle. (The browser-test failures once blamed on it were the
local workspace's freeze, fixed in ``localslack/persistence.py``.)

For the process that serves (``python -m bot run``), not for a library caller: a test suite that starts
many bots in one process would keep the cycles of every earlier one.
"""

from __future__ import annotations

import gc


def settle_after_start() -> None:
    """Freeze the objects alive now. No collection first: a started bot leaves ~40 unreachable ones, and a
    full collection would add ~45 ms to the start."""
    gc.freeze()
