"""The pydantic-ai backend with the real framework against a local OpenAI-compatible server.

``RecordingTurn`` plays the engine's side of BackendTurn: our request policy by tool name, a fence that
records each call's result by call id (a replay returns it), checkpoints and the stream.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import pytest
from aiohttp import web
from pydantic import BaseModel
from pydantic_ai import Agent, ApprovalRequired, CallDeferred, RunContext, Tool
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.toolsets import FunctionToolset

import handlers.routes.demo_model
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
    WrappedAgent,
    fingerprint,
    wrap,
)
from bot.backends.pydantic_ai import backend
from bot.models.demo_http import BASE_PATH as DEMO_BASE_PATH
from tests.fakes.openai_server import FakeOpenAI

KEY = "sk-test"


class RecordingTurn:
    """The engine's side of one run, in memory. ``recorded`` outlives a run (pass it on, as after a kill)."""

    def __init__(self, policies: Mapping[str, GateVerdict] | None = None,
                 recorded: dict[str, Any] | None = None, stop_on_text: bool = False):
        self.session_id, self.turn_id, self.owner_id = "S1", "T1", "slack:T1:U1"
        self.policies = dict(policies or {})
        self.recorded = recorded if recorded is not None else {}
        self.stop_on_text = stop_on_text
        self.gated: list[tuple[str, str, dict[str, Any]]] = []
        self.executed: list[str] = []  # call ids whose tool ran (not replayed)
        self.checkpoints: list[tuple[str, int]] = []  # (saved, how many calls had run by then)
        self.texts: list[str] = []
        self.stop = False

    @property
    def stopped(self) -> bool:
        return self.stop

    async def gate(self, call_id: str, tool_name: str, arguments: Mapping[str, Any]) -> GateVerdict:
        self.gated.append((call_id, tool_name, dict(arguments)))
        return self.policies.get(tool_name, GateVerdict(action="run"))

    async def fence(self, call_id: str, tool_name: str, run: Callable[[], Awaitable[Any]], *,
                    idempotent: bool = False) -> Any:
        if call_id in self.recorded:  # as the engine's fence: a recorded failure is raised again
            if isinstance(self.recorded[call_id], Exception):
                raise RuntimeError(str(self.recorded[call_id]))
            return self.recorded[call_id]
        try:
            result = await run()
        except Exception as exc:
            self.recorded[call_id] = exc
            raise
        self.recorded[call_id] = result
        self.executed.append(call_id)
        return result

    async def checkpoint(self, saved: str | Callable[[], str]) -> None:
        # the engine writes it with the next write; this turn keeps it at once, to see when it was given
        self.checkpoints.append((saved() if callable(saved) else saved, len(self.executed)))

    def text(self, delta: str) -> None:
        self.texts.append(delta)
        if self.stop_on_text:
            self.stop = True

    def tool_started(self, call_id: str, tool_name: str, arguments: Mapping[str, Any]) -> None:
        pass  # the engine's fence reports these

    def tool_finished(self, call_id: str, tool_name: str, output: Any) -> None:
        pass


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=KEY) as server:
        yield server


