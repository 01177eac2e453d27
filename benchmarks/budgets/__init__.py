"""Budgets: tests that pin what a cycle costs in Redis (exact commands, round trips), kept beside the
benchmarks that measure it (DESIGN §13). ``make test`` and ``make bench`` run them."""
