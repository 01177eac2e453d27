"""Request and response policies evaluated on their own (bot/approval.py): bounded evaluation, once() keys, grants."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from bot.approval import (
    MAX_POLICY_THREADS,
    Approval,
    ApprovalContext,
    Decision,
    Denied,
    Policy,
    RequestView,
    ResponseContext,
    ResponseView,
    allowed,
    always,
    auto,
    evaluate_request_policy,
    evaluate_response_policy,
    never,
    once,
    policy_named,
    policy_names,
    records_grant,
    requester_only,
)
from bot.governance import tenant_policy
from bot.principals import slack_user
from bot.session import SessionAuth, SessionInfo

ALICE = slack_user("T1", "UALICE")
SESSION = SessionInfo(id="s1", team_id="T1", auth=SessionAuth(current=ALICE, initiator=ALICE))


def call_ctx(tool_name: str = "deploy", *, approval_key: str | None = None,
             approved: frozenset[str] = frozenset()) -> ApprovalContext:
    return ApprovalContext(session=SESSION, tool_name=tool_name, tool_input={"env": "prod"}, call_id="c1",
                           approved_tools=approved, approval_key=approval_key)


def answer_ctx() -> ResponseContext:
    return ResponseContext(request=RequestView(request_id="r1", principal=ALICE),
                           response=ResponseView(decision="approve", principal=ALICE), session=SESSION)


# --- slow policies are bounded and never stall the event loop --------------------------------------


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at the end of the test so a policy stuck in a worker thread finishes."""
    gate = threading.Event()
    yield gate
    gate.set()


class Ticker:
    """Counts event-loop turns while it runs: a loop blocked by a policy stops counting."""

    def __init__(self) -> None:
        self.ticks = 0

    async def run(self) -> None:
        while True:
            self.ticks += 1
            await asyncio.sleep(0.01)


Evaluation = Callable[[Any, float], Coroutine[Any, Any, Any]]

EVALUATIONS: dict[str, Evaluation] = {
    # the engine's two ways of bounding a policy: the timeout parameter, or asyncio.wait_for around it
    "request-timeout": lambda policy, t: evaluate_request_policy(policy, call_ctx(), timeout=t),
    "request-wait_for": lambda policy, t: asyncio.wait_for(evaluate_request_policy(policy, call_ctx()), t),
    "response-timeout": lambda policy, t: evaluate_response_policy(policy, answer_ctx(), timeout=t),
    "response-wait_for": lambda policy, t: asyncio.wait_for(evaluate_response_policy(policy, answer_ctx()), t),
}


@pytest.mark.parametrize("how", list(EVALUATIONS))
async def test_a_slow_sync_policy_times_out_and_the_loop_keeps_running(how: str, release: threading.Event):
    finished: list[bool] = []

    def slow(ctx: Any) -> Any:  # a blocking call, e.g. an HTTP client without a timeout
        release.wait(3)
        finished.append(True)
        return "not-applicable" if isinstance(ctx, ApprovalContext) else allowed()

    ticker = Ticker()
    ticking = asyncio.create_task(ticker.run())
    try:
        await asyncio.sleep(0)
        before = ticker.ticks
        with pytest.raises(TimeoutError):
            await EVALUATIONS[how](slow, 0.5)
        during = ticker.ticks - before
    finally:
        ticking.cancel()
    assert finished == [], "the policy was still running when the timeout fired"
    assert during >= 5, f"the event loop stalled while the policy ran ({during} ticks)"


@pytest.mark.parametrize("kind", ["request", "response"])
async def test_a_hung_async_policy_times_out(kind: str):
    async def hung(ctx: Any) -> Any:
        await asyncio.Event().wait()

    with pytest.raises(TimeoutError):
        if kind == "request":
            await evaluate_request_policy(hung, call_ctx(), timeout=0.1)
        else:
            await evaluate_response_policy(hung, answer_ctx(), timeout=0.1)


async def test_a_custom_sync_policy_runs_off_the_event_loop_thread():
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def request(ctx: ApprovalContext) -> str:
        seen.append(threading.get_ident())
        return "user-approval"

    def response(ctx: ResponseContext) -> Any:
        seen.append(threading.get_ident())
        return {"status": "allowed"}

    assert (await evaluate_request_policy(request, call_ctx())).type == "user-approval"
    assert (await evaluate_response_policy(response, answer_ctx())).type == "allowed"
    assert len(seen) == 2 and loop_thread not in seen


async def test_sync_policy_errors_and_returned_coroutines_come_back_to_the_caller():
    def broken(ctx: ApprovalContext) -> str:
        raise LookupError("no such rule")

    async def later(ctx: ApprovalContext) -> str:
        return "denied"

    def stops(ctx: ApprovalContext) -> str:
        raise StopIteration  # asyncio futures refuse to carry this one

    with pytest.raises(LookupError):
        await evaluate_request_policy(broken, call_ctx(), timeout=5)
    with pytest.raises(RuntimeError, match="StopIteration"):
        await evaluate_request_policy(stops, call_ctx(), timeout=5)
    assert (await evaluate_request_policy(lambda ctx: later(ctx), call_ctx(), timeout=5)).type == "denied"


