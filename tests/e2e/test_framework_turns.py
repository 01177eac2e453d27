"""The engine's side of an agent backend (DESIGN §14), through signed Slack requests: a pause becomes our
card, the answer resumes the run under the lease, the call runs once inside our fence, our policies apply
to the framework's tools, and a run never resumes into an agent whose tools changed.

The backend here is the smallest honest one: a fixed plan (ask to refund, then answer), written against
``bot.backends`` the way the pydantic-ai, OpenAI Agents SDK and LangGraph adapters are.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from blocks.outcomes import NO_LONGER_NEEDED
from bot.approval import Approval, Denied, allowed, always, rejected
from bot.backends import (
    Approve,
    BackendTurn,
    Finished,
    Parked,
    PendingCall,
    Reject,
    Reply,
    ToolInfo,
    wrap,
)
from bot.engine.turn_commands import SessionRead
from bot.models.scripted import ScriptedModel
from bot.state import state_of
from handlers.delivery.status import STATUS_DELAY_S
from localslack.seed import ALICE, BOB, BOT_USER_ID, CAROL, GENERAL
from tests.e2e.framework_script import answer_in
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card


class RefundPlan:
    """Asks to refund ch_1 (the framework gates it itself), then says what happened."""

    framework = "test-plan"
    version = "1"

    def __init__(self, *, extra_tool: bool = False, question: bool = False, think_s: float = 0):
        self.runs: list[dict[str, Any]] = []
        self.extra_tool, self.question, self.think_s = extra_tool, question, think_s

    def tools(self) -> list[ToolInfo]:
        tools = [ToolInfo(name="refund", description="Refund a charge.", asks=True,
                          parameters={"type": "object", "properties": {"charge_id": {"type": "string"}}})]
        if self.extra_tool:
            tools.append(ToolInfo(name="void", description="Void a charge."))
        return tools

    async def start(self, turn: BackendTurn, text: str, saved: str | None) -> Any:
        await asyncio.sleep(self.think_s)  # a slow model: the session shows "processing" and its stop button
        if self.question:
            return Parked(pending=[PendingCall(call_id="q1", tool_name="pick", kind="question",
                                               prompt="Which charge?", options=["ch_1", "ch_2"])],
                          saved=json.dumps({"asked": "q1"}))
        verdict = await turn.gate("call_1", "refund", {"charge_id": "ch_1"})
        if verdict.action == "refuse":
            return Finished(text=f"Refused: {verdict.reason}", saved="[]")
        saved = json.dumps({"asked": "call_1"})
        await turn.checkpoint(saved)
        if verdict.action == "run":
            return await self._refund(turn, "ch_1")
        return Parked(pending=[PendingCall(call_id="call_1", tool_name="refund", arguments={"charge_id": "ch_1"},
                                           decisions=frozenset({"approve", "edit", "reject"}))], saved=saved)

    async def resume(self, turn: BackendTurn, saved: str, answers: dict[str, Any]) -> Any:
        answer = answers[json.loads(saved)["asked"]]
        if isinstance(answer, Reply):
            return Finished(text=f"You picked {answer.value}", saved="[]")
        if isinstance(answer, Reject):
            return Finished(text=f"Not refunded: {answer.message}", saved="[]")
        assert isinstance(answer, Approve)
        return await self._refund(turn, (answer.arguments or {}).get("charge_id", "ch_1"))

    async def _refund(self, turn: BackendTurn, charge: str) -> Finished:
        async def run() -> dict[str, str]:
            self.runs.append({"charge": charge, "owner": turn.owner_id})
            return {"refunded": charge}

        out = await turn.fence("call_1", "refund", run)
        return Finished(text=f"Refunded: {out['refunded']}", saved="[]")


async def test_a_framework_pause_is_our_card_and_the_approved_call_runs_once(local_slack, start_app):
    plan = RefundPlan()
    await start_app(ScriptedModel([]), [], agent=plan)
    ts, card = await mention_and_wait_for_card(local_slack)
    assert "refund" in str(card.blocks) and plan.runs == []
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await answer_in(local_slack, ts, "Refunded: ch_1")
    assert plan.runs == [{"charge": "ch_1", "owner": "slack:T0LOCAL:U0ALICE"}]
    assert "Approved" in str(local_slack.message(GENERAL, card.ts).blocks)


async def test_a_cancel_resumes_the_run_with_a_rejection_it_reads(local_slack, start_app):
    plan = RefundPlan()
    await start_app(ScriptedModel([]), [], agent=plan)
    ts, card = await mention_and_wait_for_card(local_slack)
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Cancel"))
    reply = await answer_in(local_slack, ts, "Not refunded")
    assert "denied" in reply.text.lower()
    assert plan.runs == []


async def test_our_response_policy_decides_who_may_approve_a_framework_tool(local_slack, start_app):
    def bob_only(ctx) -> object:
        return allowed() if ctx.response.principal.slack_user_id == BOB else rejected("Only finance (bob) approves.")

    plan = RefundPlan()
    await start_app(ScriptedModel([]), [], agent=wrap(plan, policies={
        "refund": Approval(request=always(), response=bob_only)}))
    ts, card = await mention_and_wait_for_card(local_slack)
    await local_slack.click(CAROL, GENERAL, card.ts, button(card, "Approve"))
    note = await local_slack.wait_for(lambda: local_slack.ephemerals(CAROL))
    assert "Only finance" in note[-1].text and plan.runs == []
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))
    await answer_in(local_slack, ts, "Refunded: ch_1")
    assert len(plan.runs) == 1


async def test_our_request_policy_can_refuse_a_framework_tool_before_it_runs(local_slack, start_app):
    def never_on_sunday(ctx) -> object:
        return Denied("Refunds are closed today.")

    plan = RefundPlan()
    await start_app(ScriptedModel([]), [], agent=wrap(plan, policies={"refund": Approval(request=never_on_sunday)}))
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1")
    reply = await answer_in(local_slack, ts, "Refused")
    assert "closed today" in reply.text and plan.runs == []


async def test_a_framework_question_is_a_menu_and_its_answer_resumes_the_run(local_slack, start_app):
    plan = RefundPlan(question=True)
    await start_app(ScriptedModel([]), [], agent=plan)
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund something")
    await local_slack.wait_for(lambda: any("Which charge?" in str(m.blocks) for m in local_slack.messages(GENERAL, ts)))
    await local_slack.post_message(ALICE, GENERAL, "ch_2", thread_ts=ts)  # typed, not picked
    await answer_in(local_slack, ts, "You picked ch_2")


async def test_a_turn_paused_under_other_tools_fails_closed_instead_of_resuming(local_slack, start_app):
    first = await start_app(ScriptedModel([]), [], agent=RefundPlan())
    ts, card = await mention_and_wait_for_card(local_slack)
    await first.close()
    changed = RefundPlan(extra_tool=True)  # a deploy added a tool while the turn waited
    await start_app(ScriptedModel([]), [], agent=changed)
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    reply = await answer_in(local_slack, ts, "different version of the agent")
    assert changed.runs == [], reply.text


class SlowExport:
    """Runs a long export at once (no approval); it finishes only when released, unless stopped."""

    framework = "test-plan"
    version = "1"

    def __init__(self) -> None:
        self.started, self.release, self.cancelled = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self.exported: list[str] = []

    def tools(self) -> list[ToolInfo]:
        return [ToolInfo(name="export", description="Export a quarter.")]

    async def start(self, turn: BackendTurn, text: str, saved: str | None) -> Any:
        assert (await turn.gate("call_1", "export", {"name": "q3"})).action == "run"
        await turn.checkpoint("{}")

        async def run() -> str:
            self.started.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            self.exported.append("q3")
            return "exported"

        await turn.fence("call_1", "export", run)
        return Finished(text="All exported.", saved="[]")

    async def resume(self, turn: BackendTurn, saved: str, answers: dict[str, Any]) -> Any:
        raise AssertionError("never parks")


async def test_the_stop_button_mid_approval_ends_a_framework_turn_and_its_card(local_slack, start_app):
    plan = RefundPlan(think_s=STATUS_DELAY_S + 0.3)
    bot = await start_app(ScriptedModel([]), [], agent=plan)
    ts, card = await mention_and_wait_for_card(local_slack)
    await local_slack.stop_agent_session(ALICE, GENERAL, ts, late=True)
    await answer_in(local_slack, ts, "Stopped")
    await local_slack.wait_for(lambda: NO_LONGER_NEEDED in local_slack.message(GENERAL, card.ts).text)
    await bot.wait_idle()
    assert plan.runs == []


async def test_the_stop_button_mid_run_cancels_the_framework_s_running_tool(local_slack, start_app):
    plan = SlowExport()
    bot = await start_app(ScriptedModel([]), [], agent=plan)
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> export q3")
    await asyncio.wait_for(plan.started.wait(), 5)
    await local_slack.wait_for(lambda: local_slack.assistant_state(GENERAL, ts).session_status == "processing")
    await local_slack.stop_agent_session(ALICE, GENERAL, ts)
    await asyncio.wait_for(plan.cancelled.wait(), 3)
    plan.release.set()
    await answer_in(local_slack, ts, "Stopped")
    await bot.wait_idle()
    assert plan.exported == []
    assert not [m for m in local_slack.messages(GENERAL, thread_ts=ts) if "All exported" in m.text]


class CheckpointThenExport:
    """A step's checkpoint, then its tool: the tool looks in Redis for the step it belongs to."""

    framework = "test-plan"
    version = "1"

    def __init__(self) -> None:
        self.store: Any = None
        self.stored_when_run: list[str | None] = []

    def tools(self) -> list[ToolInfo]:
        return [ToolInfo(name="export", description="Export a quarter.")]

    async def start(self, turn: BackendTurn, text: str, saved: str | None) -> Any:
        await turn.checkpoint(lambda: "step 1: the model asked to export q3")

        async def run() -> str:
            snap = await self.store.read(SessionRead(turn.session_id, state_only=True))
            run_state = state_of(snap).turn.run
            self.stored_when_run.append(run_state.saved if run_state else None)
            return "exported"

        await turn.fence("call_1", "export", run)
        return Finished(text="Exported q3.", saved="[]")

    async def resume(self, turn: BackendTurn, saved: str, answers: dict[str, Any]) -> Any:
        raise AssertionError("never parks")


async def test_a_step_is_stored_before_its_tool_runs_though_its_checkpoint_waits_for_the_next_write(
        local_slack, start_app):
    plan = CheckpointThenExport()
    bot = await start_app(ScriptedModel([]), [], agent=plan)
    plan.store = bot.store
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> export q3")
    await answer_in(local_slack, ts, "Exported q3.")
    assert plan.stored_when_run == ["step 1: the model asked to export q3"]
