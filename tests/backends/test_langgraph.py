"""The LangGraph backend (bot/backends/langgraph.py) driving real LangGraph and LangChain agents.

The model is ``ChatOpenAI`` against the local OpenAI-compatible server (tests/fakes/openai_server.py), so every
request the agent makes goes over HTTP in the real wire format and the tests read what the model was sent.
``RecordingTurn`` stands in for the engine's side: a gate answering from a table, a fence that keeps each
call's result by key (and, like the engine's, reports a call whose worker died mid-run instead of running it
again), and the checkpoints it was handed.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import json
import operator
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AnyMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import interrupt

from bot.backends import (
    AgentBackend,
    Approve,
    Failed,
    Finished,
    GateVerdict,
    Parked,
    Reject,
    Reply,
    Stopped,
    fingerprint,
    wrap,
)
from bot.backends.langgraph import backend
from bot.protocol import CancelRequested
from tests.fakes.openai_server import FakeOpenAI
from tests.test_models_demo_http import served

INTERRUPTED = "The call was interrupted before it finished (the worker stopped). It was not run again."


class WorkerKilled(BaseException):
    """kill -9 in the middle of a tool: nothing after it runs in this worker."""


class RecordingTurn:
    def __init__(self, *, gate: Mapping[str, GateVerdict] | None = None, turn_id: str = "t1",
                 checkpoint_delay_s: float = 0.0):
        self.checkpoint_delay_s = checkpoint_delay_s
        self.session_id, self.turn_id, self.owner_id = "s1", turn_id, "U1"
        self.verdicts = dict(gate or {})
        self.gated: list[str] = []
        self.markers: dict[str, Any] = {}  # key → "started" or the recorded JSON
        self.checkpoints: list[str] = []
        self.deltas: list[str] = []
        self.started: list[tuple[str, str, dict[str, Any]]] = []
        self.finished: list[tuple[str, Any]] = []
        self.stop_after_text = False
        self._stopped = False

    @property
    def stopped(self) -> bool:
        return self._stopped

    async def gate(self, call_id: str, tool_name: str, arguments: Mapping[str, Any]) -> GateVerdict:
        self.gated.append(call_id)
        return self.verdicts.get(tool_name, GateVerdict(action="run"))

    async def fence(self, call_id: str, tool_name: str, run: Callable[[], Awaitable[Any]], *,
                    idempotent: bool = False, arguments: Mapping[str, Any] | None = None) -> Any:
        """As the engine's: the output on the first run, the recorded one on a replay, and for a call whose
        worker died mid-run the failed result the model reads (unless it is idempotent)."""
        marker = self.markers.get(call_id)
        if marker == "started" and not idempotent:
            return {"status": "failed", "error": INTERRUPTED}
        if isinstance(marker, dict):
            if "error" in marker:
                raise RuntimeError(marker["error"])
            return marker["output"]
        self.markers[call_id] = "started"
        self.tool_started(call_id, tool_name, arguments or {})
        try:
            output = await run()
        except Exception as exc:
            self.markers[call_id] = {"error": f"{type(exc).__name__}: {exc}"}
            raise
        self.markers[call_id] = json.loads(json.dumps({"output": output}))  # kept as JSON, as Redis keeps it
        return output

    async def checkpoint(self, saved: str | Callable[[], str]) -> None:
        await asyncio.sleep(self.checkpoint_delay_s)  # (the engine writes it with the next write; kept at once here)
        self.checkpoints.append(saved() if callable(saved) else saved)

    def text(self, delta: str) -> None:
        self.deltas.append(delta)
        if self.stop_after_text:
            self._stopped = True

    def tool_started(self, call_id: str, tool_name: str, arguments: Mapping[str, Any]) -> None:
        self.started.append((call_id, tool_name, dict(arguments)))

    def tool_finished(self, call_id: str, tool_name: str, output: Any) -> None:
        self.finished.append((call_id, output))


refunds: list[tuple[str, int]] = []


@tool
def issue_refund(charge_id: str, amount: int) -> str:
    """Refund part or all of a charge."""
    refunds.append((charge_id, amount))
    return f"refunded {amount} EUR on {charge_id}"


@tool
def lookup_charge(charge_id: str) -> str:
    """Look up a charge."""
    return f"{charge_id}: 40 EUR, paid"


asked_for_account: list[str] = []


@tool
def pick_account(customer: str) -> str:
    """Ask which account the refund goes to."""
    asked_for_account.append(customer)
    account = interrupt({"question": f"Which account of {customer}?", "options": ["card", "wallet"]})
    refunds.append((customer, 0))
    return f"account: {account}"


@pytest.fixture(autouse=True)
def _no_refunds():
    refunds.clear()
    asked_for_account.clear()


@pytest.fixture
async def fake():
    async with FakeOpenAI(api_key="sk-test") as server:
        yield server


def model(fake: FakeOpenAI) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", base_url=fake.base_url, api_key="sk-test", max_retries=0)


def agent(fake: FakeOpenAI, *, mode: str = "batched", tools: list[Any] | None = None,
          interrupt_on: dict[str, Any] | None = None) -> Any:
    gated = {"issue_refund": True} if interrupt_on is None else interrupt_on
    middleware = [HumanInTheLoopMiddleware(interrupt_on=gated, interrupt_mode=mode)] if gated else []
    return create_agent(model(fake), tools=tools or [issue_refund, lookup_charge], middleware=middleware)


def tool_messages(fake: FakeOpenAI) -> dict[str, str]:
    """What the model was last told each tool call returned, by call id."""
    return {m["tool_call_id"]: m["content"] for m in fake.requests[-1].body["messages"] if m["role"] == "tool"}


# --- the interface ----------------------------------------------------------------------------------------


async def test_a_create_agent_agent_is_an_agent_backend_with_its_tools_and_their_gates(fake):
    graph = agent(fake, interrupt_on={"issue_refund": {"allowed_decisions": ["approve", "reject"]}})
    wrapped = wrap(graph)
    assert isinstance(wrapped.backend, AgentBackend)
    assert wrapped.backend.framework == "langgraph" and wrapped.backend.version.startswith("1.2.")
    tools = {t.name: t for t in wrapped.backend.tools()}
    assert set(tools) == {"issue_refund", "lookup_charge"}
    assert tools["issue_refund"].asks and not tools["issue_refund"].editable  # its middleware allows no edit
    assert not tools["lookup_charge"].asks
    assert tools["issue_refund"].parameters["properties"].keys() == {"charge_id", "amount"}
    assert tools["issue_refund"].args_model is not None


def chain(state: type, *steps: Callable[..., Any]) -> Any:
    """A compiled graph running ``steps`` one after the other, each a node named as its function."""
    builder = StateGraph(state)
    names = [START]
    for step in steps:
        builder.add_node(step.__name__, step)
        builder.add_edge(names[-1], step.__name__)
        names.append(step.__name__)
    builder.add_edge(names[-1], END)
    return builder.compile()


def _concatenated(state: list[str] | None, batches: list[list[str]]) -> list[str]:
    return [*(state or []), *(item for batch in batches for item in batch)]


class _Logged(TypedDict):
    log: Annotated[list, DeltaChannel(_concatenated)]


class _Plain(TypedDict):
    log: Annotated[list, operator.add]


def _logging_graph() -> Any:
    def note(state: _Logged) -> dict[str, Any]:
        return {"log": ["noted"]}

    def ask(state: _Logged) -> dict[str, Any]:
        return {"log": [f"asked: {interrupt('what next?')}"]}

    return chain(_Logged, note, ask)


def test_a_graph_with_a_delta_channel_is_refused_rather_than_resumed_without_its_history():
    """LangGraph's beta ``DeltaChannel`` rebuilds its value from every earlier checkpoint's writes; a paused run
    keeps its newest checkpoint only. Run anyway, the node after a question saw ``["asked: go"]`` where a plain
    reducer's saw ``["hi", "noted", "asked: go"]``: the history was gone. Such a graph, or one using it as a
    subgraph, is refused when it is wrapped, saying which channel and what to use instead."""
    with pytest.raises(TypeError, match="channel 'log' is a DeltaChannel.*operator.add"):
        backend(_logging_graph())

    outer = StateGraph(_Plain)  # the DeltaChannel only inside
    outer.add_node("inner", _logging_graph())
    outer.add_edge(START, "inner")
    outer.add_edge("inner", END)
    with pytest.raises(TypeError, match="DeltaChannel"):
        wrap(outer.compile(), policies={})


# --- LangChain's human-in-the-loop middleware -----------------------------------------------------------


async def test_a_batched_review_parks_one_call_per_action_keyed_by_the_models_tool_call_id(fake):
    fake.reply_tool_calls(("lookup_charge", {"charge_id": "ch_1"}, "call_look"),
                          ("issue_refund", {"charge_id": "ch_1", "amount": 40}, "call_refund"))
    fake.reply_text("Refunded 40 EUR.")
    lg, turn = backend(agent(fake)), RecordingTurn()

    parked = await lg.start(turn, "refund ch_1", None)

    assert isinstance(parked, Parked)
    [call] = parked.pending
    assert (call.call_id, call.tool_name, call.arguments) == ("call_refund", "issue_refund",
                                                            {"charge_id": "ch_1", "amount": 40})
    assert call.kind == "approval" and call.decisions == {"approve", "edit", "reject", "respond"}
    assert refunds == [] and turn.started == []  # nothing runs before people answer

    done = await lg.resume(turn, parked.saved, {"call_refund": Approve()})

    assert isinstance(done, Finished) and done.text == "Refunded 40 EUR."
    assert refunds == [("ch_1", 40)]
    assert tool_messages(fake) == {"call_look": "ch_1: 40 EUR, paid", "call_refund": "refunded 40 EUR on ch_1"}
    assert turn.gated == ["call_look"]  # our policy asked of the unreviewed call only


async def test_edit_and_approve_runs_the_edited_arguments_and_tells_the_model(fake):
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 40}, "call_refund")
    lg, turn = backend(agent(fake)), RecordingTurn()
    parked = await lg.start(turn, "refund ch_1", None)

    done = await lg.resume(turn, parked.saved, {"call_refund": Approve(arguments={"charge_id": "ch_1", "amount": 25})})

    assert isinstance(done, Finished)
    assert refunds == [("ch_1", 25)]
    assert turn.started == [("call_refund", "issue_refund", {"charge_id": "ch_1", "amount": 25})]  # what ran
    told = tool_messages(fake)["call_refund"]
    assert "replaced this tool call" in told and '"amount": 25' in told and told.endswith("refunded 25 EUR on ch_1")


async def test_a_cancel_with_a_reason_reaches_the_model_and_nothing_runs(fake):
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 40}, "call_refund")
    fake.reply_text("Understood, no refund.")
    lg, turn = backend(agent(fake)), RecordingTurn()
    parked = await lg.start(turn, "refund ch_1", None)

    done = await lg.resume(turn, parked.saved, {"call_refund": Reject(message="customer already got store credit")})

    assert isinstance(done, Finished) and done.text == "Understood, no refund."
    assert refunds == [] and turn.started == []
    assert "customer already got store credit" in tool_messages(fake)["call_refund"]


async def test_respond_answers_in_place_of_the_tool(fake):
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 40}, "call_refund")
    lg, turn = backend(agent(fake)), RecordingTurn()
    parked = await lg.start(turn, "refund ch_1", None)

    await lg.resume(turn, parked.saved, {"call_refund": Reply(value="Refunds go through finance this week.")})

    assert refunds == []
    assert tool_messages(fake)["call_refund"] == "Refunds go through finance this week."


async def test_per_call_reviews_are_one_interrupt_each_answered_by_id(fake):
    fake.reply_tool_calls(("issue_refund", {"charge_id": "ch_1", "amount": 10}, "call_a"),
                          ("issue_refund", {"charge_id": "ch_2", "amount": 20}, "call_b"))
    fake.reply_text("One refunded, one not.")
    lg, turn = backend(agent(fake, mode="per_call",
                             interrupt_on={"issue_refund": {"allowed_decisions": ["approve", "reject"]}})), RecordingTurn()

    parked = await lg.start(turn, "refund both", None)

    assert isinstance(parked, Parked)
    assert sorted(p.call_id for p in parked.pending) == ["call_a", "call_b"]
    assert all(p.decisions == {"approve", "reject"} for p in parked.pending)
    done = await lg.resume(turn, parked.saved, {"call_a": Approve(), "call_b": Reject(message="duplicate")})

    assert isinstance(done, Finished)
    assert refunds == [("ch_1", 10)]
    assert "duplicate" in tool_messages(fake)["call_b"]


async def test_the_middlewares_description_is_the_pending_calls_prompt_without_its_raw_arguments(fake):
    def described(call: Any, state: Any, runtime: Any) -> str:
        return f"Refund {call['args']['amount']} EUR to the customer's card?"

    cases = [({"allowed_decisions": ["approve", "reject"]}, None),  # the default: "...\n\nTool: …\nArgs: {…}"
             ({"allowed_decisions": ["approve"], "description": "Needs a second look"}, "Needs a second look"),
             ({"allowed_decisions": ["approve"], "description": described}, "Refund 40 EUR to the customer's card?")]
    for mode in ("batched", "per_call"):
        for config, prompt in cases:
            fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 40}, "call_refund")
            parked = await backend(agent(fake, mode=mode, interrupt_on={"issue_refund": config})).start(
                RecordingTurn(), "refund ch_1", None)
            assert isinstance(parked, Parked)
            assert parked.pending[0].prompt == prompt, (mode, config)
    custom = HumanInTheLoopMiddleware(interrupt_on={"issue_refund": True}, description_prefix="Finance reviews refunds")
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 40}, "call_refund")
    parked = await backend(create_agent(model(fake), tools=[issue_refund], middleware=[custom])).start(
        RecordingTurn(), "refund ch_1", None)
    assert parked.pending[0].prompt == "Finance reviews refunds"


async def test_a_cancel_where_the_middleware_takes_respond_but_no_reject_is_told_as_a_respond(fake):
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 40}, "call_refund")
    fake.reply_text("No refund.")
    lg = backend(agent(fake, interrupt_on={"issue_refund": {"allowed_decisions": ["approve", "respond"]}}))
    turn = RecordingTurn()
    parked = await lg.start(turn, "refund ch_1", None)

    done = await lg.resume(turn, parked.saved, {"call_refund": Reject(message="duplicate")})

    assert isinstance(done, Finished) and refunds == []
    assert tool_messages(fake)["call_refund"] == "User rejected the tool call for `issue_refund` with reason: duplicate"


# --- our request policies, through the wrapper every ToolNode gets ----------------------------------------


async def test_our_policy_asks_for_a_tool_the_agent_never_gated_and_its_answer_is_kept(fake):
    fake.reply_tool_call("lookup_charge", {"charge_id": "ch_1"}, "call_look")
    lg = backend(agent(fake, interrupt_on={}))
    turn = RecordingTurn(gate={"lookup_charge": GateVerdict(action="ask")})

    parked = await lg.start(turn, "look up ch_1", None)

    assert isinstance(parked, Parked)
    [call] = parked.pending
    assert (call.call_id, call.tool_name, call.decisions) == ("call_look", "lookup_charge",
                                                             {"approve", "edit", "reject"})
    done = await lg.resume(turn, parked.saved, {"call_look": Approve(arguments={"charge_id": "ch_9"})})

    assert isinstance(done, Finished)
    assert tool_messages(fake)["call_look"] == "ch_9: 40 EUR, paid"
    assert turn.gated == ["call_look"]  # asked once: the approval is not gated again


async def test_a_refusal_of_our_policy_is_what_the_model_reads(fake):
    fake.reply_tool_call("lookup_charge", {"charge_id": "ch_1"}, "call_look")
    lg = backend(agent(fake, interrupt_on={}))
    turn = RecordingTurn(gate={"lookup_charge": GateVerdict(action="refuse", reason="lookups are off today")})

    done = await lg.start(turn, "look up ch_1", None)

    assert isinstance(done, Finished)
    assert tool_messages(fake)["call_look"] == "lookups are off today"
    assert turn.started == []


class MessagesState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def plain_graph(fake: FakeOpenAI) -> Any:
    """A hand-built ReAct graph, the way LangGraph's docs write one: a model node, a ToolNode, a condition."""
    bound = model(fake).bind_tools([issue_refund])

    async def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", call_model)
    builder.add_node("tools", ToolNode([issue_refund]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile()


async def test_a_plain_graphs_tool_node_gets_our_policy_and_fence(fake):
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 40}, "call_refund")
    fake.reply_text("Done.")
    lg = backend(plain_graph(fake))
    assert [t.name for t in lg.tools()] == ["issue_refund"] and not lg.tools()[0].asks
    turn = RecordingTurn(gate={"issue_refund": GateVerdict(action="ask")})

    parked = await lg.start(turn, "refund ch_1", None)
    assert isinstance(parked, Parked) and parked.pending[0].call_id == "call_refund"
    done = await lg.resume(turn, parked.saved, {"call_refund": Approve()})

    assert isinstance(done, Finished) and done.text == "Done."
    assert refunds == [("ch_1", 40)] and "call_refund" in turn.markers


