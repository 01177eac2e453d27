"""Writes that apply once even when the Redis client sends them twice.

The client resends a command whose reply was lost on a broken connection (store/client.py): the write
may have been applied already. A ``replay_safe`` script carries a fresh mark per invocation (its last
key, in the hash slot of the others, and the mark's lifetime, its last argument); the first run stores
its answer under the mark and a resent copy gets that answer back instead of running again. Without it
a resent inbox take would say "taken by someone else" and lose the message, a resent tool start would
report the call as interrupted, a resent commit or audit append would add its entries twice.
"""

from __future__ import annotations

import secrets
from typing import Any

# How long a write remembers its answer: far longer than the client retries a command (seconds).
REPLAY_MARK_MS = 60_000


def replay_safe(body: str, *, then: str = "") -> str:
    """The Lua ``body`` wrapped so that an invocation sent twice runs once; the body sees its own
    KEYS and ARGV only (the mark and its lifetime are removed first).

    ``then``: Lua run after the body, by a resent copy too, with the body's answer (as remembered) in
    ``result``; it returns the script's answer, which is not remembered. For reads that go with the write
    (what a lease holder starts from): no copy of them is kept under the mark, and a resent copy reads them
    afresh, at least as new as the write."""
    return (
        "local mark, mark_ms = table.remove(KEYS), table.remove(ARGV)\n"
        "local result = redis.call('GET', mark)\n"
        "if result then result = cjson.decode(result) else\n"
        "result = (function()\n" + body + "\nend)()\n"
        "redis.call('SET', mark, cjson.encode(result), 'PX', mark_ms)\n"
        "end\n" + (then or "return result") + "\n"
    )


def replay_mark(keys: list[Any]) -> str:
    """A fresh mark key in the hash slot of ``keys[0]`` (all our script keys carry a hash tag)."""
    first = keys[0].decode() if isinstance(keys[0], bytes) else str(keys[0])
    tag = first[: first.index("}") + 1]
    return f"{tag}:once:{secrets.token_hex(8)}"


def replay_own(body: str, *, then: str = "") -> str:
    """For a script that keeps its mark in what it writes anyway (no key of its own, two commands
    fewer): called as a ``replay_safe`` one (the mark key last, its lifetime last), but the body sees
    ``mark`` (this invocation's id, unique: the mark key's last 16 characters), ``mark_key`` and ``mark_ms``,
    and answers a resent copy itself. ``then`` as in :func:`replay_safe`; the body may leave it what it read
    in ``read`` (a table; empty for a resent copy, which returns early), so that it reads nothing twice."""
    return (
        "local mark_key, mark_ms = table.remove(KEYS), table.remove(ARGV)\n"
        "local mark, read = string.sub(mark_key, -16), {}\n"
        "local result = (function()\n" + body + "\nend)()\n" + (then or "return result") + "\n"
    )
