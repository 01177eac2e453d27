"""Slack's redeliveries: an event the bot acts on is acted on once, by its ``event_id`` (DESIGN §10).

Slack sends an event again, with the same ``event_id`` and an ``X-Slack-Retry-Num``, when it did not see the
200 within 3 seconds, up to minutes later ("immediately, after 1 minute, after 5 minutes"), to any replica.
Each event id is claimed with ``SET NX`` before the bot acts on it (the app processes before it responds), in
a key of its own (its own hash slot: Cluster-safe), and marked acted once the act is done; the mark ends after
:data:`SEEN_SECONDS`, well past Slack's last retry. A claim never marked acted (its worker died, or its act
failed) ends after :data:`ACTING_SECONDS`: a redelivery meanwhile is told to come back later (Slack's next
retry), and the one after acts. So a redelivery neither acts twice nor is dropped because a first try died
between its claim and its act. Messages do not come through here: their record is keyed by the message
itself (channel and ts, in the session's inbox script), which also catches the same message arriving as two
events.
"""

from __future__ import annotations

from typing import Literal

from store.client import RedisClient

PREFIX = "hitl:slack-event"
SEEN_SECONDS = 3600  # Slack's last retry comes about 6 minutes after the event; an hour is past any of them
# a claim not marked acted: longer than Slack's 3 s for an ack (a slow first try is still acting, and its
# redelivery must not act beside it), shorter than Slack's retry a minute later (a dead try's is taken over)
ACTING_SECONDS = 10
ACTING, ACTED = b"acting", b"acted"

Claim = Literal["act", "acted", "acting"]


class SlackEvents:
    def __init__(self, redis: RedisClient, *, seen_s: int = SEEN_SECONDS, acting_s: float = ACTING_SECONDS):
        self.redis = redis
        self.seen_s = seen_s
        self.acting_s = acting_s

    @staticmethod
    def _key(event_id: str) -> str:
        return f"{PREFIX}:{{{event_id}}}"

    async def claim(self, event_id: str) -> Claim:
        """``act``: this delivery acts on the event (then :meth:`acted`, or :meth:`release` if it failed);
        ``acted``: a delivery acted on it already; ``acting``: one is acting on it now, or died doing so."""
        key = self._key(event_id)
        if await self.redis.set(key, ACTING, nx=True, px=max(1, int(self.acting_s * 1000))):
            return "act"
        return "acted" if await self.redis.get(key) == ACTED else "acting"

    async def acted(self, event_id: str) -> None:
        await self.redis.set(self._key(event_id), ACTED, ex=self.seen_s)

    async def release(self, event_id: str) -> None:
        """The act failed: Slack's redelivery (it sees the failure) acts again."""
        await self.redis.delete(self._key(event_id))
