"""The OpenAI Agents SDK backend against the real SDK, over real HTTP to the local OpenAI-compatible server.

The engine's side of a run is a small in-memory turn here (gate verdicts by tool, a fence that records
results by call id, the checkpoints and the stream in a list), so what these tests observe is what the
SDK does with our hooks: which calls wait, which run and how often, and what the model is told.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    ShellTool,
    ToolOutputText,
    TracingProcessor,
    WebSearchTool,
    add_trace_processor,
    function_tool,
    handoff,
)
from agents.mcp import MCPServerStdio
from aiohttp import web
from openai import AsyncOpenAI

import handlers.routes.demo_model
from bot.backends import (
    AgentBackend,
    Approve,
    Failed,
    Finished,
    GateVerdict,
    Parked,
    Reject,
    Stopped,
    fingerprint,
    wrap,
)
from bot.backends.openai_agents import OpenAIAgentsBackend, backend
from bot.models.demo_http import BASE_PATH as DEMO_BASE_PATH
from tests.fakes.openai_server import FakeOpenAI

API_KEY = "sk-test"


class LeaseLost(Exception):
    """Stands in for the engine's: the fence's own failure, which must reach the engine as is."""


class RecordingTurn:
    """The engine's side of one run, in memory: verdicts by tool name, a fence by call id, a log."""

    def __init__(self, verdicts: Mapping[str, GateVerdict] | None = None, *,
                 recorded: dict[str, Any] | None = None):
        self.session_id = "s1"
        self.turn_id = "t1"
        self.owner_id = "U_OWNER"
        self.verdicts = dict(verdicts or {})
        self.recorded: dict[str, Any] = {} if recorded is None else recorded  # shared across "replicas"
        self.log: list[str] = []
        self.gated: list[tuple[str, str, dict[str, Any]]] = []
        self.checkpoints: list[str] = []
        self.streamed: list[str] = []
        self.stop_after_text = False
        self.lease_lost = False
        self.fenced: dict[str, bool] = {}  # tool → idempotent, as the fence was told
        self._stopped = False

    @property
    def stopped(self) -> bool:
        return self._stopped

    async def gate(self, call_id: str, tool_name: str, arguments: Mapping[str, Any]) -> GateVerdict:
        self.gated.append((call_id, tool_name, dict(arguments)))
        return self.verdicts.get(tool_name, GateVerdict(action="run"))

    async def fence(self, call_id: str, tool_name: str, run: Callable[[], Awaitable[Any]], *,
                    idempotent: bool = False) -> Any:
        self.fenced[tool_name] = idempotent
        if self.lease_lost:
            raise LeaseLost(call_id)
        if call_id in self.recorded:
            self.log.append(f"replayed {tool_name}")
            return self.recorded[call_id]
        result = await run()
        json.dumps(result)  # the engine records it as JSON
        self.recorded[call_id] = result
        self.log.append(f"ran {tool_name}")
        return result

    async def checkpoint(self, saved: str) -> None:
        json.loads(saved)
        self.checkpoints.append(saved)
        self.log.append("checkpoint")

    def text(self, delta: str) -> None:
        self.streamed.append(delta)
        if self.stop_after_text:
            self._stopped = True

    def tool_started(self, call_id: str, tool_name: str, arguments: Mapping[str, Any]) -> None:
        self.log.append(f"started {tool_name}")

    def tool_finished(self, call_id: str, tool_name: str, output: Any) -> None:
        self.log.append(f"finished {tool_name}")


refunds: list[str] = []


@function_tool(needs_approval=True)
def issue_refund(charge_id: str, amount_cents: int = 500) -> str:
    """Refund a charge to the customer's card."""
    refunds.append(charge_id)
    return f"refunded {amount_cents} cents of {charge_id}"


@function_tool
def lookup_charge(charge_id: str) -> str:
    """Look up a charge by its id."""
    return f"{charge_id}: 5.00 USD, paid"


async def _large_only(context: Any, params: dict[str, Any], call_id: str) -> bool:
    return params.get("amount_cents", 0) > 10_000


@function_tool(needs_approval=_large_only)
def credit_account(account: str, amount_cents: int) -> str:
    """Credit a customer's account."""
    return f"credited {amount_cents} to {account}"


