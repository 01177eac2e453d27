"""The guarantees ladder: ``python -m benchmarks.http.ladder --rung N --redis-url … …``, a contender.

The durable floor (``durable.py``) with the product's own guarantees added one rung at a time, each
written as plainly as Bolt, redis-py and pydantic allow (no engine, no abstraction), so that the HTTP
bench can say what those guarantees cost at the least (``python -m benchmarks.http.ladder_bench``).
The rungs are cumulative:

1. **Streamed model calls and the agent session status.** The model is called as the project calls it
   (OpenAI chat completions, ``stream: true`` with usage, over aiohttp, the chunks parsed and joined), and the cycle
   ends with ``agents.sessions.setStatus`` (``active``, titled with the request), the fourth Slack call
   the project makes in a quick cycle. Redis as the floor.
2. **An event log and an outbox.** Each state change is one Lua script that writes the state and XADDs
   its events (pydantic-validated JSON) to the session's stream. Nothing is posted by the listeners:
   a delivery pass (one per drive: after the park, after the answer) takes the session's deliverer
   lock, reads the stream after its cursor (XRANGE) and claims every post (card, reply) in the session's
   post ledger (HSETNX) in that same script; then it posts, and one script records where the posts
   landed, moves the cursor and lets the lock go. A crash after a claim never posts twice (at most once,
   as the project's ledger). Retention is set once, when the turn ends (nothing an open request needs
   expires).
3. **A turn lease with fencing, exactly-once tool runs, wake-ups.** The mention takes the session's turn
   lease (``SET NX PX`` with a token); every write script checks the token; the park lets it go and the
   settle takes it again. The settle, which makes the call ready, starts its execution marker (``SET NX``;
   a call whose marker was there is never run again); the tool's result is written into the marker by a
   fenced script right after it ran. The session is on ``lad:active`` (ZADD with the lease's deadline)
   while a lease is held and on ``lad:outbox`` while it has undelivered events, ZREM'd when done (the
   outbox's only if its score is unchanged since the pass began), so a kill -9 anywhere leaves a wake-up.
   The sorted sets are global keys: written beside the session's scripts in the same pipeline, not in them.
4. **The audit log's hash chain.** The delivery pass appends each decision it reads (the request, the
   settlement, the execution) to the workspace's audit stream as a hash-chained entry (sha256 of the
   canonical JSON holding the previous entry's hash), compare-and-set on the chain's head, with the
   session's audit progress so each event is audited once; in the pass's closing round trip (in one of its
   own when another pass of this process is appending to the workspace's chain: one append at a time). The
   floor's plain decision XADD goes.
5. **The contract's event vocabulary.** The same transitions write the ten events DESIGN §4 names for an
   approve cycle (``turn.started``, ``input.requested``, ``turn.waiting`` with the park; ``approval.settled``,
   ``input.resolved`` with the settle; ``action.started``, ``action.result`` with the result;
   ``message.completed``, ``turn.completed``, ``session.waiting`` with the answer), built with the contract's
   own models (``bot.protocol``, in ``vocabulary.py``) instead of rung 4's four small ones, and the pass
   reads them back with the contract's adapter and audits the four decisions the project audits (the
   request, the settlement, the resolution, the execution). ``action.started`` is stamped when the settle
   started the call's marker but written with its result (its data is known only once the settle has read
   the turn), so a crash mid-tool leaves the marker without it.

Which rung runs is ``--rung``; each uses its own key prefix (``lad<N>:``).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import time
import uuid
from typing import Any

from aiohttp import web

from .durable import SETTLE as FLOOR_SETTLE
from .durable import TOOL, Busy
from .serve import open_site, serve_until_stopped

LADDER_ACTION = "ladder-approve"
RETENTION_MS = 7 * 24 * 3600 * 1000
LEASE_MS = 30_000
LOCK_MS = 15_000
MARKER_MS = 7 * 24 * 3600 * 1000
MAXLEN = 1000
GENESIS = "0" * 64
POSTS = ("request", "answer")  # the events whose delivery is a new message: claimed before posting

RUNGS = {
    1: "floor + streamed model calls + agent session status",
    2: "+ event log and outbox (post ledger claims)",
    3: "+ turn lease with fencing, tool marker, wake-ups",
    4: "+ audit hash chain",
    5: "+ the contract's event vocabulary (10 events, 4 audited decisions)",
}

# ---- the scripts (rung 2 on) -------------------------------------------------------------------------------

# KEYS: turn, events, lease. ARGV: token ('' none), requester, doc, then (type, event) pairs
# → 1 | -1 (the lease is not ours)
PARK = f"""
if ARGV[1] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[1] then return -1 end
redis.call('HSET', KEYS[1], 'status', 'parked', 'requester', ARGV[2], 'doc', ARGV[3])
for i = 4, #ARGV, 2 do
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', {MAXLEN}, '*', 't', ARGV[i], 'e', ARGV[i + 1])
end
if ARGV[1] ~= '' then redis.call('DEL', KEYS[3]) end
return 1
"""

# KEYS: turn, events, decisions (the floor's plain audit stream), lease, marker. ARGV: clicker, request id,
# plain audit '1'/'0', token ('' none), lease ms, marker ms, then (type, event) pairs
# → {'ok', doc} | {'refused'} | {'gone'} | {'busy'} (another holds the lease) | {'ran', doc} (its call began before)
SETTLE = f"""
local status, requester, doc = unpack(redis.call('HMGET', KEYS[1], 'status', 'requester', 'doc'))
if status ~= 'parked' then return {{'gone'}} end
if requester ~= ARGV[1] then return {{'refused'}} end
if ARGV[4] ~= '' and not redis.call('SET', KEYS[4], ARGV[4], 'NX', 'PX', ARGV[5]) then return {{'busy'}} end
redis.call('HSET', KEYS[1], 'status', 'approved', 'approver', ARGV[1])
for i = 7, #ARGV, 2 do
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', {MAXLEN}, '*', 't', ARGV[i], 'e', ARGV[i + 1])
end
if ARGV[3] == '1' then
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', 100000, '*', 'request', ARGV[2], 'by', ARGV[1], 'outcome', 'approved')
end
if ARGV[4] ~= '' and not redis.call('SET', KEYS[5], 'started', 'NX', 'PX', ARGV[6]) then return {{'ran', doc}} end
return {{'ok', doc}}
"""

# The tool's result, written into its marker right after it ran. KEYS: lease, marker, events.
# ARGV: token, result, marker ms, then (type, event) pairs → 1 | -1
RESULT = f"""
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
for i = 4, #ARGV, 2 do
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', {MAXLEN}, '*', 't', ARGV[i], 'e', ARGV[i + 1])
end
return 1
"""

# The turn answered: done, its events, the lease let go, every session key's retention set once.
# KEYS: turn, events, lease, out, chan. ARGV: token ('' none), retention ms, then (type, event) pairs → 1 | -1
FINISH = f"""
if ARGV[1] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[1] then return -1 end
redis.call('HSET', KEYS[1], 'status', 'done')
for i = 3, #ARGV, 2 do
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', {MAXLEN}, '*', 't', ARGV[i], 'e', ARGV[i + 1])
end
if ARGV[1] ~= '' then redis.call('DEL', KEYS[3]) end
for i = 1, 5 do if i ~= 3 then redis.call('PEXPIRE', KEYS[i], ARGV[2]) end end
return 1
"""



def pass_begin(posts: tuple[str, ...]) -> str:
    """A delivery pass begins: the deliverer lock, the events after the cursor, the post ledger, and a claim
    of every post among them (the events of a type in ``posts``: '?' until the post's ts is recorded; a claim
    found set is never posted again). KEYS: out, events, chan, lock. ARGV: token, lock ms
    → false (another pass holds it) | {entries, ledger, claims}"""
    return f"""
