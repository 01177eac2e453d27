"""The Lua scripts of a session's turns (store/turns.py): one atomic step each, in the session's hash slot.

``RETIRE_FN`` is the retention rule's shared part (store/session_keys.py: ``SESSION_KEYS``, and the rule).
"""

from __future__ import annotations

from store.requests import PACK_RECORD_FN
from store.session_keys import SESSION_KEYS

RETIRE_FN = """
local SK = {""" + ", ".join(f"['{name}'] = {i}" for i, name in enumerate(SESSION_KEYS)) + """}
local function id_after(a, b)  -- stream id a comes after b
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if not am then return false end
  if not bm then return true end
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am > bm or (am == bm and as > bs)
end
-- ``read_end``: the end as the caller read it (false if none); ``audited``: the session's audit progress as
-- the caller read it in the workspace's slot ('' nothing audited; nil not read)
local function retire(base, now, read_end, audited)
  local raw = read_end
  if raw == nil then raw = redis.call('GET', KEYS[base + SK['end']]) end
  if not raw then return 0, 0 end
  local ends = tonumber(raw) or 0
  if ends > now then return 2, ends end
  if redis.call('EXISTS', KEYS[base + SK.lease], KEYS[base + SK.open], KEYS[base + SK.inbox]) > 0 then return 3, 0 end
  local lock = redis.call('GET', KEYS[base + SK.outlock])
  if lock and tonumber(string.match(lock, '|(%d+)$') or now + 1) > now then return 3, 0 end  -- a pass under way
  -- the audit's floor (store/audit_events.py): the audit may lack the events after it, until its progress
  -- (in the workspace's slot, read by the caller) is past it; nothing is retired while its audit lags
  local floor = redis.call('HGET', KEYS[base + SK.out], '_audit')
  if floor and floor ~= '' then
    if audited == nil then return 4, redis.call('HGET', KEYS[base + SK.out], '_ref') or '' end
    if not id_after(audited, floor) then return 5, 0 end
  end
  local all = {}
  for _, i in pairs(SK) do all[#all + 1] = KEYS[base + i] end
  redis.call('DEL', unpack(all))
  return 1, 0
end
"""

# The sweep's step (retiring: ``RedisTurns.sweep``). KEYS: the session's keys; ARGV: now ms, the audit's progress
# ('?' not read)
# → {verdict, end, or (4: the progress is needed) the session's ref}
RETIRE = RETIRE_FN + """
local audited = ARGV[2]
if audited == '?' then audited = nil end
local verdict, ends = retire(1, tonumber(ARGV[1]), nil, audited)
return {verdict, ends}
"""

