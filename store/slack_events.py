"""Slack's redeliveries: an event the bot acts on is acted on once, by its ``event_id`` (DESIGN §10).

Slack sends an event again, with the same ``event_id`` and an ``X-Slack-Retry-Num``, when it did not see the
200 within 3 seconds, up to minutes later ("immediately, after 1 minute, after 5 minutes"), to any replica.
Each event id is claimed once, with ``SET NX``, before the ack (the app processes before it responds), in a
key of its own (its own hash slot: Cluster-safe) that ends after :data:`SEEN_SECONDS`, well past Slack's last
retry. Messages do not come through here: their record is keyed by the message itself (channel and ts, in
the session's inbox script), which also catches the same message arriving as two events.
"""

from __future__ import annotations

from store.client import RedisClient

PREFIX = "hitl:slack-event"
SEEN_SECONDS = 3600  # Slack's last retry comes about 6 minutes after the event; an hour is past any of them


class SlackEvents:
    def __init__(self, redis: RedisClient, *, seen_s: int = SEEN_SECONDS):
        self.redis = redis
        self.seen_s = seen_s

    async def first_delivery(self, event_id: str) -> bool:
        """True the first time ``event_id`` is offered (in any replica); False for a redelivery."""
        return bool(await self.redis.set(f"{PREFIX}:{{{event_id}}}", "1", nx=True, ex=self.seen_s))