@pytest.fixture(autouse=True)
def _no_refunds_yet() -> None:
    refunds.clear()


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=API_KEY) as server:
        yield server


def _agent(fake: FakeOpenAI, **kwargs: Any) -> Agent[Any]:
    model = OpenAIChatCompletionsModel(model="gpt-4o-mini",
                                       openai_client=AsyncOpenAI(base_url=fake.base_url, api_key=API_KEY))
    kwargs.setdefault("tools", [issue_refund, lookup_charge, credit_account])
    return Agent(name="support", instructions="You help customers.", model=model, **kwargs)


def _tool_messages(fake: FakeOpenAI) -> dict[str, str]:
    """What the model was told each call returned, in its last request: call id → content."""
    messages = fake.requests[-1].body["messages"]
    return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}


async def test_a_tool_needing_no_approval_runs_after_its_step_is_stored(fake: FakeOpenAI) -> None:
    fake.reply_tool_call("lookup_charge", {"charge_id": "ch_1"}, "call_look")
    fake.reply_text("The charge ch_1 was 5.00 USD.")
    turn = RecordingTurn()

    outcome = await backend(_agent(fake)).start(turn, "what was ch_1?", None)

    assert outcome == Finished(text="The charge ch_1 was 5.00 USD.", saved=outcome.saved)
    assert turn.log == ["checkpoint", "started lookup_charge", "ran lookup_charge"]
    assert "call_look" in turn.checkpoints[0]
    assert "".join(turn.streamed) == "The charge ch_1 was 5.00 USD."
    assert _tool_messages(fake) == {"call_look": "ch_1: 5.00 USD, paid"}


async def test_a_tool_the_sdk_gates_parks_and_runs_once_approved(fake: FakeOpenAI) -> None:
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1"}, "call_refund")
    fake.reply_text("Refunded.")
    agent_backend = backend(_agent(fake))
    turn = RecordingTurn()

    parked = await agent_backend.start(turn, "refund ch_1", None)

    assert isinstance(parked, Parked)
    [pending] = parked.pending
    assert (pending.call_id, pending.tool_name, pending.arguments) == ("call_refund", "issue_refund",
                                                                       {"charge_id": "ch_1"})
    assert pending.decisions == frozenset({"approve", "edit", "reject"})
    assert refunds == []
    assert parked.saved == turn.checkpoints[-1]

    finished = await agent_backend.resume(RecordingTurn(), parked.saved, {"call_refund": Approve()})

    assert isinstance(finished, Finished) and finished.text == "Refunded."
    assert refunds == ["ch_1"]
    assert _tool_messages(fake) == {"call_refund": "refunded 500 cents of ch_1"}


async def test_the_cancellers_reason_is_what_the_model_reads(fake: FakeOpenAI) -> None:
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1"}, "call_refund")
    fake.reply_text("Understood, no refund.")
    agent_backend = backend(_agent(fake))
    parked = await agent_backend.start(RecordingTurn(), "refund ch_1", None)

    finished = await agent_backend.resume(
        RecordingTurn(), parked.saved, {"call_refund": Reject(message="Cancelled by Ann: chargeback open")})

    assert isinstance(finished, Finished)
    assert refunds == []
    assert _tool_messages(fake) == {"call_refund": "Cancelled by Ann: chargeback open"}


async def test_our_policy_asks_for_a_tool_the_sdk_would_run(fake: FakeOpenAI) -> None:
    fake.reply_tool_call("lookup_charge", {"charge_id": "ch_1"}, "call_look")
    turn = RecordingTurn({"lookup_charge": GateVerdict(action="ask")})

    parked = await backend(_agent(fake)).start(turn, "what was ch_1?", None)

    assert isinstance(parked, Parked)
    assert [p.call_id for p in parked.pending] == ["call_look"]
    assert turn.gated == [("call_look", "lookup_charge", {"charge_id": "ch_1"})]
    assert "ran lookup_charge" not in turn.log


