"""Revoked result tokens (``bot.engine.result_tokens``): when each person's tokens were last revoked.

One key per person, ``hitl:result-tokens-revoked:<principal id>`` → epoch milliseconds, kept as long as a
token lives: after that, every token it revoked has expired anyway. Written only by the holder (with their
token) or a workspace admin (from Slack), so it holds at most one key per person who had a token.
"""

from __future__ import annotations

from store.client import RedisClient


class TokenRevocations:
    def __init__(self, redis: RedisClient, *, keep_s: int) -> None:
        self._redis = redis
        self._keep_s = keep_s

    @staticmethod
    def key(principal_id: str) -> str:
        return f"hitl:result-tokens-revoked:{principal_id}"

    async def revoke(self, principal_id: str, at_ms: int) -> None:
        await self._redis.set(self.key(principal_id), str(at_ms), ex=self._keep_s)

    async def revoked_at_ms(self, principal_id: str) -> int | None:
        raw = await self._redis.get(self.key(principal_id))
        return None if raw is None else int(raw)
