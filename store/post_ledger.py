"""Where a session's Slack posts are: the post ledger (the session's ``P:chan`` hash; DESIGN §9, §12).

A field per post (a card, a reply, a status line, a task list…) records where Slack has it, or a claim
taken before posting it, so that a post is made once whoever delivers. Slack specifics (what the fields
and values mean) stay in handlers/; this module stores strings.

While this process delivers a session's events (between ``outbox_begin`` and ``outbox_end``,
store/outbox.py) it reads the session's post ledger from what the pass read at its start, kept current by
its own writes (store/delivery_pass.py): the deliverer lock makes this process the only one posting cards
and replies for the session meanwhile.
"""

from __future__ import annotations

import time

from redis.asyncio import Redis

from store.delivery_pass import PassViews
from store.session_keys import DEFAULT_RETENTION_SECONDS, SessionRedis

# Claim a post before sending it: set the field only if unset, keep the frontend data only if this wrote
# it (a lost claim wrote nothing). KEYS: chan, open; ARGV: field, value, retention ms → {1, value} | {0, held}
_CLAIM = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  return {1, ARGV[2]}
end
return {0, redis.call('HGET', KEYS[1], ARGV[1])}
"""


class PostLedger(SessionRedis):
    """A session's post ledger: ``get`` where a post is, ``set`` it, ``claim`` it before posting, ``delete`` it."""

    def __init__(self, redis: Redis, views: PassViews | None = None, *, lease_ms: int = 30_000,
                 retention_s: int = DEFAULT_RETENTION_SECONDS):
        super().__init__(redis, lease_ms=lease_ms, retention_s=retention_s)
        self.views: PassViews = {} if views is None else views  # shared with the outbox that opens them
        self._claim = redis.register_script(_CLAIM)

    async def get(self, session_id: str, field: str) -> str | None:
        view = self.views.get(session_id)
        if view is not None:
            return view.fields.get(field)
        raw = await self.redis.hget(self.key(session_id, "chan"), field)
        return raw.decode() if raw else None

    async def set(self, session_id: str, field: str, value: str, *, in_pass: bool = False) -> None:
        """``in_pass``: where a message the pass just posted is (its claim already in Redis): written with
        the pass's closing round trip instead of now. A crash before then leaves the claim, and the next
        deliverer finds the message in the thread, as after a crash between posting and recording."""
        view = self.views.get(session_id)
        if view is not None:
            view.fields[field] = value
            view.claimed.pop(field, None)
            if in_pass:
                view.pending[field] = value
                return
            view.pending.pop(field, None)
        key = self.key(session_id, "chan")
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(key, field, value)
        await pipe.execute()

    async def claim(self, session_id: str, field: str, value: str, *, in_pass: bool = False) -> bool:
        """Set ``field`` only if it is not set yet (claim a post before sending it); True if we did.

        ``in_pass``: a post made only by the session's delivery pass (a card, a reply). While the pass's lock
        is fresh nobody else posts for the session, so the claim stays in the pass's memory (no round trip);
        where the post landed is recorded with the pass's closing round trip, and a claim never recorded
        (its answer was lost) is written then. A deliverer that dies first leaves its lock to run out, and the
        next pass is careful (``pass_is_careful``): it looks in the thread before posting."""
        view = self.views.get(session_id)
        if in_pass and view is not None and time.monotonic() < view.lock_fresh_until:
            if field in view.fields:
                return False
            view.fields[field] = view.claimed[field] = value
            return True
        [(claimed, now)] = await self._pipelined(self._claim, [self.key(session_id, "chan"), self.key(session_id, "open")],
                                                 [field, value, self.retention_ms])
        if view is not None:  # what Redis holds now: ours, or whoever claimed it first
            if now is None:
                view.fields.pop(field, None)
            else:
                view.fields[field] = now.decode()
        return bool(claimed)

    async def delete(self, session_id: str, field: str) -> None:
        view = self.views.get(session_id)
        if view is not None:
            view.fields.pop(field, None)
            view.pending.pop(field, None)
            if view.claimed.pop(field, None) is not None:
                return  # claimed in memory only: nothing in Redis to take back
        await self.redis.hdel(self.key(session_id, "chan"), field)

    def pass_is_careful(self, session_id: str) -> bool:
        """Whether this process's delivery pass over the session follows a deliverer that died mid-pass."""
        view = self.views.get(session_id)
        return view is not None and view.careful
