"""Redis: parked turns, sessions, event streams, approver lists, audit log, the embedded server (DESIGN §9)."""

from store.client import RedisClient, RedisHandle, open_redis, ping
from store.embedded import DataDirInUse, EmbeddedServerError, EmbeddedValkey

__all__ = [
    "DataDirInUse",
    "EmbeddedServerError",
    "EmbeddedValkey",
    "RedisClient",
    "RedisHandle",
    "open_redis",
    "ping",
]