# Commit a checkpoint: verify the lease, write state, create requests, append events.
# Queued messages the new state takes in (``take``) leave the inbox in the same write, so a message is
# always either queued or in the saved history, never in neither (-2: another worker took one first).
# ``unless_cancelled`` (a turn id): write nothing if someone asked to cancel that turn (-3), so the
# check and the checkpoint are one atomic step and cost no round trip of their own. ``release`` ('1'):
# the lease goes with a checkpoint that was written (a drive's last), never with a refused one; opening no
# request, it ends the turn and writes the session's end (ARGV ``ends``). Opening one takes the end away.
# ``begin``: execution markers of the calls this checkpoint makes ready, started in the same fenced step, as
# ``BEGIN`` starts one (SET NX with their own end): per marker '' (started now, run it) or what was there.
# ``finished``: results of calls that ran (a step's last), written into their markers first and whatever
# the checkpoint's fate, as ``mark_call`` records one: a fact about the world, not fenced.
# KEYS: lease, state, events, seq, out, open, end, the new requests…, cancel, inbox, the markers…, the
# finished markers…; ARGV ends with: …, maxlen, markers' lifetime ms, number of markers, the finished
# results…, their number → {first seq, {per marker}, the cancel read ('' none; with ``release``)} | -1/-2/-3
# ``replay_own``: a lease holder's checkpoint keeps its mark and answer in the session's ``lastmark`` (a key in its
# slot, named after the lease's), read with the lease in one MGET and written with the state in one MSET. One
# holder writes at a time, so the last mark is enough: a resent copy finds its own, or another holder's
# checkpoint came since, and then its lease is gone and the copy is refused (-1), having applied once. A
# checkpoint without a token (``emit``) keeps its mark under its own key, as before.
# The session's ref (``_ref`` in ``out``, where the deliverer routes) is written only when it changed: the last
# mark carries the SHA-1 of the ref its checkpoint left there (``lastmark`` = mark, that sum, the answer), so a
# holder whose ref matches writes none. Both keys are written here only, and retired together; a checkpoint
# without a token that writes a ref zeroes the sum (the next holder's checkpoint writes its ref again).
COMMIT = """
local n_done = tonumber(ARGV[#ARGV])
local NA, NK = #ARGV - n_done - 1, #KEYS - n_done  -- the checkpoint's own ARGV and KEYS end there
for i = 1, n_done do redis.call('SET', KEYS[NK + i], ARGV[NA + i], 'PX', ARGV[NA - 1]) end
local n_begin, begin_ms = tonumber(ARGV[NA]), ARGV[NA - 1]
local A, K = NA - 2, NK - n_begin  -- the last of the checkpoint's own ARGV and KEYS
local token, state_json, n_events, n_requests = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local ref_json, ends = ARGV[A - 2], ARGV[A - 1]
local take, unless_cancelled, release = cjson.decode(ARGV[A - 3]), ARGV[A - 4], ARGV[A - 5]
local lastmark = string.sub(KEYS[1], 1, -6) .. 'lastmark'  -- (KEYS[1] is the session's ':lease')
local strings = {mark_key}  -- the lease, the mark and a requested cancel: one read for them all
if token ~= '' then strings = {KEYS[1], lastmark} end
if unless_cancelled ~= '' or release == '1' then strings[#strings + 1] = KEYS[K - 1] end
local got = redis.call('MGET', unpack(strings))
local held, seen, cancel, ref_sum, ref_there
if token ~= '' then held, seen, cancel = got[1], got[2], got[3] else seen, cancel = got[1], got[2] end
if token ~= '' then
  ref_sum = ref_json ~= '' and redis.sha1hex(ref_json) or string.rep('0', 40)
  ref_there = ref_json ~= '' and seen and string.sub(seen, 17, 56) == ref_sum
  seen = seen and string.sub(seen, 1, 16) == mark and string.sub(seen, 57)
end
if seen then return cjson.decode(seen) end  -- this checkpoint, resent after its reply was lost: it applied
local answer = (function()
if token ~= '' and held ~= token then return -1 end
if unless_cancelled ~= '' and cancel == unless_cancelled then return -3 end
for _, raw in ipairs(take) do
  if not redis.call('LPOS', KEYS[K], raw) then return -2 end
end
for _, raw in ipairs(take) do redis.call('LREM', KEYS[K], 1, raw) end
for i = 1, n_requests do
  local fields = cjson.decode(ARGV[4 + n_events + i])
  local flat = {}
  for k, v in pairs(fields) do table.insert(flat, k); table.insert(flat, v) end
  redis.call('HSET', KEYS[7 + i], unpack(flat))
  redis.call('SADD', KEYS[6], KEYS[7 + i])
end
if n_requests > 0 then redis.call('DEL', KEYS[7]) end  -- open requests: the session has no end
local first = 0
if n_events > 0 then first = redis.call('INCRBY', KEYS[4], n_events) - n_events + 1 end
for i = 1, n_events do
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[A], '*', 's', first + i - 1, 'e', ARGV[4 + i])
end
if release == '1' then
  redis.call('DEL', KEYS[1])
  if n_requests == 0 then redis.call('SET', KEYS[7], ends) end  -- the turn ended: the session's end, once
end
local begun = {}
for i = 1, n_begin do
  if redis.call('SET', KEYS[K + i], 'started', 'NX', 'PX', begin_ms) then begun[i] = ''
  else begun[i] = redis.call('GET', KEYS[K + i]) or 'started' end
end
return {first, begun, release == '1' and cancel or ''}  -- (a drive's last: a stop asked until it let go)
end)()
if type(answer) ~= 'table' then return answer end  -- refused: none of the checkpoint written, nothing to remember
if ref_json ~= '' and not ref_there then redis.call('HSET', KEYS[5], '_ref', ref_json) end
local state = state_json ~= '' and {KEYS[2], state_json} or {}
if token ~= '' then  -- the state and the mark (with the ref's sum): one write
  state[#state + 1] = lastmark
  state[#state + 1] = mark .. ref_sum .. cjson.encode(answer)
  redis.call('MSET', unpack(state))
else
  if ref_json ~= '' then  -- the ref changed outside the marks: the last mark's sum no longer says it is there
    local last = redis.call('GET', lastmark)
    if last then redis.call('SET', lastmark, string.sub(last, 1, 16) .. string.rep('0', 40) .. string.sub(last, 57)) end
  end
  if #state > 0 then redis.call('SET', KEYS[2], state_json) end
  redis.call('SET', mark_key, cjson.encode(answer), 'PX', mark_ms)
end
return answer
"""