async def test_a_refused_call_never_runs_and_the_model_reads_why(fake: FakeOpenAI) -> None:
    fake.reply_tool_call("lookup_charge", {"charge_id": "ch_1"}, "call_look")
    fake.reply_text("I may not look that up.")
    turn = RecordingTurn({"lookup_charge": GateVerdict(action="refuse", reason="Lookups are off today.")})

    outcome = await backend(_agent(fake)).start(turn, "what was ch_1?", None)

    assert isinstance(outcome, Finished)
    assert "ran lookup_charge" not in turn.log
    assert _tool_messages(fake) == {"call_look": "Lookups are off today."}


async def test_the_sdks_own_per_call_gate_still_asks_beside_ours(fake: FakeOpenAI) -> None:
    fake.reply_tool_calls(("credit_account", {"account": "a1", "amount_cents": 200}, "call_small"),
                          ("credit_account", {"account": "a1", "amount_cents": 20_000}, "call_large"))
    turn = RecordingTurn()

    parked = await backend(_agent(fake)).start(turn, "credit a1 twice", None)

    assert isinstance(parked, Parked)
    assert [p.call_id for p in parked.pending] == ["call_large"]
    assert "ran credit_account" not in turn.log  # nothing of a step runs before people answer its asks


async def test_calls_that_may_run_wait_with_the_step_and_run_once_it_is_answered(fake: FakeOpenAI) -> None:
    fake.reply_tool_calls(("lookup_charge", {"charge_id": "ch_1"}, "call_look"),
                          ("issue_refund", {"charge_id": "ch_1"}, "call_refund"))
    fake.reply_text("Looked up and refunded.")
    agent_backend = backend(_agent(fake))
    parked = await agent_backend.start(RecordingTurn(), "refund ch_1", None)
    assert [p.call_id for p in parked.pending] == ["call_refund"]

    turn = RecordingTurn()
    finished = await agent_backend.resume(turn, parked.saved, {"call_refund": Approve()})

    assert isinstance(finished, Finished)
    assert sorted(x for x in turn.log if x.startswith("ran")) == ["ran issue_refund", "ran lookup_charge"]
    assert set(_tool_messages(fake)) == {"call_look", "call_refund"}


async def test_a_resume_replayed_after_a_kill_returns_the_recorded_result(fake: FakeOpenAI) -> None:
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1"}, "call_refund")
    agent_backend = backend(_agent(fake))
    parked = await agent_backend.start(RecordingTurn(), "refund ch_1", None)
    recorded: dict[str, Any] = {}
    fake.reply_text("Refunded.")
    await agent_backend.resume(RecordingTurn(recorded=recorded), parked.saved, {"call_refund": Approve()})

    # the worker died before storing the outcome: another replica resumes the same saved step
    fake.reply_text("Refunded.")
    replay = RecordingTurn(recorded=recorded)
    finished = await agent_backend.resume(replay, parked.saved, {"call_refund": Approve()})

    assert isinstance(finished, Finished)
    assert refunds == ["ch_1"]
    assert "replayed issue_refund" in replay.log
    assert _tool_messages(fake) == {"call_refund": "refunded 500 cents of ch_1"}


async def test_a_step_stored_before_its_tools_ran_goes_on_from_the_checkpoint(fake: FakeOpenAI) -> None:
    fake.reply_tool_call("lookup_charge", {"charge_id": "ch_1"}, "call_look")
    fake.reply_text("Found it.")
    agent_backend = backend(_agent(fake))
    turn = RecordingTurn()
    turn.lease_lost = True  # the worker loses the turn as the tool is about to run

    with pytest.raises(LeaseLost):
        await agent_backend.start(turn, "what was ch_1?", None)

    # the engine goes on from the last checkpoint: the same call (same id) runs, the model is not re-asked
    resumed = RecordingTurn()
    finished = await agent_backend.resume(resumed, turn.checkpoints[-1], {})

    assert isinstance(finished, Finished) and finished.text == "Found it."
    assert "ran lookup_charge" in resumed.log
    assert len(fake.requests) == 2


async def test_the_next_turn_carries_the_conversation(fake: FakeOpenAI) -> None:
    fake.reply_text("Hello Ann.")
    agent_backend = backend(_agent(fake))
    first = await agent_backend.start(RecordingTurn(), "I am Ann", None)
    fake.reply_text("You are Ann.")

    second = await agent_backend.start(RecordingTurn(), "who am I?", first.saved)

    assert isinstance(second, Finished)
    said = [(m["role"], m["content"]) for m in fake.requests[-1].body["messages"] if m["role"] != "system"]
    assert said == [("user", "I am Ann"), ("assistant", "Hello Ann."), ("user", "who am I?")]


