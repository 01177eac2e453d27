"""Retention never takes what an open request needs, and never hides a revived thread from the audit
log; a session's end is written once by its owner and its keys are retired
when it has passed, by the sweep or by the next message. Real Valkey; the retention is
shortened to a fraction of a second in the store's settings instead of waiting 30 days.
"""

from __future__ import annotations

import asyncio

from bot.approval import always
from bot.builtin import BUILTIN_TOOLS
from bot.engine.tool_registry import ToolRegistry
from bot.engine.turn_commands import CancelTurn, FailureCount, LeaseCommand, Sweep
from bot.engine.turns import Runtime, RuntimeSettings
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.session import SessionRef, slack_session_id
from store.assistant_threads import AssistantThreads
from store.audit import AuditLog
from store.audit_events import PassAudit
from store.outbox import RedisOutbox
from store.session_keys import RETIRE, SESSION_KEYS
from store.turns import RedisTurns
from tests.engine.harness import (
    RecordingChannel,
    approve,
    recording_tool,
    request_status,
    say,
    session,
    shown,
    take_lease,
    user_texts,
)

RETENTION_S = 0.4  # "BOT_RETENTION_DAYS", shortened


def _runtime(redis, model, tools, *, audited: bool = False):
    store = RedisTurns(redis, retention_s=RETENTION_S)  # type: ignore[arg-type]
    outbox = RedisOutbox(redis, retention_s=RETENTION_S,  # type: ignore[arg-type]
                         audit=PassAudit(AuditLog(redis)) if audited else None)
    channel = RecordingChannel()
    runtime = Runtime(store=store, outbox_store=outbox, model=model, tools=ToolRegistry([*BUILTIN_TOOLS, *tools]),
                      channel=channel, settings=RuntimeSettings(system_prompt=""))
    return runtime, channel, store


async def _own_keys(store: RedisTurns, session_id: str) -> set[str]:
    """Which of the session's own keys (``SESSION_KEYS``) Redis still holds."""
    prefix = store.key(session_id, "")
    return {k.decode()[len(prefix):] for k in await store.session_keys(session_id)} & set(SESSION_KEYS)


async def test_a_parked_turn_outlives_the_retention_while_its_request_is_open(redis):
    deploy, runs = recording_tool("deploy", approval=always())
    model = ScriptedModel([model_say("hi"), call("deploy"), model_say("deployed")])
    runtime, channel, store = _runtime(redis, model, [deploy])
    sid = session().session_id
    await say(runtime, "hello")  # a first turn ends: the session gets its end, and a place on the schedule
    assert await redis.zscore(RETIRE, sid) is not None
    await say(runtime, "deploy")
    [req] = channel.requests()
    await asyncio.sleep(RETENTION_S * 2)  # the retention passes while the card waits
    await runtime.recover()  # the sweep (every few seconds in production) finds the session due
    await runtime.wait_idle()
    assert await store.exists(sid) and "state" in await _own_keys(store, sid)

    result = await approve(runtime, req.request_id)

    assert result.state == "settled"
    assert len(runs) == 1, "the approved call never ran: its turn's state was retired under the open request"
    assert [e.text for e in channel.of("message.completed")] == ["hi", "deployed"]


async def test_the_sweep_retires_an_ended_session_once_and_never_a_held_one(redis):
    """Once a session's end has passed, the sweep deletes its own keys (one DEL) and takes it
    off the schedule; while something holds it (here a turn under way: the lease) it is left alone and looked
    at again later, and the unit of work that held it writes its new end when it ends."""
    runtime, channel, store = _runtime(redis, ScriptedModel([model_say("hi")]), [])
    sid = session().session_id
    await say(runtime, "hello")
    assert {"state", "events", "seq", "end"} <= await _own_keys(store, sid)
    token = await take_lease(store, sid)  # a replica starts work on it just as its end passes
    assert token is not None
    await asyncio.sleep(RETENTION_S * 1.5)

    assert (await store.sweep(Sweep("retire"))).retired == 0
    assert "state" in await _own_keys(store, sid)
    await store.lease(LeaseCommand(sid, "release", token, still_active=False))  # its work ends: a new end, written once
    assert await store.exists(sid) and (await store.sweep(Sweep("retire"))).retired == 0  # not due yet
    await asyncio.sleep(RETENTION_S * 1.5)

    assert (await store.sweep(Sweep("retire"))).retired == 1
    assert await _own_keys(store, sid) == set() and not await store.exists(sid)
    assert await redis.zscore(RETIRE, sid) is None and (await store.sweep(Sweep("retire"))).retired == 0