# --- questions -----------------------------------------------------------------------------------------


async def test_a_plain_interrupt_in_a_tool_is_a_question_and_the_tool_runs_on_with_the_answer(fake):
    fake.reply_tool_call("pick_account", {"customer": "ada"}, "call_pick")
    fake.reply_text("Refund goes to the wallet.")
    lg, turn = backend(agent(fake, tools=[pick_account], interrupt_on={})), RecordingTurn()

    parked = await lg.start(turn, "refund ada", None)

    assert isinstance(parked, Parked)
    [question] = parked.pending
    assert question.kind == "question" and question.tool_name == "pick_account"
    assert (question.prompt, question.options) == ("Which account of ada?", ["card", "wallet"])
    done = await lg.resume(turn, parked.saved, {question.call_id: Reply(value="wallet")})

    assert isinstance(done, Finished)
    assert tool_messages(fake)["call_pick"] == "account: wallet"
    assert refunds == [("ada", 0)]  # past its question once, under a fence key of its own
    assert set(turn.markers) == {"call_pick", "call_pick:1"}


async def test_a_tools_question_asked_again_after_a_kill_is_the_same_question_not_a_second_run(fake):
    fake.reply_tool_call("pick_account", {"customer": "ada"}, "call_pick")
    lg, turn = backend(agent(fake, tools=[pick_account], interrupt_on={})), RecordingTurn()
    parked = await lg.start(turn, "refund ada", None)
    stored = turn.checkpoints[-1]  # killed before the pause was stored: the engine has the step before it

    again = await lg.resume(turn, stored, {})

    assert isinstance(again, Parked)
    assert [(p.call_id, p.tool_name, p.prompt) for p in again.pending] == [
        (q.call_id, q.tool_name, q.prompt) for q in parked.pending]
    assert asked_for_account == ["ada"]  # the recorded question, not the tool run again