# What the lease holder starts from, read in the script that took the lease (``LEASE_AND_READ``; and, after
# a new message's record or a step's last settle that took it for this process's drive, in that script's
# ``then``: store/replay.py): the state, grants, a requested cancel, the inbox, the failure count, and the
# records (with their approvals) of the requests the turn waits on: its parked step's and a session-limit
# prompt's, found in the state's text (``"request_ids":[…]``, ``"limit_request_id":"…"``: the state is never
# decoded here), and only requests in this session's slot are read (all of them: request ids carry their
# session's slot). A request the caller needs and does not find here it reads apart.
# ``lease_read(lease, state, grants, cancel, inbox, fails)`` → {state, grants, cancel, inbox, fails,
# {request id, record and approvals as ``pack_record``'s JSON text, …}}
LEASE_READ_FN = PACK_RECORD_FN + """
local function lease_read(lease, state, grants, cancel, inbox, fails, strings)
  -- one read for the three (``strings``: read already by the script, which has not written them since)
  local raw, cancelled, failed = unpack(strings or redis.call('MGET', state, cancel, fails))
  local records = {}
  if raw and (string.find(raw, '"request_ids":["', 1, true) or string.find(raw, '"limit_request_id":"', 1, true)) then
    -- found in the state's text, not by decoding it all (a state holds the whole history): the keys appear
    -- unescaped only as keys, and a record read for nothing is only not used
    local ids = {}
    for list in string.gmatch(raw, '"request_ids":%[([^%]]*)%]') do
      for id in string.gmatch(list, '"([^"]*)"') do ids[#ids + 1] = id end
    end
    for id in string.gmatch(raw, '"limit_request_id":"([^"]*)"') do ids[#ids + 1] = id end
    local base, slot = string.match(lease, '^(hitl:{([^}]*)}):lease$')
    for _, id in ipairs(ids) do
      if type(id) == 'string' and string.match(id, '^([^.]*)%.') == slot then
        records[#records + 1] = id
        records[#records + 1] = pack_record(base .. ':req:' .. id)
      end
    end
  end
  return {raw or false, redis.call('SMEMBERS', grants), cancelled or false,
          redis.call('LRANGE', inbox, 0, -1), failed or false, records}
end
"""

# ``take_lease(lease, token, ms)``: the turn lease, if free (SET NX), or already this token's (a resent copy).
TAKE_LEASE_FN = """
local function take_lease(key, token, ms)
  return redis.call('SET', key, token, 'NX', 'PX', ms) or redis.call('GET', key) == token
end
"""

