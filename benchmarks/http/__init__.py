"""``python -m benchmarks.http``: the app over real HTTP, side by side with bare Bolt and raw aiohttp.

A benchmark, not a test (see ``__main__`` and docs/PERFORMANCE.md, "The HTTP benchmark").
"""
