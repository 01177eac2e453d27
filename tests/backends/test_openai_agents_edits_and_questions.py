"""What the bot adds to an OpenAI Agents SDK agent: Edit & approve, and questions (``ask_user``), against the
real SDK over real HTTP to the local OpenAI-compatible server. The engine's side is the in-memory turn of
test_openai_agents.py: what these tests observe is what ran, with which arguments, and what the model read.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import Agent, FunctionTool, function_tool, handoff
from pydantic import ValidationError

from bot.backends import Approve, Failed, Finished, Parked, Reject, Reply, fingerprint
from bot.backends.openai_agents import QUESTION_TOOL, OpenAIAgentsBackend, backend
from tests.backends.test_openai_agents import API_KEY, RecordingTurn, _agent, _tool_messages
from tests.fakes.openai_server import FakeOpenAI

refunded: list[tuple[str, int]] = []


@function_tool(needs_approval=True)
def refund(charge_id: str, amount_cents: int) -> str:
    """Refund part of a charge to the customer's card, in cents."""
    refunded.append((charge_id, amount_cents))
    return f"refunded {amount_cents} cents of {charge_id}"


async def _note(context: Any, arguments: str) -> str:
    return "noted"


# a FunctionTool made by hand: the SDK holds no model of its arguments, so no form can be offered
note = FunctionTool(name="note", description="Keep a note.", on_invoke_tool=_note, needs_approval=True,
                    params_json_schema={"type": "object", "properties": {"text": {"type": "string"}},
                                        "required": ["text"], "additionalProperties": False})


@pytest.fixture(autouse=True)
def _nothing_refunded_yet() -> None:
    refunded.clear()


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=API_KEY) as server:
        yield server


