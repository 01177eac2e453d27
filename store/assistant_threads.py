"""What the bot remembers about an assistant thread (Slack's AI split view): the channel the person was
looking at when they opened it or switched to (its *context*), and whether the thread has its title yet.

One small hash per thread, in its own hash slot (Cluster-safe). Its owner is the thread's session (DESIGN
§12, Retention): until a message makes one, nothing can be open in the thread, and the hash ends a retention
after its last write; the first message recorded in the thread hands it to its session (``claim_title``, run
for each message: the hash loses its end and names the session), and from then on it ends with that session
(``RedisTurns.sweep``, retiring, deletes it with the session's keys), so nothing of it expires while a request is
open. Bolt's own default keeps the context in message metadata and reads it back with
``conversations.replies`` on every message (a Tier 3 call, far tighter for new apps since 2025); one Redis
round trip is cheaper.
"""

from __future__ import annotations

import json
from typing import Any

from store.client import RedisClient
from store.session_keys import DEFAULT_RETENTION_SECONDS

PREFIX = "hitl:assistant"

# Remember the context; a thread no session owns yet ends a retention after it. KEYS: the thread;
# ARGV: context JSON, retention ms
_REMEMBER = """
redis.call('HSET', KEYS[1], 'context', ARGV[1])
if redis.call('HEXISTS', KEYS[1], 'session') == 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
"""

# Name the thread once → 1 if this call is the first. With a session (ARGV[1], '' none) it owns the thread from
# now on (no end of its own); without, a thread no session owns ends a retention later. KEYS: the thread;
# ARGV: session id, retention ms
_CLAIM_TITLE = """
local first = redis.call('HSETNX', KEYS[1], 'titled', '1')
if ARGV[1] ~= '' then
  redis.call('HSET', KEYS[1], 'session', ARGV[1])
  redis.call('PERSIST', KEYS[1])
elseif redis.call('HEXISTS', KEYS[1], 'session') == 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return first
"""


class AssistantThreads:
    def __init__(self, redis: RedisClient, *, retention_s: int = DEFAULT_RETENTION_SECONDS):
        self.redis = redis
        self.retention_ms = int(retention_s * 1000)
        self._remember = redis.register_script(_REMEMBER)
        self._claim_title = redis.register_script(_CLAIM_TITLE)

    @staticmethod
    def key(channel_id: str, thread_ts: str) -> str:
        return f"{PREFIX}:{{{channel_id}:{thread_ts}}}"

    @staticmethod
    def key_of_session(session_id: str) -> str | None:
        """The thread hash a Slack session (``slack:<team>:<channel>:<thread>``) may own; None for another kind."""
        kind, _, rest = session_id.partition(":")
        _, _, where = rest.partition(":")
        channel_id, _, thread_ts = where.partition(":")
        return AssistantThreads.key(channel_id, thread_ts) if kind == "slack" and channel_id and thread_ts else None

    async def context(self, channel_id: str, thread_ts: str) -> dict[str, Any] | None:
        """The channel (``channel_id``, ``team_id``, ``enterprise_id``) the person was looking at, if known."""
        raw = await self.redis.hget(self.key(channel_id, thread_ts), "context")
        return json.loads(raw) if raw else None

    async def remember_context(self, channel_id: str, thread_ts: str, context: dict[str, Any]) -> None:
        await self._remember(keys=[self.key(channel_id, thread_ts)], args=[json.dumps(context), self.retention_ms])

    async def claim_title(self, channel_id: str, thread_ts: str, session_id: str | None) -> bool:
        """True once per thread: the first request names it (later ones, and Slack's retries, do not).
        ``session_id``: the session the message was recorded into, which owns the thread's hash from now on
        (None: the message was not recorded, e.g. refused)."""
        return bool(await self._claim_title(keys=[self.key(channel_id, thread_ts)],
                                            args=[session_id or "", self.retention_ms]))
