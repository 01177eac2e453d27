"""The /metrics gauges read from Redis at scrape time (store.gauges, bot.ops.metrics.StoreGauges): by kind,
bounded, cached against scrape storms, answering even when Redis does not, and on a Redis Cluster."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from bot.approval import always
from bot.models.scripted import ScriptedModel, call, calls
from bot.ops.metrics import AppMetrics, StoreCounts, StoreGauges
from store.client import RedisClient
from store.gauges import GaugeReader
from tests.engine.harness import make_runtime, recording_tool, say, session


class CountingReader(GaugeReader):
    """The real reader, counting how often a scrape reaches Redis."""

    reads = 0

    async def read(self) -> StoreCounts:
        self.reads += 1
        return await super().read()


async def _park(client: RedisClient) -> None:
    """Two workspaces: one approval in T1, one approval and one question in T2 (one step, one turn)."""
    refund, _ = recording_tool("refund", approval=always())
    steps = [
        call("refund", call_id="c1", charge="ch_1"),
        calls(
            ("refund", {"charge": "ch_2"}, "c2"),
            (
                "ask_question",
                {"question": "Which day?", "options": [{"label": "Sat"}, {"label": "Sun"}]},
                "q1",
            ),
        ),
    ]
    model = ScriptedModel(steps, by_turn_position=False)  # the steps in order, one session after the other
    runtime, _, _ = make_runtime(client, model, [refund])
    await say(runtime, "refund", ref=session("a", team="T1"))
    await say(runtime, "refund and ask", ref=session("b", team="T2"))


def _gauges(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("hitl_")
    }


async def test_open_requests_by_kind_parked_turns_and_the_read_bound(redis: Redis) -> None:
    await _park(redis)
    counts = await GaugeReader(redis).read()
    assert counts.open_requests == {"tool-approval": 2, "question": 1}
    assert counts.parked_turns == 2 and counts.workspaces == 2
    bounded = await GaugeReader(redis, read_limit=2).read()  # the rest is counted, not read
    assert sum(bounded.open_requests.values()) == 3 and bounded.open_requests["unread"] == 1


async def test_a_scrape_storm_reads_redis_once_per_cache_period(redis: Redis) -> None:
    reader = CountingReader(redis, workspaces_ttl_s=0)
    metrics = AppMetrics(StoreGauges(reader, ttl_s=60))
    pages = await asyncio.gather(*(metrics.exposition() for _ in range(20)))
    assert reader.reads == 1 and all(b"hitl_open_requests" in page for page in pages)
    await _park(redis)
    await metrics.exposition()
    assert reader.reads == 1  # still cached: the new requests show at the next period
    metrics.gauges.ttl_s = 0
    text = (await metrics.exposition()).decode()
    assert reader.reads == 2
    assert _gauges(text)[("hitl_open_requests", (("kind", "tool-approval"),))] == 2


async def test_with_redis_down_the_scrape_still_answers() -> None:
    down = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    try:
        text = (await AppMetrics(StoreGauges(GaugeReader(down))).exposition()).decode()
    finally:
        await down.aclose()
    assert _gauges(text)[("hitl_store_gauges_ok", ())] == 0
    assert "hitl_requests_settled_total" in text  # the process's own metrics are there all the same


async def test_gauges_on_a_redis_cluster(cluster_redis: RedisClient) -> None:
    await _park(cluster_redis)
    counts = await GaugeReader(cluster_redis).read()  # SCAN on every master; reads routed by slot
    assert counts.open_requests == {"tool-approval": 2, "question": 1}
    assert counts.parked_turns == 2 and counts.workspaces == 2
