"""GET /metrics as Prometheus reads it, around an approve cycle driven by localslack over signed HTTP.

Counters are process-wide (several apps run in this process, one after another), so each test reads
them as a dashboard does: by how much they moved between two scrapes.
"""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bot.models.scripted import ScriptedModel, say
from localslack.seed import ALICE, BOT_USER_ID, GENERAL, TEAM_ID
from tests.e2e.test_approval_flow import RUNS, button, mention_and_wait_for_card, refund_charge, refund_script

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(bot) -> tuple[Samples, str]:
    async with aiohttp.ClientSession() as http, http.get(f"{bot.url}/metrics") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = await resp.text()
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    return samples, text


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """Summed over the labels not given."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


async def test_an_approve_cycle_shows_in_metrics(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(refund_script(), [refund_charge])
    bot.metrics.gauges.ttl_s = 0  # read Redis at every scrape here (the default caches for 10 s)
    bot.metrics.gauges.source.workspaces_ttl_s = 0
    before, _ = await scrape(bot)

    ts, card = await mention_and_wait_for_card(local_slack)
    waiting, _ = await scrape(bot)
    assert value(waiting, "hitl_open_requests", kind="tool-approval") == 1
    assert value(waiting, "hitl_parked_turns") == 1
    assert value(waiting, "hitl_store_gauges_ok") == 1

    result = await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    assert result.status == 200
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    await bot.wait_idle()
    after, text = await scrape(bot)

    def moved(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    assert moved("hitl_requests_settled_total", kind="tool-approval", outcome="approved") == 1
    assert moved("hitl_answers_total", result="settled") == 1
    assert moved("hitl_settle_seconds_count", result="settled") == 1
    assert moved("hitl_tool_runs_total", tool="refund_charge", outcome="completed") == 1
    assert moved("hitl_tool_run_seconds_count", tool="refund_charge") == 1
    assert moved("hitl_slack_ack_seconds_count", payload="block_actions") >= 1
    assert moved("hitl_slack_ack_seconds_count", payload="event_callback") >= 1
    assert moved("hitl_slack_api_calls_total", method="chat.postMessage", result="ok") >= 2  # card, answer
    assert moved("hitl_slack_api_calls_total", method="chat.update", result="ok") >= 1  # the card, settled
    assert moved("hitl_delivery_lag_seconds_count") >= 5
    assert moved("hitl_turn_events_total", type="turn.started") == 1
    assert moved("hitl_turn_events_total", type="turn.completed") == 1
    assert moved("hitl_model_request_seconds_count", result="ok") == 2
    assert total(after, "hitl_open_requests") == 0
    assert value(after, "hitl_parked_turns") == 0
    assert "process_cpu_seconds_total" in text
    # label values are bounded sets: no user, session or request id, no message text
    for forbidden in (ALICE, "slack:", ts, "refund ch_1", "Result:"):
        assert forbidden not in text


async def test_a_rate_limited_post_is_counted(local_slack, start_app):
    bot = await start_app(ScriptedModel([say("after the rate limit")]), [], recovery_interval=0.2)
    before, _ = await scrape(bot)
    local_slack.fail_next("chat.postMessage", status=429, retry_after=1, times=1)
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> hi")
    await local_slack.wait_for_message(
        GENERAL, thread_ts=ts, predicate=lambda m: "after the rate limit" in m.text, timeout_s=10
    )
    after, _ = await scrape(bot)
    limited = (
        "hitl_slack_api_calls_total",
        frozenset({("method", "chat.postMessage"), ("result", "ratelimited")}),
    )
    assert after.get(limited, 0) - before.get(limited, 0) == 1


async def test_health_readiness_and_metrics_name_no_workspace_person_thread_or_request(local_slack, start_app):
    """Anyone who can reach the port can read these: while a request waits (the moment the gauges count
    it) and after it settled, they carry counts and bounded labels only, never an id or a token."""
    RUNS.clear()
    bot = await start_app(refund_script(), [refund_charge])
    bot.metrics.gauges.ttl_s = 0
    bot.metrics.gauges.source.workspaces_ttl_s = 0
    ts, card = await mention_and_wait_for_card(local_slack)
    [waiting] = await bot.store.pending_for_team(TEAM_ID)
    ids = [TEAM_ID, ALICE, GENERAL, BOT_USER_ID, ts, card.ts, waiting.request_id, waiting.session_id,
           waiting.turn_id, waiting.request.action.call_id, local_slack.bot_token, "refund ch_1"]

    async def everything_shown() -> str:
        async with aiohttp.ClientSession() as http:
            bodies = []
            for path in ("/healthz", "/readyz", "/metrics"):
                async with http.get(f"{bot.url}{path}") as resp:
                    assert resp.status == 200, path
                    bodies.append(await resp.text())
        return "\n".join(bodies)

    shown = await everything_shown()
    assert 'hitl_open_requests{kind="tool-approval"} 1.0' in shown  # the waiting request is counted
    assert [i for i in ids if i and i in shown] == []
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    await bot.wait_idle()
    shown = await everything_shown()
    assert [i for i in ids if i and i in shown] == []


async def test_a_framework_agent_s_tool_runs_show_in_metrics(local_slack, start_app):
    from bot.models.scripted import ScriptedModel
    from tests.e2e.test_framework_turns import RefundPlan

    bot = await start_app(ScriptedModel([]), [], agent=RefundPlan())
    before, _ = await scrape(bot)
    ts, card = await mention_and_wait_for_card(local_slack)
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Refunded: ch_1" in m.text)
    await bot.wait_idle()
    after, _ = await scrape(bot)
    assert total(after, "hitl_tool_runs_total", tool="refund", outcome="completed") - total(
        before, "hitl_tool_runs_total", tool="refund", outcome="completed") == 1
    assert total(after, "hitl_tool_run_seconds_count", tool="refund") - total(
        before, "hitl_tool_run_seconds_count", tool="refund") == 1