class Refund(TypedDict, total=False):
    charge_id: str
    decision: str
    answer: Annotated[list[str], operator.add]


ALL_OF_INBOX = {"allow_accept": True, "allow_edit": True, "allow_respond": True, "allow_ignore": True}


def inbox_graph(config: dict[str, bool] = ALL_OF_INBOX) -> Any:
    """A workflow step reviewed through Agent Inbox's interrupt schema, and a plain question after it."""

    def review(state: Refund) -> dict[str, Any]:
        [response] = interrupt([{
            "action_request": {"action": "issue_refund", "args": {"charge_id": state["charge_id"]}},
            "config": config, "description": "Refund this charge?"}])
        return {"decision": json.dumps(response)}

    def ask(state: Refund) -> dict[str, Any]:
        return {"answer": [interrupt("Anything to tell the customer?")]}

    return chain(Refund, review, ask)


async def test_agent_inbox_requests_and_a_plain_question_in_a_workflow(fake):
    lg, turn = backend(inbox_graph(), input=lambda text: {"charge_id": text}), RecordingTurn()

    parked = await lg.start(turn, "ch_7", None)

    assert isinstance(parked, Parked)
    [review] = parked.pending
    assert (review.tool_name, review.arguments, review.prompt) == ("issue_refund", {"charge_id": "ch_7"},
                                                                   "Refund this charge?")
    assert review.kind == "approval" and review.decisions == {"approve", "edit", "reject", "respond"}

    asked = await lg.resume(turn, parked.saved, {review.call_id: Approve(arguments={"charge_id": "ch_8"})})

    assert isinstance(asked, Parked)
    [question] = asked.pending
    assert question.kind == "question" and question.tool_name == "ask"
    assert question.prompt == "Anything to tell the customer?"
    done = await lg.resume(turn, asked.saved, {question.call_id: Reply(value="sorry for the wait")})

    assert isinstance(done, Finished)
    values = json.loads(done.text)
    assert json.loads(values["decision"]) == {"type": "edit", "args": {"action": "issue_refund",
                                                                      "args": {"charge_id": "ch_8"}}}
    assert values["answer"] == ["sorry for the wait"]