async def test_a_policy_hanging_on_every_call_cannot_pile_up_threads(release: threading.Event):
    started: list[int] = []

    def stuck(ctx: ApprovalContext) -> str:
        started.append(1)
        release.wait(10)
        return "not-applicable"

    tasks = [asyncio.create_task(evaluate_request_policy(stuck, call_ctx())) for _ in range(MAX_POLICY_THREADS + 1)]
    done, _ = await asyncio.wait(tasks, timeout=5, return_when=asyncio.FIRST_COMPLETED)
    refused = [t for t in done if isinstance(t.exception(), RuntimeError)]
    assert refused, "every stuck call got a thread of its own"
    release.set()
    finished = await asyncio.gather(*(t for t in tasks if t not in refused))
    assert {s.type for s in finished} == {"not-applicable"} and len(started) <= MAX_POLICY_THREADS
    # once the stuck calls return, policies run again
    assert (await evaluate_request_policy(stuck, call_ctx(), timeout=5)).type == "not-applicable"


def finish_without_suspending(coro: Coroutine[Any, Any, Any]) -> Any:
    """Drive a coroutine by hand, with no event loop: it must complete at once (no thread, no await)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise AssertionError("the evaluation suspended: it left the calling thread")


def test_builtin_policies_are_evaluated_inline():
    granted = call_ctx(approved=frozenset({"deploy"}))
    assert finish_without_suspending(evaluate_request_policy(never(), call_ctx())).type == "not-applicable"
    assert finish_without_suspending(evaluate_request_policy(always(), granted)).type == "user-approval"
    assert finish_without_suspending(evaluate_request_policy(once(), granted)).type == "not-applicable"
    decided = finish_without_suspending(evaluate_response_policy(requester_only(), answer_ctx()))
    assert decided.type == "allowed"


# --- once() and approval keys ----------------------------------------------------------------------


def once_status(ctx: ApprovalContext) -> str:
    return finish_without_suspending(evaluate_request_policy(once(), ctx)).type


def test_once_checks_the_approval_key_when_the_tool_has_one():
    assert once_status(call_ctx(approval_key="deploy:prod", approved=frozenset({"deploy:prod"}))) == "not-applicable"
    # a grant for another key, or for the bare tool name, does not cover a keyed call
    assert once_status(call_ctx(approval_key="deploy:prod", approved=frozenset({"deploy:staging"}))) == "user-approval"
    assert once_status(call_ctx(approval_key="deploy:prod", approved=frozenset({"deploy"}))) == "user-approval"


def test_once_without_a_key_checks_the_tool_name():
    assert once_status(call_ctx()) == "user-approval"
    assert once_status(call_ctx(approved=frozenset({"deploy"}))) == "not-applicable"
    assert once_status(call_ctx(approved=frozenset({"other"}))) == "user-approval"


def test_only_once_and_custom_policies_record_grants():
    def custom(ctx: ApprovalContext) -> str:
        return "user-approval"

    assert records_grant(once())
    assert records_grant(Approval(request=once()))
    assert records_grant(custom), "custom policies read approved_tools, so their approvals are granted"
    for policy in (always(), never(), auto(), tenant_policy("tool:deploy")):
        assert not records_grant(policy), policy.kind
        assert not records_grant(Approval(request=policy)), policy.kind



# --- typed policies ---------------------------------------------------------------------


def test_a_plain_function_is_wrapped_once_as_a_custom_policy():
    def mine(ctx: ApprovalContext) -> str:
        return "user-approval"

    approval = Approval(request=mine, response=lambda ctx: allowed())
    assert isinstance(approval.request, Policy) and approval.request.kind == "custom"
    assert approval.request.rule is mine and not approval.request.inline
    assert approval.request.label == "custom policy"
    assert approval.response is not None and approval.response.label == "a custom rule in its code decides"
    assert Approval(request=approval.request).request is approval.request  # a Policy is not wrapped again


async def test_decisions_are_one_type_and_each_side_refuses_the_others_words():
    assert await evaluate_request_policy(lambda ctx: Denied("no"), call_ctx()) == Decision(type="denied", reason="no")
    assert (await evaluate_response_policy(lambda ctx: {"type": "rejected", "reason": "no"}, answer_ctx())).reason == "no"
    with pytest.raises(TypeError):
        await evaluate_request_policy(lambda ctx: allowed(), call_ctx())
    with pytest.raises(TypeError):
        await evaluate_response_policy(lambda ctx: "approved", answer_ctx())


def test_config_files_name_policies_from_one_registry():
    assert {"never", "always", "once"} <= set(policy_names())
    assert policy_named("once").kind == "once" and policy_named("never").label == "runs without asking"
    with pytest.raises(ValueError, match="sometimes"):
        policy_named("sometimes")
