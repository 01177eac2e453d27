"""Optional OpenTelemetry traces: with OTEL_EXPORTER_OTLP_ENDPOINT set, an approve cycle is one trace per
turn whose spans (model, tool, Slack calls) reach an OTLP/HTTP receiver as the collector would get them."""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from bot.ops import logs, tracing
from localslack.seed import ALICE, GENERAL
from tests.e2e.test_approval_flow import RUNS, button, mention_and_wait_for_card, refund_charge, refund_script

trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")


@pytest.fixture
async def collector() -> AsyncIterator[tuple[str, list]]:
    """A minimal OTLP/HTTP traces endpoint: ``POST /v1/traces`` with a protobuf body."""
    spans: list = []

    async def receive(request: web.Request) -> web.Response:
        export = trace_service.ExportTraceServiceRequest.FromString(await request.read())
        spans.extend(s for rs in export.resource_spans for ss in rs.scope_spans for s in ss.spans)
        return web.Response(
            body=trace_service.ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    app = web.Application()
    app.router.add_post("/v1/traces", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", spans
    finally:
        tracing.shutdown()  # whatever happened, later tests run without tracing
        await runner.cleanup()


async def test_an_approve_cycle_is_one_trace_per_turn(local_slack, start_app, collector):
    endpoint, spans = collector
    RUNS.clear()
    bot = await start_app(refund_script(), [refund_charge], OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    ts, card = await mention_and_wait_for_card(local_slack)
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    await bot.wait_idle()
    await bot.close()  # exports what is left

    [root] = [s for s in spans if s.name == "turn"]
    in_turn = [s for s in spans if s.trace_id == root.trace_id and s is not root]
    names = [s.name for s in in_turn]
    assert names.count("model.complete") == 2
    assert "tool.run" in names and "slack chat.postMessage" in names and "slack chat.update" in names
    assert all(s.parent_span_id == root.span_id for s in in_turn)
    tool = next(s for s in in_turn if s.name == "tool.run")
    attributes = {a.key: a.value.string_value for a in tool.attributes}
    assert attributes["tool.name"] == "refund_charge" and attributes["hitl.turn_id"].startswith("turn_")
    # ids, names and outcomes only: no message text in any span
    for span in spans:
        assert "refund ch_1" not in str(span) and "Result:" not in str(span)


def test_without_the_package_tracing_is_off_with_one_line(monkeypatch, caplog):
    assert tracing.setup(None) is False  # no endpoint: nothing to do, nothing said
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with caplog.at_level(logging.WARNING, logger="bot.ops.tracing"):
        assert tracing.setup("http://127.0.0.1:4318") is False
    assert not tracing.enabled()
    [line] = [r.getMessage() for r in caplog.records if r.name == "bot.ops.tracing"]
    assert "OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry is not installed" in line
    assert "slack-hitl-bot[otel]" in line


async def test_the_endpoint_is_logged_without_the_credentials_in_its_url(local_slack, start_app, collector, caplog):
    """A collector's URL may carry a password or a key: the line that says where traces go names the
    host and path only, as the bot's log format writes it."""
    endpoint, _ = collector
    with caplog.at_level(logging.INFO, logger="bot.ops.tracing"):
        await start_app(refund_script(), [refund_charge], OTEL_EXPORTER_OTLP_ENDPOINT=endpoint.replace(
            "http://", "http://otel:pa55-for-traces@") + "/?tenant_key=tk-0123")
    [line] = [logs.TextFormatter().format(r) for r in caplog.records if "exporting traces" in r.getMessage()]
    assert "pa55-for-traces" not in line and "tk-0123" not in line, line
    assert f"exporting traces to {endpoint}/" in line