class ArgumentsTurn(RecordingTurn):
    """Also keeps the arguments each started call was reported with (the task's and the audit's)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.started: dict[str, dict[str, Any]] = {}

    def tool_started(self, call_id: str, tool_name: str, arguments: Any) -> None:
        super().tool_started(call_id, tool_name, arguments)
        self.started[call_id] = dict(arguments)


def _support(fake: FakeOpenAI, **kwargs: Any) -> Agent[Any]:
    kwargs.setdefault("tools", [refund, note])
    return _agent(fake, **kwargs)


async def _parked(agent_backend: OpenAIAgentsBackend, fake: FakeOpenAI, amount: int = 500) -> Parked:
    fake.reply_tool_call("refund", {"charge_id": "ch_1", "amount_cents": amount}, "call_refund")
    parked = await agent_backend.start(RecordingTurn(), "refund ch_1", None)
    assert isinstance(parked, Parked)
    return parked


# --- Edit & approve --------------------------------------------------------------------------------


async def test_an_edited_approval_runs_the_tool_once_with_the_edit_and_the_model_reads_its_result(
        fake: FakeOpenAI) -> None:
    agent_backend = backend(_support(fake))
    parked = await _parked(agent_backend, fake)
    [pending] = parked.pending
    assert pending.decisions == frozenset({"approve", "edit", "reject"})
    fake.reply_text("Refunded 1.20 USD.")
    turn = ArgumentsTurn()

    finished = await agent_backend.resume(turn, parked.saved, {
        "call_refund": Approve(arguments={"charge_id": "ch_1", "amount_cents": 120}, by="U_ANN")})

    assert isinstance(finished, Finished) and finished.text == "Refunded 1.20 USD."
    assert refunded == [("ch_1", 120)]
    assert _tool_messages(fake) == {"call_refund": "refunded 120 cents of ch_1"}
    assert turn.started["call_refund"] == {"charge_id": "ch_1", "amount_cents": 120}


async def test_an_edited_approval_replayed_after_a_kill_never_runs_the_original_nor_twice(
        fake: FakeOpenAI) -> None:
    agent_backend = backend(_support(fake))
    parked = await _parked(agent_backend, fake)
    edited = {"call_refund": Approve(arguments={"charge_id": "ch_1", "amount_cents": 120})}
    recorded: dict[str, Any] = {}
    fake.reply_text("Refunded.")
    await agent_backend.resume(RecordingTurn(recorded=recorded), parked.saved, edited)

    # the worker died before the outcome was stored: the resume is replayed from the same paused step, with
    # the answer read again from the settled request
    fake.reply_text("Refunded.")
    replay = RecordingTurn(recorded=recorded)
    finished = await agent_backend.resume(replay, parked.saved, edited)

    assert isinstance(finished, Finished)
    assert refunded == [("ch_1", 120)]
    assert "replayed refund" in replay.log
    assert _tool_messages(fake) == {"call_refund": "refunded 120 cents of ch_1"}


async def test_the_edit_form_is_the_sdks_own_model_of_the_arguments(fake: FakeOpenAI) -> None:
    tools = {t.name: t for t in backend(_support(fake)).tools()}

    form = tools["refund"].args_model
    assert tools["refund"].editable and form is not None
    assert form(charge_id="ch_1", amount_cents="120").amount_cents == 120
    with pytest.raises(ValidationError):
        form(charge_id="ch_1", amount_cents="a lot")
    assert tools["note"].args_model is None  # made by hand: approve and reject only on its card


async def test_an_agent_used_as_a_tool_takes_no_edit(fake: FakeOpenAI) -> None:
    billing = _support(fake, tools=[refund])
    billing.name = "billing"
    desk = billing.as_tool(tool_name="billing_desk", tool_description="Ask billing.")
    desk.needs_approval = True
    agent_backend = backend(_support(fake, tools=[desk]))
    fake.reply_tool_call("billing_desk", {"input": "refund ch_9"}, "call_desk")

    parked = await agent_backend.start(RecordingTurn(), "refund ch_9", None)

    [pending] = parked.pending
    assert pending.decisions == frozenset({"approve", "reject"})
    assert not {t.name: t for t in agent_backend.tools()}["billing_desk"].editable
    failed = await agent_backend.resume(RecordingTurn(), parked.saved,
                                        {"call_desk": Approve(arguments={"input": "refund ch_1"})})
    assert isinstance(failed, Failed) and "changed arguments" in failed.reason


# --- questions -------------------------------------------------------------------------------------


def _ask(fake: FakeOpenAI, call_id: str = "call_ask", options: list[str] | None = None) -> None:
    fake.reply_tool_call(QUESTION_TOOL, {"question": "Why refund ch_1?", "options": options or []}, call_id)


async def test_the_model_is_offered_a_tool_for_asking_people(fake: FakeOpenAI) -> None:
    fake.reply_text("Hello.")

    await backend(_support(fake)).start(RecordingTurn(), "hi", None)

    offered = {t["function"]["name"]: t["function"] for t in fake.requests[0].body["tools"]}
    assert set(offered) == {"refund", "note", QUESTION_TOOL}
    assert "Ask the person" in offered[QUESTION_TOOL]["description"]
    assert set(offered[QUESTION_TOOL]["parameters"]["properties"]) == {"question", "options"}


async def test_a_question_parks_as_a_question_and_the_answer_is_what_the_model_reads(fake: FakeOpenAI) -> None:
    agent_backend = backend(_support(fake))
    _ask(fake, options=["duplicate", "fraud", "duplicate", " "])
    turn = RecordingTurn()

    parked = await agent_backend.start(turn, "refund ch_1", None)

    assert isinstance(parked, Parked)
    [pending] = parked.pending
    assert (pending.kind, pending.call_id, pending.tool_name) == ("question", "call_ask", QUESTION_TOOL)
    assert (pending.prompt, pending.options) == ("Why refund ch_1?", ["duplicate", "fraud"])
    assert pending.decisions == frozenset({"respond", "reject"})
    assert turn.gated == []  # a question is not a call our request policies judge
    fake.reply_text("Noted: fraud.")

    finished = await agent_backend.resume(RecordingTurn(), parked.saved, {"call_ask": Reply(value="fraud")})

    assert isinstance(finished, Finished) and finished.text == "Noted: fraud."
    assert _tool_messages(fake) == {"call_ask": "fraud"}


async def test_words_typed_instead_of_an_option_are_the_answer(fake: FakeOpenAI) -> None:
    agent_backend = backend(_support(fake))
    _ask(fake, options=["duplicate", "fraud"])
    parked = await agent_backend.start(RecordingTurn(), "refund ch_1", None)
    fake.reply_text("Noted.")

    await agent_backend.resume(RecordingTurn(), parked.saved, {"call_ask": Reply(value="the customer asked twice")})

    assert _tool_messages(fake) == {"call_ask": "the customer asked twice"}


async def test_a_question_cancelled_tells_the_model_why(fake: FakeOpenAI) -> None:
    agent_backend = backend(_support(fake))
    _ask(fake)
    parked = await agent_backend.start(RecordingTurn(), "refund ch_1", None)
    fake.reply_text("I will not ask again.")

    await agent_backend.resume(RecordingTurn(), parked.saved,
                               {"call_ask": Reject(message="Nobody answered: the question expired.")})

    assert _tool_messages(fake) == {"call_ask": "Nobody answered: the question expired."}


async def test_an_approval_given_to_a_question_fails_plainly(fake: FakeOpenAI) -> None:
    agent_backend = backend(_support(fake))
    _ask(fake)
    parked = await agent_backend.start(RecordingTurn(), "refund ch_1", None)

    failed = await agent_backend.resume(RecordingTurn(), parked.saved, {"call_ask": Approve()})

    assert isinstance(failed, Failed) and "waits on a reply" in failed.reason


async def test_an_agent_handed_off_to_can_ask_too_and_the_agents_given_are_unchanged(fake: FakeOpenAI) -> None:
    billing = _support(fake, tools=[refund])
    billing.name = "billing"
    billing_handoff = handoff(billing)
    triage = _support(fake, tools=[note], handoffs=[billing_handoff])
    agent_backend = backend(triage)
    fake.reply_tool_call("transfer_to_billing", {}, "call_handoff")
    _ask(fake)

    parked = await agent_backend.start(RecordingTurn(), "refund ch_1", None)

    assert isinstance(parked, Parked) and [p.kind for p in parked.pending] == ["question"]
    fake.reply_text("Billing noted it.")
    finished = await agent_backend.resume(RecordingTurn(), parked.saved, {"call_ask": Reply(value="fraud")})
    assert isinstance(finished, Finished) and finished.text == "Billing noted it."
    assert _tool_messages(fake)["call_ask"] == "fraud"
    assert [t.name for t in triage.tools] == ["note"] and [t.name for t in billing.tools] == ["refund"]
    assert triage.handoffs == [billing_handoff] and billing_handoff._agent_ref() is billing


async def test_an_agent_named_directly_as_a_handoff_is_copied_with_the_question_tool(fake: FakeOpenAI) -> None:
    billing = _support(fake, tools=[refund])
    billing.name = "billing"

    agent_backend = backend(_support(fake, tools=[note], handoffs=[billing]))

    [copy] = agent_backend.agent.handoffs
    assert copy is not billing and copy.name == "billing"
    assert [t.name for t in copy.tools] == ["refund", QUESTION_TOOL] and billing.tools == [refund]


async def test_questions_can_be_turned_off(fake: FakeOpenAI) -> None:
    fake.reply_text("Hello.")
    agent_backend = OpenAIAgentsBackend(_support(fake), questions=False)

    await agent_backend.start(RecordingTurn(), "hi", None)

    assert QUESTION_TOOL not in {t.name for t in agent_backend.tools()}
    assert QUESTION_TOOL not in {t["function"]["name"] for t in fake.requests[0].body["tools"]}


@function_tool(needs_approval=True)
def ask_user(topic: str) -> str:
    """The team's own tool of that name."""
    return f"asked about {topic}"


async def test_an_agent_with_its_own_tool_of_that_name_keeps_it(fake: FakeOpenAI) -> None:
    agent_backend = backend(_support(fake, tools=[refund, ask_user]))
    fake.reply_tool_call(QUESTION_TOOL, {"topic": "refunds"}, "call_theirs")

    parked = await agent_backend.start(RecordingTurn(), "ask", None)

    [pending] = parked.pending
    assert (pending.kind, pending.arguments) == ("approval", {"topic": "refunds"})
    assert [t.description for t in agent_backend.tools() if t.name == QUESTION_TOOL] == [
        "The team's own tool of that name."]


async def test_the_question_tool_keeps_the_tools_fingerprint_stable(fake: FakeOpenAI) -> None:
    first, second = backend(_support(fake)), backend(_support(fake))

    assert fingerprint(first.tools()) == fingerprint(second.tools())
    assert fingerprint(first.tools()) != fingerprint(OpenAIAgentsBackend(_support(fake), questions=False).tools())
    assert json.dumps([t.name for t in first.tools()]).count(QUESTION_TOOL) == 1
