"""The machinery: the turn loop, settle, execution, the outbox, timers; `turns.Runtime` is its façade."""
