"""Running it in production: logs, metrics, traces, the events' log lines, the heap, and threads for user code."""
