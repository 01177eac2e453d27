"""Sweeps never wait on a tool or a model: a replica that finds a turn to continue
when it starts hands it to a background drive and answers at once, and a schedule's tick starts its turn
in the background, so the sweep that fired it (and every deadline after it) goes on beside a slow tool."""

from __future__ import annotations

import asyncio
import time

from bot.approval import always
from bot.models.scripted import ScriptedModel, call, say
from bot.principals import slack_user
from bot.protocol import InputResponse
from bot.tools import Tool
from localslack.seed import ALICE, GENERAL, TEAM_ID
from tests.e2e.test_approval_flow import mention_and_wait_for_card


async def test_a_replica_starting_beside_a_slow_turn_answers_at_once_and_finishes_it_later(local_slack, start_app):
    entered, release, runs = asyncio.Event(), asyncio.Event(), []

    async def sync_ledger(args: dict) -> dict:
        runs.append(args)
        entered.set()
        await release.wait()  # slow: the test holds it
        return {"synced": True}

    tool = Tool(sync_ledger, name="sync_ledger", description="Sync the ledger.", approval=always())
    model = ScriptedModel([call("sync_ledger"), say("Ledger synced.")])  # shared: whichever replica continues
    first = await start_app(model, [tool])
    ts, _ = await mention_and_wait_for_card(local_slack, "sync the ledger")
    [record] = await first.store.pending_for_team(TEAM_ID)
    # approved, and the process that settled it died before it drove the turn: the next replica's start-up
    # sweep finds the turn to continue
    settled = await first.runtime.answer(InputResponse(request_id=record.request_id, option_id="approve",
                                                       principal=slack_user(TEAM_ID, ALICE)), resume=False)
    assert settled.state == "settled"

    began = time.monotonic()
    try:
        second = await asyncio.wait_for(start_app(model, [tool], recovery_interval=0.2), 3)
        assert time.monotonic() - began < 3
        await asyncio.wait_for(entered.wait(), 3)  # it continues the turn, in the background
        ready = await asyncio.to_thread(_get, f"{second.url}/readyz")
        assert ready == 200 and not release.is_set()
    finally:
        release.set()
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: m.text == "Ledger synced.")
    assert reply and len(runs) == 1


async def test_a_scheduled_turn_with_a_slow_tool_does_not_hold_up_the_sweep_that_fired_it(local_slack, start_app):
    entered, release, runs = asyncio.Event(), asyncio.Event(), []

    async def sync_ledger(args: dict) -> dict:
        runs.append(args)
        entered.set()
        await release.wait()
        return {"synced": True}

    tool = Tool(sync_ledger, name="sync_ledger", description="Sync the ledger.")  # runs without a card
    bot = await start_app(ScriptedModel([call("sync_ledger"), say("Ledger synced.")]), [tool])
    said = await local_slack.slash_command(ALICE, "/agent", "schedule in 10m sync the ledger", channel_id=GENERAL)
    assert said.status == 200 and "Scheduled" in said.body
    now = bot.runtime.settings.clock() + 11 * 60
    bot.runtime.settings.clock = lambda: now
    try:
        await asyncio.wait_for(bot.runtime.recover(), 2)  # fires the tick, and does not wait for its turn
        await asyncio.wait_for(entered.wait(), 3)
        await asyncio.wait_for(bot.runtime.recover(), 1)  # the next sweep neither
        assert not release.is_set()
    finally:
        release.set()
    await local_slack.wait_for(lambda: any(m.text == "Ledger synced." for m in _thread_replies(local_slack)))
    assert len(runs) == 1


def _thread_replies(slack) -> list:
    return [r for m in slack.messages(GENERAL) for r in slack.messages(GENERAL, thread_ts=m.ts)]


def _get(url: str) -> int:
    import urllib.request

    with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - a local test server
        return response.status