def refund_agent(fake: FakeOpenAI, ran: list[tuple[str, Any]]) -> Agent[None, str]:
    """An ordinary pydantic-ai agent: a refund needing approval, a lookup, a question, a tool that breaks."""
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=fake.base_url, api_key=KEY))
    agent = Agent(model, instructions="You handle refunds.")

    @agent.tool_plain(requires_approval=True)
    def issue_refund(charge_id: str, amount: int) -> str:
        """Refund part of a charge.

        Args:
            charge_id: the charge to refund
            amount: how much, in cents
        """
        ran.append(("issue_refund", {"charge_id": charge_id, "amount": amount}))
        return f"refunded {amount} on {charge_id}"

    @agent.tool_plain(metadata={"idempotent": True})
    def lookup_charge(charge_id: str) -> dict[str, Any]:
        """Look a charge up."""
        ran.append(("lookup_charge", charge_id))
        return {"charge_id": charge_id, "amount": 500}

    @agent.tool_plain
    def pick_reason(topic: str) -> str:
        """Ask the customer-support person why."""
        raise CallDeferred(metadata={"question": f"Why refund {topic}?", "options": ["duplicate", "fraud"]})

    @agent.tool
    def refund_over_limit(ctx: RunContext[None], charge_id: str, amount: int) -> str:
        """Refund; a big one waits for a person's approval."""
        ran.append(("refund_over_limit entered", amount))
        if amount > 100 and not ctx.tool_call_approved:
            raise ApprovalRequired(metadata={"reason": f"{amount} is over the limit"})
        ran.append(("refund_over_limit", amount))
        return f"refunded {amount}"

    @agent.tool_plain
    def broken() -> str:
        raise RuntimeError("the ledger is down")

    return agent


def tool_messages(fake: FakeOpenAI) -> dict[str, str]:
    """What the model was last told each tool call returned, by call id."""
    messages = fake.requests[-1].body["messages"]
    return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}


async def test_a_tool_needing_approval_parks_and_runs_once_approved(fake: FakeOpenAI) -> None:
    ran: list[tuple[str, Any]] = []
    driven = backend(refund_agent(fake, ran))
    fake.reply_tool_calls(("lookup_charge", {"charge_id": "ch_1"}, "c_look"),
                          ("issue_refund", {"charge_id": "ch_1", "amount": 500}, "c_refund"))
    fake.reply_text("Refunded 500 on ch_1.")
    turn = RecordingTurn()

    parked = await driven.start(turn, "refund ch_1", None)

    assert isinstance(parked, Parked)
    [pending] = parked.pending
    assert (pending.call_id, pending.tool_name, pending.kind) == ("c_refund", "issue_refund", "approval")
    assert pending.arguments == {"charge_id": "ch_1", "amount": 500}
    assert pending.decisions == {"approve", "edit", "reject"}
    assert ran == [("lookup_charge", "ch_1")]
    # the model's response was stored before any of its tools ran
    assert len(turn.checkpoints) == 1 and turn.checkpoints[0][1] == 0
    assert "c_refund" in turn.checkpoints[0][0]

    finished = await driven.resume(turn, parked.saved, {"c_refund": Approve(by="slack:T1:U2")})

    assert finished == Finished(text="Refunded 500 on ch_1.", saved=finished.saved)
    assert ran == [("lookup_charge", "ch_1"), ("issue_refund", {"charge_id": "ch_1", "amount": 500})]
    assert turn.executed == ["c_look", "c_refund"]
    assert [call_id for call_id, _, _ in turn.gated] == ["c_look"]  # an approved call is not gated again
    assert tool_messages(fake) == {"c_look": json.dumps({"charge_id": "ch_1", "amount": 500}, separators=(",", ":")),
                                   "c_refund": "refunded 500 on ch_1"}
    assert "".join(turn.texts) == "Refunded 500 on ch_1."


async def test_edited_arguments_are_what_the_tool_runs_with(fake: FakeOpenAI) -> None:
    ran: list[tuple[str, Any]] = []
    driven = backend(refund_agent(fake, ran))
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 500}, "c_refund")
    turn = RecordingTurn()
    parked = await driven.start(turn, "refund ch_1", None)
    assert isinstance(parked, Parked)

    await driven.resume(turn, parked.saved, {"c_refund": Approve(arguments={"charge_id": "ch_1", "amount": 120})})

    assert ran == [("issue_refund", {"charge_id": "ch_1", "amount": 120})]
    assert tool_messages(fake)["c_refund"] == "refunded 120 on ch_1"


