"""Who has looked at their App Home lately, per workspace (handlers/delivery/home.py keeps those homes current).

Two marks per workspace, each with a day's life from the last publish: ``home-seen:<user>`` (this person's
home is worth re-publishing when a request of theirs appears or settles) and ``home-seen-any`` (anyone's is:
a workspace where nobody looks costs no refresh at all).
"""

from __future__ import annotations

from store.audit import workspace_key
from store.client import RedisClient

HOME_SEEN_SECONDS = 24 * 3600  # homes published this lately are kept current by HomeRefresh


class HomeViews:
    def __init__(self, redis: RedisClient) -> None:
        self.redis = redis

    async def mark_seen(self, team: str, user_id: str) -> None:
        """``user_id``'s App Home was just published (one round trip)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(workspace_key(team, "home-seen", user_id), b"1", ex=HOME_SEEN_SECONDS)
        pipe.set(workspace_key(team, "home-seen-any"), b"1", ex=HOME_SEEN_SECONDS)  # lets a refresh skip at once
        await pipe.execute()

    async def seen(self, team: str, user_ids: list[str]) -> list[str]:
        """Those of ``user_ids`` whose App Home was published lately (one MGET; none asked: no round trip)."""
        if not user_ids:
            return []
        marks = await self.redis.mget([workspace_key(team, "home-seen", u) for u in user_ids])
        return [u for u, mark in zip(user_ids, marks, strict=True) if mark is not None]

    async def anyone_looking(self, team: str) -> bool:
        """Whether anyone in the workspace had their App Home published lately (one EXISTS)."""
        return bool(await self.redis.exists(workspace_key(team, "home-seen-any")))
