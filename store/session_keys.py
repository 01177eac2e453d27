"""Where a session's data lives in Redis, and what the session store's parts share (DESIGN §9).

The session store is three classes along the ports the engine sees: the turns (store/turns.py), their
delivery (store/outbox.py) and where a session's Slack posts are (store/post_ledger.py). They share the
key names below, one client, the lease and the retention, and the way a script goes out with the
commands around it (:class:`SessionRedis`).

Every key of one session carries the same hash tag ``{<slot>}`` (a hash of the session id), so
each Lua script of the store touches one Redis Cluster slot. Request ids embed the slot, so a click that
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
  P:lastmark     the last lease holder's checkpoint's replay mark, the sum of the ref it left, its answer (COMMIT)
Global, advisory indexes (outside any slot; readers re-check the records):
  hitl:active                 zset session_id → when it next needs a look (lease expiry)
  hitl:outbox                 zset session_id → when its committed events next need delivering
  hitl:retire                 zset session_id → its end: the sweep retires it once that has passed
  hitl:{ws:<team>}:pending    zset request_id → created time, for "waiting on you" listings

Retention (DESIGN §12), by owner, once. A session's own keys (``SESSION_KEYS``: all of
the above but requests, execution markers and message marks) carry no TTL and are never renewed. When a
unit of work ends, the script that ends it writes ``P:end`` = now + ``retention_s`` and the same round trip
puts the session on ``hitl:retire``: the drive's last checkpoint that opens no request (the turn ended), a
lease let go with no request open, the settle that completes its step's requests. A checkpoint that opens
a request deletes ``P:end``: nothing an open request needs (state, events and their counter, inbox,
grants, frontend data, outbox cursor) can end while it is open. Once the end has passed the session is
gone to its readers (``exists``, the grants listing: a conversation grant lapses with its conversation),
and its keys are deleted in one DEL by whoever comes first: the recovery sweep (``RedisTurns.sweep``, retiring) or the
next message recorded into it (a revived thread starts afresh: new state, events numbered from 1); both
re-check in the session's slot and leave alone a session with an open request, a lease, a queued message,
a delivery pass under way, or an audit that lags (its audit floor, ``_audit`` in ``P:out``, not yet passed by
its audit progress, which the caller reads in the workspace's slot: the sweep then has a pass audit it first,
and a message after the end joins the session as it is). What the bot remembers of an assistant thread (store/assistant_threads.py) is its
session's once a message is recorded there, and the sweep deletes it with the session's keys. A request record and its approvals have no end while open and
``retention_s`` from the settle that closes them; execution markers and message marks get theirs when
created. A request whose state is gone anyway (removed, or parked before this rule) is closed "no longer
needed" by the click that finds it, never approved. Indexes drop settled ids as the outbox delivers their
resolution.
"""

from __future__ import annotations

import time
from typing import Any

from redis.asyncio import Redis

from bot.protocol import UnknownRequest
from bot.session import session_slot
from store.pipelined import Command, evalsha, pipelined
from store.replay import REPLAY_MARK_MS, replay_mark

EVENTS_MAXLEN = 10_000
MESSAGE_DEDUPE_SECONDS = 24 * 3600
DEFAULT_RETENTION_SECONDS = 30 * 24 * 3600
ACTIVE = b"hitl:active"
OUTBOX = b"hitl:outbox"
TIMERS = b"hitl:timers"  # deadlines: "<kind>:<request id>" by due epoch ms (DESIGN §12, Time)
RETIRE = b"hitl:retire"  # sessions by their end (epoch ms): the sweep retires them once it has passed
SETTLED_LOOK_AGAIN_MS = 0  # the next sweep; the answering process normally resumes it first
OUTBOX_GRACE_MS = 2_000  # a committer delivers at once; the sweep steps in if it died


def prefix(slot: str) -> str:
    return f"hitl:{{{slot}}}"


def slot_of_request(request_id: str) -> str:
    slot, _, rest = request_id.partition(".")
    if not slot or not rest or len(slot) != 16:
        raise UnknownRequest(request_id)
    return slot