async def test_a_rejection_reaches_the_model_with_the_cancellers_reason(fake: FakeOpenAI) -> None:
    ran: list[tuple[str, Any]] = []
    driven = backend(refund_agent(fake, ran))
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 500}, "c_refund")
    fake.reply_text("Understood, no refund.")
    turn = RecordingTurn()
    parked = await driven.start(turn, "refund ch_1", None)
    assert isinstance(parked, Parked)

    finished = await driven.resume(turn, parked.saved, {"c_refund": Reject(message="Already refunded last week.")})

    assert isinstance(finished, Finished) and finished.text == "Understood, no refund."
    assert ran == []
    assert tool_messages(fake) == {"c_refund": "Already refunded last week."}


async def test_our_policy_asks_for_a_tool_the_framework_would_run(fake: FakeOpenAI) -> None:
    ran: list[tuple[str, Any]] = []
    driven = backend(refund_agent(fake, ran))
    fake.reply_tool_call("lookup_charge", {"charge_id": "ch_9"}, "c_look")
    fake.reply_text("It was 500.")
    turn = RecordingTurn(policies={"lookup_charge": GateVerdict(action="ask")})

    parked = await driven.start(turn, "look ch_9 up", None)

    assert isinstance(parked, Parked)
    assert [(p.call_id, p.kind) for p in parked.pending] == [("c_look", "approval")]
    assert ran == [] and turn.executed == []
    finished = await driven.resume(turn, parked.saved, {"c_look": Approve()})
    assert isinstance(finished, Finished) and finished.text == "It was 500."
    assert ran == [("lookup_charge", "ch_9")]


async def test_a_refused_call_does_not_run_and_the_model_reads_why(fake: FakeOpenAI) -> None:
    ran: list[tuple[str, Any]] = []
    driven = backend(refund_agent(fake, ran))
    fake.reply_tool_call("lookup_charge", {"charge_id": "ch_9"}, "c_look")
    fake.reply_text("I may not look that up.")
    turn = RecordingTurn(policies={"lookup_charge": GateVerdict(action="refuse", reason="Lookups are off today.")})

    finished = await driven.start(turn, "look ch_9 up", None)

    assert isinstance(finished, Finished)
    assert ran == []
    assert "Lookups are off today." in tool_messages(fake)["c_look"]


async def test_a_deferred_call_is_a_question_and_its_reply_is_the_tools_result(fake: FakeOpenAI) -> None:
    ran: list[tuple[str, Any]] = []
    driven = backend(refund_agent(fake, ran))
    fake.reply_tool_call("pick_reason", {"topic": "ch_1"}, "c_why")
    fake.reply_text("Noted: fraud.")
    turn = RecordingTurn()

    parked = await driven.start(turn, "refund ch_1", None)

    assert isinstance(parked, Parked)
    [question] = parked.pending
    assert (question.call_id, question.kind, question.prompt) == ("c_why", "question", "Why refund ch_1?")
    assert question.options == ["duplicate", "fraud"]
    finished = await driven.resume(turn, parked.saved, {"c_why": Reply(value="fraud")})
    assert isinstance(finished, Finished) and finished.text == "Noted: fraud."
    assert tool_messages(fake) == {"c_why": "fraud"}


async def test_a_cancelled_question_reaches_the_model_as_a_failed_call_with_the_reason(fake: FakeOpenAI) -> None:
    driven = backend(refund_agent(fake, []))
    fake.reply_tool_call("pick_reason", {"topic": "ch_1"}, "c_why")
    fake.reply_text("I will not guess.")
    turn = RecordingTurn()
    parked = await driven.start(turn, "refund ch_1", None)
    assert isinstance(parked, Parked)

    finished = await driven.resume(turn, parked.saved, {"c_why": Reject(message="Nobody knows yet.")})

    assert isinstance(finished, Finished)
    assert "Nobody knows yet." in tool_messages(fake)["c_why"]


