"""The bot's own loop as an agent backend (``bot.backends.native``): the bot's model client on the local
OpenAI-compatible server and an ``@tool`` refund under ``always()``, driven by the engine through signed Slack
requests; and a replay without a kill, against a BackendTurn that keeps each fenced call's result."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from bot.approval import always
from bot.backends import Approve, Finished, GateVerdict, Parked
from bot.backends.native import NativeBackend, native
from bot.models.openai import OpenAIChatModel
from bot.models.scripted import ScriptedModel
from bot.session import SessionInfo
from bot.tools import Tool, tool
from localslack.seed import ALICE, GENERAL, TEAM_ID
from tests.audit_polling import audit_entries
from tests.e2e.framework_script import answer_in, refund_then_answer, told_the_model
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card
from tests.e2e.test_decisions import inputs
from tests.fakes.openai_server import FakeOpenAI

KEY = "sk-test"


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=KEY) as server:
        yield server


def refund_tool(ran: list[dict[str, Any]]) -> Tool:
    @tool(approval=always(), editable=True)
    async def issue_refund(charge_id: str, amount: int) -> str:
        """Refund part of a charge, in cents."""
        ran.append({"charge_id": charge_id, "amount": amount})
        return f"refunded {amount} on {charge_id}"

    return issue_refund


def lookup_tool(ran: list[dict[str, Any]]) -> Tool:
    @tool
    async def lookup_charge(charge_id: str) -> dict[str, Any]:
        """Look a charge up."""
        ran.append({"charge_id": charge_id})
        return {"charge_id": charge_id, "amount": 500}

    return lookup_charge


def model_of(fake: FakeOpenAI) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-4o-mini", base_url=fake.base_url, api_key=KEY)


async def test_approve_runs_the_refund_once_and_the_model_reads_its_result(local_slack, start_app, fake):
    ran: list[dict[str, Any]] = []
    refund_then_answer(fake)
    agent = native(model_of(fake), [refund_tool(ran)], instructions="You refund charges.")
    bot = await start_app(ScriptedModel([]), [], agent=agent)

    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
    assert "issue_refund" in json.dumps(card.blocks) and ran == []
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "Done: the refund went through.")
    assert ran == [{"charge_id": "ch_1", "amount": 500}]
    assert told_the_model(fake, "call_refund") == "refunded 500 on ch_1"
    assert fake.requests[-1].body["messages"][0] == {"role": "system", "content": "You refund charges."}
    assert len(fake.requests) == 2
    assert "Approved" in json.dumps(local_slack.message(GENERAL, card.ts).blocks)
    [resolution] = await audit_entries(bot.redis.client, TEAM_ID, kind="resolution")
    assert resolution.data["outcome"] == "approved" and resolution.actor == f"slack:{TEAM_ID}:{ALICE}"
    [execution] = await audit_entries(bot.redis.client, TEAM_ID, kind="execution")
    assert (execution.data["tool"], execution.data["status"]) == ("issue_refund", "completed")


async def test_cancel_with_a_reason_is_what_the_model_reads(local_slack, start_app, fake):
    ran: list[dict[str, Any]] = []
    refund_then_answer(fake)
    await start_app(ScriptedModel([]), [], agent=native(model_of(fake), [refund_tool(ran)]))
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Cancel with reason"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE))
    [reason] = inputs(modal).values()
    await local_slack.submit_view(ALICE, modal.id,
                                  {reason["block_id"]: {reason["element"]["action_id"]: "Customer got store credit"}})

    await answer_in(local_slack, ts, "Done")
    assert ran == []
    told = json.loads(told_the_model(fake, "call_refund"))
    # as the built-in loop tells its model: the refusal's code, and the canceller's words quoted
    assert (told["status"], told["code"]) == ("rejected", "TOOL_EXECUTION_DENIED")
    assert "Customer got store credit" in told["note"]


async def test_edit_before_approve_runs_the_refund_with_the_edit_and_says_so(local_slack, start_app, fake):
    ran: list[dict[str, Any]] = []
    refund_then_answer(fake)
    await start_app(ScriptedModel([]), [], agent=native(model_of(fake), [refund_tool(ran)]))
    ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Edit & approve"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE))
    assert set(inputs(modal)) == {"hitl_arg:charge_id", "hitl_arg:amount"}
    assert (await local_slack.submit_view(ALICE, modal.id, {"hitl_arg:amount": {"value": "120"}})).status == 200

    await answer_in(local_slack, ts, "Done")
    assert ran == [{"charge_id": "ch_1", "amount": 120}]
    told = json.loads(told_the_model(fake, "call_refund"))
    assert told["arguments"] == {"charge_id": "ch_1", "amount": 120} and told["result"] == "refunded 120 on ch_1"
    assert "changed the arguments" in told["note"]


@dataclass
class Failure:
    error: str


class RecordingTurn:
    """The engine's side of one run, in memory: every call may run, and the fence keeps each call's result
    by call id (``recorded`` outlives a run: pass it on, as a worker that takes the turn over reads it)."""

    def __init__(self, recorded: dict[str, Any] | None = None):
        self.session_id, self.turn_id, self.owner_id = "S1", "T1", "slack:T1:U1"
        self.session, self.owner, self.workspace, self.history_window = SessionInfo(id="S1"), None, None, 0
        self.history_limit = 0
        self.recorded = recorded if recorded is not None else {}
        self.executed: list[str] = []
        self.checkpoints: list[str] = []
        self.stopped = False

    def on_stop(self, listener) -> None:  # noqa: ANN001 - nothing stops an in-memory run
        pass

    async def gate(self, call_id: str, tool_name: str, arguments: Mapping[str, Any]) -> GateVerdict:
        return GateVerdict(action="run")

    async def take_messages(self) -> list[str]:
        return []

    async def fence(self, call_id: str, tool_name: str, run: Callable[[], Awaitable[Any]], *,
                    idempotent: bool = False, arguments: Mapping[str, Any] | None = None, answered: int = 0) -> Any:
        if call_id in self.recorded:  # as the engine's fence: a recorded failure is raised again
            kept = self.recorded[call_id]
            if isinstance(kept, Failure):
                raise RuntimeError(kept.error)
            return kept
        self.executed.append(call_id)
        try:
            self.recorded[call_id] = await run()
        except Exception as exc:
            self.recorded[call_id] = Failure(f"{type(exc).__name__}: {exc}")
            raise
        return self.recorded[call_id]

    async def checkpoint(self, saved: str | Callable[[], str]) -> None:
        self.checkpoints.append(saved() if callable(saved) else saved)

    def model_used(self, tokens: int) -> None: ...

    over_budget = False

    def text(self, delta: str) -> None: ...

    def tool_started(self, call_id: str, tool_name: str, arguments: Mapping[str, Any]) -> None: ...

    def tool_finished(self, call_id: str, tool_name: str, output: Any) -> None: ...


async def test_a_resume_from_the_checkpoint_returns_recorded_results_instead_of_running_again(fake):
    ran: list[dict[str, Any]] = []
    backend = NativeBackend(model_of(fake), [lookup_tool(ran)])
    fake.reply_tool_calls(("lookup_charge", {"charge_id": "ch_1"}, "c_look"),
                          ("lookup_charge", {"charge_id": "ch_2"}, "c_look2"))
    fake.reply_text("Both found.")
    first = RecordingTurn()
    assert isinstance(await backend.start(first, "look both up", None), Finished)
    assert len(ran) == 2
    [checkpoint] = first.checkpoints  # after the response with the calls, before they ran
    assert "c_look2" in checkpoint and '"role": "tool"' not in checkpoint

    # the turn was taken over from that checkpoint (its worker stopped before the turn's end was stored)
    fake.reply_text("Both found.")
    again = RecordingTurn(recorded=dict(first.recorded))
    finished = await backend.resume(again, checkpoint, {})

    assert isinstance(finished, Finished) and finished.text == "Both found."
    assert len(ran) == 2 and again.executed == []
    assert json.loads(told_the_model(fake, "c_look2")) == {"charge_id": "ch_2", "amount": 500}
    await backend.model.aclose()


async def test_a_tools_failure_is_what_the_model_reads_run_or_replayed(fake):
    @tool
    async def void_charge(charge_id: str) -> str:
        """Void a charge."""
        raise ValueError(f"{charge_id} is settled already")

    backend = NativeBackend(model_of(fake), [void_charge])
    fake.reply_tool_call("void_charge", {"charge_id": "ch_1"}, "c_void")
    fake.reply_text("It could not be voided.")
    first = RecordingTurn()
    assert isinstance(await backend.start(first, "void ch_1", None), Finished)
    said = json.loads(told_the_model(fake, "c_void"))
    assert said == {"status": "failed", "error": "ValueError: ch_1 is settled already"}

    fake.reply_text("It could not be voided.")
    again = RecordingTurn(recorded=dict(first.recorded))
    assert isinstance(await backend.resume(again, first.checkpoints[0], {}), Finished)
    assert again.executed == [] and json.loads(told_the_model(fake, "c_void")) == said
    await backend.model.aclose()


async def test_an_approved_call_whose_result_was_recorded_is_not_run_again_on_resume(fake):
    ran: list[dict[str, Any]] = []
    backend = NativeBackend(model_of(fake), [refund_tool(ran)])
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 500}, "call_refund")
    parked = await backend.start(_Asking(), "refund ch_1", None)
    assert isinstance(parked, Parked) and [p.call_id for p in parked.pending] == ["call_refund"]
    assert "edit" in parked.pending[0].decisions

    fake.reply_text("Done.")
    first = RecordingTurn()
    await backend.resume(first, parked.saved, {"call_refund": Approve()})
    fake.reply_text("Done.")
    again = RecordingTurn(recorded=dict(first.recorded))
    finished = await backend.resume(again, parked.saved, {"call_refund": Approve()})

    assert isinstance(finished, Finished) and finished.text == "Done."
    assert ran == [{"charge_id": "ch_1", "amount": 500}] and again.executed == []
    assert told_the_model(fake, "call_refund") == "refunded 500 on ch_1"
    await backend.model.aclose()


class _Asking(RecordingTurn):
    async def gate(self, call_id: str, tool_name: str, arguments: Mapping[str, Any]) -> GateVerdict:
        return GateVerdict(action="ask")
