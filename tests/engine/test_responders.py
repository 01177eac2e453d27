"""Who may settle a request (DESIGN §6): requester-only by default, response policies, their timeouts."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from typing import Any

import pytest

from bot.approval import ONLY_REQUESTER, Approval, ResponseContext, allowed, always, rejected
from bot.engine.turns import RuntimeSettings
from bot.governance import approvers, four_eyes, n_of_m
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.principals import slack_user
from tests.engine.harness import (
    ALICE,
    BOB,
    CAROL,
    approve,
    cancel,
    decision,
    make_runtime,
    recording_tool,
    request_status,
    say,
    session,
    shown,
    stored_policies,
    tool_results,
)

DAVE = slack_user("T1", "UDAVE")
ERIN = slack_user("T1", "UERIN", user_team_id="T2")  # Slack Connect: a partner company's person
FINANCE = {CAROL.principal_id}
FINANCE_ONLY = "Only finance can approve refunds."


def finance_only(ctx: ResponseContext):
    if ctx.response.decision == "cancel":
        return allowed()
    return allowed() if ctx.response.principal.principal_id in FINANCE else rejected(FINANCE_ONLY)


async def test_only_the_requester_may_settle_by_default(redis):
    gated, runs = recording_tool("refund", approval=always())
    runtime, channel, store = make_runtime(redis, ScriptedModel([call("refund"), model_say("ok")]), [gated])
    await say(runtime, "refund", who=ALICE)
    [req] = channel.requests()
    assert req.principal == ALICE

    refused = await approve(runtime, req.request_id, who=BOB)
    assert refused.state == "rejected" and refused.reason == ONLY_REQUESTER
    [candidate] = channel.of("approval.candidate")
    assert candidate.outcome == "rejected" and candidate.reason == ONLY_REQUESTER
    assert candidate.responder == BOB and candidate.request_id == req.request_id
    assert await request_status(store, req.request_id) == "open"
    assert runs == [] and channel.of("approval.settled") == []

    # BOB cannot cancel it either
    assert (await cancel(runtime, req.request_id, who=BOB)).state == "rejected"
    assert await request_status(store, req.request_id) == "open"

    settled = await approve(runtime, req.request_id, who=ALICE)
    assert settled.state == "settled"
    assert len(runs) == 1 and runs[0].principal == ALICE
    [done] = channel.of("approval.settled")
    assert done.outcome == "approved" and done.responder == ALICE


async def test_anonymous_requester_lets_anyone_settle(redis):
    gated, runs = recording_tool("refund", approval=always())
    runtime, channel, _ = make_runtime(redis, ScriptedModel([call("refund"), model_say("ok")]), [gated])
    await say(runtime, "refund", who=None)
    [req] = channel.requests()
    assert req.principal is None
    result = await approve(runtime, req.request_id, who=BOB)
    assert result.state == "settled"
    assert len(runs) == 1
    assert channel.types()[-1] == "session.waiting"


async def test_answer_without_a_principal_is_refused(redis):
    gated, runs = recording_tool("refund", approval=always())
    runtime, channel, store = make_runtime(redis, ScriptedModel([call("refund"), model_say("ok")]), [gated])
    await say(runtime, "refund", who=None)
    [req] = channel.requests()
    result = await approve(runtime, req.request_id, who=None)
    assert result.state == "rejected"
    assert runs == [] and await request_status(store, req.request_id) == "open"


async def test_response_policy_rejects_then_allows(redis):
    refund, refund_runs = recording_tool("big_refund", approval=Approval(request=always(), response=finance_only))
    lookup, lookup_runs = recording_tool("lookup")
    model = ScriptedModel([call("big_refund", amount=900), call("lookup"), model_say("refunded")])
    runtime, channel, store = make_runtime(redis, model, [refund, lookup])
    await say(runtime, "refund 900", who=ALICE)
    [req] = channel.requests()

    before = len(channel.events)
    refused = await approve(runtime, req.request_id, who=BOB)
    assert refused.state == "rejected" and refused.reason == FINANCE_ONLY
    events = channel.events[before:]
    assert [(e.type, e.outcome) for e in events] == [("approval.candidate", "pending"), ("approval.candidate", "rejected")]
    assert all(e.responder == BOB for e in events) and events[1].reason == FINANCE_ONLY
    assert await request_status(store, req.request_id) == "open"
    assert refund_runs == []

    before = len(channel.events)
    ok = await approve(runtime, req.request_id, who=CAROL)
    assert ok.state == "settled"
    kinds = [e.type for e in channel.events[before:]]
    assert kinds[:3] == ["approval.candidate", "approval.settled", "input.resolved"]
    assert channel.events[before].outcome == "pending" and channel.events[before].responder == CAROL
    settled = channel.events[before + 1]
    assert settled.outcome == "approved" and settled.responder == CAROL
    assert channel.events[before + 2].resolutions[0].outcome == "approved"

    # the approved call ran under the approver; a later call of the same turn under the owner
    assert [r.principal for r in refund_runs] == [CAROL]
    assert [r.principal for r in lookup_runs] == [ALICE]
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]


async def test_response_policy_allows_anyone_to_cancel(redis):
    refund, runs = recording_tool("big_refund", approval=Approval(request=always(), response=finance_only))
    model = ScriptedModel([call("big_refund", call_id="c1"), model_say("cancelled then")])
    runtime, channel, _ = make_runtime(redis, model, [refund])
    await say(runtime, "refund", who=ALICE)
    [req] = channel.requests()
    result = await cancel(runtime, req.request_id, who=BOB)
    assert result.state == "settled"
    assert runs == []
    [settled] = channel.of("approval.settled")
    assert settled.outcome == "cancelled" and settled.responder == BOB
    assert channel.of("input.resolved")[0].resolutions[0].outcome == "denied"


async def test_response_policy_timeout_fails_the_candidate(redis):
    async def slow_directory(ctx: ResponseContext):
        await asyncio.sleep(2)
        return allowed()

    refund, runs = recording_tool("big_refund", approval=Approval(request=always(), response=slow_directory))
    model = ScriptedModel([call("big_refund"), model_say("ok")])
    runtime, channel, store = make_runtime(redis, model, [refund],
                                           settings=RuntimeSettings(system_prompt="", response_policy_timeout=0.2))
    await say(runtime, "refund")
    [req] = channel.requests()
    result = await asyncio.wait_for(approve(runtime, req.request_id, who=CAROL), 1.5)
    assert result.state == "failed" and result.reason
    outcomes = [e.outcome for e in channel.of("approval.candidate")]
    assert outcomes == ["pending", "failed"]
    assert channel.of("approval.candidate")[1].reason == result.reason
    assert await request_status(store, req.request_id) == "open"
    assert runs == [] and channel.of("approval.settled") == []


async def test_response_policy_that_raises_fails_closed(redis):
    def broken(ctx: ResponseContext):
        raise RuntimeError("directory down")

    refund, runs = recording_tool("big_refund", approval=Approval(request=always(), response=broken))
    runtime, channel, store = make_runtime(redis, ScriptedModel([call("big_refund"), model_say("ok")]), [refund])
    await say(runtime, "refund")
    [req] = channel.requests()
    result = await approve(runtime, req.request_id, who=ALICE)
    assert result.state == "failed"
    assert [e.outcome for e in channel.of("approval.candidate")] == ["pending", "failed"]
    assert await request_status(store, req.request_id) == "open" and runs == []


async def test_response_policy_sees_request_and_response(redis):
    seen: list[ResponseContext] = []

    def record(ctx: ResponseContext):
        seen.append(ctx)
        return allowed()

    refund, _ = recording_tool("big_refund", approval=Approval(request=always(), response=record))
    model = ScriptedModel([call("big_refund", call_id="c7", amount=12), model_say("ok")])
    runtime, channel, _ = make_runtime(redis, model, [refund])
    await say(runtime, "refund")
    [req] = channel.requests()
    await cancel(runtime, req.request_id, who=CAROL, note="not today")
    [ctx] = seen
    assert ctx.request.request_id == req.request_id and ctx.request.call_id == "c7"
    assert ctx.request.tool_name == "big_refund" and ctx.request.tool_input == {"amount": 12}
    assert ctx.request.principal == ALICE
    assert ctx.response.decision == "cancel" and ctx.response.principal == CAROL
    assert ctx.response.note == "not today"
    assert ctx.session.auth.current == ALICE


async def test_cancel_note_reaches_the_model_quoted_and_attributed(redis):
    refund, runs = recording_tool("refund", approval=always())
    model = ScriptedModel([call("refund", call_id="c1", pack="five"), model_say("Understood, only the three-pack.")])
    runtime, channel, _ = make_runtime(redis, model, [refund])
    await say(runtime, "refund the five-pack")
    [req] = channel.requests()
    result = await runtime.answer(decision(req.request_id, "cancel", ALICE), note="Only the three-pack.")
    await runtime.wait_idle()  # the outbox delivers in the background
    assert result.state == "settled" and runs == []
    [settled] = channel.of("approval.settled")
    assert settled.outcome == "cancelled" and settled.note == "Only the three-pack."
    seen = json.loads(tool_results(shown(model))["c1"])
    flat = json.dumps(seen, ensure_ascii=False).replace('\\"', '"')
    assert '"Only the three-pack."' in flat  # quoted…
    assert ALICE.principal_id in flat or "UALICE" in flat  # …and attributed to the person who wrote it
    assert "not_run" in flat


async def test_two_distinct_approvers_required(redis):
    def two_of_finance(ctx: ResponseContext):
        return allowed(required=2)

    refund, runs = recording_tool("big_refund", approval=Approval(request=always(), response=two_of_finance))
    model = ScriptedModel([call("big_refund"), model_say("ok")])
    runtime, channel, store = make_runtime(redis, model, [refund])
    await say(runtime, "refund")
    [req] = channel.requests()
    first = await approve(runtime, req.request_id, who=BOB)
    assert first.state == "partial" and first.approvals == 1 and first.required == 2
    again = await approve(runtime, req.request_id, who=BOB)  # the same person twice counts once
    assert again.state == "partial" and again.approvals == 1
    assert runs == [] and await request_status(store, req.request_id) == "open"
    done = await approve(runtime, req.request_id, who=CAROL)
    assert done.state == "settled"
    assert len(runs) == 1
    progress = [e.approvals for e in channel.of("approval.candidate") if e.approvals]
    assert progress == [1, 1]
    assert channel.of("approval.settled")[0].responder == CAROL


# --- escalation widens who may answer, never what is required -------------------


class _Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def lists(redis):
    source = stored_policies(redis)
    await source.policies.set_approvers("T1", "tool:rotate", ["UBOB", "UCAROL"], actor="admin")
    # the managers' list holds dave, and erin from a partner company (Slack Connect) — and alice, who asks
    await source.policies.set_approvers("T1", "tool:managers", ["UDAVE", "UERIN", "UALICE"], actor="admin")
    return source.policies


async def _escalated(redis, response, name: str = "s1") -> tuple[Any, list, Any, Any]:
    rotate, runs = recording_tool("rotate", approval=Approval(request=always(), response=response))
    rotate.escalate_after, rotate.escalate_to = timedelta(seconds=60), "tool:managers"
    runtime, channel, store = make_runtime(redis, ScriptedModel([call("rotate"), model_say("ok")]), [rotate],
                                           policies=stored_policies(redis))
    clock = runtime.settings.clock = _Clock()
    await say(runtime, "rotate the keys", ref=session(name))
    [req] = channel.requests()
    clock.now += 61
    await runtime.timers.sweep()
    await runtime.wait_idle()
    assert [e.request_id for e in channel.of("input.escalated")] == [req.request_id]
    return runtime, runs, store, req


async def test_after_escalation_n_of_m_still_needs_n_distinct_people(redis, lists):
    runtime, runs, store, req = await _escalated(redis, n_of_m(2, "tool:rotate"))
    first = await approve(runtime, req.request_id, who=DAVE)  # a manager counts, as one of the two
    assert first.state == "partial" and first.approvals == 1 and first.required == 2
    assert (await approve(runtime, req.request_id, who=DAVE)).state == "partial"  # twice is once
    assert runs == [] and await request_status(store, req.request_id) == "open"
    done = await approve(runtime, req.request_id, who=BOB)
    assert done.state == "settled" and len(runs) == 1


async def test_after_escalation_an_outsider_on_the_list_stays_an_outsider(redis, lists):
    runtime, runs, store, req = await _escalated(redis, n_of_m(2, "tool:rotate"))
    refused = await approve(runtime, req.request_id, who=ERIN)
    assert refused.state == "rejected" and "other workspaces" in refused.reason
    own = await approve(runtime, req.request_id, who=ALICE)  # the requester on the managers' list
    assert own.state == "rejected"
    assert runs == [] and await request_status(store, req.request_id) == "open"


async def test_after_escalation_four_eyes_and_the_list_quorum_still_hold(redis, lists):
    await lists.set_approvers("T1", "tool:rotate", ["UBOB", "UCAROL"], required=2, actor="admin")
    runtime, runs, _, req = await _escalated(redis, approvers("tool:rotate"))  # the list itself asks for 2
    assert (await approve(runtime, req.request_id, who=DAVE)).state == "partial"
    assert (await approve(runtime, req.request_id, who=CAROL)).state == "settled" and len(runs) == 1
    runtime, runs, _, req = await _escalated(redis, four_eyes(), "s2")
    assert (await approve(runtime, req.request_id, who=ALICE)).state == "rejected"
    assert (await approve(runtime, req.request_id, who=ERIN)).state == "rejected"
    assert (await approve(runtime, req.request_id, who=DAVE)).state == "settled" and len(runs) == 1


async def test_after_escalation_a_custom_rule_that_does_not_describe_itself_keeps_what_it_required(redis, lists):
    """A custom rule that says neither who answers nor how many (no ``responders``) needs two of finance here.
    Escalation cannot know its quorum: the people it was escalated to may cancel, never approve, so one
    approval never settles what needed two; the rule's own people still settle it as it requires."""
    def two_of_finance(ctx: ResponseContext):
        if ctx.response.principal.principal_id in {BOB.principal_id, CAROL.principal_id}:
            return allowed(required=2)
        return rejected("Only finance can approve this.")

    runtime, runs, store, req = await _escalated(redis, two_of_finance)
    refused = await approve(runtime, req.request_id, who=DAVE)  # a manager it was escalated to
    assert refused.state == "rejected" and "cancel" in refused.reason
    assert runs == [] and await request_status(store, req.request_id) == "open"
    assert (await approve(runtime, req.request_id, who=BOB)).state == "partial"
    assert (await approve(runtime, req.request_id, who=CAROL)).state == "settled" and len(runs) == 1

    runtime, runs, store, req = await _escalated(redis, two_of_finance, "s2")
    cancelled = await cancel(runtime, req.request_id, who=DAVE)  # stepping in to stop it still works
    assert cancelled.state == "settled" and runs == []