# Retention by owner, once (DESIGN §12). A session's own keys (``SESSION_KEYS``) carry no
# TTL: nothing renews an end on every write. The session's end (``P:end``, epoch ms) is written once per unit
# of work by whoever ends it, in the script that ends it: the drive's last checkpoint when it opens no request
# (the turn ended), a lease let go with no request open, the settle that completes its step's requests; the
# same round trip puts the session on ``hitl:retire`` by that end. A checkpoint that opens a request takes the
# end away: a session with an open request has none. Once its end has passed and nothing holds it (no open
# request, no lease, no queued message, no delivery pass under way), ``retire`` deletes its keys in one DEL:
# the sweep does (retiring), or the first message recorded after the end (a revived thread starts
# afresh). ``retire(base, now)``: the session's keys are KEYS[base..] in ``SESSION_KEYS`` order; returns
# 0 (no end: in use, or gone), 1 (deleted), 2 and the end (not yet), 3 (held).
SESSION_KEYS = ("state", "lease", "seq", "events", "inbox", "grants", "granted", "chan", "out", "open",
                "outlock", "cancel", "fails", "end", "lastmark")

# Take a member off a schedule (the outbox list, the timers) unless someone re-scheduled it meanwhile.
FORGET_IF_UNCHANGED = """
if tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1])) == tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
"""


# Schedule a member again (ARGV: member, the score it was left at, the new one), unless someone re-scheduled it
# meanwhile (a commit: its own time stands); one that left the schedule is put back.
RESCHEDULE_IF_UNCHANGED = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) ~= tonumber(ARGV[2]) then return 0 end
return redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
"""


def now_ms() -> int:
    return int(time.time() * 1000)


def queue(pipe: Any, commands: list[Command]) -> None:
    for name, args in commands:
        getattr(pipe, name)(*args)


class SessionRedis:
    """One client, the turn lease's length and the retention: what each part of the session store starts from.

    The parts call ``super().__init__`` with the same arguments, so one object can join several of them
    (store/sessions.py)."""

    def __init__(self, redis: Redis, *, lease_ms: int = 30_000, retention_s: int = DEFAULT_RETENTION_SECONDS):
        self.redis = redis
        self.lease_ms = lease_ms
        self.retention_ms = int(retention_s * 1000)

    def key(self, session_id: str, name: str) -> str:
        return f"{prefix(session_slot(session_id))}:{name}"

    def own_keys(self, session_id: str) -> list[str]:
        """The session's own keys (``SESSION_KEYS``, in that order): what retirement deletes."""
        base = prefix(session_slot(session_id))
        return [f"{base}:{name}" for name in SESSION_KEYS]

    def _ends_at(self) -> int:
        """A session's end if its unit of work ended now (epoch ms)."""
        return now_ms() + self.retention_ms

    @staticmethod
    def request_key(request_id: str) -> str:
        return f"{prefix(slot_of_request(request_id))}:req:{request_id}"

    @staticmethod
    def pending_key(team_id: str | None) -> str:
        return f"hitl:{{ws:{team_id or '-'}}}:pending"

    async def _eval_pipelined(self, script: Any, keys: list[Any], args: list[Any], extra: list[Command], *,
                              scripts: list[Any] = (), raise_on_error: bool = True) -> list[Any]:  # type: ignore[assignment]
        """A ``replay_safe`` script plus a few idempotent commands in one round trip."""
        return await self._pipelined(script, [*keys, replay_mark(keys)], [*args, REPLAY_MARK_MS], after=extra,
                                     scripts=scripts, raise_on_error=raise_on_error)

    async def _pipelined(
        self, script: Any, keys: list[Any], args: list[Any], *,
        before: list[Command] = (),  # type: ignore[assignment]
        after: list[Command] = (),  # type: ignore[assignment]
        scripts: list[Any] = (),  # type: ignore[assignment]
        raise_on_error: bool = True,
    ) -> list[Any]:
        """EVALSHA of ``script`` between a few other commands: one round trip on Redis, in the same order
        one by one on a Cluster (store/pipelined.py). ``scripts``: those the other commands run;
        ``raise_on_error`` False: an error is its command's reply."""
        commands = [*before, evalsha(script, keys, args), *after]
        return await pipelined(self.redis, commands, [script, *scripts], raise_on_error=raise_on_error)