async def test_a_conversation_kept_by_another_agent_is_left_behind(fake: FakeOpenAI) -> None:
    fake.reply_text("Hello.")

    outcome = await backend(_agent(fake)).start(RecordingTurn(), "hi", json.dumps([{"role": "user"}]))

    assert isinstance(outcome, Finished)
    said = [(m["role"], m["content"]) for m in fake.requests[-1].body["messages"] if m["role"] != "system"]
    assert said == [("user", "hi")]


async def test_stop_ends_the_run_before_any_tool(fake: FakeOpenAI) -> None:
    fake.reply_tool_calls(("lookup_charge", {"charge_id": "ch_1"}, "call_look"), text="Let me look")
    turn = RecordingTurn()
    turn.stop_after_text = True

    outcome = await backend(_agent(fake)).start(turn, "what was ch_1?", None)

    assert isinstance(outcome, Stopped)
    assert "ran lookup_charge" not in turn.log


async def test_a_tool_of_an_agent_handed_off_to_is_gated_and_fenced(fake: FakeOpenAI) -> None:
    billing = _agent(fake, tools=[issue_refund])
    billing.name = "billing"
    triage = _agent(fake, tools=[lookup_charge], handoffs=[handoff(billing)])
    fake.reply_tool_call("transfer_to_billing", {}, "call_handoff")
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_9"}, "call_refund")
    fake.reply_text("Billing refunded it.")
    agent_backend = backend(triage)

    parked = await agent_backend.start(RecordingTurn(), "refund ch_9", None)

    assert isinstance(parked, Parked) and [p.tool_name for p in parked.pending] == ["issue_refund"]
    turn = RecordingTurn()
    finished = await agent_backend.resume(turn, parked.saved, {"call_refund": Approve()})
    assert isinstance(finished, Finished) and finished.text == "Billing refunded it."
    assert "ran issue_refund" in turn.log and refunds == ["ch_9"]
    assert {t.name for t in agent_backend.tools()} == {"lookup_charge", "issue_refund", "ask_user"}


async def test_a_tool_of_an_agent_used_as_a_tool_waits_on_people_and_runs_once(fake: FakeOpenAI) -> None:
    billing = _agent(fake, tools=[issue_refund])
    billing.name = "billing"
    triage = _agent(fake, tools=[lookup_charge, billing.as_tool(tool_name="billing_desk",
                                                                tool_description="Ask billing.")])
    fake.reply_tool_call("billing_desk", {"input": "refund ch_9"}, "call_desk")
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_9"}, "call_refund")  # billing's own model
    fake.reply_text("billing: done")
    fake.reply_text("Billing refunded it.")
    agent_backend = backend(triage)

    parked = await agent_backend.start(RecordingTurn(), "refund ch_9", None)

    assert isinstance(parked, Parked) and [p.call_id for p in parked.pending] == ["call_refund"]
    assert refunds == []
    turn = RecordingTurn()
    finished = await agent_backend.resume(turn, parked.saved, {"call_refund": Approve()})
    assert isinstance(finished, Finished) and finished.text == "Billing refunded it."
    assert refunds == ["ch_9"] and turn.log.count("ran issue_refund") == 1
    assert len(fake.requests) == 4  # billing's model was not asked again on resume
    assert {t.name for t in agent_backend.tools()} == {"lookup_charge", "billing_desk", "issue_refund", "ask_user"}


async def test_the_model_failing_is_a_plain_failure(fake: FakeOpenAI) -> None:
    for _ in range(4):  # the client's own retries included
        fake.reply_error(400, "This model's maximum context length is 128000 tokens.")

    outcome = await backend(_agent(fake)).start(RecordingTurn(), "hi", None)

    assert isinstance(outcome, Failed)
    assert "maximum context length" in outcome.reason


async def test_a_paused_run_of_another_agent_fails_closed(fake: FakeOpenAI) -> None:
    outcome = await backend(_agent(fake)).resume(RecordingTurn(), json.dumps({"nothing": 1}), {})

    assert isinstance(outcome, Failed)


