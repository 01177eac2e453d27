"""The outbox in Redis: committed events → the consumers that deliver them (DESIGN §12; bot/outbox.py).

A session's events stream (``P:events``) is the source of truth of what the agent said; each consumer keeps
its cursor in ``P:out``. A session is on ``hitl:outbox`` while its committed events may still need
delivering; one delivery pass at a time holds its deliverer lock (``P:outlock``) and, while it delivers,
this process keeps a view of the session (store/delivery_pass.py) through which the post ledger
(:attr:`RedisOutbox.posts`, store/post_ledger.py) and the pass's request reads go.
"""

from __future__ import annotations

import time
from typing import Any

from redis.asyncio import Redis

from bot.outbox import OutboxPass
from bot.protocol import Event, RequestRecord, event_from_json
from bot.session import SessionRef
from store.delivery_pass import CLAIM_MARGIN_S, PassView, PassViews
from store.pipelined import Command, evalsha
from store.post_ledger import PostLedger
from store.requests import RequestReads
from store.session_keys import DEFAULT_RETENTION_SECONDS, FORGET_IF_UNCHANGED, OUTBOX, now_ms

# One delivery pass over a session (bot/outbox.py). Begin: take the session's deliverer lock and read,
# for every consumer, its cursor and until when it holds off (epoch ms), and the events after the lowest
# cursor of the consumers not holding off (a held consumer far behind must not starve the others).
# The session's frontend data (where its cards and replies are) comes with it: the pass reads it from
# there instead of asking once per event. The lock is "<token>|<deadline ms>" with no TTL: a lock whose
# deadline passed tells the next deliverer that its holder died mid-pass, so that pass is careful (what the
# dead one posted may be unrecorded: it looks in the thread before posting). KEYS: out, events, lock, chan;
# ARGV: token, lock ms, count, consumers… → false (locked) | {ref, cursors, holds, entries, chan (flat
# field, value…), careful}. (A resent copy finds the lock ours and reads again.)
_OUTBOX_BEGIN = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holder, careful = redis.call('GET', KEYS[3]), 0
if holder then
  local who, deadline = string.match(holder, '^([^|]*)|(%d+)$')
  if who ~= ARGV[1] then
    if not deadline or tonumber(deadline) > now then return false end
    careful = 1  -- its deliverer died mid-pass (the lock ran out): what it posted may be unrecorded
  end
end
redis.call('SET', KEYS[3], ARGV[1] .. '|' .. (now + tonumber(ARGV[2])))
local fields, n = {}, #ARGV - 3
for i = 1, n do fields[i], fields[n + i] = ARGV[3 + i], '_hold:' .. ARGV[3 + i] end
fields[2 * n + 1] = '_ref'
local stored = redis.call('HMGET', KEYS[1], unpack(fields))
local cursors, holds, low, low_ms, low_seq = {}, {}, nil, 0, 0
for i = 1, n do
  local cursor, hold = stored[i] or '0-0', stored[n + i] or '0'
  cursors[i], holds[i] = cursor, hold
  if tonumber(hold) <= now then
    local ms, seq = string.match(cursor, '^(%d+)-(%d+)$')
    ms, seq = tonumber(ms), tonumber(seq)
    if low == nil or ms < low_ms or (ms == low_ms and seq < low_seq) then
      low, low_ms, low_seq = cursor, ms, seq
    end
  end
end
local entries = {}
if low ~= nil then entries = redis.call('XRANGE', KEYS[2], '(' .. low, '+', 'COUNT', ARGV[3]) end
return {stored[2 * n + 1] or '', cursors, holds, entries, redis.call('HGETALL', KEYS[4]), careful}
"""

# Save a pass's progress: move cursors, record where the pass's posts are (frontend data kept for the pass's
# end), forget the failures of consumers that delivered again, keep the cursors and the frontend data as long
# as the session (one look at P:open for both); then renew the lock, or (ARGV[2] = 0) release it if still
# ours. KEYS: out, lock, open, chan; ARGV: token, lock ms (0 = release), retention ms, n cursors, m frontend
# fields, consumer, cursor, … (n pairs), field, value, … (m pairs), consumers to clear… (lock ms -1: release,
# marked as a pass that ended with work left after a careful one, so that the next pass is careful too)
_OUTBOX_SAVE = """
local n, m = tonumber(ARGV[4]), tonumber(ARGV[5])
if n > 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 6, 5 + 2 * n))
end
if m > 0 then  -- written whether or not the lock is still ours: where a message was posted is a fact
  redis.call('HSET', KEYS[4], unpack(ARGV, 6 + 2 * n, 5 + 2 * n + 2 * m))
