"""Turn lifecycle (DESIGN §4, §7, §8): event order, park and resume anywhere, exactly once, cancel, steer, queue."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis.asyncio as redis_asyncio

from bot.approval import Denied, always
from bot.engine.call_outcomes import IGNORED_MESSAGE
from bot.engine.turns import RuntimeSettings
from bot.models.scripted import ScriptedModel, call, calls
from bot.models.scripted import say as model_say
from bot.protocol import InputResponse
from bot.tools import Tool, ToolContext
from tests.chaos.harness import poll
from tests.engine.harness import (
    ALICE,
    BOB,
    approve,
    assert_valid_history,
    cancel,
    make_runtime,
    recording_tool,
    request_status,
    say,
    session,
    shown,
    tool_results,
    user_texts,
)


def gated_script(final: str = "Done.") -> list:
    return [call("deploy", call_id="call_deploy", env="prod"), model_say(final)]


async def test_event_order_of_a_parked_and_approved_turn(redis):
    gated, runs = recording_tool("deploy", approval=always())
    runtime, channel, store = make_runtime(redis, ScriptedModel(gated_script()), [gated])
    await say(runtime, "deploy prod")
    assert channel.types() == ["turn.started", "input.requested", "turn.waiting"]
    assert channel.events[-1].on == "input"
    [req] = channel.requests()
    assert req.kind == "tool-approval" and req.display == "confirmation"
    assert [(o.id, o.label) for o in req.options] == [("approve", "Approve"), ("cancel", "Cancel")]
    assert req.action.call_id == "call_deploy" and req.action.input == {"env": "prod"}

    await approve(runtime, req.request_id)
    assert channel.types() == [
        "turn.started", "input.requested", "turn.waiting",
        "approval.settled", "input.resolved",
        "action.started", "action.result",
        "message.completed", "turn.completed", "session.waiting",
    ]
    assert len({e.turn_id for e in channel.events if e.type != "session.waiting"}) == 1  # same turn resumed
    resolved = channel.of("input.resolved")[0].resolutions[0]
    assert resolved.request_id == req.request_id and resolved.outcome == "approved"
    assert resolved.response.option_id == "approve"
    assert channel.of("action.result")[0].status == "completed"
    assert len(runs) == 1


async def test_events_are_stored_in_the_stream_before_and_as_shown(redis):
    gated, _ = recording_tool("deploy", approval=always())
    runtime, channel, store = make_runtime(redis, ScriptedModel(gated_script()), [gated])
    await say(runtime, "deploy prod")
    await approve(runtime, channel.requests()[0].request_id)
    stored = await store.events(session().session_id)
    assert [(e.type, e.seq) for e in stored] == [(e.type, e.seq) for e in channel.events]
    seqs = [e.seq for e in channel.events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs) and seqs[0] >= 1


@pytest.mark.parametrize("how", ["cancelled", "ignored", "policy-denied"])
async def test_calls_that_do_not_run_surface_as_rejected_action_results(redis, how):
    policy = (lambda ctx: Denied("no deploys today")) if how == "policy-denied" else always()
    gated, runs = recording_tool("deploy", approval=policy)
    runtime, channel, _ = make_runtime(redis, ScriptedModel([*gated_script(), model_say("spare")]), [gated])
    await say(runtime, "deploy prod")
    if how == "cancelled":
        await cancel(runtime, channel.requests()[0].request_id)
    elif how == "ignored":
        await say(runtime, "actually, what's the weather?")
    assert runs == []
    results = [e for e in channel.of("action.result") if e.call_id == "call_deploy"]
    assert [r.status for r in results] == ["rejected"], channel.types()


async def test_park_then_resume_in_a_new_process(redis, redis_url):
    gated_a, runs_a = recording_tool("deploy", approval=always())
    model_a = ScriptedModel(gated_script("Deployed."))
    runtime_a, channel_a, _ = make_runtime(redis, model_a, [gated_a])
    await say(runtime_a, "deploy prod")
    [req] = channel_a.requests()

    # a different process: its own Redis connection, store, registry and model with the same script
    other = redis_asyncio.Redis.from_url(redis_url)
    try:
        gated_b, runs_b = recording_tool("deploy", approval=always())
        model_b = ScriptedModel(gated_script("Deployed."))
        runtime_b, channel_b, _ = make_runtime(other, model_b, [gated_b])
        result = await approve(runtime_b, req.request_id)
    finally:
        await other.aclose()
    assert result.state == "settled"
    assert runs_a == [] and len(runs_b) == 1 and runs_b[0].args == {"env": "prod"}
    assert len(model_a.requests) == 1 and len(model_b.requests) == 1
    assert json.loads(tool_results(shown(model_b))["call_deploy"]) == {"ok": True, "tool": "deploy"}
    assert channel_b.types()[-3:] == ["message.completed", "turn.completed", "session.waiting"]
    assert channel_b.of("message.completed")[0].text == "Deployed."
    assert channel_b.events[-2].turn_id == channel_a.events[0].turn_id


async def test_double_answer_executes_once(redis):
    gated, runs = recording_tool("deploy", approval=always())
    runtime, channel, _ = make_runtime(redis, ScriptedModel(gated_script()), [gated])
    await say(runtime, "deploy prod")
    [req] = channel.requests()
    assert (await approve(runtime, req.request_id)).state == "settled"
    again = await approve(runtime, req.request_id)
    assert again.state == "stale"
    late_cancel = await cancel(runtime, req.request_id)
    assert late_cancel.state == "stale"
    assert len(runs) == 1
    assert channel.types().count("turn.completed") == 1


async def test_two_replicas_answering_at_once_execute_once(redis, redis_url):
    slow_runs: list[str] = []

    async def slow_deploy(args: dict) -> dict:
        slow_runs.append("ran")
        await asyncio.sleep(0.05)
        return {"ok": True}

    from bot.tools import Tool

    other = redis_asyncio.Redis.from_url(redis_url)
    try:
        runtimes = []
        for client in (redis, other):
            tool_ = Tool(slow_deploy, name="deploy", approval=always())
            runtimes.append(make_runtime(client, ScriptedModel(gated_script()), [tool_]))
        (rt_a, channel_a, _), (rt_b, channel_b, _) = runtimes
        await say(rt_a, "deploy prod")
        [req] = channel_a.requests()
        results = await asyncio.gather(approve(rt_a, req.request_id), approve(rt_b, req.request_id),
                                       rt_b.drive(session().session_id), rt_a.drive(session().session_id))
    finally:
        await other.aclose()
    states = sorted(r.state for r in results[:2])
    assert states in (["settled", "stale"], ["settled", "settled"])
    assert slow_runs == ["ran"]
    completed = channel_a.types().count("turn.completed") + channel_b.types().count("turn.completed")
    assert completed == 1


async def test_eight_concurrent_approvals_execute_once(redis):
    gated, runs = recording_tool("deploy", approval=always())
    runtime, channel, _ = make_runtime(redis, ScriptedModel(gated_script()), [gated])
    await say(runtime, "deploy prod")
    [req] = channel.requests()
    results = await asyncio.gather(*(approve(runtime, req.request_id) for _ in range(8)))
    assert sorted(r.state for r in results).count("settled") == 1
    assert len(runs) == 1
    assert len(channel.of("approval.settled")) == 1
    assert channel.types().count("turn.completed") == 1


async def test_cancel_turn_while_parked(redis):
    gated, runs = recording_tool("deploy", approval=always())
    model = ScriptedModel([*gated_script(), model_say("Hello again.")])
    runtime, channel, store = make_runtime(redis, model, [gated])
    await say(runtime, "deploy prod")
    [req] = channel.requests()
    assert await runtime.cancel_turn(session().session_id, ALICE) is True
    await runtime.wait_idle()  # the events reach the frontend through the outbox, after the commit
    assert runs == []
    [resolved] = channel.of("input.resolved")
    assert resolved.resolutions[0].request_id == req.request_id
    assert resolved.resolutions[0].outcome == "cancelled"
    assert channel.types().count("turn.cancelled") == 1
    assert channel.types()[-2:] == ["turn.cancelled", "session.waiting"]
    assert channel.types().index("input.resolved") < channel.types().index("turn.cancelled")
    assert len(model.requests) == 1  # the model was not asked to continue the cancelled turn

    # a second cancel does nothing; a late approval authorizes nothing
    assert await runtime.cancel_turn(session().session_id, ALICE) is False
    late = await approve(runtime, req.request_id)
    assert late.state == "stale"
    assert runs == [] and channel.types().count("turn.cancelled") == 1
    assert await request_status(store, req.request_id) == "settled"

    # the next turn starts cleanly on a valid history that says the call did not run
    await say(runtime, "hi")
    history = shown(model)
    assert_valid_history(history)
    assert "cancelled" in tool_results(history)["call_deploy"]
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]


async def test_someone_else_cannot_cancel_the_turn(redis):
    gated, runs = recording_tool("deploy", approval=always())
    runtime, channel, store = make_runtime(redis, ScriptedModel(gated_script()), [gated])
    await say(runtime, "deploy prod")
    [req] = channel.requests()
    assert await runtime.cancel_turn(session().session_id, BOB) is False
    assert await request_status(store, req.request_id) == "open"
    assert "turn.cancelled" not in channel.types()


async def test_steering_past_an_approval(redis):
    gated, runs = recording_tool("deploy", approval=always())
    model = ScriptedModel([*gated_script("It is noon.")])
    runtime, channel, store = make_runtime(redis, model, [gated])
    await say(runtime, "deploy prod")
    [req] = channel.requests()
    posted = await say(runtime, "what time is it?")
    assert posted.state == "queued"
    assert runs == []
    [resolved] = channel.of("input.resolved")
    assert resolved.resolutions[0].outcome == "ignored"
    assert await request_status(store, req.request_id) == "settled"
    history = shown(model)
    assert_valid_history(history)
    assert IGNORED_MESSAGE in tool_results(history)["call_deploy"]
    assert user_texts(history) == ["deploy prod", "what time is it?"]
    assert channel.types().count("turn.started") == 1  # the same turn continued
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]
    assert (await approve(runtime, req.request_id)).state == "stale"
    assert runs == []


async def test_message_from_someone_else_waits_for_the_turn(redis):
    gated, runs = recording_tool("deploy", approval=always())
    model = ScriptedModel([*gated_script("Deployed for Alice."), model_say("Hi Bob.")])
    runtime, channel, store = make_runtime(redis, model, [gated])
    await say(runtime, "deploy prod", who=ALICE)
    [req] = channel.requests()
    posted = await say(runtime, "hello, can you help me?", who=BOB)
    assert posted.state == "queued"
    assert len(model.requests) == 1  # no model call for Bob yet
    assert await request_status(store, req.request_id) == "open"  # Bob did not steer Alice's turn
    assert channel.types()[-2:] == ["input.requested", "turn.waiting"]

    await approve(runtime, req.request_id, who=ALICE)
    assert len(runs) == 1
    assert "hello, can you help me?" not in user_texts(shown(model, 1))
    started = channel.of("turn.started")
    assert [s.principal for s in started] == [ALICE, BOB]
    assert started[1].turn_id != started[0].turn_id
    assert user_texts(shown(model))[-1] == "hello, can you help me?"
    assert [e.text for e in channel.of("message.completed")] == ["Deployed for Alice.", "Hi Bob."]
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]


async def test_duplicate_message_ids(redis):
    model = ScriptedModel([model_say("hi"), model_say("hi again")])
    runtime, channel, _ = make_runtime(redis, model, [])
    first = await say(runtime, "hello", message_id="Ev1")
    second = await say(runtime, "hello", message_id="Ev1")
    assert first.state == "queued" and second.state == "duplicate"
    assert len(model.requests) == 1
    assert channel.types().count("turn.started") == 1


async def test_calls_without_approval_run_before_parking_and_not_again(redis):
    free, free_runs = recording_tool("lookup")
    gated, gated_runs = recording_tool("deploy", approval=always())
    model = ScriptedModel([calls(("lookup", {}, "l1"), ("deploy", {}, "d1")), model_say("done")])
    runtime, channel, _ = make_runtime(redis, model, [free, gated])
    await say(runtime, "look up and deploy")
    assert len(free_runs) == 1 and gated_runs == []
    assert channel.types()[-2:] == ["input.requested", "turn.waiting"]
    await approve(runtime, channel.requests()[0].request_id)
    assert len(free_runs) == 1 and len(gated_runs) == 1
    results = tool_results(shown(model))
    assert set(results) == {"l1", "d1"}
    assert_valid_history(shown(model))


async def test_steering_keeps_answers_already_given(redis):
    gated, runs = recording_tool("deploy", approval=always())
    model = ScriptedModel([calls(("deploy", {"env": "a"}, "d1"), ("deploy", {"env": "b"}, "d2")), model_say("ok")])
    runtime, channel, _ = make_runtime(redis, model, [gated])
    await say(runtime, "deploy both")
    first, second = channel.of("input.requested")[0].requests
    await approve(runtime, first.request_id)
    assert runs == []  # the batch is not complete yet
    await say(runtime, "skip the other one, thanks")
    assert [r.call_id for r in runs] == ["d1"]  # the answer given stands; the unanswered one is ignored
    results = tool_results(shown(model))
    assert IGNORED_MESSAGE in results["d2"] and IGNORED_MESSAGE not in results["d1"]
    assert user_texts(shown(model))[-1] == "skip the other one, thanks"


async def test_cancel_turn_parked_on_the_session_limit(redis):
    noop, runs = recording_tool("noop")
    model = ScriptedModel([call("noop"), model_say("never said")])
    runtime, channel, store = make_runtime(redis, model, [noop],
                                           settings=RuntimeSettings(system_prompt="", step_budget=1))
    await say(runtime, "work")
    [limit] = channel.requests()
    assert await runtime.cancel_turn(session().session_id, ALICE) is True
    await runtime.wait_idle()
    assert channel.types()[-2:] == ["turn.cancelled", "session.waiting"]
    assert await request_status(store, limit.request_id) == "settled"
    assert len(model.requests) == 1


async def test_answer_without_resuming_leaves_the_turn_to_the_sweep(redis):
    # a frontend may settle first (to ack a click fast) and resume later; if it dies in between,
    # the recovery sweep resumes the turn
    gated, runs = recording_tool("deploy", approval=always())
    runtime, channel, _ = make_runtime(redis, ScriptedModel(gated_script()), [gated])
    await say(runtime, "deploy prod")
    [req] = channel.requests()
    assert await runtime.recover() == 0  # a healthy parked turn needs nothing
    result = await runtime.answer(InputResponse(request_id=req.request_id, option_id="approve", principal=ALICE),
                                  resume=False)
    await runtime.wait_idle()
    assert result.state == "settled" and result.batch_complete
    assert runs == [] and channel.types()[-1] == "input.resolved"
    await runtime.recover()
    await runtime.wait_idle()
    assert len(runs) == 1
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]


async def test_cancel_while_the_model_is_thinking_runs_nothing_it_asks_for(redis):
    thinking, release = asyncio.Event(), asyncio.Event()

    async def slow_step(messages, tools):
        thinking.set()
        await release.wait()
        return call("delete_branch", call_id="del1", name="main")

    tool_, runs = recording_tool("delete_branch")
    model = ScriptedModel([slow_step, model_say("never")])
    runtime, channel, _ = make_runtime(redis, model, [tool_])
    worker = asyncio.create_task(say(runtime, "clean up"))
    await asyncio.wait_for(thinking.wait(), 2)
    assert await runtime.cancel_turn(session().session_id, ALICE) is True
    release.set()
    await asyncio.wait_for(worker, 3)
    assert runs == []  # the call came after the stop: it must not run
    assert channel.types().count("turn.cancelled") == 1
    assert channel.types()[-2:] == ["turn.cancelled", "session.waiting"]
    assert len(model.requests) == 1


@pytest.mark.parametrize("where", ["same replica", "another replica"])
async def test_cancel_while_a_tool_runs_tells_it_and_records_the_call_stopped(redis, where):
    # the running tool learns of the stop (at once here; from its lease renewal on another replica), its
    # side effect after the stop point never happens, the call is recorded stopped and never run again
    entered, release, seen = asyncio.Event(), asyncio.Event(), []

    async def build(args: dict, ctx: ToolContext) -> dict:
        seen.append("entered")
        entered.set()
        try:
            await release.wait()
        except asyncio.CancelledError:
            seen.append(f"cancelled, stopped={ctx.stopped}")
            raise
        seen.append("built")
        return {"built": True}

    model = ScriptedModel([call("build", call_id="b1"), model_say("never")])
    runtime, channel, _ = make_runtime(redis, model, [Tool(build, name="build", idempotent=True)], lease_ms=300)
    worker = asyncio.create_task(say(runtime, "build it"))
    await asyncio.wait_for(entered.wait(), 2)
    stopper = runtime if where == "same replica" else make_runtime(redis, ScriptedModel([]), [], lease_ms=300)[0]
    assert await stopper.cancel_turn(session().session_id, ALICE) is True
    await asyncio.wait_for(worker, 3)
    release.set()
    assert seen == ["entered", "cancelled, stopped=True"]
    [result] = channel.of("action.result")
    assert result.status == "rejected" and result.output["code"] == "TURN_CANCELLED"
    assert channel.types()[-2:] == ["turn.cancelled", "session.waiting"]
    assert len(model.requests) == 1
    await runtime.drive(session().session_id)  # a successor finds the call recorded: nothing runs again
    assert seen == ["entered", "cancelled, stopped=True"]


async def test_cancel_while_a_sync_tool_runs_tells_it_through_ctx_stopped_and_keeps_its_result(redis):
    # a thread cannot be cancelled: the sync tool polls ctx.stopped, and what it returns is what happened
    entered = asyncio.Event()
    loop = asyncio.get_running_loop()

    def copy_rows(args: dict, ctx: ToolContext) -> dict:
        loop.call_soon_threadsafe(entered.set)
        copied = 0
        while not ctx.stopped and copied < 500:
            copied += 1
            time.sleep(0.01)
        return {"copied": copied, "stopped": ctx.stopped}

    runtime, channel, _ = make_runtime(redis, ScriptedModel([call("copy_rows", call_id="c1"), model_say("never")]),
                                       [Tool(copy_rows, name="copy_rows")])
    worker = asyncio.create_task(say(runtime, "copy"))
    await asyncio.wait_for(entered.wait(), 2)
    assert await runtime.cancel_turn(session().session_id, ALICE) is True
    await asyncio.wait_for(worker, 3)
    [result] = channel.of("action.result")
    assert result.status == "completed" and result.output["stopped"] is True and result.output["copied"] < 500
    assert channel.types()[-2:] == ["turn.cancelled", "session.waiting"]


async def test_cancel_while_the_model_writes_its_answer_says_nothing_of_it(redis):
    # the stop must win over an answer that arrives after it: no reply, the turn ends cancelled
    thinking, release = asyncio.Event(), asyncio.Event()

    async def slow_answer(messages, tools):
        thinking.set()
        await release.wait()
        return model_say("Here is everything you asked for.")

    runtime, channel, _ = make_runtime(redis, ScriptedModel([slow_answer]), [])
    worker = asyncio.create_task(say(runtime, "summarise the thread"))
    await asyncio.wait_for(thinking.wait(), 2)
    assert await runtime.cancel_turn(session().session_id, ALICE) is True
    release.set()
    await asyncio.wait_for(worker, 3)
    assert channel.of("message.completed") == []
    assert channel.types()[-2:] == ["turn.cancelled", "session.waiting"]
    assert "turn.completed" not in channel.types()


async def test_tools_see_their_session_and_call(redis):
    seen: list = []

    async def inspect_ctx(args: dict, ctx: ToolContext) -> dict:
        seen.append((ctx.session.id, ctx.tenant, ctx.session.auth.current, ctx.call_id, ctx.idempotency_key))
        return {}

    model = ScriptedModel([call("inspect", call_id="c42"), model_say("ok")])
    runtime, _, _ = make_runtime(redis, model, [Tool(inspect_ctx, name="inspect")])
    await say(runtime, "who am I?")
    [(sid, tenant, current, call_id, key)] = seen
    assert sid == session().session_id and tenant == "T1" and current == ALICE and call_id == "c42"
    assert key and "c42" in key


async def test_a_model_that_reuses_call_ids_still_gets_each_call_run(redis):
    # some OpenAI-compatible servers number tool calls per response ("call_0", "call_1", …), so the
    # same id shows up again in a later step; each is a new call and must run
    counter = {"n": 0}

    async def bump(args: dict) -> dict:
        counter["n"] += 1
        return {"count": counter["n"]}

    model = ScriptedModel([call("bump", call_id="call_0"), call("bump", call_id="call_0"), model_say("twice")])
    runtime, channel, _ = make_runtime(redis, model, [Tool(bump, name="bump")])
    await say(runtime, "bump twice")
    assert counter["n"] == 2
    outputs = [e.output for e in channel.of("action.result")]
    assert outputs == [{"count": 1}, {"count": 2}]


async def test_owner_message_while_a_tool_runs_steers_the_same_turn(redis):
    running, finish = asyncio.Event(), asyncio.Event()

    async def build(args: dict) -> dict:
        running.set()
        await finish.wait()
        return {"built": True}

    model = ScriptedModel([call("build", call_id="b1"), model_say("Built, and noted.")])
    runtime, channel, _ = make_runtime(redis, model, [Tool(build, name="build")])
    worker = asyncio.create_task(say(runtime, "build it"))
    await asyncio.wait_for(running.wait(), 2)
    posted = await say(runtime, "also bump the version")
    assert posted.state == "queued"
    finish.set()
    await asyncio.wait_for(worker, 3)
    assert len(model.requests) == 2
    history = shown(model)
    assert_valid_history(history)
    assert user_texts(history) == ["build it", "also bump the version"]
    assert channel.types().count("turn.started") == 1
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]


async def test_cancel_while_a_policy_reviews_the_call_runs_nothing(redis):
    reviewing, verdict = asyncio.Event(), asyncio.Event()

    async def slow_review(ctx) -> str:  # e.g. auto() waiting on its reviewing model
        reviewing.set()
        await verdict.wait()
        return "approved"

    tool_, runs = recording_tool("delete_branch", approval=slow_review)
    model = ScriptedModel([call("delete_branch", call_id="del1"), model_say("never")])
    runtime, channel, _ = make_runtime(redis, model, [tool_])
    worker = asyncio.create_task(say(runtime, "clean up"))
    await asyncio.wait_for(reviewing.wait(), 2)
    assert await runtime.cancel_turn(session().session_id, ALICE) is True
    verdict.set()
    await asyncio.wait_for(worker, 3)
    assert runs == []
    assert channel.types()[-2:] == ["turn.cancelled", "session.waiting"]


async def test_a_slow_sync_tool_does_not_stall_other_sessions(redis):
    # DESIGN §6 "sync functions work too": a blocking sync tool must not freeze the event loop (other
    # sessions, lease renewal and Slack's 3-second acks all share it)
    def export_csv(args: dict) -> dict:
        time.sleep(1.0)
        return {"rows": 10}

    def script(messages, tools):
        first = next(m["content"] for m in messages if m["role"] == "user")
        if first == "export" and not any(m["role"] == "tool" for m in messages):
            return call("export_csv", call_id="x1")
        return model_say("done")

    model = ScriptedModel([script, script])
    runtime, channel, _ = make_runtime(redis, model, [Tool(export_csv, name="export_csv")])
    started = time.monotonic()
    slow = asyncio.create_task(say(runtime, "export", ref=session("slow")))

    async def other() -> float:
        await asyncio.sleep(0.05)
        await say(runtime, "hello", ref=session("other"))
        return time.monotonic() - started

    elapsed = await asyncio.wait_for(other(), 5)
    await asyncio.wait_for(slow, 5)
    assert elapsed < 0.6, f"another session waited {elapsed:.2f}s behind a sync tool"


async def test_a_start_is_shown_while_the_model_still_thinks_and_a_slow_tools_start_while_it_runs(redis):
    # a step's start may wait a moment to go out with its next checkpoint (one delivery pass), never for
    # the step's end: a model or a tool that takes long still has its start shown while it works
    thinking, release_model, running, release_tool = (asyncio.Event() for _ in range(4))

    async def slow_step(messages, tools):
        thinking.set()
        await release_model.wait()
        return call("lookup", call_id="look1", name="acme")

    async def lookup(args: dict, ctx: ToolContext) -> dict:
        running.set()
        await release_tool.wait()
        return {"plan": "pro"}

    runtime, channel, _ = make_runtime(redis, ScriptedModel([slow_step, model_say("Pro.")]),
                                       [Tool(lookup, name="lookup")])
    worker = asyncio.create_task(say(runtime, "plan of acme?"))
    await asyncio.wait_for(thinking.wait(), 2)
    await poll(lambda: "turn.started" in channel.types(), 2)
    release_model.set()
    await asyncio.wait_for(running.wait(), 2)
    await poll(lambda: "action.started" in channel.types(), 2)
    assert "action.result" not in channel.types()
    release_tool.set()
    await asyncio.wait_for(worker, 3)
    await runtime.wait_idle()
    assert channel.types() == ["turn.started", "action.started", "action.result",
                               "message.completed", "turn.completed", "session.waiting"]
