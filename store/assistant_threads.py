"""What the bot remembers about an assistant thread (Slack's AI split view): the channel the person was
looking at when they opened it or switched to (its *context*), and whether the thread has its title yet.

One small hash per thread, in its own hash slot (Cluster-safe), living as long as sessions do. Bolt's own
default keeps the context in message metadata and reads it back with ``conversations.replies`` on every
message (a Tier 3 call, far tighter for new apps since 2025); one Redis round trip is cheaper.
"""

from __future__ import annotations

import json
from typing import Any

from store.client import RedisClient
from store.session_keys import DEFAULT_RETENTION_SECONDS

PREFIX = "hitl:assistant"


class AssistantThreads:
    def __init__(self, redis: RedisClient, *, retention_s: int = DEFAULT_RETENTION_SECONDS):
        self.redis = redis
        self.retention_ms = int(retention_s * 1000)

    @staticmethod
    def key(channel_id: str, thread_ts: str) -> str:
        return f"{PREFIX}:{{{channel_id}:{thread_ts}}}"

    async def context(self, channel_id: str, thread_ts: str) -> dict[str, Any] | None:
        """The channel (``channel_id``, ``team_id``, ``enterprise_id``) the person was looking at, if known."""
        raw = await self.redis.hget(self.key(channel_id, thread_ts), "context")
        return json.loads(raw) if raw else None

    async def remember_context(self, channel_id: str, thread_ts: str, context: dict[str, Any]) -> None:
        key = self.key(channel_id, thread_ts)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(key, "context", json.dumps(context))
        pipe.pexpire(key, self.retention_ms)
        await pipe.execute()

    async def claim_title(self, channel_id: str, thread_ts: str) -> bool:
        """True once per thread: the first request names it (later ones, and Slack's retries, do not)."""
        key = self.key(channel_id, thread_ts)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hsetnx(key, "titled", "1")
        pipe.pexpire(key, self.retention_ms)
        claimed, _ = await pipe.execute()
        return bool(claimed)