async def test_an_approval_as_proposed_where_only_an_edit_is_taken_goes_as_an_edit_of_the_same_arguments(fake):
    config = {"allow_accept": False, "allow_edit": True, "allow_respond": False, "allow_ignore": True}
    lg, turn = backend(inbox_graph(config), input=lambda text: {"charge_id": text}), RecordingTurn()
    parked = await lg.start(turn, "ch_7", None)
    [review] = parked.pending
    assert review.decisions == {"edit", "reject"}

    asked = await lg.resume(turn, parked.saved, {review.call_id: Approve()})
    done = await lg.resume(turn, asked.saved, {asked.pending[0].call_id: Reply(value="ok")})

    assert json.loads(json.loads(done.text)["decision"]) == {
        "type": "edit", "args": {"action": "issue_refund", "args": {"charge_id": "ch_7"}}}

    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 40}, "call_refund")
    fake.reply_text("Refunded.")
    graph = agent(fake, interrupt_on={"issue_refund": {"allowed_decisions": ["edit", "reject"]}})
    parked = await backend(graph).start(turn, "refund ch_1", None)
    done = await backend(graph).resume(turn, parked.saved, {"call_refund": Approve()})
    assert isinstance(done, Finished) and refunds == [("ch_1", 40)]


async def test_an_inbox_approval_answered_in_the_tools_place_is_a_response_with_the_words(fake):
    lg, turn = backend(inbox_graph(), input=lambda text: {"charge_id": text}), RecordingTurn()
    parked = await lg.start(turn, "ch_7", None)
    [review] = parked.pending

    asked = await lg.resume(turn, parked.saved, {review.call_id: Reply(value="ask the customer first")})
    done = await lg.resume(turn, asked.saved, {asked.pending[0].call_id: Reply(value="ok")})

    assert json.loads(json.loads(done.text)["decision"]) == {"type": "response", "args": "ask the customer first"}