if not redis.call('SET', KEYS[4], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
local cursor = redis.call('HGET', KEYS[1], 'c') or '0-0'
local entries = redis.call('XRANGE', KEYS[2], '(' .. cursor, '+', 'COUNT', 100)
local claims = {{}}
for i, entry in ipairs(entries) do
  local kind = entry[2][2]
  claims[i] = 0
  if {' or '.join(f"kind == '{p}'" for p in posts)} then
    claims[i] = redis.call('HSETNX', KEYS[3], 'post:' .. entry[1], '?')
  end
end
return {{entries, redis.call('HGETALL', KEYS[3]), claims}}
"""


# The pass ends: where its posts landed, the cursor moved, the lock let go if still ours.
# KEYS: out, chan, lock. ARGV: token, cursor, then (field, value) pairs → 1
PASS_SAVE = """
if #ARGV > 2 then redis.call('HSET', KEYS[2], unpack(ARGV, 3)) end
redis.call('HSET', KEYS[1], 'c', ARGV[2])
if redis.call('GET', KEYS[3]) == ARGV[1] then redis.call('DEL', KEYS[3]) end
return 1
"""

# A wake-up is forgotten only if nobody set it again since it was read (a newer event's ZADD wins).
# KEYS: the sorted set. ARGV: member, score as read → 1 | 0
FORGET = """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0
"""

# Append a session's decisions to the workspace's chain if its head is still the one the hashes were
# computed on, and only events after the session's audit progress. KEYS: stream, head, progress.
# ARGV: expected head hash, the batch's first event id, its last, retention ms, then (seq, hash, entry) triples
# → {'ok'} | {'seen'} (audited before) | {'head', seq, hash} (another writer appended first: recompute)
AUDIT = f"""
local function after(a, b)  -- stream id a > b
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am > bm or (am == bm and as > bs)
end
local seq, hash = unpack(redis.call('HMGET', KEYS[2], 'seq', 'hash'))
if (hash or '{GENESIS}') ~= ARGV[1] then return {{'head', seq or '0', hash or '{GENESIS}'}} end
local upto = redis.call('GET', KEYS[3])
if upto and not after(ARGV[2], upto) then return {{'seen'}} end
for i = 5, #ARGV, 3 do
  redis.call('XADD', KEYS[1], '*', 'seq', ARGV[i], 'hash', ARGV[i + 1], 'e', ARGV[i + 2])
end
redis.call('HSET', KEYS[2], 'seq', ARGV[#ARGV - 2], 'hash', ARGV[#ARGV - 1])
redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[4])
return {{'ok'}}
"""

AUDITED = {"request": "request", "settled": "settlement", "result": "execution"}  # event type → audit kind


def canonical(entry: dict[str, Any]) -> bytes:
    """What an audit entry's hash covers: sorted-key compact JSON of every field but the hash."""
    return json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


Decision = tuple[str, str | None, str | None, dict[str, Any]]  # an audit entry's kind, actor, subject, data


def chain_entry(seq: int, prev_hash: str, team: str, decision: Decision, at_ms: int) -> tuple[str, str]:
    """(hash, JSON) of one audit entry: the previous entry's hash is inside what is hashed."""
    kind, actor, subject, data = decision
    body = {"seq": seq, "at_ms": at_ms, "team_id": team, "kind": kind, "actor": actor, "subject": subject,
            "data": data, "prev_hash": prev_hash}
    digest = hashlib.sha256(canonical(body)).hexdigest()
    return digest, json.dumps({**body, "hash": digest}, separators=(",", ":"))


def verify_chain(entries: list[dict[str, Any]]) -> bool:
    """Each entry hashes to its ``hash`` and names the one before it (the bench's check of rung 4)."""
    prev = GENESIS
    for entry in entries:
        body = {k: v for k, v in entry.items() if k != "hash"}
        if body["prev_hash"] != prev or hashlib.sha256(canonical(body)).hexdigest() != entry["hash"]:
            return False
        prev = entry["hash"]
    return True


async def leftovers(redis: Any, rung: int, cycles: int) -> list[str]:
    """What a rung left that it should not have after ``cycles`` whole cycles, all ended: wake-ups still set
    (rung 3 on: nothing would be left to recover), an audit chain that does not verify or lacks a decision
    (rung 4: three per cycle; rung 5: four)."""
    problems = []
    if rung >= 3:
        for name in ("active", "outbox"):
            if left := await redis.zcard(f"lad{rung}:{name}"):
                problems.append(f"{left} sessions still on lad{rung}:{name}")
    if rung >= 4:
        entries = []
        async for stream in redis.scan_iter(match=f"lad{rung}:{{ws:*}}:audit"):
            entries += [json.loads(fields[b"e"]) for _, fields in await redis.xrange(stream)]
        if not verify_chain(sorted(entries, key=lambda e: e["seq"])):
            problems.append("the audit chain does not verify")
        each = 4 if rung >= 5 else 3
        if len(entries) != each * cycles:
            problems.append(f"{len(entries)} audit entries for {cycles} cycles, not {each} each")
    return problems


# ---- the app ------------------------------------------------------------------------------------------------


def ladder_app(rung: int, secret: str, token: str, slack_url: str, model_url: str, redis_url: str,
               busy: Busy) -> web.Application:
    import aiohttp
    from pydantic import BaseModel
    from redis.asyncio import Redis
    from slack_bolt.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    from .bare import approve_card

    outbox, leases, audited, contract = rung >= 2, rung >= 3, rung >= 4, rung >= 5
    prefix = f"lad{rung}"
    if contract:
        from . import vocabulary

    class ToolCall(BaseModel):
        id: str
        name: str
        arguments: str

    class ParkedTurn(BaseModel):
        channel: str
        thread_ts: str
        requester: str
        messages: list[dict[str, Any]]
        call: ToolCall

    class Event(BaseModel):
        """What a state change tells the delivery pass (and the audit): the session's routing data with it."""

        type: str
        channel: str
        thread_ts: str
        request_id: str = ""
        user: str = ""
        text: str = ""
        tool: str = ""
        output: dict[str, Any] | None = None
        title: str = ""  # the answer's: the session's title, its first request

    session = aiohttp.ClientSession()
    # the model on its own aiohttp session, as the project's client (bot/models/transport.py)
    model = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60.0))
    redis = Redis.from_url(redis_url)
    scripts = {name: redis.register_script(text) for name, text in
               (("park", PARK), ("settle", SETTLE if outbox else FLOOR_SETTLE), ("result", RESULT), ("finish", FINISH),
                ("begin", pass_begin(vocabulary.POSTS if contract else POSTS)), ("save", PASS_SAVE), ("forget", FORGET), ("audit", AUDIT))}
    slack = AsyncWebClient(token=token, base_url=slack_url, session=session)
    app = AsyncApp(signing_secret=secret, client=slack)
    heads: dict[str, tuple[int, str]] = {}  # workspace → its chain's head as this process last knew it
    chain_locks: dict[str, asyncio.Lock] = {}  # one append at a time per workspace from this process

    def queue(pipe: Any, name: str, keys: list[str], args: list[Any]) -> None:
        # EVALSHA as a plain command: a redis-py Script in a pipeline sends SCRIPT EXISTS on every execute (one
        # more round trip); the scripts are loaded once, at start
        pipe.evalsha(scripts[name].sha, len(keys), *keys, *args)

    def key(sid: str, part: str) -> str:  # a session's keys share its hash slot
        return f"{prefix}:{{{sid}}}:{part}"

    def score() -> int:
        return time.time_ns() // 1000

    async def complete(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        """One streamed chat completion, its chunks joined as the project's OpenAI client joins them."""
        body: dict[str, Any] = {"model": "bench-model", "messages": messages, "stream": True,
                                "stream_options": {"include_usage": True}}
        if tools:
            body["tools"] = tools
        content: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        async with model.post(f"{model_url}/chat/completions", json=body,
                              headers={"Authorization": "Bearer sk-bench",
                                       "Accept": "application/json, text/event-stream"}) as answer:
            answer.raise_for_status()
            async for raw in answer.content:  # (line by line)
                line = raw.decode().rstrip("\r\n")
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    break
                for choice in json.loads(line[6:]).get("choices") or []:
                    delta = choice.get("delta") or {}
                    if delta.get("content"):
                        content.append(delta["content"])
                    for part in delta.get("tool_calls") or []:
                        call = calls.setdefault(part["index"], {"id": "", "type": "function",
                                                                "function": {"name": "", "arguments": ""}})
                        call["id"] = part.get("id") or call["id"]
                        function = part.get("function") or {}
                        call["function"]["name"] = function.get("name") or call["function"]["name"]
                        call["function"]["arguments"] += function.get("arguments") or ""
        said: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
        if calls:
            said["tool_calls"] = [calls[i] for i in sorted(calls)]
        return said

    async def set_status(channel: str, thread_ts: str, title: str) -> None:
        await slack.api_call("agents.sessions.setStatus", json={"channel_id": channel, "thread_ts": thread_ts,
                                                                "status": "active", "title": title[:200]})

    def card(sid: str) -> list[dict[str, Any]]:
        blocks = approve_card(LADDER_ACTION)
        blocks[1]["elements"][0]["value"] = sid
        return blocks

    # ---- the delivery pass (rung 2 on) --------------------------------------------------------------------

    def read(kind: str, raw: bytes) -> tuple[Event, Decision | None]:
        """A stream entry as the pass delivers it (rung 5: routed by its session id) and what it audits."""
        if not contract:
            event = Event.model_validate_json(raw)
            audited_as = AUDITED.get(event.type)
            return event, (audited_as, event.user or None, event.request_id or None,
                           event.model_dump(include={"tool", "output"}, exclude_defaults=True)) if audited_as else None
        said = vocabulary.read(raw)
        channel, thread_ts = vocabulary.where(said.session_id)
        routed = Event(type=kind, channel=channel, thread_ts=thread_ts)
        if said.type == "input.requested":
            routed = Event(type="request", channel=channel, thread_ts=thread_ts, request_id=said.requests[0].request_id)
        elif said.type == "approval.settled" and said.responder is not None:
            routed = Event(type="settled", channel=channel, thread_ts=thread_ts,
                           user=said.responder.attributes["user_id"])
        elif said.type == "message.completed":
            routed = Event(type="answer", channel=channel, thread_ts=thread_ts, text=said.text, title=vocabulary.PROMPT)
        audited_as = vocabulary.AUDITED.get(said.type)
        return routed, (audited_as, *vocabulary.decision(said)) if audited_as else None

    async def audit(pipe: Any, team: str, sid: str, batch: list[tuple[str, Event, Decision | None]]) -> list[Any] | None:
        """Send the pipeline with the pass's decisions appended to the chain (under this process's lock for
        the workspace, so its own appends never race each other); None when there is nothing to audit."""
        decisions = [(entry_id, decision) for entry_id, _, decision in batch if decision is not None]
        if not decisions:
            return None
        stream, head_key = f"{prefix}:{{ws:{team}}}:audit", f"{prefix}:{{ws:{team}}}:audit:head"
        progress = f"{prefix}:{{ws:{team}}}:audit:upto:{sid}"
        lock = chain_locks.setdefault(team, asyncio.Lock())
        if lock.locked():  # another pass is appending: the save goes now (it lets the session's lock go), the
            await pipe.execute()  # audit in a round trip of its own once the chain is free
            pipe = redis.pipeline(transaction=False)
        async with lock:
            if team not in heads:
                seq, hash_ = await redis.hmget(head_key, "seq", "hash")
                heads[team] = (int(seq or 0), hash_.decode() if hash_ else GENESIS)
            while True:
                seq, prev = heads[team]
                expected, args = prev, []
                for entry_id, decision in decisions:
                    seq += 1
                    prev, text = chain_entry(seq, prev, team, decision, int(entry_id.split("-")[0]))
                    args += [seq, prev, text]
                queue(pipe, "audit", [stream, head_key, progress],
                      [expected, decisions[0][0], decisions[-1][0], RETENTION_MS, *args])
                replies = await pipe.execute()
                answer = replies[-1]
                if answer[0] == b"head":  # another replica appended first: from its head, alone
                    heads[team] = (int(answer[1]), answer[2].decode())
                    pipe = redis.pipeline(transaction=False)
                    continue
                if answer[0] == b"ok":
                    heads[team] = (seq, prev)
                return replies

    async def deliver(sid: str, team: str) -> None:
        """One pass over the session's undelivered events: post, update, set the status; each post once."""
        out, events, chan, lock = key(sid, "out"), key(sid, "events"), key(sid, "chan"), key(sid, "lock")
        token, woken = uuid.uuid4().hex, None
        for _ in range(200):  # another pass holds the session: it ends in a few ms (the bench never waits long)
            if leases:
                pipe = redis.pipeline(transaction=False)
                pipe.zscore(f"{prefix}:outbox", sid)
                queue(pipe, "begin", [out, events, chan, lock], [token, LOCK_MS])
                woken, began = await pipe.execute()
            else:
                began = await scripts["begin"](keys=[out, events, chan, lock], args=[token, LOCK_MS])
            if began:
                break
            await asyncio.sleep(0.005)
        else:
            raise RuntimeError(f"session {sid}: the deliverer lock was never free")
        entries, flat, claims = began
        ledger = {flat[i].decode(): flat[i + 1].decode() for i in range(0, len(flat), 2)}
        batch = [(entry_id.decode(), *read(fields[1].decode(), fields[3])) for entry_id, fields in entries]
        record: list[str] = []
        for (entry_id, event, _), claimed in zip(batch, claims, strict=True):
            if event.type == "request" and claimed:
                posted = await slack.chat_postMessage(channel=event.channel, thread_ts=event.thread_ts,
                                                      text="Approve the refund?", blocks=card(sid))
                ledger["card"] = posted["ts"]
                record += [f"post:{entry_id}", posted["ts"], "card", posted["ts"]]
            elif event.type == "settled" and (card_ts := ledger.get("card")):
                await slack.chat_update(channel=event.channel, ts=card_ts, text=f"Approved by <@{event.user}>.",
                                        blocks=[])
            elif event.type == "answer" and claimed:
                posted = await slack.chat_postMessage(channel=event.channel, thread_ts=event.thread_ts,
                                                      text=event.text)
                record += [f"post:{entry_id}", posted["ts"]]
                await set_status(event.channel, event.thread_ts, event.title)
        pipe = redis.pipeline(transaction=False)
        cursor = batch[-1][0] if batch else "0-0"
        if batch:
            queue(pipe, "save", [out, chan, lock], [token, cursor, *record])
        else:
            pipe.eval("if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end", 1, lock, token)
        if leases and woken is not None:
            queue(pipe, "forget", [f"{prefix}:outbox"], [sid, int(woken)])
        if audited and await audit(pipe, team, sid, batch) is not None:
            return  # sent with the audit's append
        await pipe.execute()

    def appended(pipe: Any, sid: str, *, lease_let_go: bool) -> None:
        """The wake-ups a write leaves (rung 3): the session has events to deliver; its lease went."""
        if leases:
            if lease_let_go:
                pipe.zrem(f"{prefix}:active", sid)
            pipe.zadd(f"{prefix}:outbox", {sid: score()})

    # ---- the listeners ------------------------------------------------------------------------------------

    @app.event("message")
    async def twin(ack: Any) -> None:  # a mention arrives twice (app_mention and message), as in Slack
        await ack()

    @app.event("app_mention")
    async def mention(body: dict[str, Any], event: dict[str, Any], client: AsyncWebClient) -> None:
        with busy:
            sid, lease = uuid.uuid4().hex, uuid.uuid4().hex if leases else ""
            if leases:  # the event's claim, the turn's lease and its wake-up: one round trip
                pipe = redis.pipeline(transaction=False)
                pipe.set(f"{prefix}:event:{body['event_id']}", 1, nx=True, px=RETENTION_MS)
                pipe.set(key(sid, "lease"), lease, nx=True, px=LEASE_MS)
                pipe.zadd(f"{prefix}:active", {sid: time.time() * 1000 + LEASE_MS})
                fresh, _, _ = await pipe.execute()
            else:
                fresh = await redis.set(f"{prefix}:event:{body['event_id']}", 1, nx=True, px=RETENTION_MS)
            if not fresh:  # Slack resent an event already taken
                if leases:
                    await redis.pipeline(transaction=False).delete(key(sid, "lease")).zrem(
                        f"{prefix}:active", sid).execute()
                return
            messages = [{"role": "system", "content": "You refund charges when asked."},
                        {"role": "user", "content": event["text"]}]
            said = await complete(messages, [TOOL])
            call = said["tool_calls"][0]
            turn = ParkedTurn(channel=event["channel"], thread_ts=event.get("thread_ts") or event["ts"],
                              requester=event["user"], messages=[*messages, said],
                              call=ToolCall(id=call["id"], name=call["function"]["name"],
                                            arguments=call["function"]["arguments"]))
            if not outbox:  # rung 1: as the floor
                async with redis.pipeline(transaction=True) as pipe:
                    pipe.hset(key(sid, "turn"), mapping={"status": "parked", "requester": turn.requester,
                                                         "doc": turn.model_dump_json()})
                    pipe.pexpire(key(sid, "turn"), RETENTION_MS)
                    await pipe.execute()
                await client.chat_postMessage(channel=turn.channel, thread_ts=turn.thread_ts,
                                              text="Approve the refund?", blocks=card(sid))
                return
            team = body.get("team_id") or "T"
            if contract:
                asked = vocabulary.asked(vocabulary.session_id(team, turn.channel, turn.thread_ts), sid,
                                         vocabulary.person(team, turn.requester), turn.call.id, turn.call.name,
                                         turn.call.arguments)
            else:
                asked = [("request", Event(type="request", channel=turn.channel, thread_ts=turn.thread_ts,
                                           request_id=sid, user=turn.requester, tool=turn.call.name).model_dump_json())]
            pipe = redis.pipeline(transaction=False)
            queue(pipe, "park", [key(sid, "turn"), key(sid, "events"), key(sid, "lease")],
                  [lease, turn.requester, turn.model_dump_json(), *(part for pair in asked for part in pair)])
            appended(pipe, sid, lease_let_go=True)
            if (await pipe.execute())[0] != 1:
                return  # the lease was lost: whoever holds it now goes on
            await deliver(sid, team)

    @app.action(LADDER_ACTION)
    async def approve(ack: Any, body: dict[str, Any], client: AsyncWebClient) -> None:
        with busy:
            sid, user = body["actions"][0]["value"], body["user"]["id"]
            team, lease = (body.get("team") or {}).get("id") or "T", uuid.uuid4().hex if leases else ""
            if not outbox:  # rung 1: the floor's settle
                answer = await scripts["settle"](keys=[key(sid, "turn"), f"{prefix}:decisions"], args=[user, sid])
            else:
                where = body["container"]
                if contract:  # the call it starts is the parked turn's, read by the settle: written with its result
                    session = vocabulary.session_id(team, where["channel_id"], where.get("thread_ts", ""))
                    settled = vocabulary.settled(session, sid, vocabulary.person(team, user))
                else:
                    settled = [("settled", Event(type="settled", channel=where["channel_id"],
                                                 thread_ts=where.get("thread_ts", ""), request_id=sid,
                                                 user=user).model_dump_json())]
                pipe = redis.pipeline(transaction=False)
                queue(pipe, "settle", [key(sid, "turn"), key(sid, "events"), f"{prefix}:decisions",
                                       key(sid, "lease"), key(sid, "call")],
                      [user, sid, "0" if audited else "1", lease, LEASE_MS, MARKER_MS,
                       *(part for pair in settled for part in pair)])
                if leases:
                    pipe.zadd(f"{prefix}:active", {sid: time.time() * 1000 + LEASE_MS})
                answer = (await pipe.execute())[0]
            await ack()
            if answer[0] not in (b"ok", b"ran"):
                if leases and answer[0] != b"busy":
                    await redis.zrem(f"{prefix}:active", sid)
                return
            turn = ParkedTurn.model_validate_json(answer[1])
            if contract:  # stamped now, as its marker started (``session``: the settle's, the card's thread)
                started = vocabulary.started(session, sid, turn.call.id, turn.call.name, turn.call.arguments)
            if answer[0] == b"ran":  # its call began before (a crash mid-tool): never run twice
                result: dict[str, Any] = {"error": "outcome unknown: the call began before and was not run again"}
            else:
                result = {"refunded": json.loads(turn.call.arguments)["charge_id"]}
            ran = "" if contract else Event(type="result", channel=turn.channel, thread_ts=turn.thread_ts,
                                            request_id=sid, tool=turn.call.name, output=result).model_dump_json()
            if leases:  # the result, into the marker and the log at once
                pairs = ([started, vocabulary.ran(session, sid, turn.call.id, turn.call.name, result)] if contract
                         else [("result", ran)])
                if await scripts["result"](keys=[key(sid, "lease"), key(sid, "call"), key(sid, "events")],
                                           args=[lease, json.dumps(result), MARKER_MS,
                                                 *(part for pair in pairs for part in pair)]) != 1:
                    return
            said = await complete([*turn.messages, {"role": "tool", "tool_call_id": turn.call.id,
                                                    "content": json.dumps(result)}], [TOOL])
            title = turn.messages[1]["content"]
            if not outbox:  # rung 1: as the floor, and the session's status
                where = body["container"]
                await client.chat_update(channel=where["channel_id"], ts=where["message_ts"],
                                         text=f"Approved by <@{user}>.", blocks=[])
                await client.chat_postMessage(channel=turn.channel, thread_ts=turn.thread_ts, text=said["content"])
                await set_status(turn.channel, turn.thread_ts, title)
                await redis.hset(key(sid, "turn"), "status", "done")
                return
            if contract:
                pairs = [part for pair in vocabulary.answered(session, sid, said["content"]) for part in pair]
            else:
                pairs = ["answer", Event(type="answer", channel=turn.channel, thread_ts=turn.thread_ts, request_id=sid,
                                         text=said["content"], title=title).model_dump_json()]
            if not leases:
                pairs = ["result", ran, *pairs]
            pipe = redis.pipeline(transaction=False)
            queue(pipe, "finish", [key(sid, "turn"), key(sid, "events"), key(sid, "lease"), key(sid, "out"),
                                   key(sid, "chan")], [lease, RETENTION_MS, *pairs])
            appended(pipe, sid, lease_let_go=True)
            if (await pipe.execute())[0] != 1:
                return
            await deliver(sid, team)

    async def load(_: web.Application) -> None:
        for script in scripts.values():
            await redis.script_load(script.script)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def close(_: web.Application) -> None:
        await session.close()
        await model.close()
        await redis.aclose()

    web_app = app.web_app(path="/slack/events")
    web_app.router.add_get("/healthz", healthz)
    web_app.on_startup.append(load)
    web_app.on_cleanup.append(close)
    return web_app


async def main(args: argparse.Namespace) -> None:
    busy = Busy()
    app = ladder_app(args.rung, args.secret, args.token, args.slack_url, args.model_url, args.redis_url, busy)
    runner, port = await open_site(app, args.port)
    try:
        await serve_until_stopped(f"http://127.0.0.1:{port}/slack/events", busy.idle)
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.http.ladder")
    parser.add_argument("--rung", type=int, choices=sorted(RUNGS), required=True)
    for name in ("--secret", "--token", "--slack-url", "--model-url", "--redis-url"):
        parser.add_argument(name, required=True)
    parser.add_argument("--port", type=int, default=0)
    asyncio.run(main(parser.parse_args()))
