"""A quick answer (complete before its step would stream) goes out without waiting on the step's stream timer.

Every step whose model writes text starts a task that would stream it after ``STREAM_AFTER_S``. When the answer
is complete first, ``message.completed`` posts it whole; it must not wait for that task to wind down: on an
event loop busy with other sessions, each turn of the loop it waits costs the answer milliseconds.
"""

from __future__ import annotations

import asyncio

from bot.protocol import MessageCompleted
from bot.session import SessionRef
from handlers.delivery.streams import LiveAnswers
from store.delivery_pass import PassView
from store.post_ledger import PostLedger

SID = "slack:T0LOCAL:C0QUICK:1718000000.000100"
SESSION = SessionRef(
    session_id=SID, team_id="T0LOCAL", channel={"channel_id": "C0QUICK", "thread_ts": "1718000000.000100"}
)


async def _no_client(team_id: str | None) -> object:
    raise AssertionError("a quick answer calls no Slack method while it is finished")


async def test_a_quick_answer_is_finished_without_waiting_on_its_stream_timer(redis):
    ledger = PostLedger(redis)
    live = LiveAnswers(ledger, _no_client, stream_after_s=60.0)
    live.text_so_far(SESSION, "turn-1", 1, "Refunded.", None)
    await asyncio.sleep(0)  # the step's stream task now waits for its moment (a minute)
    ledger.views[SID] = PassView(
        token="pass", fields={}
    )  # as the delivery pass has it: no round trip to read

    turns = 0

    async def other_sessions() -> None:  # runs once per turn of the loop the answer gives away
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    others = asyncio.create_task(other_sessions())
    await asyncio.sleep(0)
    before = turns
    try:
        rest = await live.finish(
            SESSION, MessageCompleted(session_id=SID, turn_id="turn-1", text="Refunded.", step=1)
        )
        given_away = turns - before
    finally:
        others.cancel()
    assert rest is None  # never streamed: the caller posts it whole
    assert given_away == 0  # it waited on no other task
    assert not ledger.views[SID].fields  # and nothing was claimed for a stream