# Settle one request. Modes: settle (the answer counts), reject (the policy refused this
# responder), approve-n (counts once `required` distinct approvers agree). First writer wins. The settle
# that completes its step's requests writes the session's end (ARGV ``ends``: nothing is open any more).
# With ARGV ``lease`` (a token: the settling process resumes the turn next), that settle also takes the turn
# lease if it is free, and ``SETTLE_READ`` (its ``then``) reads what the holder starts from, so the resume
# reads nothing first. ARGV ``rev``: the revision of the record the caller's checks read (a request's ``rev``
# counts every change of it): an open request changed since is not touched → {'changed', 0, 0, 0, 0, its
# record and approvals (``pack_record``)}, and the caller checks the fresh record again (fail closed; a stale record never
# settles). KEYS: request, its approvals, events, seq, grants, open, state, granted, end, lease, cancel,
# inbox, fails, the step's other requests… → {state, first seq, approvals, step complete 0/1, lease taken
# 0/1}; with ``SETTLE_READ``, the last is ``lease_read``'s answer or false
SETTLE = TAKE_LEASE_FN + PACK_RECORD_FN + """
local req, oks, events, seq, grants, open = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local mode, now, outcome, response, responder, responder_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local required, grant_key, note, maxlen = tonumber(ARGV[7]), ARGV[8], ARGV[9], ARGV[10]
local ev_settled, ev_partial, ev_rejected, ev_stale = ARGV[11], ARGV[12], ARGV[13], ARGV[14]
local retention, ev_gone, grant_id, grant_json, ends = ARGV[15], ARGV[16], ARGV[17], ARGV[18], ARGV[19]
local lease, lease_ms, rev = ARGV[20], ARGV[21], ARGV[22]
local granted, session_end = KEYS[8], KEYS[9]
local BATCH = 14  -- KEYS[7..13]: state, granted, end, lease, cancel, inbox, fails; then the step's other requests
local status, seen, stored_rev = unpack(redis.call('HMGET', req, 'status', '_once', 'rev'))
local rev_now = tonumber(stored_rev or '0')  -- the record's revision as this settle leaves it
local function emit(list_json, approvals)
  local list = list_json ~= '' and cjson.decode(list_json) or {}
  if #list == 0 then return 0 end
  local first = redis.call('INCRBY', seq, #list) - #list + 1  -- their seqs counted at once
  for i, ev in ipairs(list) do
    if approvals then ev = string.gsub(ev, '"approvals":%-1', '"approvals":' .. approvals) end
    redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 's', first + i - 1, 'e', ev)
  end
  return first
end
-- the answer, kept with the invocation's mark in the request's hash (``replay_own``): a resent copy finds it
local function kept(answer) return mark .. cjson.encode(answer) end
local function remember(answer)
  redis.call('HSET', req, '_once', kept(answer))
  return answer
end
-- closed: the request's own end is set here, once; the step's last one writes the session's end
local function close(status, closed_outcome, answered, first, count)
  local complete = 1
  for i = BATCH, #KEYS do
    if redis.call('HGET', KEYS[i], 'status') == 'open' then complete = 0 break end
  end
  local answer = {answered, first, count, complete}
  redis.call('HSET', req, 'status', status, 'outcome', closed_outcome, 'response', response,
             'responder', responder, 'settled_at', now, 'note', note, '_once', kept(answer), 'rev', rev_now + 1)
  redis.call('PEXPIRE', req, retention)
  redis.call('PEXPIRE', oks, retention)
  redis.call('SREM', open, req)
  if complete == 1 then redis.call('SET', session_end, ends) end
  return answer
end
if not status then return {'missing', 0, 0, 0} end
if seen and string.sub(seen, 1, 16) == mark then  -- this settle, resent after its reply was lost: it applied
  local answer = cjson.decode(string.sub(seen, 17))
  if answer[1] == 'settled' then  -- (the lease as its first copy left it: taking it again is a no-op)
    answer[5] = answer[4] == 1 and lease ~= '' and take_lease(KEYS[10], lease, lease_ms) and 1 or 0
  end
  return answer
end
if status ~= 'open' then return remember({'stale', emit(ev_stale), 0, 0}) end
if rev ~= '' and tonumber(stored_rev or '0') ~= tonumber(rev) then  -- (writes nothing: nothing to remember)
  return {'changed', 0, 0, 0, 0, pack_record(req)}
end
read.strings = redis.call('MGET', KEYS[7], KEYS[11], KEYS[13])  -- state, cancel, fails: for SETTLE_READ too
if not read.strings[1] then  -- its turn is gone: nothing can resume, so nobody may approve it
  response, responder, note = '', '', ''
  return close('settled', 'cancelled', 'gone', emit(ev_gone), 0)
end
if mode == 'reject' then return remember({'rejected', emit(ev_rejected), 0, 0}) end
local count = 0
if required > 1 and outcome == 'approved' then
  if redis.call('SADD', oks, responder_id) == 1 then rev_now = redis.call('HINCRBY', req, 'rev', 1) end
  count = redis.call('SCARD', oks)
  if count < required then return remember({'partial', emit(ev_partial, count), count, 0}) end
end
if grant_key ~= '' and outcome == 'approved' then
  -- the grant and what App Home lists of it: one write, one lifetime (the listing's own write comes first,
  -- so a failed one leaves nothing settled and nothing granted)
  redis.call('HSET', granted, grant_id, grant_json)
  redis.call('SADD', grants, grant_key)
end
local answer = close('settled', outcome, 'settled', emit(ev_settled, count), count)
answer[5] = answer[4] == 1 and lease ~= '' and take_lease(KEYS[10], lease, lease_ms) and 1 or 0
return answer
"""