end
local gone = {}
for i = 6 + 2 * n + 2 * m, #ARGV do gone[#gone + 1], gone[#gone + 2] = '_fails:' .. ARGV[i], '_hold:' .. ARGV[i] end
if #gone > 0 then redis.call('HDEL', KEYS[1], unpack(gone)) end
local holder = redis.call('GET', KEYS[2])
if not holder or string.match(holder, '^([^|]*)') ~= ARGV[1] then return 0 end
if ARGV[2] == '0' then redis.call('DEL', KEYS[2]) return 1 end
if ARGV[2] == '-1' then redis.call('SET', KEYS[2], ARGV[1] .. '|0') return 1 end  -- let go, the next pass careful
local t = redis.call('TIME')
redis.call('SET', KEYS[2], ARGV[1] .. '|' .. (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])))
return 1
"""


class RedisOutbox(RequestReads):
    """What the outbox needs of Redis (bot.outbox.OutboxStore), and what a delivery pass reads and notes
    on requests; ``posts``: the session's post ledger, read through the pass's view while it delivers."""

    def __init__(self, redis: Redis, *, lease_ms: int = 30_000, retention_s: int = DEFAULT_RETENTION_SECONDS):
        super().__init__(redis, lease_ms=lease_ms, retention_s=retention_s)
        self._outbox_begin = redis.register_script(_OUTBOX_BEGIN)
        self._outbox_save = redis.register_script(_OUTBOX_SAVE)
        self._forget_if_unchanged = redis.register_script(FORGET_IF_UNCHANGED)
        self._pass_views: PassViews = {}  # session id → its post ledger's view, while this process delivers
        self.posts = PostLedger(redis, self._pass_views, lease_ms=lease_ms, retention_s=retention_s)

    async def outbox_due(self, *, limit: int = 100) -> list[str]:
        """Sessions whose committed events may still need delivering, most overdue first."""
        raw = await self.redis.zrangebyscore(OUTBOX, 0, now_ms(), start=0, num=limit)
        return [r.decode() for r in raw]

    async def outbox_schedule(self, session_id: str, *, delay_ms: int) -> None:
        await self.redis.zadd(OUTBOX, {session_id: now_ms() + delay_ms})

    async def outbox_begin(
        self, session_id: str, consumers: list[str], token: str, *, count: int = 100
    ) -> OutboxPass | None:
        """Start a delivery pass (one round trip): keep the session on the outbox list, due again one lease
        from now (if this process dies mid-delivery, any replica's sweep takes over then), take its
        deliverer lock and read what the consumers have not handled yet. None when another deliverer
        holds the lock."""
        claim = now_ms() + self.lease_ms
        asked_at = time.monotonic()  # the lock's life counts from no later than this
        keys = [self.key(session_id, "out"), self.key(session_id, "events"), self.key(session_id, "outlock"),
                self.key(session_id, "chan")]
        replies = await self._pipelined(self._outbox_begin, keys, [token, self.lease_ms, count, *consumers],
                                        before=[("zadd", (OUTBOX, {session_id: claim}))])
        reply = replies[1]
        if not reply:
            return None
        raw_ref, cursors, holds, entries, chan, careful = reply
        self._pass_views[session_id] = PassView(
            token, {k.decode(): v.decode() for k, v in zip(chan[::2], chan[1::2], strict=True)},
            careful=bool(careful), lock_fresh_until=asked_at + self._claim_margin_s())
        events: list[tuple[str, Event]] = []
        for entry_id, flat in entries:
            fields = dict(zip(flat[::2], flat[1::2], strict=True))
            event = event_from_json(fields[b"e"])
            event.seq = int(fields[b"s"])
            events.append((entry_id.decode(), event))
        return OutboxPass(
            ref=SessionRef.model_validate_json(raw_ref) if raw_ref else SessionRef(session_id=session_id),
            cursors={name: c.decode() for name, c in zip(consumers, cursors, strict=True)},
            holds={name: int(h) for name, h in zip(consumers, holds, strict=True)},
            entries=events, claim=claim, full=len(entries) >= count,
        )

    async def outbox_checkpoint(self, session_id: str, token: str, cursors: dict[str, str],
                                cleared: list[str]) -> None:
        """Save a long pass's progress and renew its lock (one round trip)."""
        tidy, posts = self._recorded_in_pass(session_id, token, done=False)
        renewed_at = time.monotonic()
        await self._pipelined(self._outbox_save, self._outbox_save_keys(session_id),
                              self._outbox_save_args(token, self.lease_ms, cursors, cleared, posts), before=tidy)
        if (view := self._pass_views.get(session_id)) is not None and view.token == token:
            view.lock_fresh_until = renewed_at + self._claim_margin_s()

    async def outbox_end(self, session_id: str, token: str, cursors: dict[str, str], cleared: list[str], *,
                         claim: int, again_in_ms: int | None) -> None:
        """Finish a pass (one round trip): save its progress, release the lock; then either schedule the
        session again (a consumer is waiting) or take it off the list, unless a commit re-scheduled it."""
        after: list[Command] = []
        if again_in_ms is not None:
            after.append(("zadd", (OUTBOX, {session_id: now_ms() + again_in_ms})))
        else:
            after.append(evalsha(self._forget_if_unchanged, [OUTBOX], [session_id, claim]))
        view = self._pass_views.get(session_id)
        # a careful pass that leaves work behind hands its care on: the events it did not reach may have
        # been posted by the deliverer that died
        careful_next = view is not None and view.token == token and view.careful and again_in_ms is not None
        tidy, posts = self._recorded_in_pass(session_id, token, done=True)
        await self._pipelined(self._outbox_save, self._outbox_save_keys(session_id),
                              self._outbox_save_args(token, -1 if careful_next else 0, cursors, cleared, posts),
                              before=tidy, after=after, scripts=[self._forget_if_unchanged])

    def _recorded_in_pass(self, session_id: str, token: str, *, done: bool) -> tuple[list[Command], dict[str, str]]:
        """The writes a pass kept for its end: index clean-ups (``unindex_request(..., in_pass=True)``), as
        commands, and where its posts are (``channel_set(..., in_pass=True)``), which the closing script
        writes; with ``done`` the pass's view is dropped. Written whether or not the lock is still ours:
        where a message was posted is a fact, whoever delivers next."""
        view = self._pass_views.get(session_id)
        if view is None or view.token != token:
            return [], {}
        if done:
            del self._pass_views[session_id]
        # a post claimed in memory and neither recorded nor given up: its answer was lost (it may be in the
        # thread), so its claim goes to Redis and the next attempt looks before posting again
        writes, view.pending = {**view.claimed, **view.pending}, {}
        view.claimed = {}
        commands, view.tidy = view.tidy, []
        return commands, writes

    def _claim_margin_s(self) -> float:
        """How long after taking or renewing its lock a pass may still claim a post in memory: while more of
        the lock's life is left than a post can take (CLAIM_MARGIN_S), no other deliverer can start."""
        return max(self.lease_ms / 1000 - CLAIM_MARGIN_S, 0.0)

    def _outbox_save_keys(self, session_id: str) -> list[str]:
        return [self.key(session_id, "out"), self.key(session_id, "outlock"), self.key(session_id, "open"),
                self.key(session_id, "chan")]

    def _outbox_save_args(self, token: str, lock_ms: int, cursors: dict[str, str], cleared: list[str],
                          posts: dict[str, str]) -> list[Any]:
        pairs = [x for name, cursor in cursors.items() for x in (name, cursor)]
        fields = [x for pair in posts.items() for x in pair]
        return [token, lock_ms, self.retention_ms, len(cursors), len(posts), *pairs, *fields, *cleared]

    async def outbox_failures(self, session_id: str, consumer: str, *, failed: bool) -> int:
        """Count consecutive delivery failures of a consumer (reset on success); returns the count."""
        key, field = self.key(session_id, "out"), f"_fails:{consumer}"
        if failed:
            return int(await self.redis.hincrby(key, field, 1))
        await self.redis.hdel(key, field, f"_hold:{consumer}")
        return 0

    async def outbox_hold(self, session_id: str, consumer: str, until_ms: int) -> None:
        """Do not try ``consumer`` again before ``until_ms`` (epoch ms), whoever delivers next."""
        await self.redis.hset(self.key(session_id, "out"), f"_hold:{consumer}", until_ms)

    # what a delivery pass reads and notes on requests ------------------------------------------

    async def unindex_request(self, record: RequestRecord, *, in_pass: bool = False) -> None:
        """Drop a settled request from the workspace's pending index. ``in_pass``: with the closing round
        trip of the session's delivery pass, if one is under way here; a crash before then leaves the
        entry, which readers of the index skip and drop (``pending_for_team``)."""
        key = self.pending_key(record.team_id)
        view = self._pass_views.get(record.session_id)
        if in_pass and view is not None:
            view.tidy.append(("zrem", (key, record.request_id)))
            return
        await self.redis.zrem(key, record.request_id)

    async def pass_request(self, session_id: str, request_id: str) -> RequestRecord:
        """A request as the session's delivery pass sees it: read once per pass, whichever consumer asks
        first (a record read after the pass began is at least as new as every event the pass delivers).
        Outside a pass, ``get_request``. Only for delivery: anything that decides reads afresh."""
        view = self._pass_views.get(session_id)
        if view is not None and (known := view.requests.get(request_id)) is not None:
            return known
        record = await self.get_request(request_id)
        if view is not None and self._pass_views.get(session_id) is view:
            view.requests[request_id] = record
        return record

    async def mark_undeliverable(self, request_id: str, reason: str) -> None:
        """Note on a stored request that its card cannot be shown (never creates a request)."""
        await self.redis.eval(
            "if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'undeliverable', ARGV[1]) end",
            1, self.request_key(request_id), reason[:300],
        )
