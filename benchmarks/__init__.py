"""``make bench``: figures for the engine on a real Redis (DESIGN §7, §9).

A benchmark, not a test: pytest does not collect it. ``python -m benchmarks --help`` lists the
options; docs/PERFORMANCE.md explains each figure and holds the last recorded run.
"""