async def test_a_replay_after_a_kill_returns_recorded_results_instead_of_running_again(fake: FakeOpenAI) -> None:
    ran: list[tuple[str, Any]] = []
    driven = backend(refund_agent(fake, ran))
    fake.reply_tool_calls(("lookup_charge", {"charge_id": "ch_1"}, "c_look"),
                          ("lookup_charge", {"charge_id": "ch_2"}, "c_look2"))
    fake.reply_text("Both found.")
    first = RecordingTurn()
    await driven.start(first, "look both up", None)
    assert len(ran) == 2
    checkpoint, calls_done = first.checkpoints[0]  # after the response with the calls, before they ran
    assert calls_done == 0 and "c_look2" in checkpoint

    # the worker died after its tools ran but before the turn was stored: the next one goes on from the checkpoint
    fake.reply_text("Both found.")
    again = RecordingTurn(recorded=dict(first.recorded))
    finished = await driven.resume(again, checkpoint, {})

    assert isinstance(finished, Finished) and finished.text == "Both found."
    assert len(ran) == 2 and again.executed == []
    assert set(tool_messages(fake)) == {"c_look", "c_look2"}


async def test_a_replay_after_the_final_answer_was_checkpointed_gives_that_answer(fake: FakeOpenAI) -> None:
    driven = backend(refund_agent(fake, []))
    fake.reply_text("Final words.")
    first = RecordingTurn()
    await driven.start(first, "hi", None)
    asked = len(fake.requests)

    # killed after the answer's checkpoint, before the turn ended: the replay asks the model nothing more
    again = await driven.resume(RecordingTurn(), first.checkpoints[-1][0], {})

    assert isinstance(again, Finished) and again.text == "Final words."
    assert len(fake.requests) == asked


async def test_a_structured_output_is_the_answer_and_is_not_gated(fake: FakeOpenAI) -> None:
    class Verdict(BaseModel):
        refund: bool
        reason: str

    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=fake.base_url, api_key=KEY))
    driven = backend(Agent(model, output_type=Verdict))
    fake.reply_tool_call("final_result", {"refund": True, "reason": "charged twice"}, "c_out")
    turn = RecordingTurn()

    finished = await driven.start(turn, "should we refund?", None)

    assert isinstance(finished, Finished)
    assert json.loads(finished.text) == {"refund": True, "reason": "charged twice"}
    assert turn.gated == [] and turn.executed == []  # the output is pydantic-ai's, not a tool of the agent's
    again = await driven.resume(RecordingTurn(), turn.checkpoints[-1][0], {})
    assert again == Finished(text=finished.text, saved=again.saved) and len(fake.requests) == 1


async def test_tools_of_the_agents_toolsets_dynamic_ones_and_ones_added_later_are_gated_too(fake: FakeOpenAI) -> None:
    """Not only ``@agent.tool``: a toolset given to the agent, a dynamic one (made anew each run) and one added
    after the agent was given to the bot all run through our request policy and the fence."""
    ran: list[str] = []

    def tool_of(name: str) -> FunctionToolset[None]:
        def act(charge_id: str) -> str:
            ran.append(name)
            return f"{name} {charge_id}"
        return FunctionToolset([Tool(act, name=name)])

    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=fake.base_url, api_key=KEY))
    agent = Agent(model, toolsets=[tool_of("void_charge")])

    @agent.toolset
    def per_run(ctx: RunContext[None]) -> FunctionToolset[None]:
        return tool_of("freeze_card")

    driven = backend(agent)

    @agent.toolset
    def added_later(ctx: RunContext[None]) -> FunctionToolset[None]:
        return tool_of("close_account")

    refused = GateVerdict(action="refuse", reason="Not on a Sunday.")
    turn = RecordingTurn(policies={"void_charge": refused, "freeze_card": refused, "close_account": refused})
    fake.reply_tool_calls(("void_charge", {"charge_id": "ch_1"}, "c_void"),
                          ("freeze_card", {"charge_id": "ch_1"}, "c_freeze"),
                          ("close_account", {"charge_id": "ch_1"}, "c_close"))
    fake.reply_text("None of that is allowed today.")

    finished = await driven.start(turn, "void, freeze and close", None)

    assert isinstance(finished, Finished)
    assert ran == [] and turn.executed == []
    assert sorted(name for _, name, _ in turn.gated) == ["close_account", "freeze_card", "void_charge"]
    assert all("Not on a Sunday." in content for content in tool_messages(fake).values())
    ran.clear()
    allowed = RecordingTurn()
    fake.reply_tool_calls(("freeze_card", {"charge_id": "ch_2"}, "c_freeze2"))
    fake.reply_text("Frozen.")
    await driven.start(allowed, "freeze it", None)
    assert ran == ["freeze_card"] and allowed.executed == ["c_freeze2"]  # fenced under the model's call id


