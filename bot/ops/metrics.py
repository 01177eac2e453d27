"""Prometheus metrics: the one module that owns the metric objects.

The counters and histograms are process-wide, like loggers: the engine's modules bump them where the
work happens (a settle, a tool run, a timer, a delivery) without any object being passed around, and
with no Redis work at all. Each running app builds its own :class:`CollectorRegistry` that holds these
objects plus its own scrape-time gauges (:class:`StoreGauges`, read from its Redis), so several apps in
one process (the end-to-end tests) never register a name twice; they do share the counters, which
readers treat as Prometheus treats every counter: by how much it moved.

Label values are bounded sets only — outcomes, kinds, Slack method names, registered tool names, event
types — never user, session or request ids, and never text.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric

from bot.models.base import ChatModel, Message, ModelResponse, TextCallback, ToolSpec
from bot.ops import tracing

log = logging.getLogger(__name__)

# the *_created series double every counter's lines and tell a dashboard nothing it needs
disable_created_metrics()

CONTENT_TYPE = CONTENT_TYPE_LATEST
# Slack wants an ack within 3 s: fine steps below it
ACK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0)
WORK_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
LAG_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)

SLACK_ACK = Histogram(
    "hitl_slack_ack_seconds",
    "Time from a Slack request reaching the app to its acknowledgement "
    "(payload=block_actions: clicks and menu choices; view_submission: modals; event_callback: messages).",
    ["payload"],
    buckets=ACK_BUCKETS,
    registry=None,
)
SETTLE = Histogram(
    "hitl_settle_seconds",
    "Time to settle one answer: read, response policy, atomic settle.",
    ["result"],
    buckets=ACK_BUCKETS,
    registry=None,
)
SETTLED = Counter(
    "hitl_requests_settled_total",
    "Requests settled, by kind and outcome (approved, denied, answered, ignored, cancelled, expired).",
    ["kind", "outcome"],
    registry=None,
)
ANSWERS = Counter(
    "hitl_answers_total",
    "Answers to requests, by what became of them (settled, partial, rejected, failed, "
    "stale, invalid, forbidden).",
    ["result"],
    registry=None,
)
STORE_UNAVAILABLE = Counter(
    "hitl_slack_store_unavailable_total",
    "People's Slack requests (clicks, submissions, shortcuts, commands) answered 'try again' because "
    "Redis was unreachable, by payload type.",
    ["payload"],
    registry=None,
)
TIMERS_FIRED = Counter(
    "hitl_timers_fired_total",
    "Deadlines fired by this replica's sweep (expire, remind, escalate, schedule).",
    ["kind"],
    registry=None,
)
SLACK_CALLS = Counter(
    "hitl_slack_api_calls_total",
    "Slack Web API requests, each attempt counted, by method and result "
    "(ok, error, ratelimited, server_error, exception).",
    ["method", "result"],
    registry=None,
)
DELIVERY_LAG = Histogram(
    "hitl_delivery_lag_seconds",
    "Time from an event's commit to its delivery to Slack by the outbox.",
    buckets=LAG_BUCKETS,
    registry=None,
)
TURN_EVENTS = Counter(
    "hitl_turn_events_total",
    "Events delivered to Slack, by type (turn.started, turn.completed, …).",
    ["type"],
    registry=None,
)
MODEL_SECONDS = Histogram(
    "hitl_model_request_seconds",
    "Model calls (retries included), by result (ok, error).",
    ["result"],
    buckets=WORK_BUCKETS,
    registry=None,
)
MODEL_TOKENS = Counter(
    "hitl_model_tokens_total",
    "Tokens the model endpoint reported (type: prompt, completion).",
    ["type"],
    registry=None,
)
TOOL_RUNS = Counter(
    "hitl_tool_runs_total",
    "Tool executions, by tool and outcome (completed, failed, asked, rejected: stopped while it ran).",
    ["tool", "outcome"],
    registry=None,
)
TOOL_SECONDS = Histogram(
    "hitl_tool_run_seconds", "Time a tool's function ran.", ["tool"], buckets=WORK_BUCKETS, registry=None
)

PROCESS_METRICS = (
    SLACK_ACK,
    SETTLE,
    SETTLED,
    ANSWERS,
    STORE_UNAVAILABLE,
    TIMERS_FIRED,
    SLACK_CALLS,
    DELIVERY_LAG,
    TURN_EVENTS,
    MODEL_SECONDS,
    MODEL_TOKENS,
    TOOL_RUNS,
    TOOL_SECONDS,
)

# --- gauges read from Redis at scrape time ---------------------------------------------------------

GAUGE_CACHE_S = 10.0  # a scrape storm reads Redis at most this often per replica


@dataclass
class StoreCounts:
    """What Redis holds right now, read by ``store.gauges`` (sizes of indexes that already exist)."""

    # kind → open requests ("unread": those past the read bound)
    open_requests: dict[str, int] = field(default_factory=dict)
    parked_turns: int = 0  # distinct turns waiting on the open requests read
    active_sessions: int = 0  # ZCARD hitl:active: turns being worked on, or due a look
    outbox_sessions: int = 0  # ZCARD hitl:outbox: sessions with events to deliver or a delivery pass due
    timers: int = 0  # ZCARD hitl:timers: deadlines and schedule ticks waiting
    workspaces: int = 0  # workspaces with a pending-requests index


class GaugeSource(Protocol):
    """Where the gauges come from (``store.gauges.GaugeReader``)."""

    async def read(self) -> StoreCounts: ...


class StoreGauges:
    """A collector whose values come from Redis, refreshed by ``await refresh()`` before a scrape and
    cached for ``ttl_s`` (collect() itself is synchronous and never touches Redis)."""

    def __init__(self, source: GaugeSource, *, ttl_s: float = GAUGE_CACHE_S):
        self.source = source
        self.ttl_s = ttl_s  # tests set 0 to read at every scrape
        self._counts: StoreCounts | None = None
        self._read_at = float("-inf")
        self._ok = False
        self._lock = asyncio.Lock()

    async def refresh(self) -> None:
        async with self._lock:  # concurrent scrapes share one read
            if time.monotonic() - self._read_at < self.ttl_s:
                return
            try:
                self._counts, self._ok = await self.source.read(), True
            except Exception as exc:  # noqa: BLE001 - a scrape must answer even with Redis down
                log.warning("metrics: could not read the gauges from Redis (%s)", type(exc).__name__)
                self._ok = False
            self._read_at = time.monotonic()

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "hitl_store_gauges_ok",
            "1 when the gauges below were read from Redis at the "
            "last refresh, 0 when that read failed (they then keep their last values).",
        )
        up.add_metric([], 1.0 if self._ok else 0.0)
        yield up
        counts = self._counts
        if counts is None:
            return
        requests = GaugeMetricFamily(
            "hitl_open_requests", "Requests waiting for a person, by kind.", labels=["kind"]
        )
        for kind, n in sorted(counts.open_requests.items()):
            requests.add_metric([kind], n)
        yield requests
        for name, doc, value in (
            ("hitl_parked_turns", "Turns parked on open requests.", counts.parked_turns),
            (
                "hitl_active_sessions",
                "Sessions whose turn is being worked on or is due a look (hitl:active).",
                counts.active_sessions,
            ),
            (
                "hitl_outbox_sessions",
                "Sessions on the outbox list (hitl:outbox): events to deliver, or a delivery pass due.",
                counts.outbox_sessions,
            ),
            ("hitl_timers_scheduled", "Deadlines and schedule ticks waiting (hitl:timers).", counts.timers),
            ("hitl_pending_workspaces", "Workspaces with a pending-requests index.", counts.workspaces),
        ):
            gauge = GaugeMetricFamily(name, doc)
            gauge.add_metric([], value)
            yield gauge


class AppMetrics:
    """One app's registry: the process-wide metrics plus its own store gauges and process stats."""

    def __init__(self, gauges: StoreGauges | None = None):
        self.registry = CollectorRegistry(auto_describe=True)
        for metric in PROCESS_METRICS:
            self.registry.register(metric)
        ProcessCollector(registry=self.registry)  # CPU seconds, memory, open fds (Linux)
        PlatformCollector(registry=self.registry)
        self.gauges = gauges
        if gauges is not None:
            self.registry.register(gauges)  # type: ignore[arg-type]  # a duck-typed collector

    async def exposition(self) -> bytes:
        """The text a Prometheus scrape gets."""
        if self.gauges is not None:
            await self.gauges.refresh()
        return generate_latest(self.registry)