async def test_tools_describe_the_agent_for_policies_and_cards(fake: FakeOpenAI) -> None:
    agent_backend = backend(_agent(fake, tools=[issue_refund, lookup_charge, credit_account, WebSearchTool()]))

    tools = {t.name: t for t in agent_backend.tools()}

    assert isinstance(agent_backend, AgentBackend)
    assert (agent_backend.framework, agent_backend.version) == ("openai-agents", "0.24.0")
    assert tools["issue_refund"].asks and not tools["lookup_charge"].asks
    assert not tools["credit_account"].asks  # it asks per call, by its arguments
    assert tools["web_search"].hosted
    assert tools["issue_refund"].parameters["required"] == ["charge_id", "amount_cents"]
    assert fingerprint(agent_backend.tools()) == fingerprint(backend(_agent(fake)).tools() + [tools["web_search"]])


async def test_wrap_knows_an_sdk_agent(fake: FakeOpenAI) -> None:
    wrapped = wrap(_agent(fake), policies={"issue_refund": "finance"})

    assert isinstance(wrapped.backend, OpenAIAgentsBackend)
    assert wrapped.policies == {"issue_refund": "finance"}


async def test_an_agent_with_tools_beyond_the_fence_is_refused(fake: FakeOpenAI) -> None:
    async def shell(request: Any) -> str:
        return ""

    with pytest.raises(TypeError, match="ShellTool"):
        backend(_agent(fake, tools=[lookup_charge, ShellTool(executor=shell)]))


class RecordingTraces(TracingProcessor):
    """Whatever the SDK would export to OpenAI's tracing servers passes through here first."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_trace_start(self, trace: Any) -> None:
        self.seen.append(f"trace {trace.name}")

    def on_trace_end(self, trace: Any) -> None:
        pass

    def on_span_start(self, span: Any) -> None:
        self.seen.append("span")

    def on_span_end(self, span: Any) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


async def test_the_sdks_tracing_exports_nothing(fake: FakeOpenAI) -> None:
    traces = RecordingTraces()
    add_trace_processor(traces)
    fake.reply_tool_call("lookup_charge", {"charge_id": "ch_1"}, "call_look")
    fake.reply_text("Found it.")

    outcome = await backend(_agent(fake)).start(RecordingTurn(), "what was ch_1?", None)

    assert isinstance(outcome, Finished)
    assert traces.seen == []


async def test_an_agent_with_local_mcp_servers_is_refused(fake: FakeOpenAI) -> None:
    server = MCPServerStdio(params={"command": "true"}, name="files")  # never started: refused before

    with pytest.raises(TypeError, match="local MCP servers"):
        backend(_agent(fake, mcp_servers=[server]))


async def test_two_sessions_running_one_agent_at_once_keep_their_own_verdicts(fake: FakeOpenAI) -> None:
    fake.reply_tool_call("lookup_charge", {"charge_id": "ch_1"})
    fake.reply_tool_call("lookup_charge", {"charge_id": "ch_1"})
    fake.reply_text("It was 5.00 USD.")  # only the session whose lookup runs asks the model again
    agent_backend = backend(_agent(fake))
    asks, runs = RecordingTurn({"lookup_charge": GateVerdict(action="ask")}), RecordingTurn()

    parked, finished = await asyncio.gather(agent_backend.start(asks, "what was ch_1?", None),
                                            agent_backend.start(runs, "what was ch_1?", None))

    assert isinstance(parked, Parked) and isinstance(finished, Finished)
    assert "ran lookup_charge" in runs.log and "ran lookup_charge" not in asks.log
    assert len(asks.gated) == len(runs.gated) == 1


async def test_the_example_agent_runs_on_the_offline_demo_model(monkeypatch: pytest.MonkeyPatch) -> None:
    # a model given by name goes through the SDK's one HTTP client per process: this test's loop gets its own
    monkeypatch.setattr("agents.models.openai_provider._http_client", None)
    app = web.Application()
    handlers.routes.demo_model.add_routes(app)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}{DEMO_BASE_PATH}")  # as make run sets it
    monkeypatch.setenv("OPENAI_API_KEY", "demo")
    try:
        from examples.openai_agents_agent import slack_agent

        looked_up = await slack_agent.backend.start(RecordingTurn(), "look up acme", None)
        parked = await slack_agent.backend.start(RecordingTurn(), "refund ch_1001 $40", None)
        assert isinstance(parked, Parked)
        [pending] = parked.pending
        refunded = await slack_agent.backend.resume(RecordingTurn(), parked.saved, {pending.call_id: Approve()})
    finally:
        await runner.cleanup()

    assert isinstance(looked_up, Finished) and "team plan" in looked_up.text
    assert (pending.tool_name, pending.arguments) == ("refund_charge", {"charge_id": "ch_1001", "amount": 40.0})
    assert isinstance(refunded, Finished) and "Refunded $40.00 on ch_1001." in refunded.text


async def test_a_model_given_by_name_gets_each_call_an_id_of_its_own(fake: FakeOpenAI,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A server numbering calls per answer (``<tool>:<n>``, Kimi K2 on vLLM) behind a model the agent names by a
    string, as most agents do: the run's model provider gives the second round's call a new id, so it parks on
    its own approval and the first call's recorded result is never taken for it."""
    monkeypatch.setattr("agents.models.openai_provider._http_client", None)  # this test's loop gets its own
    monkeypatch.setattr("agents.models._openai_shared._use_responses_by_default", False)  # Chat Completions
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1"}, "issue_refund:0")
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_2"}, "issue_refund:0")
    fake.reply_text("Refunded both.")
    agent_backend = backend(Agent(name="support", model="gpt-4o-mini", tools=[issue_refund]))

    first = await agent_backend.start(RecordingTurn(), "refund ch_1 and ch_2", None)
    assert isinstance(first, Parked) and first.pending[0].call_id == "issue_refund:0"
    second = await agent_backend.resume(RecordingTurn(), first.saved, {"issue_refund:0": Approve()})
    assert isinstance(second, Parked)
    [pending] = second.pending
    assert pending.call_id != "issue_refund:0" and pending.arguments == {"charge_id": "ch_2"}
    finished = await agent_backend.resume(RecordingTurn(), second.saved, {pending.call_id: Approve()})

    assert isinstance(finished, Finished) and finished.text == "Refunded both."
    assert refunds == ["ch_1", "ch_2"]
    assert _tool_messages(fake) == {"issue_refund:0": "refunded 500 cents of ch_1",
                                    pending.call_id: "refunded 500 cents of ch_2"}