async def test_a_list_change_describes_open_requests_again_once_and_the_newest_version_wins(redis, lists):
    rotate, runs = recording_tool("rotate", approval=Approval(request=always(), response=approvers("tool:rotate")))
    runtime, channel, store = make_runtime(redis, ScriptedModel([call("rotate"), model_say("ok")]), [rotate],
                                           policies=stored_policies(redis))
    await say(runtime, "rotate the keys")
    [req] = channel.requests()
    assert [p.slack_user_id for p in req.responders.people] == ["UBOB", "UCAROL"]

    await lists.set_approvers("T1", "tool:rotate", ["UCAROL", "UDAVE"], actor="admin")
    version = (await lists.get("T1")).version
    assert await runtime.refresh_responders("T1", "tool:rotate", version) == 1
    await runtime.wait_idle()
    [changed] = channel.of("input.responders")
    assert ([p.slack_user_id for p in changed.added], [p.slack_user_id for p in changed.removed]) == (["UDAVE"], ["UBOB"])
    stored = (await store.get_request(req.request_id)).request.responders
    assert [p.slack_user_id for p in stored.people] == ["UCAROL", "UDAVE"]

    assert await runtime.refresh_responders("T1", "tool:rotate", version) == 0  # nothing new: no event
    await lists.set_approvers("T1", "tool:rotate", ["UBOB"], actor="admin")
    assert await runtime.refresh_responders("T1", "tool:rotate", version - 1) == 0  # an older description loses
    assert await runtime.refresh_responders("T1", "tool:other", version + 9) == 0  # a list its rule doesn't read
    assert await approve(runtime, req.request_id, who=BOB)
    await runtime.wait_idle()
    assert len(runs) == 1 and await runtime.refresh_responders("T1", "tool:rotate", version + 9) == 0  # settled
    assert len(channel.of("input.responders")) == 1