SETTLE_READ = LEASE_READ_FN + """
if type(result) == 'table' and result[5] == 1 then
  result[5] = lease_read(KEYS[10], KEYS[7], KEYS[5], KEYS[11], KEYS[12], KEYS[13], read.strings)
elseif type(result) == 'table' then result[5] = false end
return result
"""

# Claim due timers: each due member is pushed one lease into the future and returned, atomically, so
# two sweeping replicas never get the same one; the claimer removes it when it has fired (if it dies
# first, the timer is due again a lease later, and firing is idempotent).
# KEYS[1] timers; ARGV: now ms, limit, lease ms → {member, claim, …}
TIMERS_CLAIM = """
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
MARK_ONCE = """
if redis.call('HGET', KEYS[1], 'status') ~= 'open' then return 0 end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'rev', 1)
local s = redis.call('INCR', KEYS[3])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 's', s, 'e', ARGV[3])
return s
"""

# A request's responders described again after an approver list changed (``RedisTurns.amend``, new responders): only
# while it is open, and only by a description made from a newer policy version than the stored one, so
# two list edits in quick succession leave the later one's description. ARGV: responders json, version,
# event json, events maxlen. KEYS: request, events, seq.
CHANGE_RESPONDERS = """
if redis.call('HGET', KEYS[1], 'status') ~= 'open' then return 0 end
if tonumber(redis.call('HGET', KEYS[1], 'responders_v') or '-1') >= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'responders', ARGV[1], 'responders_v', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'rev', 1)
local s = redis.call('INCR', KEYS[3])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 's', s, 'e', ARGV[3])
return s
"""

# Let a lease go, if it is still ours; with ARGV[2] (an end, epoch ms) the unit of work is over: a session
# that has a state and no open request gets that end. KEYS: lease, open, state, end.
RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if ARGV[2] ~= '' and redis.call('EXISTS', KEYS[2]) == 0 and redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('SET', KEYS[4], ARGV[2])
end
return 1
"""

# Take one queued message off the inbox (the taker then owns it).
TAKE = """
return redis.call('LREM', KEYS[1], 1, ARGV[1])
"""