async def test_tools_named_safe_to_repeat_are_fenced_as_such(fake: FakeOpenAI) -> None:
    fake.reply_tool_call("lookup_charge", {"charge_id": "ch_1"}, "call_look")
    fake.reply_text("It was 5.00 USD.")
    agent_backend = OpenAIAgentsBackend(_agent(fake), idempotent={"lookup_charge"})
    turn = RecordingTurn()

    await agent_backend.start(turn, "what was ch_1?", None)

    assert turn.fenced == {"lookup_charge": True}
    assert {t.name: t.idempotent for t in agent_backend.tools()} == {
        "lookup_charge": True, "issue_refund": False, "credit_account": False, "ask_user": False}


@function_tool
def charge_details(charge_id: str) -> dict[str, Any]:
    """A charge's details."""
    return {"id": charge_id, "amount_cents": 500}


@function_tool
def receipt(charge_id: str) -> ToolOutputText:
    """A charge's receipt, as text."""
    return ToolOutputText(text=f"Receipt for {charge_id}")


async def test_the_model_reads_a_dict_as_json_and_the_sdks_own_outputs_as_the_sdk_writes_them(
        fake: FakeOpenAI) -> None:
    fake.reply_tool_calls(("charge_details", {"charge_id": "ch_1"}, "call_details"),
                          ("receipt", {"charge_id": "ch_1"}, "call_receipt"))
    fake.reply_text("Here.")

    await backend(_agent(fake, tools=[charge_details, receipt])).start(RecordingTurn(), "ch_1?", None)

    told = _tool_messages(fake)
    assert json.loads(told["call_details"]) == {"id": "ch_1", "amount_cents": 500}
    assert told["call_receipt"] == [{"type": "text", "text": "Receipt for ch_1"}]  # a content part, as the SDK sends it
