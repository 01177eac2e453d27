"""Tools for the chaos proofs (tests/chaos): each execution leaves a durable trace on disk.

Loaded by the bot under test through ``BOT_TOOLS=tests.fixtures_tools.chaos_tools``. Environment:

- ``CHAOS_LEDGER``: the ledger file. Every *effect* appends one line ``key<TAB>pid<TAB>idempotency_key``
  (``O_APPEND`` + ``fsync``, so a line survives a ``kill -9`` the instant after it was written and lines
  from several processes never interleave).
- ``CHAOS_STARTS`` (optional): a journal of *executions*: one line per time a tool body starts, written
  before the delay. It tells a test "the tool is running now", the window to kill in.
- ``CHAOS_TOOL_DELAY``: seconds to sleep before the effect (float, default 0), so "while a slow tool
  runs" is a window a test can hit.

``ledger_write`` is an ordinary, non-idempotent tool: if it is interrupted the engine must not run it
again. ``ledger_write_idem`` declares itself idempotent and keys its effect by ``ctx.idempotency_key``,
as DESIGN §7 tells tool authors to, so the engine may re-run it after a crash and the ledger still gets
one line.
"""

from __future__ import annotations

import asyncio
import fcntl
import os

from pydantic import BaseModel

from bot.approval import always
from bot.tools import ToolContext, tool


class LedgerEntry(BaseModel):
    key: str


def _append(env_name: str, line: str) -> None:
    path = os.environ.get(env_name)
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _line(key: str, ctx: ToolContext) -> str:
    return f"{key}\t{os.getpid()}\t{ctx.idempotency_key}\n"


def _delay() -> float:
    return float(os.environ.get("CHAOS_TOOL_DELAY") or 0)


def _append_once(line: str, idempotency_key: str) -> bool:
    """Append unless a line with this idempotency key is there already; True when it wrote.

    An exclusive ``flock`` makes check-then-append atomic across processes (two replicas may both
    re-run an interrupted idempotent call).
    """
    path = os.environ.get("CHAOS_LEDGER")
    if not path:
        return False
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with open(path, encoding="utf-8") as existing:
            if any(row.rstrip("\n").split("\t")[-1] == idempotency_key for row in existing):
                return False
        os.write(fd, line.encode())
        os.fsync(fd)
        return True
    finally:
        os.close(fd)  # releases the lock


@tool(approval=always())
async def ledger_write(args: LedgerEntry, ctx: ToolContext) -> str:
    """Write one line for this key to the ledger (needs approval; not safe to repeat)."""
    _append("CHAOS_STARTS", _line(args.key, ctx))
    await asyncio.sleep(_delay())
    _append("CHAOS_LEDGER", _line(args.key, ctx))
    return f"wrote {args.key}"


@tool(approval=always(), idempotent=True)
async def ledger_write_idem(args: LedgerEntry, ctx: ToolContext) -> str:
    """Write one line for this key to the ledger, at most once per idempotency key (safe to repeat)."""
    _append("CHAOS_STARTS", _line(args.key, ctx))
    await asyncio.sleep(_delay())
    await asyncio.to_thread(_append_once, _line(args.key, ctx), ctx.idempotency_key)
    return f"wrote {args.key}"