# Start a tool call: only the lease holder may (fencing), and only once per marker.
BEGIN = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1, false} end
if redis.call('SET', KEYS[2], 'started', 'NX', 'PX', ARGV[2]) then return {1, false} end
return {0, redis.call('GET', KEYS[2])}
"""

# Take the turn lease and read what the lease holder starts from (``RedisTurns.lease``, take). The token
# is fresh per attempt, so a resent copy that finds the lease holding it has taken it. KEYS: lease, state,
# grants, cancel, inbox, fails; ARGV: token, lease ms → false (taken) | ``lease_read``'s answer
LEASE_AND_READ = TAKE_LEASE_FN + LEASE_READ_FN + """
if not take_lease(KEYS[1], ARGV[1], ARGV[2]) then return false end
return lease_read(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
"""

# Record an incoming message durably, once: the dedupe mark and the queue entry are one write. A session
# whose end has passed is retired first, so a thread used again starts afresh. KEYS: the mark, then the
# session's keys; ARGV: message id, message, mark seconds, now ms, then a lease token ('' = none) and its
# ms. With a token (the recording process drives the session next) the turn lease is taken too if it is
# free → {1, taken 1/0}, and ``RECORD_MESSAGE_READ`` (its ``then``) reads after the record what the holder
# starts from (either way: trying the message as an answer needs the state and inbox) → {1, taken 1/0,
# ``lease_read``'s answer}. Without a token → 1. A repeat → 0. ARGV ends with the audit's progress in the session
# ('?' not read): a session whose end has passed and whose audit may lag answers {'audit', its ref} instead,
# having written nothing, and is asked again with it (it is then retired, or, its audit lagging, not).
# ``replay_own``: the dedupe mark holds the invocation's mark, so a resent copy that finds it (not a repeat) answers
# as the first did without queuing the message again; a message without an id keeps the mark under its own key.
RECORD_MESSAGE = RETIRE_FN + TAKE_LEASE_FN + """
local first_copy
if ARGV[1] ~= '' then
  first_copy = redis.call('SET', KEYS[1], mark, 'NX', 'EX', ARGV[3])
  if not first_copy and redis.call('GET', KEYS[1]) ~= mark then return 0 end
else first_copy = redis.call('SET', mark_key, 1, 'NX', 'PX', mark_ms) end
local audited = ARGV[7]
if audited == '?' then audited = nil end
local verdict, said
if first_copy and ARGV[5] ~= '' then  -- the end with the strings RECORD_MESSAGE_READ reads: one MGET
  local got = redis.call('MGET', KEYS[2 + SK['end']], KEYS[2 + SK.state], KEYS[2 + SK.cancel], KEYS[2 + SK.fails])
  verdict, said = retire(2, tonumber(ARGV[4]), got[1], audited)
  if verdict == 1 then got = {false, false, false, false} end  -- (retired: gone)
  read.strings = {got[2], got[3], got[4]}
elseif first_copy then verdict, said = retire(2, tonumber(ARGV[4]), nil, audited) end
if verdict == 4 then  -- ended, and its audit may lag: asked again with the audit's progress, nothing written
  if ARGV[1] ~= '' then redis.call('DEL', KEYS[1]) else redis.call('DEL', mark_key) end
  return {'audit', said}
end
if first_copy then redis.call('RPUSH', KEYS[2 + SK.inbox], ARGV[2]) end
if ARGV[5] == '' then return 1 end
return {1, take_lease(KEYS[2 + SK.lease], ARGV[5], ARGV[6]) and 1 or 0}
"""

RECORD_MESSAGE_READ = LEASE_READ_FN + """
if type(result) ~= 'table' or result[1] == 'audit' then return result end
""" + "return {{1, result[2], lease_read({}, read.strings)}}\n".format(
    ", ".join(f"KEYS[{2 + SESSION_KEYS.index(name)}]" for name in ("lease", "state", "grants", "cancel", "inbox",
                                                                   "fails")))