# --- durability: checkpoints, replays, kills ------------------------------------------------------------


async def test_the_step_is_checkpointed_before_its_tools_run(fake):
    stored_before_running: list[list[str]] = []
    holder: dict[str, RecordingTurn] = {}

    @tool
    def note(text: str) -> str:
        """Take a note."""
        stored_before_running.append(tool_call_ids_in(holder["turn"].checkpoints[-1]))
        return "noted"

    fake.reply_tool_call("note", {"text": "hi"}, "call_note")
    fake.reply_text("Noted.")
    lg = backend(agent(fake, tools=[note], interrupt_on={}))
    holder["turn"] = turn = RecordingTurn(checkpoint_delay_s=0.05)  # a store that takes its time

    done = await lg.start(turn, "note hi", None)

    assert isinstance(done, Finished)
    assert stored_before_running == [["call_note"]]  # the model's step was stored before its tool ran


def tool_call_ids_in(saved: str) -> list[str]:
    """The tool calls of the AI messages in a saved thread's main checkpoint (read with LangGraph's serde)."""
    [main] = [c for c in json.loads(saved)["checkpoints"] if c["ns"] == ""]
    typed = main["values"]["messages"]  # each channel's value apart from the checkpoint, as the saver wrote it
    messages = JsonPlusSerializer().loads_typed((typed["type"], base64.b64decode(typed["data"])))
    return [c["id"] for m in messages for c in getattr(m, "tool_calls", [])]


