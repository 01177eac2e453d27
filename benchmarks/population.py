"""Many parked turns, quickly: copy one real parked turn under new sessions, in batches.

Driving 100,000 turns through the runtime would take minutes, so the bench parks one real turn and
copies its keys — same Redis types, same sizes, same encodings — under new Slack threads. Every id
inside the values (session id and its slot, request id, turn id, call id, thread ts) is rewritten,
so each copy is a valid parked turn the runtime can resume (the bench checks a few). Each copy also
gets its entry in the workspace's pending index, as a real park does. The ids are rewritten here; a
small Lua script issues the writes of 500 copies per call.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from bot.session import session_slot, slack_session_id
from store.turns import RedisTurns

from .scenario import CHANNEL, TEAM

BATCH = 500  # copies per script call (each call blocks the server for a few ms)
_TURN_ID = re.compile(rb"turn_[0-9a-f]{12}")
_CALL_ID = re.compile(rb"call_[0-9a-f]{24}")


@dataclass
class TemplateKey:
    suffix: bytes  # the key after ``hitl:{slot}``
    kind: str
    value: Any
    pttl: int  # -1: no expiry


@dataclass
class Template:
    """A parked turn read back from Redis, and the ids its values contain."""

    thread_ts: bytes
    slot: bytes
    request_tail: bytes  # the random part of the request id (after "<slot>.")
    turn_id: bytes
    call_id: bytes
    keys: list[TemplateKey]


async def read_template(store: RedisTurns, session_id: str, thread_ts: str, request_id: str) -> Template:
    redis = store.redis
    slot = session_slot(session_id)
    prefix = f"hitl:{{{slot}}}".encode()
    state = await redis.get(store.key(session_id, "state"))
    keys: list[TemplateKey] = []
    for key in sorted(await store.session_keys(session_id)):
        kind = (await redis.type(key)).decode()
        readers = {
            "string": redis.get,
            "hash": redis.hgetall,
            "set": redis.smembers,
            "list": lambda k: redis.lrange(k, 0, -1),
            "stream": redis.xrange,
        }
        if kind not in readers:
            raise RuntimeError(f"cannot clone {key!r} of type {kind}")
        keys.append(TemplateKey(key[len(prefix) :], kind, await readers[kind](key), await redis.pttl(key)))
    return Template(
        thread_ts=thread_ts.encode(),
        slot=slot.encode(),
        request_tail=request_id.partition(".")[2].encode(),
        turn_id=_one(_TURN_ID, state),
        call_id=_one(_CALL_ID, state),
        keys=keys,
    )


def _one(pattern: re.Pattern[bytes], text: bytes) -> bytes:
    found = set(pattern.findall(text))
    if len(found) != 1:
        raise RuntimeError(f"expected one id matching {pattern.pattern!r} in the parked state, got {found}")
    return found.pop()


# Writes a batch of copies in one call. Python rewrites the ids (fast bytes.replace); the script
# only issues the writes, which spares redis-py packing and parsing ~10 commands per copy.
# ARGV[1]: the template's shape (see Cloner._shape); ARGV[2]: per copy, a flat list of strings in
# shape order (for each key its name, then its values), then the request id for the pending index.
# Standalone servers only: the keys are not declared.
_CLONE = """
local shape = cjson.decode(ARGV[1])
local copies = cjson.decode(ARGV[2])
for _, c in ipairs(copies) do
  local i = 1
  local function take() local v = c[i]; i = i + 1; return v end
  for _, key in ipairs(shape.keys) do
    local name = take()
    if key.k == 'string' then
      if key.t > 0 then redis.call('SET', name, take(), 'PX', key.t) else redis.call('SET', name, take()) end
    elseif key.k == 'stream' then
      for _, fields in ipairs(key.f) do
        local flat = {}
        for _, f in ipairs(fields) do flat[#flat + 1] = f; flat[#flat + 1] = take() end
        redis.call('XADD', name, '*', unpack(flat))
      end
    elseif key.k == 'hash' then
      local flat = {}
      for _, f in ipairs(key.f) do flat[#flat + 1] = f; flat[#flat + 1] = take() end
      redis.call('HSET', name, unpack(flat))
    else
      local flat = {}
      for _ = 1, key.n do flat[#flat + 1] = take() end
      redis.call(key.k == 'set' and 'SADD' or 'RPUSH', name, unpack(flat))
    end
    if key.t > 0 and key.k ~= 'string' then redis.call('PEXPIRE', name, key.t) end
  end
  redis.call('ZADD', shape.pending, shape.now, take())
end
return #copies
"""


class Cloner:
    """Writes copies of a template turn; copy ``n`` lives in thread ``1719000000.<n>``."""

    def __init__(self, redis: Redis, template: Template):
        self.redis = redis
        self.template = template
        self.pending_key = RedisTurns.pending_key(TEAM)
        self._script = redis.register_script(_CLONE)

    def ids(self, n: int) -> dict[bytes, bytes]:
        """Old id → new id for copy ``n``."""
        thread_ts = f"1719000000.{n:06d}"
        slot = session_slot(slack_session_id(TEAM, CHANNEL, thread_ts))
        t = self.template
        # order matters: the request tail and the thread ts before the slot they sit next to
        return {
            t.request_tail: f"{n:012x}".encode(),
            t.thread_ts: thread_ts.encode(),
            t.turn_id: f"turn_{n:012x}".encode(),
            t.call_id: f"call_{n:024x}".encode(),
            t.slot: slot.encode(),
        }

    def request_id(self, n: int) -> str:
        ids = self.ids(n)
        return f"{ids[self.template.slot].decode()}.{ids[self.template.request_tail].decode()}"

    def session_id(self, n: int) -> str:
        return slack_session_id(TEAM, CHANNEL, f"1719000000.{n:06d}")

    def _shape(self, now: float) -> str:
        keys = []
        for key in self.template.keys:
            entry: dict[str, Any] = {"k": key.kind, "t": key.pttl}
            if key.kind == "hash":
                entry["f"] = [f.decode() for f in key.value]
            elif key.kind == "stream":
                entry["f"] = [[f.decode() for f in fields] for _id, fields in key.value]
            elif key.kind in ("set", "list"):
                entry["n"] = len(key.value)
            keys.append(entry)
        return json.dumps({"keys": keys, "pending": self.pending_key, "now": now})

    def _values(self, n: int) -> list[str]:
        ids = self.ids(n)
        prefix = b"hitl:{" + self.template.slot + b"}"
        parts: list[bytes] = []
        for key in self.template.keys:
            parts.append(prefix + key.suffix)
            if key.kind == "string":
                parts.append(key.value)
            elif key.kind == "hash":
                parts.extend(key.value.values())
            elif key.kind == "stream":
                parts.extend(v for _id, fields in key.value for v in fields.values())
            else:
                parts.extend(key.value)
        joined = b"\0".join(parts)  # one rewrite pass over everything (no id contains a NUL)
        for old, new in ids.items():
            joined = joined.replace(old, new)
        return [*joined.decode().split("\0"), self.request_id(n)]

    async def write(self, first: int, count: int) -> float:
        """Write copies ``first`` … ``first + count - 1``; returns the seconds it took."""
        started = time.perf_counter()
        shape = self._shape(time.time())
        for start in range(first, first + count, BATCH):
            copies = [self._values(n) for n in range(start, min(start + BATCH, first + count))]
            await self._script(args=[shape, json.dumps(copies)])
        return time.perf_counter() - started
