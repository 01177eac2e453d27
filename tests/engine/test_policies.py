"""Request policies (DESIGN §6): never/always/once, custom policies in every status form, approval keys."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from pydantic import BaseModel

from bot.approval import (
    Approval,
    ApprovalContext,
    Approved,
    Denied,
    ResponseContext,
    allowed,
    always,
    never,
    once,
)
from bot.engine.call_outcomes import DENIED_MESSAGE
from bot.engine.turns import RuntimeSettings
from bot.models.scripted import ScriptedModel, call, calls
from bot.models.scripted import say as model_say
from bot.tools import ToolContext, tool
from tests.engine.harness import (
    ALICE,
    approve,
    cancel,
    make_runtime,
    recording_tool,
    request_status,
    say,
    session,
    shown,
    tool_results,
)


async def test_never_runs_without_asking(redis):
    gated, runs = recording_tool("lookup", approval=never())
    model = ScriptedModel([call("lookup", q="x"), model_say("found")])
    runtime, channel, _ = make_runtime(redis, model, [gated])
    await say(runtime, "look it up")
    assert len(runs) == 1 and runs[0].args == {"q": "x"}
    assert channel.of("input.requested") == []
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]


async def test_default_policy_is_never(redis):
    plain, runs = recording_tool("plain")
    runtime, channel, _ = make_runtime(redis, ScriptedModel([call("plain"), model_say("ok")]), [plain])
    await say(runtime, "go")
    assert len(runs) == 1 and channel.of("input.requested") == []


async def test_always_asks_on_every_call(redis):
    gated, runs = recording_tool("refund", approval=always())
    model = ScriptedModel([call("refund", n=1), call("refund", n=2), model_say("both done")])
    runtime, channel, _ = make_runtime(redis, model, [gated])
    await say(runtime, "refund twice")
    [first] = channel.requests()
    assert first.kind == "tool-approval" and first.action.tool_name == "refund"
    assert first.action.input == {"n": 1}
    assert runs == []
    await approve(runtime, first.request_id)
    assert [r.args for r in runs] == [{"n": 1}]
    # the approval did not stick: the second call asks again
    requests = channel.requests()
    assert len(requests) == 2
    assert channel.types()[-2:] == ["input.requested", "turn.waiting"]
    await approve(runtime, requests[1].request_id)
    assert [r.args for r in runs] == [{"n": 1}, {"n": 2}]
    assert channel.types()[-1] == "session.waiting"


# --- custom policies: every status form ------------------------------------------------------------

RUNS, ASKS = "runs", "asks"

STATUS_FORMS: list[tuple[str, Any, str, str | None]] = [
    ("not-applicable", "not-applicable", RUNS, None),
    ("approved", "approved", RUNS, None),
    ("Approved(r)", Approved("a rule allowed it"), RUNS, None),
    ("dict-approved", {"type": "approved", "reason": "fine"}, RUNS, None),
    ("False", False, RUNS, None),
    ("None", None, RUNS, None),
    ("user-approval", "user-approval", ASKS, None),
    ("True", True, ASKS, None),
    ("dict-user-approval", {"type": "user-approval"}, ASKS, None),
    ("denied", "denied", "denied", DENIED_MESSAGE),
    ("Denied(why)", Denied("Refunds over 500 need a ticket."), "denied", "Refunds over 500 need a ticket."),
    ("dict-denied", {"type": "denied", "reason": "Not on Fridays."}, "denied", "Not on Fridays."),
]


def _policy(value: Any, is_async: bool):
    if is_async:
        async def policy(ctx: ApprovalContext) -> Any:
            await asyncio.sleep(0)
            return value
        return policy
    return lambda ctx: value


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(("label", "status", "expect", "reason"), STATUS_FORMS, ids=[s[0] for s in STATUS_FORMS])
async def test_custom_policy_status_forms(redis, label, status, expect, reason, is_async):
    gated, runs = recording_tool("act", approval=_policy(status, is_async))
    model = ScriptedModel([call("act", call_id="call_act"), model_say("finished")])
    runtime, channel, _ = make_runtime(redis, model, [gated])
    await say(runtime, "do it")
    if expect == RUNS:
        assert len(runs) == 1
        assert channel.of("input.requested") == []
        assert channel.types()[-2:] == ["turn.completed", "session.waiting"]
    elif expect == ASKS:
        assert runs == []
        [req] = channel.requests()
        assert req.kind == "tool-approval" and req.action.call_id == "call_act"
        assert channel.types()[-2:] == ["input.requested", "turn.waiting"]
        await approve(runtime, req.request_id)
        assert len(runs) == 1
    else:
        assert runs == []
        assert channel.of("input.requested") == []
        seen = tool_results(shown(model))["call_act"]
        assert reason in seen
        assert "not_run" in seen
        assert channel.types()[-2:] == ["turn.completed", "session.waiting"]


@pytest.mark.parametrize("broken", ["raises", "unknown-string", "wrong-type"])
async def test_broken_policy_denies_the_call(redis, broken):
    def policy(ctx: ApprovalContext) -> Any:
        if broken == "raises":
            raise RuntimeError("policy store unreachable")
        return "maybe" if broken == "unknown-string" else 42

    gated, runs = recording_tool("act", approval=policy)
    model = ScriptedModel([call("act", call_id="call_act"), model_say("could not")])
    runtime, channel, _ = make_runtime(redis, model, [gated])
    await say(runtime, "do it")
    assert runs == []
    assert channel.of("input.requested") == []
    assert "denied" in tool_results(shown(model))["call_act"]
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]


async def test_policy_sees_the_call_and_session(redis):
    seen: list[ApprovalContext] = []

    def policy(ctx: ApprovalContext) -> str:
        seen.append(ctx)
        return "not-applicable"

    gated, _ = recording_tool("act", approval=policy)
    runtime, _, _ = make_runtime(redis, ScriptedModel([call("act", call_id="c9", amount=3), model_say("ok")]), [gated])
    await say(runtime, "go")
    [ctx] = seen
    assert ctx.tool_name == "act" and ctx.call_id == "c9" and ctx.tool_input == {"amount": 3}
    assert ctx.session.id == session().session_id
    assert ctx.session.auth.current == ALICE and ctx.session.auth.initiator == ALICE
    assert ctx.approved_tools == frozenset()


# --- once() grant timing ---------------------------------------------------------------------------


async def test_once_two_calls_in_one_step_are_two_decisions(redis):
    gated, runs = recording_tool("send", approval=once())
    model = ScriptedModel([
        calls(("send", {"to": "a"}, "c1"), ("send", {"to": "b"}, "c2")),
        call("send", call_id="c3", to="c"),
        model_say("all sent"),
    ])
    runtime, channel, store = make_runtime(redis, model, [gated])
    await say(runtime, "send both")
    [parked] = channel.of("input.requested")
    first, second = parked.requests
    assert {first.action.call_id, second.action.call_id} == {"c1", "c2"}

    result = await approve(runtime, first.request_id)
    assert result.state == "settled"
    # approving one prompt does not approve the other: it stays pending and nothing ran
    assert await request_status(store, second.request_id) == "open"
    assert runs == []
    assert (await stored_turn_status(store)) == "parked"
    assert "turn.completed" not in channel.types()
    assert len(model.requests) == 1

    await approve(runtime, second.request_id)
    assert sorted(r.call_id for r in runs[:2]) == ["c1", "c2"]
    # the later step calls it again: granted now, so it runs without a request
    assert [r.call_id for r in runs[2:]] == ["c3"]
    assert len(channel.requests()) == 2
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]


async def stored_turn_status(store) -> str | None:
    raw, _, _ = await store.load(session().session_id)
    return raw["turn"]["status"] if raw and raw["turn"] else None


async def test_once_cancel_records_no_grant(redis):
    gated, runs = recording_tool("send", approval=once())
    model = ScriptedModel([call("send", call_id="c1"), call("send", call_id="c2"), model_say("ok")])
    runtime, channel, _ = make_runtime(redis, model, [gated])
    await say(runtime, "send")
    [first] = channel.requests()
    await cancel(runtime, first.request_id)
    assert runs == []
    # the next call asks again: a cancel granted nothing
    requests = channel.requests()
    assert len(requests) == 2 and requests[1].action.call_id == "c2"
    assert channel.types()[-2:] == ["input.requested", "turn.waiting"]


async def test_once_grant_survives_into_later_turns(redis):
    gated, runs = recording_tool("send", approval=once())
    model = ScriptedModel([call("send", call_id="c1"), model_say("sent"), call("send", call_id="c2"), model_say("again")])
    runtime, channel, _ = make_runtime(redis, model, [gated])
    await say(runtime, "send")
    await approve(runtime, channel.requests()[0].request_id)
    await say(runtime, "send again")
    assert [r.call_id for r in runs] == ["c1", "c2"]
    assert len(channel.requests()) == 1


class Deploy(BaseModel):
    env: str


async def test_approval_key_scopes_grants(redis):
    ran: list[str] = []

    def per_env(ctx: ApprovalContext) -> str:
        return "not-applicable" if f"deploy:{ctx.tool_input['env']}" in ctx.approved_tools else "user-approval"

    @tool(approval=per_env, approval_key=lambda a: f"deploy:{a.env}")
    async def deploy(args: Deploy, ctx: ToolContext) -> dict:
        """Deploy to an environment."""
        ran.append(args.env)
        return {"deployed": args.env}

    model = ScriptedModel([
        call("deploy", call_id="d1", env="prod"),
        call("deploy", call_id="d2", env="prod"),
        call("deploy", call_id="d3", env="staging"),
        model_say("done"),
    ])
    runtime, channel, store = make_runtime(redis, model, [deploy])
    await say(runtime, "deploy")
    [prod] = channel.requests()
    await approve(runtime, prod.request_id)
    # prod again runs without asking; staging is a different key and asks
    assert ran == ["prod", "prod"]
    requests = channel.requests()
    assert len(requests) == 2 and requests[1].action.input == {"env": "staging"}
    _, grants, _ = await store.load(session().session_id)
    assert grants == {"deploy:prod"}


# --- a slow response policy is bounded and does not stall the worker ---------------------------------


async def test_a_slow_sync_response_policy_times_out_without_stalling_the_loop(redis):
    release = threading.Event()
    calls_seen: list[str] = []

    def slow_then_fast(ctx: ResponseContext) -> Any:
        calls_seen.append(ctx.response.decision)
        if len(calls_seen) == 1:
            release.wait(3)  # a blocking lookup that hangs the first time
        return allowed()

    gated, runs = recording_tool("refund", approval=Approval(request=always(), response=slow_then_fast))
    model = ScriptedModel([call("refund", call_id="c1"), model_say("refunded")])
    runtime, channel, store = make_runtime(redis, model, [gated],
                                           settings=RuntimeSettings(system_prompt="", response_policy_timeout=0.5))
    await say(runtime, "refund it")
    [req] = channel.requests()

    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    try:
        await asyncio.sleep(0)
        before = ticks
        result = await approve(runtime, req.request_id)
        during = ticks - before
    finally:
        ticker.cancel()
        release.set()
    # the click did not count, nothing ran, and the worker kept serving everything else meanwhile
    assert result.state == "failed" and "temporarily unavailable" in result.reason
    assert runs == [] and await request_status(store, req.request_id) == "open"
    assert during >= 5, f"the event loop stalled while the policy ran ({during} ticks)"
    # the next click, with the policy answering promptly, settles it
    assert (await approve(runtime, req.request_id)).state == "settled"
    assert len(runs) == 1 and channel.types()[-1] == "session.waiting"