async def test_a_request_whose_turn_is_gone_is_no_longer_available(redis):
    deploy, runs = recording_tool("deploy", approval=always())
    runtime, channel, store = _runtime(redis, ScriptedModel([call("deploy"), model_say("deployed")]), [deploy])
    await say(runtime, "deploy")
    [req] = channel.requests()
    await redis.delete(store.key(session().session_id, "state"))  # e.g. a turn parked before this fix

    result = await approve(runtime, req.request_id)

    assert result.state == "stale" and runs == []  # not "settled": nothing was approved
    assert await request_status(store, req.request_id) == "settled"  # closed, so no card offers it again
    [resolved] = [r for e in channel.of("input.resolved") for r in e.resolutions]
    assert resolved.request_id == req.request_id and resolved.outcome == "cancelled"  # the card: "no longer needed"
    assert await store.pending_for_team("T1") == []


async def test_a_thread_revived_after_the_retention_is_audited_again(redis):
    deploy, runs = recording_tool("deploy")  # runs without asking: an execution
    gated, _ = recording_tool("refund", approval=always())  # asks: a request
    life = [call("deploy"), call("refund"), model_say("done")]
    model = ScriptedModel([*life, *life], by_turn_position=False)
    runtime, channel, store = _runtime(redis, model, [deploy, gated], audited=True)
    audit = AuditLog(redis)

    async def audited(kind: str) -> list:
        return [e for e in await audit.entries("T1") if e.kind == kind]

    await say(runtime, "first life")
    [first] = channel.requests()
    await approve(runtime, first.request_id)
    assert len(await audited("request")) == 1 and len(await audited("execution")) == 2
    await asyncio.sleep(RETENTION_S * 2)  # the session's keys (its sequence counter too) lapse
    assert not await store.exists(session().session_id)

    await say(runtime, "second life")  # the same thread, used again (no sweep ran: the message retires it)
    assert user_texts(shown(model)) == ["second life"], "the revived thread did not start afresh"
    second = channel.requests()[-1]
    await approve(runtime, second.request_id)

    assert len(runs) == 2
    requests = await audited("request")
    assert [e.subject for e in requests] == [first.request_id, second.request_id], \
        "the revived thread's request was skipped as already audited"
    assert len(await audited("execution")) == 4


async def test_a_request_whose_turn_is_gone_is_not_listed_as_waiting(redis):
    deploy, _ = recording_tool("deploy", approval=always())
    runtime, channel, store = _runtime(redis, ScriptedModel([call("deploy"), model_say("deployed")]), [deploy])
    await say(runtime, "deploy")
    [req] = channel.requests()
    assert [r.request_id for r in await store.pending_for_team("T1")] == [req.request_id]
    await redis.delete(store.key(session().session_id, "state"))

    assert await store.pending_for_team("T1") == []  # App Home and `bot pending` offer no button for it


async def _calls(redis, *names: str) -> dict[str, int]:
    stats = await redis.info("commandstats")
    return {name: stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in names}


async def test_a_pass_records_its_posts_in_its_closing_script(redis):
    """Where a pass's posts are (``PostLedger.set(..., in_pass=True)``) is written by the pass's closing
    script, not by a separate write and ``EVAL`` of a retention rule; the frontend data has no end of its own
    (it ends with its session), so nothing asks whether a request is open."""
    store = RedisOutbox(redis, retention_s=RETENTION_S)  # type: ignore[arg-type]
    sid = session().session_id
    warm = await store.outbox_begin(sid, ["frontend"], "token")  # the scripts loaded: no NOSCRIPT resend counted
    assert warm is not None
    await store.outbox_end(sid, "token", {}, [], claim=warm.claim, again_in_ms=None)
    before = await _calls(redis, "eval", "exists", "pexpire")
    opened = await store.outbox_begin(sid, ["frontend"], "token")
    assert opened is not None
    await store.posts.set(sid, "post:1", "1718000000.000100", in_pass=True)
    await store.outbox_end(sid, "token", {"frontend": "1-0"}, [], claim=opened.claim, again_in_ms=None)
    spent = {name: n - before[name] for name, n in (await _calls(redis, "eval", "exists", "pexpire")).items()}

    assert await store.posts.get(sid, "post:1") == "1718000000.000100"
    assert await redis.pttl(store.key(sid, "chan")) == -1
    assert spent == {"eval": 0, "exists": 0, "pexpire": 0}, spent  # was an EVAL, 2 EXISTS and a PEXPIRE


