"""Regression tests for the review's breaks of "exactly once" and "fail closed" (one test per defect).

Each test is named by the behaviour it pins. They run on a real Valkey with real runtimes;
"a dead worker" is a runtime whose tasks are cancelled before they finish, the way kill -9 leaves them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from typing import Any

import pytest

from bot.approval import Approval, allowed, always, once, rejected
from bot.engine.lease_keeper import LeaseKeeper
from bot.engine.turn_commands import CallMark, CancelTurn, CommitCommand, LeaseCommand, RecordMessage
from bot.engine.turns import RuntimeSettings
from bot.models.scripted import ScriptedModel, call, calls
from bot.models.scripted import say as model_say
from bot.principals import slack_user
from bot.protocol import InputResponse, LeaseLost, MessageTaken
from bot.tools import Tool, ToolContext
from store.session_keys import OUTBOX, RETIRE
from tests.engine.harness import (
    ALICE,
    BOB,
    RecordingChannel,
    approve,
    assert_valid_history,
    decision,
    make_runtime,
    recording_tool,
    request_status,
    say,
    session,
    shown,
    take_lease,
    tool_results,
    user_texts,
)

EVE_ELSEWHERE = slack_user("T2", "UEVE")  # a person of another workspace the app is installed in


def _not_the_requester(ctx):
    if ctx.response.decision == "approve" and ctx.request.principal.same_as(ctx.response.principal):
        return rejected("Someone else has to approve.")
    return allowed()


async def test_a_replica_without_the_tool_refuses_instead_of_using_another_rule(redis):
    gated, runs = recording_tool("wire", approval=Approval(request=always(), response=_not_the_requester))
    runtime_a, channel, store = make_runtime(redis, ScriptedModel([call("wire"), model_say("sent")]), [gated])
    await say(runtime_a, "wire the money")
    [req] = channel.requests()
    runtime_b, _, _ = make_runtime(redis, ScriptedModel([]), [])  # a rolling deploy: no "wire" here

    result = await runtime_b.answer(decision(req.request_id, "approve", ALICE))  # the requester themself
    await runtime_b.wait_idle()
    assert result.state == "failed" and "not available" in (result.reason or "")
    assert await request_status(store, req.request_id) == "open"
    assert runs == []
    assert await runtime_b.check_response(await store.get_request(req.request_id), ALICE) is None


async def test_answers_from_another_workspace_settle_nothing(redis):
    anyone = Approval(request=always(), response=lambda ctx: allowed())
    gated, runs = recording_tool("deploy", approval=anyone)
    runtime, channel, store = make_runtime(redis, ScriptedModel([call("deploy"), model_say("ok")]), [gated])
    await say(runtime, "deploy")
    [req] = channel.requests()
    for option in ("approve", "cancel"):
        result = await runtime.answer(decision(req.request_id, option, EVE_ELSEWHERE))
        assert result.state == "forbidden"
    await runtime.wait_idle()
    assert await request_status(store, req.request_id) == "open"
    assert channel.of("approval.candidate") == []  # no trace in this workspace's session or audit
    assert (await approve(runtime, req.request_id, BOB)).state == "settled"  # a colleague's answer counts
    assert len(runs) == 1


async def test_a_colleague_from_another_workspace_of_the_org_crosses_the_boundary(redis):
    anyone = Approval(request=always(), response=lambda ctx: allowed())
    gated, runs = recording_tool("deploy", approval=anyone)
    runtime, channel, store = make_runtime(redis, ScriptedModel([call("deploy"), model_say("ok")]), [gated])
    in_org = session().model_copy(update={"enterprise_id": "E1"})
    await say(runtime, "deploy", ref=in_org)
    [req] = channel.requests()
    outsider = slack_user("T2", "UEVE", enterprise_id="E2")  # another installation of another org
    assert (await runtime.answer(decision(req.request_id, "approve", outsider))).state == "forbidden"
    no_org = slack_user("T2", "UEVE")  # a payload that names no org does not count as the org's
    assert (await runtime.answer(decision(req.request_id, "approve", no_org))).state == "forbidden"
    colleague = slack_user("T2", "UDEV", enterprise_id="E1")  # org-wide install, their own workspace
    assert (await approve(runtime, req.request_id, colleague)).state == "settled"
    await runtime.wait_idle()
    assert len(runs) == 1
    record = await store.get_request(req.request_id)
    assert record.session_info["enterprise_id"] == "E1"  # the org travels with the request


async def test_markers_stay_unique_after_keep_going(redis):
    gated, runs = recording_tool("deploy", approval=always())
    script = [call("deploy", call_id="call_0", env="a"), call("deploy", call_id="call_0", env="b"),
              model_say("both done")]
    model = ScriptedModel(script, by_turn_position=False)
    runtime, channel, _ = make_runtime(redis, model, [gated], settings=RuntimeSettings(system_prompt="", step_budget=1))
    await say(runtime, "deploy a then b")
    [first] = channel.requests()
    await approve(runtime, first.request_id)
    limit = channel.requests()[-1]
    assert limit.kind == "session-limit"
    await runtime.answer(decision(limit.request_id, "continue"))  # "keep going": the step counter restarts
    await runtime.wait_idle()
    second = channel.requests()[-1]
    assert second.kind == "tool-approval" and second.action.input == {"env": "b"}
    await approve(runtime, second.request_id)
    assert [r.args for r in runs] == [{"env": "a"}, {"env": "b"}]  # the second call ran, not an old result
    assert_valid_history(shown(model))


async def test_a_worker_that_lost_its_lease_cannot_start_a_call(redis):
    runtime, _, store = make_runtime(redis, ScriptedModel([]), [])
    sid = session().session_id
    stale = await take_lease(store, sid)
    await redis.delete(store.key(sid, "lease"))  # it lapsed (a blip) ...
    fresh = await take_lease(store, sid)  # ... and another worker took the turn
    assert stale and fresh and stale != fresh
    with contextlib.suppress(LeaseLost):
        await store.mark_call(CallMark(sid, "turn_x:step:call_1:0", stale))
        raise AssertionError("a fenced start must raise LeaseLost")
    assert not await redis.exists(store.key(sid, "exec:turn_x:step:call_1:0"))
    assert (await store.mark_call(CallMark(sid, "turn_x:step:call_1:0", fresh))) == (True, None)


async def test_a_checkpoint_that_starts_calls_is_fenced_and_never_starts_one_twice(redis):
    # the checkpoint that makes approved calls ready starts them in its own script: the
    # same fence and the same "once" as begin_execution
    runtime, _, store = make_runtime(redis, ScriptedModel([]), [])
    sid = session().session_id
    stale = await take_lease(store, sid)
    await redis.delete(store.key(sid, "lease"))
    fresh = await take_lease(store, sid)
    with contextlib.suppress(LeaseLost):
        await store.commit(CommitCommand(sid, stale, {"turns": 0}, [], begin=["turn_x:s:call_1:0"]))
        raise AssertionError("a fenced checkpoint must raise LeaseLost")
    assert not await redis.exists(store.key(sid, "exec:turn_x:s:call_1:0"))
    # one marker already there from an earlier run (interrupted, or done): it is reported, not started again
    await redis.set(store.key(sid, "exec:turn_x:s:call_2:0"), "started")
    await redis.set(store.key(sid, "exec:turn_x:s:call_3:0"), '{"status":"completed","output":1}')
    _, _, begun = await store.commit(CommitCommand(sid, fresh, {"turns": 0}, [],
                                            begin=["turn_x:s:call_1:0", "turn_x:s:call_2:0", "turn_x:s:call_3:0"]))
    assert begun == {"turn_x:s:call_1:0": (True, None), "turn_x:s:call_2:0": (False, "started"),
                     "turn_x:s:call_3:0": (False, '{"status":"completed","output":1}')}
    assert await redis.get(store.key(sid, "exec:turn_x:s:call_1:0")) == b"started"
    assert 0 < await redis.pttl(store.key(sid, "exec:turn_x:s:call_1:0"))  # its own end, as begin_execution's
    assert await store.mark_call(CallMark(sid, "turn_x:s:call_1:0", fresh)) == (False, "started")


async def test_a_state_the_lease_script_cannot_decode_is_still_driven(redis):
    # the lease's script decodes the state to find the requests its turn waits on; a state Lua's JSON
    # cannot read (nested deeper than its 1,000 levels: a tool's output kept in the state, in an app that
    # raised Python's recursion limit) must not keep the session from its lease: its requests are then
    # read apart
    _, _, store = make_runtime(redis, ScriptedModel([]), [])
    sid = session().session_id
    deep: list = []
    for _ in range(1200):
        deep = [deep]
    waiting = {"turn": {"step": {"request_ids": ["x"]}, "limit_request_id": None}, "out": deep}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)
    try:
        token = await take_lease(store, sid)
        await store.commit(CommitCommand(sid, token, waiting))
        await store.lease(LeaseCommand(sid, "release", token, still_active=False))
        token, _, _, snap = await store.lease(LeaseCommand(sid, "take"))
        assert token is not None and snap is not None
        state = snap.state  # decoded where it is used: in the app, under its raised limit
    finally:
        sys.setrecursionlimit(limit)
    assert state["turn"]["step"]["request_ids"] == ["x"] and snap.requests == {}


async def test_lease_renewal_survives_a_redis_blip(redis):
    _, _, store = make_runtime(redis, ScriptedModel([]), [], lease_ms=600)
    sid = session().session_id
    token = await take_lease(store, sid)
    keeper = LeaseKeeper(store, sid, token, 600)
    keeper.start()
    await asyncio.sleep(0.25)
    await redis.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")  # every other connection drops
    await asyncio.sleep(0.9)  # longer than the lease: only renewals keep it
    assert not keeper.lost
    assert (await redis.get(store.key(sid, "lease"))).decode() == token
    await keeper.stop()


async def test_the_lease_never_outlives_the_work(redis):
    runtime, channel, store = make_runtime(redis, ScriptedModel([model_say("hi")]), [], lease_ms=300)
    await say(runtime, "hello")
    sid = session().session_id
    assert not await redis.exists(store.key(sid, "lease"))
    token = await take_lease(store, sid)
    keeper = LeaseKeeper(store, sid, token, 300)
    keeper.start()
    await keeper.stop()
    await asyncio.sleep(0.5)  # past the lease: a renewer still running would have kept it
    assert not await redis.exists(store.key(sid, "lease"))


async def test_19b_work_shorter_than_the_first_renewal_costs_the_keeper_no_task(redis):
    _, _, store = make_runtime(redis, ScriptedModel([]), [], lease_ms=300)
    sid = session().session_id
    token = await take_lease(store, sid)
    keeper = LeaseKeeper(store, sid, token, 300)
    before = asyncio.all_tasks()
    keeper.start()
    await asyncio.sleep(0)
    assert asyncio.all_tasks() == before  # most drives end before the first renewal would be due
    await keeper.stop()
    await asyncio.sleep(0.5)  # past the lease and the first wake-up: nothing renewed it
    assert asyncio.all_tasks() == before
    assert not await redis.exists(store.key(sid, "lease"))


def _asks_and_waits(entered: asyncio.Event):
    async def choose(args: dict, ctx: ToolContext) -> dict:
        answer = await ctx.ask("Which region?", ["eu", "us"])
        return {"region": answer.option_id}

    async def slow(args: dict, ctx: ToolContext) -> dict:
        entered.set()
        await asyncio.Event().wait()  # the worker dies in here
        return {}

    return [Tool(choose, name="choose"), Tool(slow, name="slow", idempotent=True)]


async def test_a_question_asked_before_a_crash_is_asked_again(redis):
    entered = asyncio.Event()
    script = [calls(("choose", {}, "c1"), ("slow", {}, "s1")), model_say("done")]
    runtime_a, _, _ = make_runtime(redis, ScriptedModel(script), _asks_and_waits(entered), lease_ms=300)
    worker = asyncio.create_task(runtime_a.post_message(session(), ALICE, "go"))
    await asyncio.wait_for(entered.wait(), 2)
    worker.cancel()  # dies while "slow" runs; "choose" already recorded that it asked
    with contextlib.suppress(asyncio.CancelledError):
        await worker

    finished = asyncio.Event()

    async def quick(args: dict) -> dict:
        finished.set()
        return {"ok": True}

    tools_b = [_asks_and_waits(asyncio.Event())[0], Tool(quick, name="slow", idempotent=True)]
    runtime_b, channel_b, _ = make_runtime(redis, ScriptedModel(script), tools_b, lease_ms=300)
    for _ in range(40):
        await runtime_b.recover()
        await runtime_b.wait_idle()
        if channel_b.requests():
            break
        await asyncio.sleep(0.1)
    [question] = channel_b.requests()
    assert question.kind == "question" and question.prompt == "Which region?"
    await runtime_b.answer(decision(question.request_id, "eu"))
    await runtime_b.wait_idle()
    assert channel_b.types()[-2:] == ["turn.completed", "session.waiting"]


async def test_a_tool_that_catches_everything_still_parks_on_its_question(redis):
    async def careless(args: dict, ctx: ToolContext) -> dict:
        try:
            answer = await ctx.ask("Proceed?", ["yes", "no"])
        except Exception:  # noqa: BLE001 - the point of the test
            return {"swallowed": True}
        return {"answer": answer.option_id}

    model = ScriptedModel([call("careless", call_id="k1"), model_say("ok")])
    runtime, channel, _ = make_runtime(redis, model, [Tool(careless, name="careless")])
    await say(runtime, "go")
    [question] = channel.requests()
    assert question.prompt == "Proceed?"
    await runtime.answer(decision(question.request_id, "yes"))
    await runtime.wait_idle()
    assert json.loads(tool_results(shown(model))["k1"]) == {"answer": "yes"}


async def test_odd_digits_are_text_and_nothing_is_lost(redis):
    async def pick(args: dict, ctx: ToolContext) -> dict:
        answer = await ctx.ask("How many?", ["one", "two"])
        return {"option": answer.option_id, "text": answer.text}

    model = ScriptedModel([call("pick", call_id="p1"), model_say("ok")])
    runtime, channel, store = make_runtime(redis, model, [Tool(pick, name="pick")])
    await say(runtime, "pick")
    for text in ("²", "①", "9" * 5000):
        assert (await say(runtime, text)).state in ("answered", "queued")
    assert json.loads(tool_results(shown(model))["p1"]) == {"option": None, "text": "²"}
    # the later messages were not swallowed: they wait as the owner's next words
    assert [m["text"] for m in await store.inbox(session().session_id)] in ([], ["①", "9" * 5000])


async def test_an_unexpected_error_fails_the_turn_visibly_after_bounded_retries(redis):
    gated, runs = recording_tool("deploy", approval=always())
    runtime_a, channel_a, store = make_runtime(redis, ScriptedModel([call("deploy"), model_say("ok")]), [gated])
    await say(runtime_a, "deploy")
    [req] = channel_a.requests()
    await runtime_a.answer(decision(req.request_id, "approve"), resume=False)  # then this replica goes away
    runtime_b, channel_b, _ = make_runtime(redis, ScriptedModel([model_say("hello again")], by_turn_position=False), [],
                                           settings=RuntimeSettings(system_prompt="", max_drive_failures=3))
    sid = session().session_id
    for _ in range(3):  # a replica that lacks the tool cannot resume the approved call
        await redis.zadd("hitl:active", {sid: 0})
        await runtime_b.recover()
        await runtime_b.wait_idle()
    assert runs == []
    assert "turn.failed" in channel_b.types()
    assert channel_b.types()[-1] == "session.waiting"
    assert (await say(runtime_b, "hi")).state == "queued"  # the session takes new messages again
    assert channel_b.types()[-2:] == ["turn.completed", "session.waiting"]


async def test_a_turn_that_fails_before_its_first_checkpoint_is_failed_visibly_and_the_thread_goes_on(redis):
    """A tool's approval key that raises in the turn's first model step fails the turn before anything of it
    is saved (its start goes with its first checkpoint). After the failure budget the person is told, the
    message that started it leaves the queue, and the next message in the thread starts a new turn."""
    def broken_key(args: dict) -> str:
        return f"deploy:{args['service']}"  # the model left "service" out: KeyError

    def step(messages: list, tools: list) -> Any:  # "deploy" asks for the call each time; anything else is answered
        return call("deploy") if user_texts(messages)[-1] == "deploy" else model_say("hello again")

    broken, runs = recording_tool("deploy", approval=once(), approval_key=broken_key)
    model = ScriptedModel([step, step])
    runtime, channel, store = make_runtime(redis, model, [broken],
                                           settings=RuntimeSettings(system_prompt="", max_drive_failures=3))
    sid = session().session_id
    await say(runtime, "deploy")
    for _ in range(3):  # each retry fails the same way (the sweep finds the session due again)
        await redis.zadd("hitl:active", {sid: 0})
        await runtime.recover()
        await runtime.wait_idle()

    assert runs == []
    assert channel.types()[-3:] == ["turn.started", "turn.failed", "session.waiting"], channel.types()
    [failed] = channel.of("turn.failed")
    assert failed.turn_id == channel.of("turn.started")[0].turn_id
    assert (await store.snapshot(sid)).inbox == []  # the message that started it is no longer queued
    assert (await say(runtime, "hi")).state == "queued"  # the thread takes new messages again…
    assert channel.types()[-3:] == ["message.completed", "turn.completed", "session.waiting"]
    assert [e.text for e in channel.of("message.completed")] == ["hello again"]  # …and answers them


async def test_once_with_an_approval_key_remembers_by_key_and_always_grants_nothing(redis):
    keyed, keyed_runs = recording_tool("charge", approval=once(), approval_key=lambda a: f"charge:{a['customer']}")
    script = [call("charge", customer="acme"), call("charge", customer="acme"), call("charge", customer="globex"),
              model_say("done")]
    runtime, channel, store = make_runtime(redis, ScriptedModel(script, by_turn_position=False), [keyed])
    await say(runtime, "charge them")
    [first] = channel.requests()
    await approve(runtime, first.request_id)
    # acme again runs without asking; globex is another key and asks
    assert len(keyed_runs) == 2
    assert channel.requests()[-1].action.input == {"customer": "globex"}

    always_tool, _ = recording_tool("deploy", approval=always())
    runtime2, channel2, store2 = make_runtime(redis, ScriptedModel([call("deploy"), model_say("ok")]),
                                              [always_tool])
    ref = session("s2")
    await say(runtime2, "deploy", ref=ref)
    await approve(runtime2, channel2.requests()[-1].request_id)
    assert (await store2.snapshot(ref.session_id)).grants == set()


async def test_a_refused_click_on_a_settled_request_says_who_settled_it(redis):
    only_bob = Approval(request=always(), response=lambda ctx: allowed() if ctx.response.principal.same_as(BOB)
                        else rejected("Only Bob."))
    gated, _ = recording_tool("deploy", approval=only_bob)
    runtime, channel, store = make_runtime(redis, ScriptedModel([call("deploy"), model_say("ok")]), [gated])
    await say(runtime, "deploy")
    [req] = channel.requests()
    record = await store.get_request(req.request_id)  # Carol's click read the record while it was open
    await approve(runtime, req.request_id, BOB)
    late = await runtime.answer(InputResponse(request_id=req.request_id, option_id="approve", principal=ALICE),
                                record=record)
    assert late.state == "stale"
    assert late.record.status == "settled" and late.record.responder.same_as(BOB)


async def test_what_a_dead_process_settled_still_reaches_the_frontend(redis):
    gated, runs = recording_tool("deploy", approval=always())
    runtime_a, channel_a, store = make_runtime(redis, ScriptedModel([call("deploy"), model_say("ok")]), [gated])
    await say(runtime_a, "deploy")
    [req] = channel_a.requests()
    before = len(channel_a.events)
    await runtime_a.answer(decision(req.request_id, "approve"), resume=False)
    await runtime_a.abandon()  # kill -9: its delivery never happens
    assert channel_a.events[before:] == []

    runtime_b, channel_b, _ = make_runtime(redis, ScriptedModel([call("deploy"), model_say("ok")]), [gated])
    await redis.zadd(OUTBOX, {session().session_id: 0})  # the grace period has passed
    await redis.zadd("hitl:active", {session().session_id: 0})
    await runtime_b.recover()
    await runtime_b.wait_idle()
    assert "input.resolved" in channel_b.types()  # the card loses its buttons
    assert channel_b.types()[-2:] == ["turn.completed", "session.waiting"]
    assert len(runs) == 1


class StuckChannel(RecordingChannel):
    """A frontend whose delivery of the final answer never returns: the process dies inside it."""

    async def deliver(self, event, session) -> None:  # noqa: ANN001 - Channel protocol
        if event.type == "message.completed":
            await asyncio.Event().wait()
        await super().deliver(event, session)


async def test_events_are_not_stranded_when_the_deliverer_dies_mid_delivery(redis):
    runtime_a, _, store = make_runtime(redis, ScriptedModel([model_say("the answer")]), [],
                                       channel=StuckChannel(), lease_ms=300)
    await runtime_a.record_message(session(), ALICE, "hi", message_id="m1")
    await runtime_a.drive(session().session_id)
    await asyncio.sleep(0.05)  # the deliverer is now stuck inside Slack's call
    await runtime_a.abandon()  # kill -9 mid-delivery

    runtime_b, channel_b, _ = make_runtime(redis, ScriptedModel([]), [], lease_ms=300)
    await asyncio.sleep(0.4)  # one lease later, any replica's sweep finds the session due again
    await runtime_b.recover()
    await runtime_b.wait_idle()
    assert [e.text for e in channel_b.of("message.completed")] == ["the answer"]
    assert await runtime_b.outbox.store.outbox_due() == []  # and, delivered, it leaves the list


async def test_settled_data_has_a_retention_and_indexes_forget_it(redis):
    gated, _ = recording_tool("deploy", approval=always())
    runtime, channel, store = make_runtime(redis, ScriptedModel([call("deploy"), model_say("ok")]), [gated])
    await say(runtime, "deploy")
    [req] = channel.requests()
    sid = session().session_id
    assert await redis.ttl(store.request_key(req.request_id)) == -1  # an open request never expires
    await approve(runtime, req.request_id)
    assert await redis.ttl(store.request_key(req.request_id)) > 0  # its end, set once by its settle
    # the session's keys end together, at the end its last unit of work wrote, on the retirement schedule
    ends = int(await redis.get(store.key(sid, "end")))
    assert ends > time.time() * 1000 and await redis.zscore(RETIRE, sid) == ends
    markers = [k async for k in redis.scan_iter(match=store.key(sid, "exec:*"))]
    assert markers and all([await redis.ttl(k) > 0 for k in markers])


async def test_long_sessions_keep_a_bounded_history(redis):
    model = ScriptedModel([model_say(f"reply {i}") for i in range(30)], by_turn_position=False)
    runtime, _, store = make_runtime(redis, model, [], settings=RuntimeSettings(system_prompt="sys", history_limit=10))
    for i in range(30):
        await say(runtime, f"message {i}")
    raw = (await store.snapshot(session().session_id)).state
    assert len(raw["history"]) <= 11 and raw["history"][0]["content"] == "sys"
    assert raw["history"][-1]["content"] == "reply 29"


class _DiesThinking(ScriptedModel):
    """A scripted model whose process dies while it thinks about step ``dies_at`` (its call never
    returns; the test cancels the worker the way kill -9 would)."""

    def __init__(self, steps, dies_at: int):
        super().__init__(steps)
        self.dies_at, self.thinking = dies_at, asyncio.Event()

    async def complete(self, messages, tools, **kw):  # noqa: ANN001 - ChatModel protocol
        if self.next_step_index(messages) == self.dies_at:
            self.thinking.set()
            await asyncio.Event().wait()
        return await super().complete(messages, tools, **kw)


def _saved_or_queued(snap) -> list[str]:
    queued = [m["text"] for m in snap.inbox]
    saved = [m.get("content") for m in (snap.state or {}).get("history", []) if m.get("role") == "user"]
    return queued + saved


async def test_a_steering_message_is_never_in_neither_place(redis):
    # The owner writes while a tool runs; the worker takes the message into the next model call and dies
    # while the model thinks. The message was acknowledged to Slack: it must be queued or saved at that
    # moment, and the next worker must show it to the model.
    running, finish = asyncio.Event(), asyncio.Event()

    async def build(args: dict) -> dict:
        running.set()
        await finish.wait()
        return {"built": True}

    script = [call("build", call_id="b1"), model_say("Built, and noted.")]
    model_a = _DiesThinking(script, dies_at=1)
    runtime_a, _, store = make_runtime(redis, model_a, [Tool(build, name="build", idempotent=True)], lease_ms=300)
    worker = asyncio.create_task(runtime_a.post_message(session(), ALICE, "build it"))
    await asyncio.wait_for(running.wait(), 2)
    assert (await runtime_a.post_message(session(), ALICE, "also bump the version")).state == "queued"
    finish.set()
    await asyncio.wait_for(model_a.thinking.wait(), 2)
    assert "also bump the version" in _saved_or_queued(await store.snapshot(session().session_id))
    worker.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await worker

    model_b = ScriptedModel(script)
    runtime_b, channel_b, _ = make_runtime(redis, model_b, [Tool(build, name="build", idempotent=True)],
                                           lease_ms=300)
    for _ in range(40):
        await runtime_b.recover()
        await runtime_b.wait_idle()
        if "turn.completed" in channel_b.types():
            break
        await asyncio.sleep(0.1)
    assert "also bump the version" in user_texts(shown(model_b))
    assert channel_b.types()[-2:] == ["turn.completed", "session.waiting"]


async def test_a_first_message_leaves_the_queue_only_with_the_turn_that_saves_it(redis):
    # The first commit of a turn takes the message; if that commit cannot happen (the lease is gone),
    # the message stays queued for whoever drives the session next.
    runtime, _, store = make_runtime(redis, ScriptedModel([model_say("hi")]), [])
    sid = session().session_id
    message = {"id": "m1", "principal": None, "text": "hello", "ref": session().model_dump(mode="json"), "at": "x"}
    assert await store.record_message(RecordMessage(sid, message, "m1"))
    token = await take_lease(store, sid)
    await store.lease(LeaseCommand(sid, "release", token, still_active=False))
    with pytest.raises(LeaseLost):
        await store.commit(CommitCommand(sid, token, {"ref": session().model_dump(mode="json")}, take=[message]))
    assert [m["text"] for m in await store.inbox(sid)] == ["hello"]  # lease lost: nothing taken
    token = await take_lease(store, sid)
    await store.commit(CommitCommand(sid, token, {"ref": session().model_dump(mode="json")}, take=[message]))
    assert await store.inbox(sid) == []
    with pytest.raises(MessageTaken):  # taken already: the commit writes nothing
        await store.commit(CommitCommand(sid, token, {"changed": True}, take=[message]))
    assert json.loads(await redis.get(store.key(sid, "state"))) == {"ref": session().model_dump(mode="json")}


# --- the turn's start and its model step go with the next write; a lone call's result with its step's


async def test_a_crash_while_the_model_thinks_leaves_the_message_queued_and_the_turn_starts_once(redis):
    # the turn's start is written with the step's first checkpoint: a worker that dies while the model thinks
    # has written nothing, the message is still queued, and the next worker starts the turn (once)
    model_a = _DiesThinking([call("deploy", call_id="d1"), model_say("deployed")], dies_at=0)
    gated, runs = recording_tool("deploy", approval=always())
    runtime_a, channel_a, store = make_runtime(redis, model_a, [gated], lease_ms=300)
    worker = asyncio.create_task(runtime_a.post_message(session(), ALICE, "deploy prod"))
    await asyncio.wait_for(model_a.thinking.wait(), 2)
    snap = await store.snapshot(session().session_id)
    assert [m["text"] for m in snap.inbox] == ["deploy prod"] and not (snap.state or {}).get("turn")
    worker.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await worker

    runtime_b, channel_b, _ = make_runtime(redis, ScriptedModel([call("deploy", call_id="d1"), model_say("deployed")]),
                                           [gated], lease_ms=300)
    for _ in range(40):
        await runtime_b.recover()
        await runtime_b.wait_idle()
        if channel_b.requests():
            break
        await asyncio.sleep(0.1)
    [req] = channel_b.requests()
    assert channel_a.types() + channel_b.types() == ["turn.started", "input.requested", "turn.waiting"]
    await approve(runtime_b, req.request_id)
    assert len(runs) == 1 and channel_b.types()[-2:] == ["turn.completed", "session.waiting"]
    assert await store.inbox(session().session_id) == []


async def test_a_stop_while_the_model_thinks_stops_the_turn_not_yet_written(redis):
    # nothing of the turn is written yet (its start goes with its first checkpoint), yet its owner can stop
    # it: the turn the first queued message starts has an id known in advance, and its first checkpoint is
    # refused once a stop was asked
    thinking, release = asyncio.Event(), asyncio.Event()

    async def slow_step(messages, tools):  # noqa: ANN001, ARG001
        thinking.set()
        await release.wait()
        return call("deploy", call_id="d1")

    free, runs = recording_tool("deploy")
    runtime, channel, store = make_runtime(redis, ScriptedModel([slow_step, model_say("never")]), [free])
    worker = asyncio.create_task(say(runtime, "deploy prod"))
    await asyncio.wait_for(thinking.wait(), 2)
    assert not ((await store.snapshot(session().session_id)).state or {}).get("turn"), "the start is not written yet"
    assert await runtime.cancel_turn(session().session_id, BOB, resume=False) is False, "only its owner stops it"
    assert await runtime.cancel_turn(session().session_id, ALICE, resume=False) is True
    release.set()
    await asyncio.wait_for(worker, 3)
    await runtime.wait_idle()
    assert runs == []
    assert channel.types() == ["turn.started", "turn.cancelled", "session.waiting"]
    assert await store.inbox(session().session_id) == []
    assert user_texts((await store.snapshot(session().session_id)).state["history"]) == ["deploy prod"]


async def test_a_slow_model_still_has_its_turn_s_start_written_while_it_thinks(redis):
    # the start waits for the next write only as long as a start may wait to be delivered: a model (or a
    # request policy) that takes longer has the start written alone, so the status line and the stop
    # button come while it thinks, as before
    thinking, release = asyncio.Event(), asyncio.Event()

    async def slow_step(messages, tools):  # noqa: ANN001, ARG001
        thinking.set()
        await release.wait()
        return model_say("done")

    runtime, channel, store = make_runtime(redis, ScriptedModel([slow_step]), [])
    worker = asyncio.create_task(say(runtime, "hello"))
    await asyncio.wait_for(thinking.wait(), 2)
    for _ in range(30):
        if ((await store.snapshot(session().session_id)).state or {}).get("turn"):
            break
        await asyncio.sleep(0.1)
    snap = await store.snapshot(session().session_id)
    assert snap.state["turn"] and snap.inbox == [], "written alone, taking the message with it"
    release.set()
    await asyncio.wait_for(worker, 3)
    assert channel.types() == ["turn.started", "message.completed", "turn.completed", "session.waiting"]


async def test_a_call_s_result_is_recorded_even_when_its_step_s_checkpoint_is_refused(redis):
    # the last call's result rides the step's checkpoint; the checkpoint is fenced, the result is not (a
    # fact about the world): a worker that lost its lease meanwhile still leaves the result for its successor
    sid = session().session_id
    lease: list[str] = []

    async def pay(args: dict) -> dict:
        await redis.set(lease[0], "someone-else", px=60_000)  # another worker took the turn meanwhile
        return {"paid": True}

    runtime, channel, store = make_runtime(redis, ScriptedModel([call("pay", call_id="p1"), model_say("paid")]),
                                           [Tool(pay, name="pay")])
    lease.append(store.key(sid, "lease"))
    await say(runtime, "pay it")
    markers = [key async for key in redis.scan_iter(match=store.key(sid, "exec:*"))]
    assert len(markers) == 1
    recorded = json.loads(await redis.get(markers[0]))
    assert (recorded["status"], recorded["output"]) == ("completed", {"paid": True})
    assert "turn.completed" not in channel.types(), "the refused checkpoint wrote nothing else"


async def test_with_several_calls_each_result_is_durable_as_it_finishes(redis):
    # only the step's last call to finish waits for the step's checkpoint; a call that finishes while another
    # still runs has its result recorded at once
    release = asyncio.Event()

    async def quick(args: dict) -> dict:
        return {"quick": True}

    async def slow(args: dict) -> dict:
        await release.wait()
        return {"slow": True}

    model = ScriptedModel([calls(("quick", {}, "q1"), ("slow", {}, "s1")), model_say("both")])
    runtime, channel, store = make_runtime(redis, model, [Tool(quick, name="quick"), Tool(slow, name="slow")])
    sid = session().session_id
    worker = asyncio.create_task(say(runtime, "both"))
    recorded: list[Any] = []
    for _ in range(30):
        values = [await redis.get(key) async for key in redis.scan_iter(match=store.key(sid, "exec:*"))]
        recorded = [v.decode() if v == b"started" else json.loads(v)["output"] for v in values]
        if {"quick": True} in recorded:
            break
        await asyncio.sleep(0.05)
    assert sorted(map(str, recorded)) == ["started", "{'quick': True}"], "the slow call still runs; quick's is recorded"
    release.set()
    await asyncio.wait_for(worker, 3)
    values = [json.loads(await redis.get(key)) async for key in redis.scan_iter(match=store.key(sid, "exec:*"))]
    assert sorted(json.dumps(v["output"]) for v in values) == ['{"quick": true}', '{"slow": true}']
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]


async def test_a_drive_s_last_checkpoint_sees_a_stop_and_a_message_that_came_while_it_held_the_lease(redis):
    # their own attempts to drive found the lease taken: the drive that lets it go must see them (the stop read
    # by its script as it lets go, the inbox after it); a stop or message after that finds the lease free
    _, _, store = make_runtime(redis, ScriptedModel([]), [])
    sid = session().session_id
    token = await take_lease(store, sid)
    assert token is not None
    await store.cancel(CancelTurn(sid, "turn_1"))
    assert await store.record_message(RecordMessage(sid, {"text": "and another thing"}, "m1"))
    written = {"turn": {"turn_id": "turn_1"}}
    _, after, _ = await store.commit(CommitCommand(sid, token, written, [], release=True, read=True))
    assert after is not None
    assert after.cancel == "turn_1" and [m["text"] for m in after.inbox] == ["and another thing"]
    assert after.state == written
    assert await redis.get(store.key(sid, "lease")) is None