RECORDED = Path(__file__).resolve().parents[1] / "data" / "langgraph_threads"


async def test_a_thread_parked_in_the_earlier_format_resumes_and_is_kept_in_the_new_one(fake):
    """A turn parked before a deploy changed how threads are saved (``langgraph-thread/1``, recorded from the
    bot that wrote it: each checkpoint whole) resumes after it: the refund runs once, the model is sent the
    whole conversation, turn one's included, and the thread is saved again in today's format."""
    parked = json.loads((RECORDED / "v1_parked_on_a_refund.json").read_text())["parked"]
    assert json.loads(parked)["format"] == "langgraph-thread/1"
    fake.reply_text("Refunded 40 EUR.")
    fake.reply_text("You are Ada.")
    lg = backend(agent(fake))

    done = await lg.resume(RecordingTurn(turn_id="t2"), parked, {"call_refund": Approve()})

    assert isinstance(done, Finished) and done.text == "Refunded 40 EUR."
    assert refunds == [("ch_1", 40)]
    sent = [(m["role"], m.get("content")) for m in fake.requests[-1].body["messages"]]
    assert sent[:3] == [("user", "I am Ada"), ("assistant", "Hello Ada."), ("user", "refund ch_1")]
    assert tool_messages(fake) == {"call_look": "ch_1: 40 EUR, paid", "call_refund": "refunded 40 EUR on ch_1"}
    assert json.loads(done.saved)["format"] == "langgraph-thread/2"
    following = await lg.start(RecordingTurn(turn_id="t3"), "who am I?", done.saved)
    assert isinstance(following, Finished) and following.text == "You are Ada."
    assert len(fake.requests[-1].body["messages"]) == len(sent) + 2  # its answer, then the new question