async def test_a_claim_is_one_script_that_keeps_only_what_it_wrote(redis):
    """Claiming a post (``PostLedger.claim``) is one script that reads back only when it lost; the
    winner is told, the loser sees the first claim; nothing gives the frontend data an end (its session's)."""
    store = RedisOutbox(redis, retention_s=RETENTION_S)  # type: ignore[arg-type]
    sid = session().session_id
    await store.posts.claim(sid, "warm-up", "x")  # the script loaded: no NOSCRIPT resend counted
    before = await _calls(redis, "eval", "exists", "pexpire", "hget")

    assert await store.posts.claim(sid, "post:7:0", "first") is True
    assert await store.posts.claim(sid, "post:7:0", "second") is False

    spent = {name: n - before[name] for name, n in (await _calls(redis, "eval", "exists", "pexpire", "hget")).items()}
    assert await store.posts.get(sid, "post:7:0") == "first"
    assert await redis.pttl(store.key(sid, "chan")) == -1
    assert spent == {"eval": 0, "exists": 0, "pexpire": 0, "hget": 1}, spent  # was 2 EVALs, 2 of each, 2 HGETs


async def test_the_cancel_key_and_the_failure_count_outlive_the_retention_while_a_request_is_open(redis):
    """A session's requested stop and its count of failed drives are its own keys: no end of their own, kept
    while a request is open (the sweep leaves the session alone), gone with the session once it has ended."""
    deploy, runs = recording_tool("deploy", approval=always())
    runtime, channel, store = _runtime(redis, ScriptedModel([call("deploy"), model_say("deployed")]), [deploy])
    sid = session().session_id
    await say(runtime, "deploy")
    [req] = channel.requests()
    await store.cancel(CancelTurn(sid, "an-earlier-turn"))  # a stop that names no turn under way changes nothing
    assert await store.count_failures(FailureCount(sid, failed=True)) == 1
    await asyncio.sleep(RETENTION_S * 2)  # the retention passes while the card waits
    await runtime.recover()
    await runtime.wait_idle()

    assert await store.cancel_requested(sid) == "an-earlier-turn"
    assert await store.count_failures(FailureCount(sid, failed=True)) == 2, "the failure count started over"
    await approve(runtime, req.request_id)
    assert len(runs) == 1
    await asyncio.sleep(RETENTION_S * 2)
    assert (await store.sweep(Sweep("retire"))).retired == 1
    assert await store.cancel_requested(sid) is None and await _own_keys(store, sid) == set()


async def test_an_assistant_thread_s_memory_ends_with_its_session_and_not_before(redis):
    """What the bot remembers of an assistant thread is its session's once a message is recorded there: it
    outlives the retention while a request is open and is deleted when the sweep retires the session. A thread
    no message made a session of yet ends a retention after it was last written."""
    threads = AssistantThreads(redis, retention_s=RETENTION_S)  # type: ignore[arg-type]
    deploy, runs = recording_tool("deploy", approval=always())
    runtime, channel, store = _runtime(redis, ScriptedModel([call("deploy"), model_say("deployed")]), [deploy])
    sid = slack_session_id("T1", "D1", "1.0")
    ref = SessionRef(session_id=sid, team_id="T1", channel={"channel_id": "D1", "thread_ts": "1.0"})
    await threads.remember_context("D1", "1.0", {"channel_id": "C1"})
    await threads.remember_context("D9", "9.0", {"channel_id": "C1"})  # opened, never written in
    await say(runtime, "deploy", ref=ref)
    assert await threads.claim_title("D1", "1.0", sid) is True  # (the handler's call after the message's record)
    [req] = channel.requests()
    await asyncio.sleep(RETENTION_S * 2)  # the retention passes while the card waits
    await runtime.recover()
    await runtime.wait_idle()

    assert await threads.context("D1", "1.0") == {"channel_id": "C1"}
    assert await threads.claim_title("D1", "1.0", sid) is False, "the thread would be named again"
    assert await threads.context("D9", "9.0") is None  # no session owned it: it ended
    await approve(runtime, req.request_id)
    assert len(runs) == 1
    await asyncio.sleep(RETENTION_S * 2)
    assert (await store.sweep(Sweep("retire"))).retired == 1
    assert await redis.exists(threads.key("D1", "1.0")) == 0, "the thread's memory outlived its session"