async def test_a_tool_that_asks_for_approval_itself_pauses_the_same_way_on_replay(fake: FakeOpenAI) -> None:
    ran: list[tuple[str, Any]] = []
    driven = backend(refund_agent(fake, ran))
    fake.reply_tool_call("refund_over_limit", {"charge_id": "ch_1", "amount": 900}, "c_big")
    turn = RecordingTurn()
    parked = await driven.start(turn, "refund 900", None)
    assert isinstance(parked, Parked)
    [pending] = parked.pending
    assert (pending.call_id, pending.kind, pending.prompt) == ("c_big", "approval", "900 is over the limit")

    # killed after the pause was recorded: the replay pauses again without entering the tool
    replayed = await driven.resume(RecordingTurn(recorded=turn.recorded), turn.checkpoints[0][0], {})
    assert isinstance(replayed, Parked) and [p.call_id for p in replayed.pending] == ["c_big"]
    assert ran == [("refund_over_limit entered", 900)]

    fake.reply_text("Refunded 900.")
    finished = await driven.resume(turn, parked.saved, {"c_big": Approve()})
    assert isinstance(finished, Finished) and finished.text == "Refunded 900."
    fake.reply_text("Refunded 900.")
    await driven.resume(RecordingTurn(recorded=turn.recorded), parked.saved, {"c_big": Approve()})  # replayed
    assert ran == [("refund_over_limit entered", 900), ("refund_over_limit entered", 900), ("refund_over_limit", 900)]
    assert turn.executed == ["c_big", "c_big:approved"]  # the pause, then the approved run


async def test_text_streams_and_the_stop_button_ends_the_run(fake: FakeOpenAI) -> None:
    driven = backend(refund_agent(fake, []))
    fake.reply_text("This is a long answer that someone stops.", chunk_delay_s=0.01)
    turn = RecordingTurn(stop_on_text=True)

    stopped = await driven.start(turn, "talk", None)

    assert isinstance(stopped, Stopped)
    assert 0 < len(turn.texts) < len("This is a long answer that someone stops.".split())
    assert isinstance(stopped.saved, str)
    fake.reply_text("Hello again.")
    after = await driven.start(RecordingTurn(), "hi", stopped.saved)  # the next turn goes on from it
    assert isinstance(after, Finished) and after.text == "Hello again."
    said = [(m["role"], m.get("content")) for m in fake.requests[-1].body["messages"] if m["role"] != "system"]
    assert said[0] == ("user", "talk") and said[-1] == ("user", "hi")


async def test_the_conversation_carries_into_the_next_turn(fake: FakeOpenAI) -> None:
    driven = backend(refund_agent(fake, []))
    fake.reply_text("Hi, I am the refunds bot.")
    fake.reply_text("You said hello.")
    first = await driven.start(RecordingTurn(), "hello", None)
    assert isinstance(first, Finished)

    second = await driven.start(RecordingTurn(), "what did I say?", first.saved)

    assert isinstance(second, Finished) and second.text == "You said hello."
    said = [(m["role"], m.get("content")) for m in fake.requests[-1].body["messages"] if m["role"] != "system"]
    assert said == [("user", "hello"), ("assistant", "Hi, I am the refunds bot."), ("user", "what did I say?")]


