"""The outbox in Redis: committed events → the consumers that deliver them (DESIGN §12; bot/engine/outbox.py).

A session's events stream (``P:events``) is the source of truth of what the agent said; each consumer keeps
its cursor in ``P:out``. A session is on ``hitl:outbox`` while its committed events may still need
delivering; one delivery pass at a time holds its deliverer lock (``P:outlock``) and, while it delivers,
this process keeps a view of the session (store/delivery_pass.py) through which the post ledger
(:attr:`RedisOutbox.posts`, store/post_ledger.py) and the pass's request reads go.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from bot.engine.outbox import OutboxPass, PassOpening
from bot.protocol import Event, RequestRecord, event_from_json
from bot.session import SessionRef
from store.audit import AuditGroup, stream_id_after
from store.audit_events import PassAudit, team_of
from store.delivery_pass import (
    CLAIM_MARGIN_S,
    UNREAD,
    BeginWithCheckpoint,
    PassAuditView,
    PassView,
    PassViews,
)
from store.pipelined import Command, evalsha, pipelined
from store.post_ledger import PostLedger
from store.requests import PACK_RECORD_FN, RequestReads, records_read_in_script
from store.session_keys import (
    DEFAULT_RETENTION_SECONDS,
    FORGET_IF_UNCHANGED,
    OUTBOX,
    RESCHEDULE_IF_UNCHANGED,
    now_ms,
)

# One delivery pass over a session (bot/engine/outbox.py). Begin: take the session's deliverer lock and read,
# for every consumer, its cursor and until when it holds off (epoch ms), and the events after the lowest
# cursor of the consumers not holding off (a held consumer far behind must not starve the others).
# The session's frontend data (where its cards and replies are) comes with it: the pass reads it from
# there instead of asking once per event. The lock is "<token>|<deadline ms>" with no TTL: a lock whose
# deadline passed tells the next deliverer that its holder died mid-pass, so that pass is careful (what the
# dead one posted may be unrecorded: it looks in the thread before posting). KEYS: out, events, lock, chan;
# ARGV: token, lock ms, count, consumers… → false (locked) | {ref, cursors, holds, entries (id, seq and
# event JSON of each, joined by ``ENTRY_SEPARATOR``; '' none), chan (flat
# field, value…), careful, the audit's floor ('' none), the id read after ('' nothing read), the records of
# the requests that the entries' card updates name (``records_named``)}. The audit's floor
# (``_audit``) counts like a cursor: the audit may lack the events after it. (A resent copy finds the lock
# ours and reads again.)
_OUTBOX_BEGIN = PACK_RECORD_FN + """
-- the records (with their approvals) of the requests that events updating a card name, read once for the
-- pass (``pass_request``): {request id, ``pack_record``'s text, …}; only requests in this session's slot
local NAMES_A_CARD = {['input.resolved'] = 1, ['input.reminded'] = 1, ['input.escalated'] = 1,
                      ['input.responders'] = 1, ['approval.candidate'] = 1}
local function records_named(entries)
  local base, slot = string.match(KEYS[1], '^(hitl:{([^}]*)}):out$')
  local out, seen = {}, {}
  local function read(id)
    if type(id) ~= 'string' or seen[id] or string.match(id, '^([^.]*)%.') ~= slot then return end
    seen[id] = true
    out[#out + 1], out[#out + 2] = id, pack_record(base .. ':req:' .. id)
  end
  for _, entry in ipairs(entries) do
    local flat, raw = entry[2], nil
    for i = 1, #flat, 2 do if flat[i] == 'e' then raw = flat[i + 1] end end
    -- decoded only if its type may name a card (the JSON is compact: '"type":"input.resolved"'); the rest
    -- (most events, the largest among them) are not decoded at all
    local kind = raw and string.match(raw, '"type":"([%w._]+)"')
    if kind and NAMES_A_CARD[kind] and string.find(raw, '"request_id":"', 1, true) then
      local event = cjson.decode(raw)
      if NAMES_A_CARD[event.type] then
        read(event.request_id)
        if type(event.resolutions) == 'table' then
          for _, resolution in ipairs(event.resolutions) do read(resolution.request_id) end
        end
      end
    end
  end
  return out
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lock, careful = ARGV[1] .. '|' .. (now + tonumber(ARGV[2])), 0
if not redis.call('SET', KEYS[3], lock, 'NX') then  -- a free lock is taken at once; a held one is read
  local who, deadline = string.match(redis.call('GET', KEYS[3]) or '', '^([^|]*)|(%d+)$')
  if who ~= ARGV[1] then
    if not deadline or tonumber(deadline) > now then return false end
    careful = 1  -- its deliverer died mid-pass (the lock ran out): what it posted may be unrecorded
  end
  redis.call('SET', KEYS[3], lock)
end
local fields, n = {}, #ARGV - 3
for i = 1, n do fields[i], fields[n + i] = ARGV[3 + i], '_hold:' .. ARGV[3 + i] end
fields[2 * n + 1], fields[2 * n + 2] = '_ref', '_audit'
local stored = redis.call('HMGET', KEYS[1], unpack(fields))
local cursors, holds, low, low_ms, low_seq = {}, {}, nil, 0, 0
local function lower(cursor)
  local ms, seq = string.match(cursor, '^(%d+)-(%d+)$')
  ms, seq = tonumber(ms), tonumber(seq)
  if low == nil or ms < low_ms or (ms == low_ms and seq < low_seq) then
    low, low_ms, low_seq = cursor, ms, seq
  end
end
for i = 1, n do
  local cursor, hold = stored[i] or '0-0', stored[n + i] or '0'
  cursors[i], holds[i] = cursor, hold
  if tonumber(hold) <= now then lower(cursor) end
end
local floor = stored[2 * n + 2]
if floor then lower(floor) end  -- the audit may lack the events after it (store/audit_events.py)
local entries = {}
if low ~= nil then entries = redis.call('XRANGE', KEYS[2], '(' .. low, '+', 'COUNT', ARGV[3]) end
-- the entries as one text, id, seq and event JSON of each in turn, separated by the byte 0x1e, which valid
-- JSON never holds (one reply to parse instead of seven per entry, and nothing escaped)
local packed = {}
for _, entry in ipairs(entries) do
  local flat, seq, event = entry[2], '', ''
  for j = 1, #flat, 2 do
    if flat[j] == 's' then seq = flat[j + 1] elseif flat[j] == 'e' then event = flat[j + 1] end
  end
  packed[#packed + 1], packed[#packed + 2], packed[#packed + 3] = entry[1], seq, event
end
return {stored[2 * n + 1] or '', cursors, holds, table.concat(packed, '\\30'),
        redis.call('HGETALL', KEYS[4]), careful, floor or '', low or '', records_named(entries)}
"""

# Save a pass's progress: move cursors, record where the pass's posts are (frontend data kept for the pass's
# end), forget the failures of consumers that delivered again, keep the cursors and the frontend data as long
# as the session (one look at P:open for both); then renew the lock, or (ARGV[2] = 0) release it if still
# ours. KEYS: out, lock, open, chan; ARGV: token, lock ms (0 = release), retention ms, n cursors, m frontend
# fields, the audit's floor as read and as left ('' none), consumer, cursor, … (n pairs), field, value, …
# (m pairs), consumers to clear… (lock ms -1: release,
# marked as a pass that ended with work left after a careful one, so that the next pass is careful too)
_OUTBOX_SAVE = """
local n, m = tonumber(ARGV[4]), tonumber(ARGV[5])
local holder = redis.call('GET', KEYS[2])
local ours = holder and string.match(holder, '^([^|]*)') == ARGV[1]
local out = {unpack(ARGV, 8, 7 + 2 * n)}  -- the cursors, and the audit's floor below: one HSET
if m > 0 then  -- written whether or not the lock is still ours: where a message was posted is a fact
  redis.call('HSET', KEYS[4], unpack(ARGV, 8 + 2 * n, 7 + 2 * n + 2 * m))
end
if ARGV[6] ~= '' or ARGV[7] ~= '' then  -- the audit's floor: as the pass read it, and as it leaves it
  local new = ARGV[7]
  if ours then  -- nobody else wrote it since this pass read it: it knows what it covers
    if new == '' then redis.call('HDEL', KEYS[1], '_audit') else out[#out + 1], out[#out + 2] = '_audit', new end
  elseif new ~= '' then  -- another pass took over (this one's lock ran out): keep the lower
    local cur = redis.call('HGET', KEYS[1], '_audit')
    local nm, ns = string.match(new, '^(%d+)-(%d+)$')
    local cm, cs = string.match(cur or new, '^(%d+)-(%d+)$')
    nm, ns, cm, cs = tonumber(nm), tonumber(ns), tonumber(cm), tonumber(cs)
    if not cur or nm < cm or (nm == cm and ns < cs) then redis.call('HSET', KEYS[1], '_audit', new) end
  end
end
if #out > 0 then redis.call('HSET', KEYS[1], unpack(out)) end
local gone = {}
for i = 8 + 2 * n + 2 * m, #ARGV do gone[#gone + 1], gone[#gone + 2] = '_fails:' .. ARGV[i], '_hold:' .. ARGV[i] end
if #gone > 0 then redis.call('HDEL', KEYS[1], unpack(gone)) end
if not ours then return 0 end
if ARGV[2] == '0' then redis.call('DEL', KEYS[2]) return 1 end
if ARGV[2] == '-1' then redis.call('SET', KEYS[2], ARGV[1] .. '|0') return 1 end  -- let go, the next pass careful
local t = redis.call('TIME')
redis.call('SET', KEYS[2], ARGV[1] .. '|' .. (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])))
return 1
"""


ENTRY_SEPARATOR = b"\x1e"  # (Lua's '\30') between the parts of a begin's entries: no valid JSON text holds it
AUDIT_RETRY_MS = 5_000  # an audit append that failed in the end: the next pass offers its events then
_AUDIT_TEAMS_KEPT = 10_000
_MOOT_KEPT = 10_000
# Drop the audit's floor a close left, once its append is known to have landed, unless a pass wrote another
# since. KEYS: out; ARGV: the floor
_DROP_FLOOR = """
if redis.call('HGET', KEYS[1], '_audit') == ARGV[1] then return redis.call('HDEL', KEYS[1], '_audit') end
return 0
"""


def _raise_first(replies: list[Any]) -> None:
    for reply in replies:
        if isinstance(reply, BaseException):
            raise reply


@dataclass
class _Begin:
    """A pass's begin as sent: its commands (the list's ZADD, the script, the audit progress's reads) and what
    reading its replies needs."""

    store: RedisOutbox
    session_id: str
    consumers: list[str]
    token: str
    count: int
    team: str | None
    claim: int
    commands: list[Command]
    scripts: list[Any]
    asked_at: float = field(default_factory=time.monotonic)  # the lock's life counts from no later than this

    def read(self, replies: list[Any]) -> OutboxPass | None:
        return self.store._begun(self, replies)


class RedisOutbox(RequestReads):
    """What the outbox needs of Redis (bot.engine.outbox.OutboxStore), and what a delivery pass reads and notes
    on requests; ``posts``: the session's post ledger, read through the pass's view while it delivers."""

    def __init__(self, redis: Redis, *, lease_ms: int = 30_000, retention_s: int = DEFAULT_RETENTION_SECONDS,
                 audit: PassAudit | None = None):
        super().__init__(redis, lease_ms=lease_ms, retention_s=retention_s)
        self._outbox_begin = redis.register_script(_OUTBOX_BEGIN)
        self._outbox_save = redis.register_script(_OUTBOX_SAVE)
        self._forget_if_unchanged = redis.register_script(FORGET_IF_UNCHANGED)
        self._reschedule_if_unchanged = redis.register_script(RESCHEDULE_IF_UNCHANGED)
        self._drop_floor = redis.register_script(_DROP_FLOOR)
        self._pass_views: PassViews = {}  # session id → its post ledger's view, while this process delivers
        # the audit log rides the passes (store/audit_events.py): bot/app.py gives one; None: nothing audited
        self.audit = audit
        self._audit_teams: dict[str, str] = {}  # session id → its workspace, as its last pass here read it
        # session id → the audit's retry its close wrote and the audit's floor it left, found moot (the append
        # landed: None where it wrote none): dropped with the next sweep's read of the list (``outbox_due``), not
        # in a round trip of their own, so an ended session's floor says its audit lags (store/session_keys.py)
        self._moot: dict[str, tuple[int | None, str | None]] = {}
        self.posts = PostLedger(redis, self._pass_views, lease_ms=lease_ms, retention_s=retention_s)

    async def outbox_due(self, *, limit: int = 100) -> list[str]:
        """Sessions whose committed events may still need delivering, most overdue first. The audit retries
        this process's closes wrote and found moot leave the list in the same round trip, first."""
        moot, self._moot = self._moot, {}
        forget: list[Command] = []
        for sid, (retry_at, floor) in moot.items():
            if retry_at is not None:
                forget.append(evalsha(self._forget_if_unchanged, [OUTBOX], [sid, retry_at]))
            if floor is not None:
                forget.append(evalsha(self._drop_floor, [self.key(sid, "out")], [floor]))
        *_, raw = await pipelined(self.redis, [*forget, ("zrangebyscore", (OUTBOX, 0, now_ms(), 0, limit))],
                                  [self._forget_if_unchanged, self._drop_floor])
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
        begin = self._begin_pass(session_id, consumers, token, count, self._audit_teams.get(session_id))
        replies = await pipelined(self.redis, begin.commands, begin.scripts, raise_on_error=False)
        _raise_first(replies[:2])  # the audit's read may fail alone: the pass then offers its events unread
        return begin.read(replies)

    def begin_with_checkpoint(self, session_id: str, opening: PassOpening) -> BeginWithCheckpoint:
        """The begin of a delivery pass (:meth:`outbox_begin`'s commands), for the turns' store to send right
        after a checkpoint's script, in its round trip (``RedisTurns.commit_then_read``): the pass reads what
        the checkpoint committed. The opening's pass is set when the lock was taken (also when the checkpoint
        itself was refused: that pass then runs as any); else it stays None and the pass begins on its own."""
        begin = self._begin_pass(session_id, opening.consumers, opening.token, opening.count,
                                 opening.team_id or self._audit_teams.get(session_id))

        def finish(replies: list[Any]) -> None:
            if not isinstance(replies[1], BaseException):
                opening.begun = begin.read(replies)

        return BeginWithCheckpoint(self.redis, begin.commands, begin.scripts, finish)

    def _begin_pass(self, session_id: str, consumers: list[str], token: str, count: int, team: str | None) -> _Begin:
        team = team or team_of(session_id)
        keys = [self.key(session_id, "out"), self.key(session_id, "events"), self.key(session_id, "outlock"),
                self.key(session_id, "chan")]
        reads = self.audit.begin_reads(session_id, team) if self.audit is not None and team else []
        claim = now_ms() + self.lease_ms
        commands = [("zadd", (OUTBOX, {session_id: claim})),
                    evalsha(self._outbox_begin, keys, [token, self.lease_ms, count, *consumers]), *reads]
        scripts = [self._outbox_begin, *(self.audit.scripts if reads and self.audit is not None else [])]
        return _Begin(self, session_id, consumers, token, count, team, claim, commands, scripts)

    def _begun(self, begin: _Begin, replies: list[Any]) -> OutboxPass | None:
        """The pass a begin's replies (its ZADD's, its script's, the audit's reads) start, its view kept."""
        reply = replies[1]
        if not reply:
            return None
        session_id, consumers, count, team = begin.session_id, begin.consumers, begin.count, begin.team
        raw_ref, cursors, holds, entries, chan, careful, floor, read_after, named = reply
        ref = SessionRef.model_validate_json(raw_ref) if raw_ref else SessionRef(session_id=session_id)
        events: list[tuple[str, Event]] = []
        parts = entries.split(ENTRY_SEPARATOR) if entries else []
        for entry_id, seq, raw in zip(parts[::3], parts[1::3], parts[2::3], strict=True):
            event = event_from_json(raw)
            event.seq = int(seq)
            events.append((entry_id.decode(), event))
        progress, audit_replies = UNREAD, replies[2:]
        if audit_replies and team == ref.team_id and not any(isinstance(r, BaseException) for r in audit_replies):
            progress = self.audit.progress_from(team, audit_replies)  # type: ignore[union-attr]
        if ref.team_id:
            self._note_team(session_id, ref.team_id)
        self._pass_views[session_id] = PassView(
            begin.token, {k.decode(): v.decode() for k, v in zip(chan[::2], chan[1::2], strict=True)},
            careful=bool(careful), lock_fresh_until=begin.asked_at + self._claim_margin_s(),
            requests=records_read_in_script(named),
            audit=PassAuditView(ref=ref, read=events, read_after=read_after.decode(), floor=floor.decode(),
                                progress=progress, full=len(events) >= count))
        return OutboxPass(
            ref=ref,
            cursors={name: c.decode() for name, c in zip(consumers, cursors, strict=True)},
            holds={name: int(h) for name, h in zip(consumers, holds, strict=True)},
            entries=events, claim=begin.claim, full=len(events) >= count,
        )

    async def outbox_checkpoint(self, session_id: str, token: str, cursors: dict[str, str],
                                cleared: list[str]) -> None:
        """Save a long pass's progress and renew its lock (one round trip)."""
        posts = self._recorded_in_pass(session_id, token, done=False)
        renewed_at = time.monotonic()
        # the cursors may move past events the audit has not written yet (it goes with the pass's end)
        floor = self._audit_floor(session_id, token, keep=True)[1]
        await self._pipelined(self._outbox_save, self._outbox_save_keys(session_id),
                              self._outbox_save_args(token, self.lease_ms, cursors, cleared, posts, floor))
        if (view := self._pass_views.get(session_id)) is not None and view.token == token:
            view.lock_fresh_until = renewed_at + self._claim_margin_s()

    async def outbox_end(self, session_id: str, token: str, cursors: dict[str, str], cleared: list[str], *,
                         claim: int, again_in_ms: int | None) -> None:
        """Finish a pass (one round trip): save its progress, release the lock; then either schedule the
        session again (a consumer is waiting) or take it off the list, unless a commit re-scheduled it. A
        pass that audits writes the audit's retry instead (one lease on), the close being what may fail
        to append: found moot when the append landed, it leaves with the next sweep's read of the list."""
        view = self._pass_views.get(session_id)
        # a careful pass that leaves work behind hands its care on: the events it did not reach may have
        # been posted by the deliverer that died
        careful_next = view is not None and view.token == token and view.careful and again_in_ms is not None
        groups, floor = self._audit_floor(session_id, token, keep=False)
        audits = self.audit is not None and view is not None and view.audit is not None and bool(groups)
        retry_at = now_ms() + self.lease_ms
        after: list[Command] = []
        if again_in_ms is not None:
            after.append(("zadd", (OUTBOX, {session_id: now_ms() + again_in_ms})))
        elif audits:  # a kill after this round trip, its append failed, must still leave the audit a retry
            after.append(evalsha(self._reschedule_if_unchanged, [OUTBOX], [session_id, claim, retry_at]))
        else:
            after.append(evalsha(self._forget_if_unchanged, [OUTBOX], [session_id, claim]))
        posts = self._recorded_in_pass(session_id, token, done=True)
        save = evalsha(self._outbox_save, self._outbox_save_keys(session_id),
                       self._outbox_save_args(token, -1 if careful_next else 0, cursors, cleared, posts, floor))
        scripts = [self._outbox_save, self._forget_if_unchanged, self._reschedule_if_unchanged,
                   *(self.audit.scripts if self.audit else [])]

        async def close(audit_first: list[Command]) -> list[Any]:
            # the audit's append first: a process that dies before the rest is sent has written it or nothing
            replies = await pipelined(self.redis, [*audit_first, save, *after], scripts,
                                      raise_on_error=not audit_first)
            _raise_first(replies[len(audit_first):])
            return replies

        if not audits:
            await close([])
            return
        _, audited = await self.audit.close(view.audit.ref, groups, close)  # type: ignore[union-attr]
        if not audited:  # the floor the close left makes the next pass offer them again: let one come sooner
            await self.outbox_schedule(session_id, delay_ms=AUDIT_RETRY_MS)
            return
        self._moot.pop(session_id, None)
        self._moot[session_id] = (retry_at if again_in_ms is None else None, floor[1] or None)
        if len(self._moot) > _MOOT_KEPT:  # (one left behind: a pass with nothing to do, a floor passes drop)
            del self._moot[next(iter(self._moot))]

    def _audit_floor(self, session_id: str, token: str, *, keep: bool) -> tuple[list[AuditGroup], tuple[str, str]]:
        """The audit groups of the pass's events past the session's audit progress, and the audit's floor
        in the session as the pass read it and as its save leaves it: just before the first event it offers
        (the audit may lack what follows, until its append is known written), else forward to the end of
        what it read when there may be more to read, else none. ``keep``: a checkpoint; the floor it
        writes is then the one the end compares with."""
        view = self._pass_views.get(session_id)
        if self.audit is None or view is None or view.token != token or view.audit is None:
            return [], ("", "")
        audit = view.audit
        progress = None if audit.progress is UNREAD else audit.progress
        groups = self.audit.groups(audit.read, audit.ref, progress)  # type: ignore[arg-type]
        if groups:
            ids = [audit.read_after, *(entry_id for entry_id, _ in audit.read)]
            new = ids[ids.index(groups[0].event_id) - 1]
        elif audit.floor and audit.full:  # a long way behind: what this pass read is covered, more may follow
            last = audit.read[-1][0]
            new = last if stream_id_after(last, audit.floor) else audit.floor
        else:
            new = ""
        floor = (audit.floor, new)
        if keep:
            audit.floor = new
        return groups, floor

    def _recorded_in_pass(self, session_id: str, token: str, *, done: bool) -> dict[str, str]:
        """The writes a pass kept for its end: where its posts are (``PostLedger.set(..., in_pass=True)``), which
        the closing script writes; with ``done`` the pass's view is dropped. Written whether or not the lock is
        still ours: where a message was posted is a fact, whoever delivers next."""
        view = self._pass_views.get(session_id)
        if view is None or view.token != token:
            return {}
        if done:
            del self._pass_views[session_id]
        # a post claimed in memory and neither recorded nor given up: its answer was lost (it may be in the
        # thread), so its claim goes to Redis and the next attempt looks before posting again
        writes, view.pending = {**view.claimed, **view.pending}, {}
        view.claimed = {}
        return writes

    def _claim_margin_s(self) -> float:
        """How long after taking or renewing its lock a pass may still claim a post in memory: while more of
        the lock's life is left than a post can take (CLAIM_MARGIN_S), no other deliverer can start."""
        return max(self.lease_ms / 1000 - CLAIM_MARGIN_S, 0.0)

    def _outbox_save_keys(self, session_id: str) -> list[str]:
        return [self.key(session_id, "out"), self.key(session_id, "outlock"), self.key(session_id, "open"),
                self.key(session_id, "chan")]

    def _outbox_save_args(self, token: str, lock_ms: int, cursors: dict[str, str], cleared: list[str],
                          posts: dict[str, str], floor: tuple[str, str] = ("", "")) -> list[Any]:
        pairs = [x for name, cursor in cursors.items() for x in (name, cursor)]
        fields = [x for pair in posts.items() for x in pair]
        return [token, lock_ms, self.retention_ms, len(cursors), len(posts), *floor, *pairs, *fields, *cleared]

    def _note_team(self, session_id: str, team_id: str) -> None:
        """Remember a session's workspace, so that its next pass reads its audit progress with its begin."""
        self._audit_teams.pop(session_id, None)
        self._audit_teams[session_id] = team_id
        if len(self._audit_teams) > _AUDIT_TEAMS_KEPT:
            del self._audit_teams[next(iter(self._audit_teams))]

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
            "if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'undeliverable', ARGV[1]); "
            "redis.call('HINCRBY', KEYS[1], 'rev', 1) end",  # (``rev`` counts every change of a request)
            1, self.request_key(request_id), reason[:300],
        )