async def test_a_resume_replayed_after_the_tool_ran_returns_the_recorded_result(fake):
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 40}, "call_refund")
    fake.reply_text("Refunded.")
    fake.reply_text("Refunded.")
    lg, turn = backend(agent(fake)), RecordingTurn()
    parked = await lg.start(turn, "refund ch_1", None)

    await lg.resume(turn, parked.saved, {"call_refund": Approve()})
    again = await lg.resume(turn, parked.saved, {"call_refund": Approve()})  # the engine replays the step

    assert isinstance(again, Finished)
    assert refunds == [("ch_1", 40)]
    assert tool_messages(fake)["call_refund"] == "refunded 40 EUR on ch_1"


async def test_a_resume_from_a_later_checkpoint_goes_on_without_a_second_resume(fake):
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 40}, "call_refund")
    fake.reply_text("Refunded.")
    fake.reply_text("Refunded.")
    lg, turn = backend(agent(fake)), RecordingTurn()
    parked = await lg.start(turn, "refund ch_1", None)
    turn.checkpoints.clear()
    await lg.resume(turn, parked.saved, {"call_refund": Approve()})
    after_review = turn.checkpoints[0]  # the review step done, the refund not yet run
    assert json.loads(after_review)["phase"] == "running"

    again = await lg.resume(turn, after_review, {"call_refund": Approve()})

    assert isinstance(again, Finished)
    assert refunds == [("ch_1", 40)]


async def test_a_worker_killed_mid_tool_is_reported_to_the_model_not_run_again(fake):
    calls: list[str] = []

    @tool
    def charge_card(amount: int) -> str:
        """Charge the card."""
        calls.append("ran")
        if len(calls) == 1:
            raise WorkerKilled
        return "charged"

    fake.reply_tool_call("charge_card", {"amount": 5}, "call_charge")
    fake.reply_text("It may have been charged; please check.")
    lg, turn = backend(agent(fake, tools=[charge_card], interrupt_on={"charge_card": True})), RecordingTurn()
    parked = await lg.start(turn, "charge 5", None)
    with pytest.raises(WorkerKilled):
        await lg.resume(turn, parked.saved, {"call_charge": Approve()})

    done = await lg.resume(turn, parked.saved, {"call_charge": Approve()})  # the next lease holder

    assert isinstance(done, Finished)
    assert calls == ["ran"]
    assert json.loads(tool_messages(fake)["call_charge"]) == {"status": "failed", "error": INTERRUPTED}


async def test_an_idempotent_tool_killed_mid_run_runs_again(fake):
    calls: list[str] = []

    @tool
    def read_balance(account: str) -> str:
        """Read an account's balance."""
        calls.append(account)
        if len(calls) == 1:
            raise WorkerKilled
        return "12 EUR"

    read_balance.metadata = {"idempotent": True}
    fake.reply_tool_call("read_balance", {"account": "a1"}, "call_read")
    fake.reply_text("12 EUR.")
    lg, turn = backend(agent(fake, tools=[read_balance], interrupt_on={})), RecordingTurn()
    with pytest.raises(WorkerKilled):
        await lg.start(turn, "balance?", None)

    done = await lg.resume(turn, turn.checkpoints[-1], {})

    assert isinstance(done, Finished) and calls == ["a1", "a1"]
    assert tool_messages(fake)["call_read"] == "12 EUR"
    assert [t.idempotent for t in lg.tools()] == [True]


