"""Many parked turns, quickly: clone one real parked turn under new sessions, in pipelined batches.

Driving 100,000 turns through the runtime would take minutes, so the bench parks one real turn and
copies its keys — same Redis types, same sizes, same encodings — under new Slack threads. Every id
inside the values (session id and its slot, request id, turn id, call id, thread ts) is rewritten,
so each copy is a valid parked turn the runtime can resume (the bench checks a few). Each copy also
gets its entry in the workspace's pending index, as a real park does.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from bot.session import session_slot, slack_session_id
from store.sessions import SessionStore

from .scenario import CHANNEL, TEAM

BATCH = 1000  # clones per pipeline
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


async def read_template(store: SessionStore, session_id: str, thread_ts: str, request_id: str) -> Template:
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


class Cloner:
    """Writes copies of a template turn; copy ``n`` lives in thread ``1719000000.<n>``."""

    def __init__(self, redis: Redis, template: Template):
        self.redis = redis
        self.template = template
        self.pending_key = SessionStore.pending_key(TEAM)

    def ids(self, n: int) -> dict[bytes, bytes]:
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

    @staticmethod
    def _rewrite(value: bytes, ids: dict[bytes, bytes]) -> bytes:
        for old, new in ids.items():
            value = value.replace(old, new)
        return value

    def request_id(self, n: int) -> str:
        ids = self.ids(n)
        return f"{ids[self.template.slot].decode()}.{ids[self.template.request_tail].decode()}"

    def session_id(self, n: int) -> str:
        return slack_session_id(TEAM, CHANNEL, f"1719000000.{n:06d}")

    def _write_one(self, pipe: Pipeline, n: int, now: float) -> None:
        ids = self.ids(n)
        prefix = b"hitl:{" + ids[self.template.slot] + b"}"
        for key in self.template.keys:
            name = prefix + self._rewrite(key.suffix, ids)
            if key.kind == "string":
                pipe.set(name, self._rewrite(key.value, ids), px=key.pttl if key.pttl > 0 else None)
            elif key.kind == "hash":
                pipe.hset(name, mapping={f: self._rewrite(v, ids) for f, v in key.value.items()})
            elif key.kind == "set":
                pipe.sadd(name, *[self._rewrite(v, ids) for v in key.value])
            elif key.kind == "list":
                pipe.rpush(name, *[self._rewrite(v, ids) for v in key.value])
            else:  # stream: same entries, fresh ids
                for _entry_id, fields in key.value:
                    pipe.xadd(name, {f: self._rewrite(v, ids) for f, v in fields.items()})
            if key.pttl > 0 and key.kind != "string":
                pipe.pexpire(name, key.pttl)
        pipe.zadd(self.pending_key, {self.request_id(n): now})

    async def write(self, first: int, count: int) -> float:
        """Write copies ``first`` … ``first + count - 1``; returns the seconds it took."""
        started = time.perf_counter()
        for start in range(first, first + count, BATCH):
            pipe = self.redis.pipeline(transaction=False)
            now = time.time()
            for n in range(start, min(start + BATCH, first + count)):
                self._write_one(pipe, n, now)
            await pipe.execute()
        return time.perf_counter() - started
