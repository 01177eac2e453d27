"""Where an agent session's status is recorded in a quick approve cycle, as Redis sees it (``MONITOR``):
inside the delivery pass's closing script, not by round trips of its own."""

from __future__ import annotations

from benchmarks.budgets.redis_monitor import monitored
from tests.e2e.test_agent_sessions import quick_approve_cycle
from tests.e2e.test_approval_flow import refund_charge, refund_script


async def test_a_quick_cycle_records_its_session_status_with_the_pass_closing_round_trip(local_slack, start_app,
                                                                                     redis_url):
    """The status last set (what keeps a redelivery from setting it again) is written by the delivery pass's
    closing script, not by a round trip of its own (``PostLedger.set(..., in_pass=True)``)."""
    bot = await start_app(refund_script(), [refund_charge])
    async with monitored(redis_url) as monitor:
        await quick_approve_cycle(local_slack, "refund ch_1 please")
        await bot.wait_idle()
    seen = monitor.by_kind()  # (client type: "lua" run by a script, else sent by the app; command)

    writes = [(kind, command) for kind, command in seen if command.startswith("HSET") and "agent_session" in command]
    assert writes, "the session's status was never recorded"
    assert all(kind == "lua" for kind, _ in writes), f"recorded by round trips of their own: {writes}"
