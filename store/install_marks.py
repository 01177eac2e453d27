"""Which workspaces the app was uninstalled from (the rule is ``bot.engine.installed``).

One hash beside the installations' directory, ``hitl:{inst:directory}:uninstalled`` (team → when), read
whole. Written only when Slack's signed events say the app left or came back (and by a new installation),
so it holds at most one field per workspace that ever installed the app.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable

from store.client import RedisClient

_ID = re.compile(r"^[A-Za-z0-9_.-]+$")


def _team(team_id: str) -> str:
    if not _ID.match(team_id or ""):
        raise ValueError(f"not a Slack id: {team_id!r}")
    return team_id


class InstallMarks:
    def __init__(self, redis: RedisClient, *, client_id: str | None = None) -> None:
        self._redis = redis
        self._key = ":".join(["hitl", "{inst:directory}", "uninstalled", *([client_id] if client_id else [])])

    async def uninstalled(self) -> set[str]:
        return {(t.decode() if isinstance(t, bytes) else t) for t in await self._redis.hkeys(self._key)}

    async def mark_uninstalled(self, team_ids: Iterable[str]) -> None:
        at = str(int(time.time()))
        fields = {_team(t): at for t in team_ids}
        if fields:
            await self._redis.hset(self._key, mapping=fields)

    async def mark_installed(self, *team_ids: str) -> None:
        if team_ids:
            await self._redis.hdel(self._key, *[_team(t) for t in team_ids])