async def test_a_tool_that_breaks_fails_the_run_plainly_and_an_engine_error_is_raised(fake: FakeOpenAI) -> None:
    driven = backend(refund_agent(fake, []))
    fake.reply_tool_call("broken", {}, "c_broken")

    failed = await driven.start(RecordingTurn(), "break it", None)

    assert isinstance(failed, Failed)
    assert "the ledger is down" in failed.reason and "Traceback" not in failed.reason

    class LeaseLost(Exception):
        pass

    class LosingTurn(RecordingTurn):
        async def fence(self, *args: Any, **kwargs: Any) -> Any:
            raise LeaseLost("another worker holds the turn")

    fake.reply_tool_call("lookup_charge", {"charge_id": "ch_1"}, "c_look")
    with pytest.raises(LeaseLost):
        await driven.start(LosingTurn(), "look it up", None)


async def test_the_agents_tools_as_the_engine_sees_them(fake: FakeOpenAI) -> None:
    driven = backend(refund_agent(fake, []))

    tools = {info.name: info for info in driven.tools()}

    assert set(tools) == {"issue_refund", "lookup_charge", "pick_reason", "refund_over_limit", "broken"}
    refund = tools["issue_refund"]
    assert refund.asks and refund.editable and not tools["lookup_charge"].asks
    assert tools["lookup_charge"].idempotent and not refund.idempotent
    assert refund.description.startswith("Refund part of a charge.")
    assert set(refund.parameters["properties"]) == {"charge_id", "amount"}
    assert refund.args_model is not None
    assert refund.args_model(charge_id="ch_1", amount="120").amount == 120
    assert refund.args_model.model_fields["amount"].description == "how much, in cents"
    assert fingerprint(driven.tools()) == fingerprint(backend(refund_agent(fake, [])).tools())


async def test_wrap_finds_the_backend_for_a_pydantic_ai_agent(fake: FakeOpenAI) -> None:
    wrapped = wrap(refund_agent(fake, []), policies={"lookup_charge": "a policy"})

    assert isinstance(wrapped, WrappedAgent) and isinstance(wrapped.backend, AgentBackend)
    assert (wrapped.backend.framework, wrapped.policies) == ("pydantic-ai", {"lookup_charge": "a policy"})


async def test_the_example_agent_runs_on_the_offline_demo_model(monkeypatch: pytest.MonkeyPatch) -> None:
    demo = web.Application()
    handlers.routes.demo_model.add_routes(demo)
    runner = web.AppRunner(demo, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        port = runner.addresses[0][1]
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}{DEMO_BASE_PATH}")
        monkeypatch.setenv("OPENAI_API_KEY", "demo")
        monkeypatch.delitem(sys.modules, "examples.pydantic_ai_agent", raising=False)
        example = importlib.import_module("examples.pydantic_ai_agent")
        driven = example.slack_agent.backend
        turn = RecordingTurn()

        parked = await driven.start(turn, "refund ch_1001 $40", None)

        assert isinstance(parked, Parked)
        assert [(p.tool_name, p.arguments["amount"]) for p in parked.pending] == [("refund_charge", 40.0)]
        finished = await driven.resume(turn, parked.saved, {parked.pending[0].call_id: Approve()})
        assert isinstance(finished, Finished) and "Refunded $40.00 on `ch_1001`" in finished.text
    finally:
        await runner.cleanup()


async def test_an_agents_deps_reach_its_tools_and_wrap_keeps_the_backend_given(fake: FakeOpenAI) -> None:
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=fake.base_url, api_key=KEY))
    agent = Agent(model, deps_type=dict)

    @agent.tool
    def whoami(ctx: RunContext[dict]) -> str:
        return ctx.deps["team"]

    wrapped = wrap(backend(agent, deps={"team": "billing"}), policies={"whoami": "a policy"})
    fake.reply_tool_call("whoami", {}, "c_who")
    fake.reply_text("You are billing.")

    finished = await wrapped.backend.start(RecordingTurn(), "who am I?", None)

    assert isinstance(finished, Finished) and tool_messages(fake) == {"c_who": "billing"}
