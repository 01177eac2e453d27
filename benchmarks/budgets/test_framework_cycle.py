"""What a framework agent's approve cycle costs in Redis (``BOT_AGENT``, DESIGN §14), counted by caller.

A framework's step hands its checkpoint to the engine, which writes it with the turn's next write (the
start of the step's first call, the pause, the end), never in a round trip of its own; and the turn lease
is renewed every second only while one of the run's tools runs (a stop asked elsewhere must reach it),
not while the framework waits on its model.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from benchmarks.roundtrips import SCRIPT_LOADING, counting
from bot.backends import BackendTurn, Finished, Parked, PendingCall, ToolInfo
from bot.models.scripted import ScriptedModel
from localslack.seed import ALICE, GENERAL
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card

THINK_S = 1.5  # a model step: longer than the lease keeper's one-second poll while a tool runs


class ThinkingRefunds:
    """Thinks, asks to refund ch_1 (the framework gates it), then, approved, refunds and thinks again."""

    framework = "test-plan"
    version = "1"

    def __init__(self) -> None:
        self.refunded: list[str] = []

    def tools(self) -> list[ToolInfo]:
        return [ToolInfo(name="refund", description="Refund a charge.", asks=True),
                ToolInfo(name="lookup", description="Look a charge up.")]

    async def start(self, turn: BackendTurn, text: str, saved: str | None) -> Any:
        await asyncio.sleep(THINK_S)
        await turn.checkpoint(lambda: json.dumps({"step": 1}))
        await turn.fence("call_0", "lookup", self._lookup)  # runs at once: its start carries the checkpoint
        await asyncio.sleep(THINK_S)
        await turn.checkpoint(lambda: json.dumps({"step": 2}))  # the pause carries this one
        return Parked(pending=[PendingCall(call_id="call_1", tool_name="refund", arguments={"charge_id": "ch_1"})],
                      saved=json.dumps({"asked": "call_1"}))

    async def resume(self, turn: BackendTurn, saved: str, answers: dict[str, Any]) -> Any:
        await turn.fence("call_1", "refund", self._refund)
        await asyncio.sleep(THINK_S)
        await turn.checkpoint(lambda: json.dumps({"step": 3}))  # the end carries this one
        return Finished(text="Refunded ch_1.", saved="[]")

    async def _lookup(self) -> dict[str, str]:
        return {"charge": "ch_1", "amount": "40.00"}

    async def _refund(self) -> dict[str, str]:
        self.refunded.append("ch_1")
        return {"refunded": "ch_1"}


async def test_a_framework_step_s_checkpoint_rides_the_next_write_and_thinking_renews_no_lease(
        local_slack, start_app):
    plan = ThinkingRefunds()
    bot = await start_app(ScriptedModel([]), [], agent=plan)
    with counting() as trips:
        ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1")
        await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
        await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Refunded ch_1." in m.text)
        await bot.runtime.wait_idle()
    assert plan.refunded == ["ch_1"]

    def sent_by(*functions: str) -> int:  # round trips, less the scripts' first loads (a fresh app)
        loads = sum(n for (caller, name), n in trips.counts.items()
                    if name in SCRIPT_LOADING and all(f" {f}" in f" {caller}" for f in functions))
        return trips.sent_by(*functions) - loads

    assert sent_by("checkpoint") == 0, trips.counts  # never a write of its own
    assert sent_by("_start_call", "commit") == 1, trips.counts  # the lookup's start, with step 1
    assert sent_by("_start_call", "mark_call") == 1, trips.counts  # the approved refund's start
    assert sent_by("_renew_lease") == 0, trips.counts  # 4.5 s of thinking, no tool running long



class SlowToPark(ThinkingRefunds):
    """Thinks for a second, then asks: the turn's start waits for the pause, or is written alone before it."""

    async def start(self, turn: BackendTurn, text: str, saved: str | None) -> Any:
        await asyncio.sleep(1.0)
        return Parked(pending=[PendingCall(call_id="call_1", tool_name="refund", arguments={"charge_id": "ch_1"})],
                      saved=json.dumps({"asked": "call_1"}))


async def test_a_slow_step_s_start_is_written_alone_after_half_a_second_times_bot_delay_scale(local_slack, start_app):
    for scale, written_alone in (("1", 1), ("6", 0)):
        bot = await start_app(ScriptedModel([]), [], agent=SlowToPark(), BOT_DELAY_SCALE=scale)
        with counting() as trips:
            await mention_and_wait_for_card(local_slack, "refund ch_1")
            await bot.runtime.wait_idle()
        writes = sum(n for (caller, name), n in trips.counts.items()
                     if " _write_later" in caller and name not in SCRIPT_LOADING)
        assert writes == written_alone, (scale, trips.counts)
        await bot.close()