async def test_a_checkpoint_the_engine_refuses_ends_the_run_with_the_engines_exception(fake):
    class StopAsked(RecordingTurn):
        async def checkpoint(self, saved: str | Callable[[], str]) -> None:
            if self.checkpoints:
                raise CancelRequested("a stop was asked")
            await super().checkpoint(saved)

    fake.reply_tool_call("lookup_charge", {"charge_id": "ch_1"}, "call_look")
    lg, turn = backend(agent(fake, interrupt_on={})), StopAsked()

    with pytest.raises(CancelRequested):
        await lg.start(turn, "look up ch_1", None)
    assert turn.started == []  # the refused step's tools never ran


async def test_the_conversation_carries_into_the_next_turn(fake):
    fake.reply_text("Hello Ada.")
    fake.reply_text("Your name is Ada.")
    lg = backend(agent(fake, interrupt_on={}))

    first = await lg.start(RecordingTurn(turn_id="t1"), "I am Ada", None)
    second = await lg.start(RecordingTurn(turn_id="t2"), "who am I?", first.saved)

    assert isinstance(second, Finished) and second.text == "Your name is Ada."
    sent = [(m["role"], m["content"]) for m in fake.requests[-1].body["messages"]]
    assert sent == [("user", "I am Ada"), ("assistant", "Hello Ada."), ("user", "who am I?")]


async def test_the_stop_button_ends_the_run(fake):
    fake.reply_text("a long answer that goes on and on", chunk_delay_s=0.01)
    lg, turn = backend(agent(fake, interrupt_on={})), RecordingTurn()
    turn.stop_after_text = True

    assert isinstance(await lg.start(turn, "talk", None), Stopped)
    assert turn.deltas and "".join(turn.deltas) != "a long answer that goes on and on"


async def test_a_model_failure_is_a_plain_failed_outcome(fake):
    fake.reply_error(400, "bad request: the model is gone")
    lg = backend(agent(fake, interrupt_on={}))

    failed = await lg.start(RecordingTurn(), "hi", None)

    assert isinstance(failed, Failed) and "the model is gone" in failed.reason
    assert "Traceback" not in failed.reason


async def test_the_saved_thread_is_langgraphs_serde_never_pickle(fake):
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 40}, "call_refund")
    lg, turn = backend(agent(fake)), RecordingTurn()
    parked = await lg.start(turn, "refund ch_1", None)

    saved = json.loads(parked.saved)
    types = {c["checkpoint"]["type"] for c in saved["checkpoints"]}
    assert types == {"msgpack"} and saved["phase"] == "parked"
    saved["checkpoints"][0]["checkpoint"]["type"] = "pickle"
    with pytest.raises(ValueError, match="pickle"):
        await lg.resume(turn, json.dumps(saved), {"call_refund": Approve()})


async def test_the_fingerprint_changes_when_the_agents_tools_do(fake):
    before = fingerprint(backend(agent(fake)).tools())

    @tool
    def issue_refund(charge_id: str, amount: int, reason: str) -> str:  # noqa: F811 - the next deploy's tool
        """Refund part or all of a charge."""
        return "ok"

    after = fingerprint(backend(agent(fake, tools=[issue_refund, lookup_charge])).tools())
    assert before != after


async def test_the_example_agent_against_the_offline_demo_model(monkeypatch):
    runner, url = await served()  # the endpoint `make run` serves when there is no OPENAI_API_KEY
    try:
        monkeypatch.setenv("OPENAI_BASE_URL", url.removesuffix("/chat/completions"))
        monkeypatch.setenv("OPENAI_API_KEY", "demo")
        example = importlib.reload(importlib.import_module("examples.langgraph_agent"))
        lg = example.slack_agent.backend
        assert set(example.slack_agent.policies) == {"refund_charge"}

        parked = await lg.start(RecordingTurn(turn_id="t1"), "refund ch_1001 $40", None)
        assert isinstance(parked, Parked)
        [refund] = parked.pending
        assert (refund.tool_name, refund.arguments) == ("refund_charge", {"charge_id": "ch_1001", "amount": 40.0})
        assert refund.decisions == {"approve", "edit", "reject"}
        refunded = await lg.resume(RecordingTurn(turn_id="t1"), parked.saved, {refund.call_id: Approve()})
        looked = await lg.start(RecordingTurn(turn_id="t2"), "look up acme", refunded.saved)
    finally:
        await runner.cleanup()

    assert isinstance(refunded, Finished) and refunded.text.startswith("Refunded $40.00 on `ch_1001`")
    assert isinstance(looked, Finished) and looked.text.startswith("**Acme** is on the Pro plan")
