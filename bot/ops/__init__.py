"""Running it in production: logs, metrics, traces, the events' log lines, and the heap's settings."""
