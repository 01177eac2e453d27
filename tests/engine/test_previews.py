"""``@tool(preview=fn)``: a read-only function run with the proposed arguments before the
card is posted; its short result is stored on the request (any replica renders it from Redis). It never
runs the tool, and a slow or failing preview says "preview unavailable" within its bound."""

import asyncio
import threading
import time

from pydantic import BaseModel

from bot.approval import always
from bot.models.scripted import ScriptedModel, call, calls
from bot.models.scripted import say as model_say
from bot.tools import ToolContext, tool
from tests.engine.harness import approve, make_runtime, say


class Purge(BaseModel):
    table: str
    older_than_days: int


RAN: list[str] = []
SEEN: list[tuple[str, str | None]] = []  # (table, tenant) per preview run


def purge_preview(args: Purge, ctx: ToolContext) -> str:  # sync: runs in a thread
    SEEN.append((args.table, ctx.tenant))
    return f"47 rows of {args.table} older than {args.older_than_days} days will be deleted <!channel>"


@tool(approval=always(), preview=purge_preview)
async def purge_rows(args: Purge, ctx: ToolContext) -> dict:
    """Delete old rows."""
    RAN.append(args.table)
    return {"deleted": 47}


async def test_preview_is_stored_on_the_request_and_the_tool_waits(redis):
    RAN.clear()
    SEEN.clear()
    model = ScriptedModel([call("purge_rows", table="orders", older_than_days=30), model_say("Done.")])
    runtime, channel, store = make_runtime(redis, model, [purge_rows])
    await say(runtime, "purge old orders")
    [req] = channel.requests()
    expected = "47 rows of orders older than 30 days will be deleted <!channel>"  # cards neutralise the ping
    assert req.preview == expected
    assert (await store.get_request(req.request_id)).request.preview == expected  # from Redis: any replica
    assert SEEN == [("orders", "T1")]  # the session's tenant, computed once
    assert RAN == []  # the preview never runs the tool
    await approve(runtime, req.request_id)
    assert RAN == ["orders"]
    assert SEEN == [("orders", "T1")]  # not again at settling or rendering


RELEASE = threading.Event()


async def slow_preview(args: Purge, ctx: ToolContext) -> str:
    await asyncio.sleep(30)
    return "never shown"


def stuck_sync_preview(args: Purge) -> str:
    RELEASE.wait(10)  # a sync preview stuck in I/O: its thread is left behind, the request is not
    return "never shown"


def broken_preview(args: Purge, ctx: ToolContext) -> str:
    raise RuntimeError("database is down")


@tool(approval=always(), preview=slow_preview, preview_timeout=0.3)
async def purge_slow(args: Purge, ctx: ToolContext) -> dict:
    """Delete old rows."""
    RAN.append(args.table)
    return {}


@tool(approval=always(), preview=stuck_sync_preview, preview_timeout=0.3)
def purge_stuck(args: Purge) -> dict:
    """Delete old rows."""
    RAN.append(args.table)
    return {}


@tool(approval=always(), preview=broken_preview)
async def purge_broken(args: Purge, ctx: ToolContext) -> dict:
    """Delete old rows."""
    RAN.append(args.table)
    return {}


async def test_slow_and_failing_previews_say_unavailable_within_their_bound(redis):
    RAN.clear()
    RELEASE.clear()
    model = ScriptedModel([
        calls(("purge_slow", {"table": "a", "older_than_days": 1}), ("purge_stuck", {"table": "b", "older_than_days": 1}),
              ("purge_broken", {"table": "c", "older_than_days": 1})),
        model_say("Done."),
    ])
    runtime, channel, _ = make_runtime(redis, model, [purge_slow, purge_stuck, purge_broken])
    started = time.monotonic()
    try:
        await say(runtime, "purge")
        elapsed = time.monotonic() - started
    finally:
        RELEASE.set()
    requests = {r.action.tool_name: r for r in channel.requests()}
    assert set(requests) == {"purge_slow", "purge_stuck", "purge_broken"}  # every card still posted
    assert {name: r.preview for name, r in requests.items()} == dict.fromkeys(requests, "preview unavailable")
    assert elapsed < 3.0  # previews run together, each cut at its bound (0.3 s): not 30 s, not 10 s
    assert RAN == []


def test_preview_timeout_must_be_positive_and_short():
    import pytest

    for bad in (0, 31):
        with pytest.raises(ValueError, match="preview_timeout"):
            tool(purge_preview, preview=purge_preview, preview_timeout=bad)
