"""Sessions in Redis (DESIGN §7, §9): state, the turn lease, events, parked requests, execution markers.

Every key of one session carries the same hash tag ``{<slot>}`` (a hash of the session id), so
each Lua script below touches one Redis Cluster slot. Request ids embed the slot, so a click that
carries only a request id finds its session's keys without a lookup.

Keys of a session (``P = hitl:{slot}``):
  P:state        JSON of the session state (history, turn, step) — opaque to this module
  P:lease        the turn lease: a random token with a TTL
  P:seq          event sequence counter
  P:events       Redis Stream of events, fields ``s`` (sequence) and ``e`` (event JSON)
  P:inbox        list of queued user messages (JSON)
  P:grants       set of approval keys granted in this session (once(), "don't ask again here")
  P:granted      hash grant id → Grant JSON: what App Home lists of those grants (written with them)
  P:req:<rid>    hash: the request record (see ``RequestRecord``)
  P:req:<rid>:ok set of principal ids that approved (n-of-m)
  P:exec:<call>  execution marker: "started" or the JSON result
  P:msg:<id>     seen inbound message ids (dedupe of Slack retries)
  P:chan         hash of frontend data (e.g. Slack card ts per request, post claims)
  P:out          hash consumer → id of the last stream entry that consumer has handled (the outbox cursor)
  P:open         set of the keys of the session's open requests (while it exists, the session has no end)
  P:outlock      the session's delivery lock, "<token>|<deadline ms>" (one deliverer at a time keeps order)
  P:cancel       the turn id someone asked to cancel;  P:fails  drive failures in a row
  P:end          when the session ends (epoch ms), written once per unit of work by its owner
Global, advisory indexes (outside any slot; readers re-check the records):
  hitl:active                 zset session_id → when it next needs a look (lease expiry)
  hitl:outbox                 zset session_id → when its committed events next need delivering
  hitl:retire                 zset session_id → its end: the sweep retires it once that has passed
  hitl:{ws:<team>}:pending    zset request_id → created time, for "waiting on you" listings

Retention (DESIGN §12; issue 26 item 3), by owner, once. A session's own keys (``SESSION_KEYS``: all of
the above but requests, execution markers and message marks) carry no TTL and are never renewed. When a
unit of work ends, the script that ends it writes ``P:end`` = now + ``retention_s`` and the same round trip
puts the session on ``hitl:retire``: the drive's last checkpoint that opens no request (the turn ended), a
lease let go with no request open, the settle that completes its step's requests. A checkpoint that opens
a request deletes ``P:end``: nothing an open request needs (state, events and their counter, inbox,
grants, frontend data, outbox cursor) can end while it is open. Once the end has passed the session is
gone to its readers (``exists``, the grants listing: a conversation grant lapses with its conversation),
and its keys are deleted in one DEL by whoever comes first: the recovery sweep (``retire_due``) or the
next message recorded into it (a revived thread starts afresh: new state, events numbered from 1); both
re-check in the session's slot and leave alone a session with an open request, a lease, a queued message
or a delivery pass under way. A request record and its approvals have no end while open and
``retention_s`` from the settle that closes them; execution markers and message marks get theirs when
created. A request whose state is gone anyway (removed, or parked before this rule) is closed "no longer
needed" by the click that finds it, never approved. Indexes drop settled ids as the outbox delivers their
resolution.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis

from bot.outbox import OutboxPass
from bot.principals import Principal
from bot.protocol import (
    EVENT_ADAPTER,
    CancelRequested,
    Event,
    Grant,
    InputResolved,
    InputResponse,
    LeaseLost,
    MessageTaken,
    RequestRecord,
    Resolution,
    Responders,
    SessionSnapshot,
    SettleResult,
    UnknownRequest,
    event_from_json,
)
from bot.session import SessionRef, session_slot
from store.grants import GrantStore, session_ended
from store.pipelined import Command, evalsha, pipelined
from store.replay import REPLAY_MARK_MS, replay_mark, replay_safe

EVENTS_MAXLEN = 10_000
MESSAGE_DEDUPE_SECONDS = 24 * 3600
DEFAULT_RETENTION_SECONDS = 30 * 24 * 3600
ACTIVE = b"hitl:active"
OUTBOX = b"hitl:outbox"
TIMERS = b"hitl:timers"  # deadlines: "<kind>:<request id>" by due epoch ms (DESIGN §12, Time)
RETIRE = b"hitl:retire"  # sessions by their end (epoch ms): the sweep retires them once it has passed
SETTLED_LOOK_AGAIN_MS = 0  # the next sweep; the answering process normally resumes it first
OUTBOX_GRACE_MS = 2_000  # a committer delivers at once; the sweep steps in if it died
CLAIM_MARGIN_S = 12.0  # a post is claimed in memory only while its pass's lock has this much life left


def _prefix(slot: str) -> str:
    return f"hitl:{{{slot}}}"


def slot_of_request(request_id: str) -> str:
    slot, _, rest = request_id.partition(".")
    if not slot or not rest or len(slot) != 16:
        raise UnknownRequest(request_id)
    return slot


# Retention by owner, once (DESIGN §12; issue 26 item 3). A session's own keys (``SESSION_KEYS``) carry no
# TTL: nothing renews an end on every write. The session's end (``P:end``, epoch ms) is written once per unit
# of work by whoever ends it, in the script that ends it: the drive's last checkpoint when it opens no request
# (the turn ended), a lease let go with no request open, the settle that completes its step's requests; the
# same round trip puts the session on ``hitl:retire`` by that end. A checkpoint that opens a request takes the
# end away: a session with an open request has none. Once its end has passed and nothing holds it (no open
# request, no lease, no queued message, no delivery pass under way), ``retire`` deletes its keys in one DEL:
# the sweep does (``retire_due``), or the first message recorded after the end (a revived thread starts
# afresh). ``retire(base, now)``: the session's keys are KEYS[base..] in ``SESSION_KEYS`` order; returns
# 0 (no end: in use, or gone), 1 (deleted), 2 and the end (not yet), 3 (held).
SESSION_KEYS = ("state", "lease", "seq", "events", "inbox", "grants", "granted", "chan", "out", "open",
                "outlock", "cancel", "fails", "end")
_RETIRE_FN = """
local SK = {""" + ", ".join(f"['{name}'] = {i}" for i, name in enumerate(SESSION_KEYS)) + """}
local function retire(base, now)
  local raw = redis.call('GET', KEYS[base + SK['end']])
  if not raw then return 0, 0 end
  local ends = tonumber(raw) or 0
  if ends > now then return 2, ends end
  if redis.call('EXISTS', KEYS[base + SK.lease], KEYS[base + SK.open], KEYS[base + SK.inbox]) > 0 then return 3, 0 end
  local lock = redis.call('GET', KEYS[base + SK.outlock])
  if lock and tonumber(string.match(lock, '|(%d+)$') or now + 1) > now then return 3, 0 end  -- a pass under way
  local all = {}
  for _, i in pairs(SK) do all[#all + 1] = KEYS[base + i] end
  redis.call('DEL', unpack(all))
  return 1, 0
end
"""

# The sweep's step (``retire_due``). KEYS: the session's keys; ARGV: now ms → {verdict, end}
_RETIRE = _RETIRE_FN + """
local verdict, ends = retire(1, tonumber(ARGV[1]))
return {verdict, ends}
"""


# Commit a checkpoint: verify the lease, write state, create requests, append events.
# Queued messages the new state takes in (``take``) leave the inbox in the same write, so a message is
# always either queued or in the saved history, never in neither (-2: another worker took one first).
# ``unless_cancelled`` (a turn id): write nothing if someone asked to cancel that turn (-3), so the
# check and the checkpoint are one atomic step and cost no round trip of their own. ``release`` ('1'):
# the lease goes with a checkpoint that was written (a drive's last), never with a refused one; opening no
# request, it ends the turn and writes the session's end (ARGV ``ends``). Opening one takes the end away.
# KEYS: lease, state, events, seq, out, open, end, the new requests…, cancel, inbox.
_COMMIT = """
local token, state_json, n_events, n_requests = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local ref_json, ends = ARGV[#ARGV - 2], ARGV[#ARGV - 1]
local take, unless_cancelled, release = cjson.decode(ARGV[#ARGV - 3]), ARGV[#ARGV - 4], ARGV[#ARGV - 5]
if token ~= '' and redis.call('GET', KEYS[1]) ~= token then return -1 end
if unless_cancelled ~= '' and redis.call('GET', KEYS[#KEYS - 1]) == unless_cancelled then return -3 end
for _, raw in ipairs(take) do
  if not redis.call('LPOS', KEYS[#KEYS], raw) then return -2 end
end
for _, raw in ipairs(take) do redis.call('LREM', KEYS[#KEYS], 1, raw) end
for i = 1, n_requests do
  local fields = cjson.decode(ARGV[4 + n_events + i])
  local flat = {}
  for k, v in pairs(fields) do table.insert(flat, k); table.insert(flat, v) end
  redis.call('HSET', KEYS[7 + i], unpack(flat))
  redis.call('SADD', KEYS[6], KEYS[7 + i])
end
if n_requests > 0 then redis.call('DEL', KEYS[7]) end  -- open requests: the session has no end
if state_json ~= '' then redis.call('SET', KEYS[2], state_json) end
if ref_json ~= '' then redis.call('HSET', KEYS[5], '_ref', ref_json) end
local first = 0
if n_events > 0 then first = redis.call('INCRBY', KEYS[4], n_events) - n_events + 1 end
for i = 1, n_events do
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[#ARGV], '*', 's', first + i - 1, 'e', ARGV[4 + i])
end
if release == '1' then
  redis.call('DEL', KEYS[1])
  if n_requests == 0 then redis.call('SET', KEYS[7], ends) end  -- the turn ended: the session's end, once
end
return first
"""

# Settle one request. Modes: settle (the answer counts), reject (the policy refused this
# responder), approve-n (counts once `required` distinct approvers agree). First writer wins. The settle
# that completes its step's requests writes the session's end (ARGV ``ends``: nothing is open any more).
# KEYS: request, its approvals, events, seq, grants, open, state, granted, end, the step's other requests…
_SETTLE = """
local req, oks, events, seq, grants, open = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local mode, now, outcome, response, responder, responder_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local required, grant_key, note, maxlen = tonumber(ARGV[7]), ARGV[8], ARGV[9], ARGV[10]
local ev_settled, ev_partial, ev_rejected, ev_stale = ARGV[11], ARGV[12], ARGV[13], ARGV[14]
local retention, ev_gone, grant_id, grant_json, ends = ARGV[15], ARGV[16], ARGV[17], ARGV[18], ARGV[19]
local granted, session_end = KEYS[8], KEYS[9]
local BATCH = 10  -- KEYS[7..9]: state, granted, end; then the step's other requests
local function emit(list_json, approvals)
  if list_json == '' then return 0 end
  local first = 0
  for _, ev in ipairs(cjson.decode(list_json)) do
    if approvals then ev = string.gsub(ev, '"approvals":%-1', '"approvals":' .. approvals) end
    local s = redis.call('INCR', seq)
    if first == 0 then first = s end
    redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 's', s, 'e', ev)
  end
  return first
end
-- closed: the request's own end is set here, once; the step's last one writes the session's end
local function close(status, closed_outcome)
  redis.call('HSET', req, 'status', status, 'outcome', closed_outcome, 'response', response,
             'responder', responder, 'settled_at', now, 'note', note)
  redis.call('PEXPIRE', req, retention)
  redis.call('PEXPIRE', oks, retention)
  redis.call('SREM', open, req)
  for i = BATCH, #KEYS do
    if redis.call('HGET', KEYS[i], 'status') == 'open' then return 0 end
  end
  redis.call('SET', session_end, ends)
  return 1
end
local status = redis.call('HGET', req, 'status')
if not status then return {'missing', 0, 0, 0} end
if status ~= 'open' then return {'stale', emit(ev_stale), 0, 0} end
if redis.call('EXISTS', KEYS[7]) == 0 then  -- its turn is gone: nothing can resume, so nobody may approve it
  response, responder, note = '', '', ''
  local first = emit(ev_gone)
  return {'gone', first, 0, close('settled', 'cancelled')}
end
if mode == 'reject' then return {'rejected', emit(ev_rejected), 0, 0} end
local count = 0
if required > 1 and outcome == 'approved' then
  redis.call('SADD', oks, responder_id)
  count = redis.call('SCARD', oks)
  if count < required then return {'partial', emit(ev_partial, count), count, 0} end
end
if grant_key ~= '' and outcome == 'approved' then
  -- the grant and what App Home lists of it: one write, one lifetime (the listing's own write comes first,
  -- so a failed one leaves nothing settled and nothing granted)
  redis.call('HSET', granted, grant_id, grant_json)
  redis.call('SADD', grants, grant_key)
end
local first = emit(ev_settled, count)
return {'settled', first, count, close('settled', outcome)}
"""


# Claim due timers: each due member is pushed one lease into the future and returned, atomically, so
# two sweeping replicas never get the same one; the claimer removes it when it has fired (if it dies
# first, the timer is due again a lease later, and firing is idempotent).
# KEYS[1] timers; ARGV: now ms, limit, lease ms → {member, claim, …}
_TIMERS_CLAIM = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local out, claim = {}, tonumber(ARGV[1]) + tonumber(ARGV[3])
for _, member in ipairs(due) do
  redis.call('ZADD', KEYS[1], claim, member)
  out[#out + 1] = member
  out[#out + 1] = claim
end
return out
"""

# Mark an open request once (reminded, escalated) and append the event that says so; a request
# answered meanwhile, or marked before, changes nothing. KEYS: request, events, seq;
# ARGV: field, value, event json, max stream length → seq | 0
_MARK_ONCE = """
if redis.call('HGET', KEYS[1], 'status') ~= 'open' then return 0 end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
local s = redis.call('INCR', KEYS[3])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 's', s, 'e', ARGV[3])
return s
"""

# A request's responders described again after an approver list changed (``change_responders``): only
# while it is open, and only by a description made from a newer policy version than the stored one, so
# two list edits in quick succession leave the later one's description. ARGV: responders json, version,
# event json, events maxlen. KEYS: request, events, seq.
_CHANGE_RESPONDERS = """
if redis.call('HGET', KEYS[1], 'status') ~= 'open' then return 0 end
if tonumber(redis.call('HGET', KEYS[1], 'responders_v') or '-1') >= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'responders', ARGV[1], 'responders_v', ARGV[2])
local s = redis.call('INCR', KEYS[3])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 's', s, 'e', ARGV[3])
return s
"""

# Let a lease go, if it is still ours; with ARGV[2] (an end, epoch ms) the unit of work is over: a session
# that has a state and no open request gets that end. KEYS: lease, open, state, end.
_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if ARGV[2] ~= '' and redis.call('EXISTS', KEYS[2]) == 0 and redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('SET', KEYS[4], ARGV[2])
end
return 1
"""

# Take one queued message off the inbox (the taker then owns it).
_TAKE = """
return redis.call('LREM', KEYS[1], 1, ARGV[1])
"""

# Start a tool call: only the lease holder may (fencing), and only once per marker.
_BEGIN = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1, false} end
if redis.call('SET', KEYS[2], 'started', 'NX', 'PX', ARGV[2]) then return {1, false} end
return {0, redis.call('GET', KEYS[2])}
"""

# Record an incoming message durably, once: the dedupe mark and the queue entry are one write. A session
# whose end has passed is retired first, so a thread used again starts afresh. KEYS: the mark, then the
# session's keys; ARGV: message id, message, mark seconds, now ms.
_RECORD_MESSAGE = _RETIRE_FN + """
if ARGV[1] ~= '' and not redis.call('SET', KEYS[1], 1, 'NX', 'EX', ARGV[3]) then return 0 end
retire(2, tonumber(ARGV[4]))
redis.call('RPUSH', KEYS[2 + SK.inbox], ARGV[2])
return 1
"""

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

# Claim a post before sending it: set the field only if unset, keep the frontend data only if this wrote
# it (a lost claim wrote nothing). KEYS: chan, open; ARGV: field, value, retention ms → {1, value} | {0, held}
_CLAIM = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  return {1, ARGV[2]}
end
return {0, redis.call('HGET', KEYS[1], ARGV[1])}
"""

# Take a member off a schedule (the outbox list, the timers) unless someone re-scheduled it meanwhile.
_FORGET_IF_UNCHANGED = """
if tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1])) == tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
"""


@dataclass
class _PassView:
    """A delivery pass's view of its session's frontend data (``chan``): what it read at its start, with its
    own writes since; ``pending``: those to write at its end; ``tidy``: index clean-ups to send then too;
    ``requests``: the request records its consumers read (``pass_request``), read once per pass.
    ``claimed``: posts claimed in the pass's memory (``channel_claim(..., in_pass=True)``) and neither
    recorded nor given up yet: written as claims with the pass's next save (a post whose answer was lost)."""

    token: str
    fields: dict[str, str]
    careful: bool = False  # the last deliverer died mid-pass: look in the thread before posting
    lock_fresh_until: float = 0.0  # monotonic: until then no other deliverer can take the session over
    claimed: dict[str, str] = field(default_factory=dict)  # posts claimed in memory, not yet recorded
    pending: dict[str, str] = field(default_factory=dict)
    tidy: list[Command] = field(default_factory=list)
    requests: dict[str, RequestRecord] = field(default_factory=dict)


class SessionStore:
    """Redis persistence for sessions. Methods are small and mostly one round trip each."""

    def __init__(self, redis: Redis, *, lease_ms: int = 30_000, retention_s: int = DEFAULT_RETENTION_SECONDS):
        self.redis = redis
        self.lease_ms = lease_ms
        self.retention_ms = int(retention_s * 1000)
        self.grants = GrantStore(redis, self.key)  # standing approvals, listed per workspace
        self._commit = redis.register_script(replay_safe(_COMMIT))
        self._settle = redis.register_script(replay_safe(_SETTLE))
        self._begin = redis.register_script(replay_safe(_BEGIN))
        self._record_message = redis.register_script(replay_safe(_RECORD_MESSAGE))
        self._take = redis.register_script(replay_safe(_TAKE))
        self._release = redis.register_script(_RELEASE)
        self._retire = redis.register_script(_RETIRE)
        self._timers_claim = redis.register_script(_TIMERS_CLAIM)
        self._mark_once_script = redis.register_script(replay_safe(_MARK_ONCE))
        self._change_responders_script = redis.register_script(replay_safe(_CHANGE_RESPONDERS))
        self._outbox_begin = redis.register_script(_OUTBOX_BEGIN)
        self._outbox_save = redis.register_script(_OUTBOX_SAVE)
        self._claim = redis.register_script(_CLAIM)
        self._forget_if_unchanged = redis.register_script(_FORGET_IF_UNCHANGED)
        self._pass_views: dict[str, _PassView] = {}  # session id → its frontend data, while this process delivers

    # keys ------------------------------------------------------------------------------------

    def key(self, session_id: str, name: str) -> str:
        return f"{_prefix(session_slot(session_id))}:{name}"

    def own_keys(self, session_id: str) -> list[str]:
        """The session's own keys (``SESSION_KEYS``, in that order): what retirement deletes."""
        prefix = _prefix(session_slot(session_id))
        return [f"{prefix}:{name}" for name in SESSION_KEYS]

    def _ends_at(self) -> int:
        """A session's end if its unit of work ended now (epoch ms)."""
        return _now_ms() + self.retention_ms

    @staticmethod
    def request_key(request_id: str) -> str:
        return f"{_prefix(slot_of_request(request_id))}:req:{request_id}"

    @staticmethod
    def pending_key(team_id: str | None) -> str:
        return f"hitl:{{ws:{team_id or '-'}}}:pending"

    # state and lease -------------------------------------------------------------------------

    async def load(self, session_id: str) -> tuple[dict[str, Any] | None, set[str], str | None]:
        """The session state (None if new), its granted once() keys and a requested cancel."""
        snapshot = await self.snapshot(session_id)
        return snapshot.state, snapshot.grants, snapshot.cancel

    async def snapshot(self, session_id: str, *, known_state: dict[str, Any] | None = None) -> SessionSnapshot:
        """Everything the turn loop reads before it moves a session forward, in one round trip.

        ``known_state``: the state this lease holder committed last (nobody else can have written it
        since), so it is not read again; nor is the failure count, read once per pass."""
        pipe = self.redis.pipeline(transaction=False)
        _queue(pipe, self._snapshot_reads(session_id, known_state))
        return self._snapshot_from(await pipe.execute(), known_state)

    def _snapshot_reads(self, session_id: str, known_state: dict[str, Any] | None) -> list[Command]:
        reads: list[Command] = [("get", (self.key(session_id, "state"),))] if known_state is None else []
        reads += [("smembers", (self.key(session_id, "grants"),)), ("get", (self.key(session_id, "cancel"),)),
                  ("lrange", (self.key(session_id, "inbox"), 0, -1))]
        if known_state is None:
            reads.append(("get", (self.key(session_id, "fails"),)))
        return reads

    @staticmethod
    def _snapshot_from(replies: list[Any], known_state: dict[str, Any] | None) -> SessionSnapshot:
        if known_state is not None:
            grants, cancel, inbox = replies
            return SessionSnapshot(state=known_state, grants={g.decode() for g in grants},
                                   cancel=cancel.decode() if cancel else None,
                                   inbox=[json.loads(m) for m in inbox])
        raw, grants, cancel, inbox, fails = replies
        return SessionSnapshot(
            state=json.loads(raw) if raw else None,
            grants={g.decode() for g in grants},
            cancel=cancel.decode() if cancel else None,
            inbox=[json.loads(m) for m in inbox],
            failures=int(fails or 0),
        )

    async def state(self, session_id: str) -> dict[str, Any] | None:
        """The saved session state alone (one command), for callers that need nothing else."""
        raw = await self.redis.get(self.key(session_id, "state"))
        return json.loads(raw) if raw else None

    async def exists(self, session_id: str) -> bool:
        """Whether the session is alive: it has a state and its end, if any, has not passed (an ended session
        not yet retired is gone already)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.exists(self.key(session_id, "state"))
        pipe.get(self.key(session_id, "end"))
        there, ends = await pipe.execute()
        return bool(there) and not session_ended(ends)

    async def cancel_requested(self, session_id: str) -> str | None:
        """The turn id someone asked to cancel, if any."""
        raw = await self.redis.get(self.key(session_id, "cancel"))
        return raw.decode() if raw else None

    async def request_cancel(self, session_id: str, turn_id: str) -> None:
        await self.redis.set(self.key(session_id, "cancel"), turn_id)

    async def acquire_lease(self, session_id: str) -> str | None:
        token, _ = await self._acquire_lease(session_id, read=False)
        return token

    async def acquire_lease_and_read(self, session_id: str) -> tuple[str | None, SessionSnapshot | None]:
        """Take the turn lease and read the session's snapshot (one round trip); (None, None) when another
        worker holds the lease. Once the lease is ours nobody else commits, so the read is current."""
        return await self._acquire_lease(session_id, read=True)

    async def _acquire_lease(self, session_id: str, *, read: bool) -> tuple[str | None, SessionSnapshot | None]:
        token = secrets.token_hex(8)
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(self.key(session_id, "lease"), token, nx=True, px=self.lease_ms)
        pipe.zadd(ACTIVE, {session_id: _now_ms() + self.lease_ms})
        if read:
            _queue(pipe, self._snapshot_reads(session_id, None))
        got, _, *snapshot = await pipe.execute()
        if not got:
            return None, None
        return token, self._snapshot_from(snapshot, None) if read else None

    async def renew_lease(self, session_id: str, token: str) -> tuple[bool, str | None]:
        """Extend the lease if still held; returns (held, the turn id someone asked to cancel), the cancel
        read in the same script, so a replica running a tool learns of a stop without a round trip more."""
        held, cancel = await self.redis.eval(
            "local held = 0 "
            "if redis.call('GET', KEYS[1]) == ARGV[1] then held = redis.call('PEXPIRE', KEYS[1], ARGV[2]) end "
            "return {held, redis.call('GET', KEYS[2]) or ''}",
            2,
            self.key(session_id, "lease"),
            self.key(session_id, "cancel"),
            token,
            self.lease_ms,
        )
        if held:
            await self.redis.zadd(ACTIVE, {session_id: _now_ms() + self.lease_ms})
        return bool(held), (cancel.decode() if isinstance(cancel, bytes) else cancel) or None

    async def release_lease(
        self, session_id: str, token: str, *, still_active: bool, retry_after_ms: int = 0, read: bool = False
    ) -> SessionSnapshot | None:
        """Let the turn lease go; with ``read``, then read the snapshot in the same round trip (what arrived
        while we held the lease, whose own attempt to drive found it taken). Not ``still_active``: the unit of
        work is over, and a session with no open request gets its end (and a place on ``hitl:retire``)."""
        ends = self._ends_at()
        index: list[Command] = ([("zadd", (ACTIVE, {session_id: _now_ms() + retry_after_ms}))] if still_active
                                else [("zrem", (ACTIVE, session_id)), ("zadd", (RETIRE, {session_id: ends}))])
        reads = self._snapshot_reads(session_id, None) if read else []
        keys = [self.key(session_id, name) for name in ("lease", "open", "state", "end")]
        _, *rest = await self._pipelined(self._release, keys, [token, "" if still_active else ends],
                                         after=[*index, *reads])
        return self._snapshot_from(rest[len(index):], None) if read else None

    async def drive_failures(self, session_id: str, *, failed: bool) -> int:
        """Count a session's unexpected drive failures in a row (reset on success); returns the count."""
        key = self.key(session_id, "fails")
        if not failed:
            await self.redis.delete(key)
            return 0
        return int(await self.redis.incr(key))

    async def mark_active(self, session_id: str, *, delay_ms: int = 0) -> None:
        await self.redis.zadd(ACTIVE, {session_id: _now_ms() + delay_ms})

    async def due_sessions(self, *, limit: int = 100) -> list[str]:
        """Sessions whose lease lapsed while a turn still needed work (a dead worker's turns)."""
        raw = await self.redis.zrangebyscore(ACTIVE, 0, _now_ms(), start=0, num=limit)
        return [r.decode() for r in raw]

    async def commit(
        self, session_id: str, token: str | None, state: dict[str, Any] | None,
        events: list[Event] = (), requests: list[RequestRecord] = (),  # type: ignore[assignment]
        **options: Any,
    ) -> list[Event]:
        """Atomically checkpoint state, create requests and append events; returns events with seq. The
        ``options`` (``ref``, ``take``, ``unless_cancelled``) are :meth:`commit_then_read`'s."""
        committed, _ = await self.commit_then_read(session_id, token, state, events, requests, read=False, **options)
        return committed

    async def commit_then_read(
        self,
        session_id: str,
        token: str | None,
        state: dict[str, Any] | None,
        events: list[Event] = (),  # type: ignore[assignment]
        requests: list[RequestRecord] = (),  # type: ignore[assignment]
        *,
        ref: SessionRef | None = None,
        take: list[dict[str, Any]] = (),  # type: ignore[assignment]
        unless_cancelled: str | None = None,
        read: bool = True,
        release: bool = False,
    ) -> tuple[list[Event], SessionSnapshot | None]:
        """Atomically checkpoint state, create requests and append events; returns events with seq.

        ``ref`` (the frontend's routing data) is kept beside the outbox cursor for the deliverer.
        ``take``: queued messages this state has taken in; they leave the inbox in the same write.

        With a token, fails with LeaseLost unless this worker still holds the turn lease; fails with
        MessageTaken, writing nothing, if another worker took one of ``take`` first; with
        ``unless_cancelled`` (a turn id), fails with CancelRequested, writing nothing, if someone asked
        to cancel that turn.

        ``read``: then read the session's snapshot in the same round trip, the committed ``state`` taken
        as known (what the lease holder's next step starts from); else the snapshot is None.
        ``release``: the drive ends with this checkpoint: the lease goes with it (only if it is written)
        and, with ``read``, the snapshot is read after (what arrived while the lease was held), as
        :meth:`release_lease` does.
        """
        keys = [
            self.key(session_id, "lease"),
            self.key(session_id, "state"),
            self.key(session_id, "events"),
            self.key(session_id, "seq"),
            self.key(session_id, "out"),
            self.key(session_id, "open"),
            self.key(session_id, "end"),
            *[self.request_key(r.request_id) for r in requests],
            self.key(session_id, "cancel"),
            self.key(session_id, "inbox"),
        ]
        ends = self._ends_at()  # written by the script only if this checkpoint ends the turn
        args: list[Any] = [
            token or "",
            json.dumps(state, separators=(",", ":")) if state is not None else "",
            len(events),
            len(requests),
            *[e.model_dump_json(exclude_none=True) for e in events],
            *[json.dumps(_record_fields(r), separators=(",", ":")) for r in requests],
            "1" if release and token else "",
            unless_cancelled or "",
            json.dumps([json.dumps(m, separators=(",", ":")) for m in take]) if take else "[]",
            ref.model_dump_json(exclude_none=True) if ref is not None else "",
            ends,
            EVENTS_MAXLEN,
        ]
        # the outbox entry travels in the same write as the commit, so committed events are never
        # left without someone to deliver them (the committer normally delivers them at once)
        extra: list[Command] = []
        if events:
            extra.append(("zadd", (OUTBOX, {session_id: _now_ms() + OUTBOX_GRACE_MS})))
        now = time.time()
        for r in requests:
            extra.append(("zadd", (self.pending_key(r.team_id), {r.request_id: now})))
            for kind, due in (("expire", r.request.expires_at), ("remind", r.request.remind_at),
                              ("escalate", r.request.escalate_at)):
                if due is not None:
                    extra.append(("zadd", (TIMERS, {f"{kind}:{r.request_id}": int(due.timestamp() * 1000)})))
        if release:  # the lease is no longer ours: read everything, state too
            extra.append(("zrem", (ACTIVE, session_id)))
            if token and not requests:  # the turn ended: the script wrote the session's end
                extra.append(("zadd", (RETIRE, {session_id: ends})))
        reads = (self._snapshot_reads(session_id, None if release else state)
                 if read and (release or state is not None) else [])
        first, *rest = await self._eval_pipelined(self._commit, keys, args, [*extra, *reads])
        if first == -1:
            raise LeaseLost(session_id)
        if first == -2:
            raise MessageTaken(session_id)
        if first == -3:
            raise CancelRequested(session_id)
        snapshot = self._snapshot_from(rest[len(extra):], None if release else state) if reads else None
        return _with_seq(events, int(first)), snapshot

    async def _eval_pipelined(self, script: Any, keys: list[Any], args: list[Any], extra: list[Command]) -> list[Any]:
        """A ``replay_safe`` script plus a few idempotent commands in one round trip."""
        return await self._pipelined(script, [*keys, replay_mark(keys)], [*args, REPLAY_MARK_MS], after=extra)

    async def _pipelined(
        self, script: Any, keys: list[Any], args: list[Any], *,
        before: list[Command] = (),  # type: ignore[assignment]
        after: list[Command] = (),  # type: ignore[assignment]
        scripts: list[Any] = (),  # type: ignore[assignment]
    ) -> list[Any]:
        """EVALSHA of ``script`` between a few other commands: one round trip on Redis, in the same order
        one by one on a Cluster (store/pipelined.py). ``scripts``: those the other commands run."""
        commands = [*before, evalsha(script, keys, args), *after]
        return await pipelined(self.redis, commands, [script, *scripts])

    # events ----------------------------------------------------------------------------------

    async def emit(self, session_id: str, events: list[Event]) -> list[Event]:
        """Append events without touching state (no lease needed)."""
        if not events:
            return []
        return await self.commit(session_id, None, None, events)

    async def events(self, session_id: str, *, after_seq: int = 0, count: int = 1000) -> list[Event]:
        entries = await self.redis.xrange(self.key(session_id, "events"), count=count)
        out: list[Event] = []
        for _id, fields in entries:
            seq = int(fields[b"s"])
            if seq <= after_seq:
                continue
            event = event_from_json(fields[b"e"])
            event.seq = seq
            out.append(event)
        return out

    # requests --------------------------------------------------------------------------------

    async def get_request(self, request_id: str) -> RequestRecord:
        """The stored record with its approvers; UnknownRequest if there is none."""
        key = self.request_key(request_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(key)
        pipe.smembers(f"{key}:ok")
        fields, oks = await pipe.execute()
        if not fields:
            raise UnknownRequest(request_id)
        record = _record_from_fields(fields)
        record.approvals = sorted(o.decode() for o in oks)
        return record

    async def get_requests(self, request_ids: list[str]) -> list[RequestRecord]:
        if not request_ids:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for rid in request_ids:
            key = self.request_key(rid)
            pipe.hgetall(key)
            pipe.smembers(f"{key}:ok")
        found = await pipe.execute()
        records = []
        for fields, oks in zip(found[::2], found[1::2], strict=True):
            if fields:
                record = _record_from_fields(fields)
                record.approvals = sorted(o.decode() for o in oks)
                records.append(record)
        return records

    async def settle(
        self,
        record: RequestRecord,
        *,
        mode: str,
        outcome: str,
        response: InputResponse | None,
        responder_id: str = "",
        required: int = 1,
        grant: Grant | None = None,
        note: str | None = None,
        batch: list[str] = (),  # type: ignore[assignment]
        on_settled: list[Event] = (),  # type: ignore[assignment]
        on_partial: list[Event] = (),  # type: ignore[assignment]
        on_rejected: list[Event] = (),  # type: ignore[assignment]
        on_stale: list[Event] = (),  # type: ignore[assignment]
    ) -> SettleResult:
        """One atomic settle attempt (one round trip). ``batch``: the other requests of the step.

        ``grant``: the conversation grant approving records. It is listed for the workspace first (its own
        round trip; a failure raises and nothing is settled), then the settle writes the grant and its
        record together. The listing is an index: ``GrantStore.list`` shows only grants in force, so an
        entry whose settle never came (a crash, a click that did not count) is dropped, never shown."""
        if grant is not None:
            await self.grants.add(grant)
        rid = record.request_id
        key = self.request_key(rid)
        keys = [
            key,
            f"{key}:ok",
            self.key(record.session_id, "events"),
            self.key(record.session_id, "seq"),
            self.key(record.session_id, "grants"),
            *[self.key(record.session_id, name) for name in ("open", "state", "granted", "end")],
            *[self.request_key(b) for b in batch if b != rid],
        ]
        responder = response.principal if response else None
        args = [
            mode,
            datetime.now(UTC).isoformat(),
            outcome,
            response.model_dump_json() if response else "",
            responder.model_dump_json() if responder else "",
            responder_id,
            required,
            grant.approval_key if grant is not None else "",
            note or "",
            EVENTS_MAXLEN,
            *[_events_json(evs) for evs in (on_settled, on_partial, on_rejected, on_stale)],
        ]
        gone = [InputResolved(session_id=record.session_id, turn_id=record.turn_id, resolutions=[
            Resolution(request_id=rid, kind=record.request.kind, outcome="cancelled")])]
        ends = self._ends_at()
        args += [self.retention_ms, _events_json(gone), grant.grant_id if grant is not None else "",
                 grant.model_dump_json() if grant is not None else "", ends]
        # in the same round trip: have the sweep look at the session soon, so a turn whose last answer
        # this was resumes even if this process dies before it drives it, and the outbox delivers what
        # the settle appended (the card update) even then
        extra: list[Command] = [("zadd", (OUTBOX, {record.session_id: _now_ms() + OUTBOX_GRACE_MS}))]
        if mode == "settle":
            extra.append(("zadd", (ACTIVE, {record.session_id: _now_ms() + SETTLED_LOOK_AGAIN_MS})))
        if mode != "reject":  # a settle that completes its step writes the session's end
            extra.append(("zadd", (RETIRE, {record.session_id: ends})))
        (state, first, count, complete), *_ = await self._eval_pipelined(self._settle, keys, args, extra)
        state = state.decode() if isinstance(state, bytes) else state
        if state == "missing":
            raise UnknownRequest(rid)
        chosen = {"settled": on_settled, "partial": on_partial, "rejected": on_rejected, "stale": on_stale,
                  "gone": gone}[state]
        events = _with_seq([_fill_approvals(e, int(count)) for e in chosen], int(first))
        return SettleResult(
            state=state, batch_complete=bool(complete), approvals=int(count), record=record, events=events
        )

    async def pending_for_team(self, team_id: str | None, *, limit: int = 200) -> list[RequestRecord]:
        """Open requests of a workspace, oldest first; drops index entries that are settled."""
        key = self.pending_key(team_id)
        ids = [r.decode() for r in await self.redis.zrange(key, 0, limit - 1)]
        records = [r for r in await self.get_requests(ids) if r.status == "open"]
        # a request whose turn is gone cannot be approved (its click closes it): never offer it
        pipe = self.redis.pipeline(transaction=False)
        for r in records:
            pipe.exists(self.key(r.session_id, "state"))
        alive = await pipe.execute() if records else []
        open_records = [r for r, live in zip(records, alive, strict=True) if live]
        stale = set(ids) - {r.request_id for r in records}
        if stale:
            await self.redis.zrem(key, *stale)
        return open_records

    async def teams_with_pending(self) -> list[str | None]:
        """Workspaces that have a pending-requests index (None: sessions without a workspace)."""
        teams: set[str | None] = set()
        async for key in self.redis.scan_iter(match="hitl:{ws:*}:pending", count=1000):
            team = key.decode()[len("hitl:{ws:") : -len("}:pending")]
            teams.add(None if team == "-" else team)
        return sorted(teams, key=lambda t: t or "")

    # inbox -----------------------------------------------------------------------------------

    async def record_message(self, session_id: str, message: dict[str, Any], *, message_id: str | None) -> bool:
        """Queue a message durably, once per ``message_id`` (Slack sends some twice); False for a repeat.

        The dedupe mark and the queue entry are one atomic write, and the session is put on the sweep's
        list in the same round trip: a message acknowledged to Slack is never lost, even if this process
        dies right after.
        """
        keys = [self.key(session_id, f"msg:{message_id or '-'}"), *self.own_keys(session_id)]
        args = [message_id or "", json.dumps(message, separators=(",", ":")), MESSAGE_DEDUPE_SECONDS, _now_ms()]
        extra = [("zadd", (ACTIVE, {session_id: _now_ms() + OUTBOX_GRACE_MS}))]
        recorded, _ = await self._eval_pipelined(self._record_message, keys, args, extra)
        return bool(recorded)

    async def inbox(self, session_id: str) -> list[dict[str, Any]]:
        return [json.loads(m) for m in await self.redis.lrange(self.key(session_id, "inbox"), 0, -1)]

    async def take_inbox(self, session_id: str, message: dict[str, Any]) -> bool:
        """Remove one queued message; False if another worker already took it."""
        raw = json.dumps(message, separators=(",", ":"))
        taken, *_ = await self._eval_pipelined(self._take, [self.key(session_id, "inbox")], [raw], [])
        return bool(taken)

    # exactly-once execution ------------------------------------------------------------------

    async def begin_execution(self, session_id: str, marker: str, token: str) -> tuple[bool, str | None]:
        """(True, None) if this worker may run the call; else (False, recorded value).

        The lease token fences it: a worker that lost the turn lease gets LeaseLost and starts nothing.
        """
        keys = [self.key(session_id, "lease"), self.key(session_id, f"exec:{marker}")]
        (got, value), *_ = await self._eval_pipelined(self._begin, keys, [token, self.retention_ms], [])
        if got == -1:
            raise LeaseLost(session_id)
        return got == 1, (value.decode() if isinstance(value, bytes) else None)

    async def finish_execution(self, session_id: str, marker: str, result_json: str) -> None:
        """Record what a started call did. Not fenced: it is a fact about the world, and a successor
        that finds it uses the real result instead of reporting the call as interrupted."""
        await self.redis.set(self.key(session_id, f"exec:{marker}"), result_json, px=self.retention_ms)

    # the outbox: committed events → consumers (DESIGN §12) -----------------------------------

    async def outbox_due(self, *, limit: int = 100) -> list[str]:
        """Sessions whose committed events may still need delivering, most overdue first."""
        raw = await self.redis.zrangebyscore(OUTBOX, 0, _now_ms(), start=0, num=limit)
        return [r.decode() for r in raw]

    async def outbox_schedule(self, session_id: str, *, delay_ms: int) -> None:
        await self.redis.zadd(OUTBOX, {session_id: _now_ms() + delay_ms})

    async def outbox_begin(
        self, session_id: str, consumers: list[str], token: str, *, count: int = 100
    ) -> OutboxPass | None:
        """Start a delivery pass (one round trip): keep the session on the outbox list, due again one lease
        from now (if this process dies mid-delivery, any replica's sweep takes over then), take its
        deliverer lock and read what the consumers have not handled yet. None when another deliverer
        holds the lock."""
        claim = _now_ms() + self.lease_ms
        asked_at = time.monotonic()  # the lock's life counts from no later than this
        keys = [self.key(session_id, "out"), self.key(session_id, "events"), self.key(session_id, "outlock"),
                self.key(session_id, "chan")]
        replies = await self._pipelined(self._outbox_begin, keys, [token, self.lease_ms, count, *consumers],
                                        before=[("zadd", (OUTBOX, {session_id: claim}))])
        reply = replies[1]
        if not reply:
            return None
        raw_ref, cursors, holds, entries, chan, careful = reply
        self._pass_views[session_id] = _PassView(
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
            after.append(("zadd", (OUTBOX, {session_id: _now_ms() + again_in_ms})))
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

    def pass_is_careful(self, session_id: str) -> bool:
        """Whether this process's delivery pass over the session follows a deliverer that died mid-pass."""
        view = self._pass_views.get(session_id)
        return view is not None and view.careful

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

    # deadlines ---------------------------------------------------------------------------------

    async def timers_due(self, now_ms: int, *, limit: int = 100) -> list[tuple[str, int]]:
        """Claim up to ``limit`` timers due at ``now_ms``: (member, claim) pairs, each to one caller only."""
        raw = await self._timers_claim(keys=[TIMERS], args=[now_ms, limit, self.lease_ms])
        return [(raw[i].decode(), int(raw[i + 1])) for i in range(0, len(raw), 2)]

    async def retire_due(self, *, limit: int = 100) -> int:
        """Retire sessions whose end has passed (the recovery sweep; three round trips for up to ``limit``):
        claim them from ``hitl:retire`` as timers are claimed, so two sweeping replicas never race; one
        script per session re-checks and deletes its keys in one DEL; then each leaves the schedule, or goes
        back on it by its new end (it was used again), or a retention later (something still holds it: its
        owner writes its end when that ends). Returns how many were retired."""
        now = _now_ms()
        raw = await self._timers_claim(keys=[RETIRE], args=[now, limit, self.lease_ms])
        claimed = [(raw[i].decode(), int(raw[i + 1])) for i in range(0, len(raw), 2)]
        if not claimed:
            return 0
        verdicts = await pipelined(self.redis, [evalsha(self._retire, self.own_keys(sid), [now])
                                                for sid, _ in claimed], [self._retire])
        after: list[Command] = []
        for (sid, claim), (verdict, ends) in zip(claimed, verdicts, strict=True):
            if verdict == 2:
                after.append(("zadd", (RETIRE, {sid: int(ends)})))
            elif verdict == 3:
                after.append(("zadd", (RETIRE, {sid: now + self.retention_ms})))
            else:
                after.append(evalsha(self._forget_if_unchanged, [RETIRE], [sid, claim]))
        await pipelined(self.redis, after, [self._forget_if_unchanged])
        return sum(1 for verdict, _ in verdicts if verdict == 1)

    async def timer_done(self, member: str, claim: int) -> None:
        """Forget a fired timer, unless it was claimed again meanwhile (we were too slow)."""
        await self._pipelined(self._forget_if_unchanged, [TIMERS], [member, claim])

    async def remind_once(self, record: RequestRecord, event: Event) -> bool:
        """Append ``event`` (an ``input.reminded``) if the request is still open and was never reminded."""
        return await self._mark_once(record, "reminded", "1", event)

    async def escalate_once(self, record: RequestRecord, people: list[Principal], event: Event) -> bool:
        """Let ``people`` answer too and append ``event`` (an ``input.escalated``), if the request is still
        open and was never escalated."""
        value = json.dumps([p.model_dump(mode="json") for p in people], separators=(",", ":"))
        return await self._mark_once(record, "escalated_to", value, event)

    async def _mark_once(self, record: RequestRecord, field: str, value: str, event: Event) -> bool:
        sid = record.session_id
        keys = [self.request_key(record.request_id), self.key(sid, "events"), self.key(sid, "seq")]
        args = [field, value, event.model_dump_json(exclude_none=True), EVENTS_MAXLEN]
        first, _ = await self._eval_pipelined(self._mark_once_script, keys, args,
                                             [("zadd", (OUTBOX, {sid: _now_ms() + OUTBOX_GRACE_MS}))])
        return bool(first)

    async def change_responders(self, record: RequestRecord, responders: Responders, event: Event, *,
                                version: int) -> bool:
        """Store who may settle an open request now (described from policy ``version``) and append ``event``
        (an ``input.responders``); False when it was settled meanwhile or a newer description is stored."""
        sid = record.session_id
        keys = [self.request_key(record.request_id), self.key(sid, "events"), self.key(sid, "seq")]
        args = [responders.model_dump_json(), version, event.model_dump_json(exclude_none=True), EVENTS_MAXLEN]
        changed, _ = await self._eval_pipelined(self._change_responders_script, keys, args,
                                               [("zadd", (OUTBOX, {sid: _now_ms() + OUTBOX_GRACE_MS}))])
        return bool(changed)

    async def mark_undeliverable(self, request_id: str, reason: str) -> None:
        """Note on a stored request that its card cannot be shown (never creates a request)."""
        await self.redis.eval(
            "if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'undeliverable', ARGV[1]) end",
            1, self.request_key(request_id), reason[:300],
        )

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

    # frontend data ---------------------------------------------------------------------------

    # While this process delivers a session's events (between outbox_begin and outbox_end) it reads the
    # session's frontend data from what the pass read at its start, kept current by its own writes: the
    # deliverer lock makes this process the only one posting cards and replies for the session meanwhile.

    async def channel_get(self, session_id: str, field: str) -> str | None:
        view = self._pass_views.get(session_id)
        if view is not None:
            return view.fields.get(field)
        raw = await self.redis.hget(self.key(session_id, "chan"), field)
        return raw.decode() if raw else None

    async def channel_set(self, session_id: str, field: str, value: str, *, in_pass: bool = False) -> None:
        """``in_pass``: where a message the pass just posted is (its claim already in Redis): written with
        the pass's closing round trip instead of now. A crash before then leaves the claim, and the next
        deliverer finds the message in the thread, as after a crash between posting and recording."""
        view = self._pass_views.get(session_id)
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

    async def channel_claim(self, session_id: str, field: str, value: str, *, in_pass: bool = False) -> bool:
        """Set ``field`` only if it is not set yet (claim a post before sending it); True if we did.

        ``in_pass``: a post made only by the session's delivery pass (a card, a reply). While the pass's lock
        is fresh nobody else posts for the session, so the claim stays in the pass's memory (no round trip);
        where the post landed is recorded with the pass's closing round trip, and a claim never recorded
        (its answer was lost) is written then. A deliverer that dies first leaves its lock to run out, and the
        next pass is careful (``pass_is_careful``): it looks in the thread before posting."""
        view = self._pass_views.get(session_id)
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

    async def channel_delete(self, session_id: str, field: str) -> None:
        view = self._pass_views.get(session_id)
        if view is not None:
            view.fields.pop(field, None)
            view.pending.pop(field, None)
            if view.claimed.pop(field, None) is not None:
                return  # claimed in memory only: nothing in Redis to take back
        await self.redis.hdel(self.key(session_id, "chan"), field)

    async def key_counts(self, *, limit: int = 1_000_000) -> dict[str, int]:
        """Keys by kind (state, events, requests, markers, …), by SCAN: for `bot check`, not for hot paths."""
        counts: dict[str, int] = {}
        seen = 0
        async for key in self.redis.scan_iter(match="hitl:{*}:*", count=1000):
            parts = key.decode(errors="replace").split(":")
            kind = parts[2] if len(parts) > 2 and not parts[1].startswith("{ws:") else "workspace"
            counts[kind] = counts.get(kind, 0) + 1
            seen += 1
            if seen >= limit:
                break
        return dict(sorted(counts.items()))

    async def oldest_pending(self) -> datetime | None:
        """When the oldest request still in a pending index was asked."""
        oldest: float | None = None
        async for key in self.redis.scan_iter(match="hitl:{ws:*}:pending", count=1000):
            first = await self.redis.zrange(key, 0, 0, withscores=True)
            if first and (oldest is None or first[0][1] < oldest):
                oldest = first[0][1]
        return datetime.fromtimestamp(oldest, UTC) if oldest is not None else None

    async def session_keys(self, session_id: str) -> list[bytes]:
        """Every key of a session (for measurements and tests; uses SCAN)."""
        pattern = f"{_prefix(session_slot(session_id))}:*"
        return [k async for k in self.redis.scan_iter(match=pattern, count=1000)]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _queue(pipe: Any, commands: list[Command]) -> None:
    for name, args in commands:
        getattr(pipe, name)(*args)


def _record_fields(record: RequestRecord) -> dict[str, str]:
    return {
        "request": record.request.model_dump_json(exclude_none=True),
        "session_id": record.session_id,
        "turn_id": record.turn_id,
        "team_id": record.team_id or "",
        "channel": json.dumps(record.channel, separators=(",", ":")),
        "session_info": json.dumps(record.session_info, separators=(",", ":")),
        "approval_key": record.approval_key or "",
        "grant_on_approve": "1" if record.grant_on_approve else "0",
        "status": record.status,
        "batch": json.dumps(record.batch),
    }


def _record_from_fields(fields: dict[bytes, bytes]) -> RequestRecord:
    f = {k.decode(): v.decode() for k, v in fields.items()}
    request = json.loads(f["request"])
    if f.get("responders"):  # described again since it was made (an approver list changed)
        request["responders"] = json.loads(f["responders"])
    return RequestRecord.model_validate(
        {
            "request": request,
            "session_id": f["session_id"],
            "turn_id": f["turn_id"],
            "team_id": f.get("team_id") or None,
            "channel": json.loads(f.get("channel") or "{}"),
            "session_info": json.loads(f.get("session_info") or "{}"),
            "approval_key": f.get("approval_key") or None,
            "grant_on_approve": f.get("grant_on_approve", "1") != "0",  # records from before it: once() only
            "status": f.get("status", "open"),
            "outcome": f.get("outcome") or None,
            "response": json.loads(f["response"]) if f.get("response") else None,
            "responder": json.loads(f["responder"]) if f.get("responder") else None,
            "note": f.get("note") or None,
            "settled_at": f.get("settled_at") or None,
            "batch": json.loads(f.get("batch") or "[]"),
            "undeliverable": f.get("undeliverable") or None,
            "escalated_to": json.loads(f.get("escalated_to") or "[]"),
        }
    )


def _events_json(events: list[Event]) -> str:
    if not events:
        return ""
    return json.dumps([e.model_dump_json(exclude_none=True) for e in events])


def _fill_approvals(event: Event, count: int) -> Event:
    if getattr(event, "approvals", None) == -1:
        return event.model_copy(update={"approvals": count})
    return event


def _with_seq(events: list[Event], first: int) -> list[Event]:
    out = []
    for i, event in enumerate(events):
        copy = EVENT_ADAPTER.validate_python(event.model_dump())
        copy.seq = first + i
        out.append(copy)
    return out