# --- the model ---------------------------------------------------------------------------------------


class MeteredModel:
    """A ``ChatModel`` that times every call and counts the tokens the endpoint reported (OpenAI's
    ``usage``; streamed answers carry it in their last chunk, asked for with ``stream_options``)."""

    def __init__(self, inner: ChatModel):
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)  # test doubles may not have one

    def __getattr__(self, name: str) -> Any:  # aclose(), and whatever tests look at on the inner model
        return getattr(self.inner, name)

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec], *, on_text: TextCallback | None = None
    ) -> ModelResponse:
        started = time.perf_counter()
        try:
            response = await self.inner.complete(messages, tools, on_text=on_text)
        except BaseException as exc:
            elapsed = time.perf_counter() - started
            MODEL_SECONDS.labels("error").observe(elapsed)
            tracing.record(
                "model.complete", elapsed, {"gen_ai.request.model": self.name}, error=type(exc).__name__
            )
            raise
        elapsed = time.perf_counter() - started
        usage = response.usage
        MODEL_SECONDS.labels("ok").observe(elapsed)
        MODEL_TOKENS.labels("prompt").inc(usage.prompt_tokens)
        MODEL_TOKENS.labels("completion").inc(usage.completion_tokens)
        tracing.record(
            "model.complete",
            elapsed,
            {
                "gen_ai.request.model": self.name,
                "gen_ai.usage.input_tokens": usage.prompt_tokens,
                "gen_ai.usage.output_tokens": usage.completion_tokens,
            },
        )
        return response
