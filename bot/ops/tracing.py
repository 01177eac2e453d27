"""Optional OpenTelemetry traces: on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set and the
``otel`` extra is installed (``pip install 'slack-hitl-bot[otel]'``); otherwise every call here is a no-op.

**A turn is a trace.** A turn is driven in pieces — by whichever replica holds its lease, before and
after a park that may last days — so no one process can hold a span open for it. Its trace id is
therefore derived from its ``turn_id`` (a hash), and so is the id of its root span ``turn``, written
when ``turn.started`` is delivered. Every span started while a turn is being worked on (the turn id
is in ``bot.ops.logs``' context) is that root's child, whichever process starts it: model calls
(``model.complete``), tool runs (``tool.run``), Slack Web API calls (``slack <method>``, from the
shared HTTP session, ``slack_trace_config``), all children of the root. Outside a turn (a click's ack)
a span starts a trace of its own.

Spans carry ids and names (tool, Slack method, outcome), never message text. The exporter is OTLP over
HTTP/protobuf; the other ``OTEL_EXPORTER_OTLP_*`` variables (headers, timeout) apply as usual.
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bot.ops import logs

log = logging.getLogger(__name__)

SERVICE_NAME = "slack-hitl-bot"
_tracer: Any = None  # an opentelemetry Tracer while tracing is on
_provider: Any = None
_forced_ids: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "hitl_forced_ids", default=None
)


def enabled() -> bool:
    return _tracer is not None


def setup(endpoint: str | None) -> bool:
    """Start exporting to ``endpoint`` (OTLP/HTTP); True when tracing is on. One line says why not."""
    global _tracer, _provider
    if not endpoint:
        return False
    if _tracer is not None:  # another app in this process turned it on (tests)
        return True
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry is not installed: "
            "pip install 'slack-hitl-bot[otel]' to export traces; tracing is off"
        )
        return False
    _provider = TracerProvider(
        resource=Resource.create({"service.name": SERVICE_NAME}), id_generator=_turn_id_generator()
    )
    _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=_traces_url(endpoint))))
    # our own provider, not the global one: an app's close() ends it, and the next app may start another
    _tracer = _provider.get_tracer("bot")
    log.info("exporting traces to %s", logs.redact_url(_traces_url(endpoint)))  # a URL may carry a key
    return True


def shutdown() -> None:
    """Export what is left and stop (an app's close)."""
    global _tracer, _provider
    provider, _tracer, _provider = _provider, None, None
    if provider is not None:
        provider.shutdown()  # flushes the batch: a blocking HTTP post of the last spans


def _traces_url(endpoint: str) -> str:
    """The OTLP/HTTP convention: the base endpoint gets ``/v1/traces`` appended."""
    parts = urlsplit(endpoint)
    path = parts.path.rstrip("/")
    path = path if path.endswith("/v1/traces") else f"{path}/v1/traces"
    return urlunsplit(parts._replace(path=path))  # after the path: a query (a collector's key) stays one


def _ids_of_turn(turn_id: str) -> tuple[int, int]:
    digest = hashlib.sha256(turn_id.encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:24], "big") or 1


def _turn_id_generator() -> Any:
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class TurnIds(RandomIdGenerator):
        """Random ids, except for a turn's root span: ids derived from its turn id."""

        def generate_trace_id(self) -> int:
            forced = _forced_ids.get()
            return forced[0] if forced else super().generate_trace_id()

        def generate_span_id(self) -> int:
            forced = _forced_ids.get()
            return forced[1] if forced else super().generate_span_id()

    return TurnIds()


def _turn_context(turn_id: str) -> Any:
    """A context whose parent is the turn's root span (wherever and whenever that was written)."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    trace_id, span_id = _ids_of_turn(turn_id)
    parent = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(parent))


def record(name: str, seconds: float, attributes: dict[str, Any], *, error: str | None = None) -> None:
    """A span that just ended, ``seconds`` long, under the current turn's trace (or a trace of its own
    outside a turn). Written after the fact, so the code it times needs no ``with`` around it."""
    if _tracer is None:
        return
    from opentelemetry.trace import Status, StatusCode

    end = time.time_ns()
    parent, attrs = _parent_and_attributes(attributes)
    done = _tracer.start_span(name, context=parent, attributes=attrs, start_time=end - int(seconds * 1e9))
    if error is not None:
        done.set_status(Status(StatusCode.ERROR, error))
    done.end(end_time=end)


def _parent_and_attributes(attributes: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    ids = logs.current_ids()
    turn_id = ids.get("turn_id")
    parent = _turn_context(turn_id) if turn_id else None
    attrs = {f"hitl.{k}": v for k, v in ids.items()} | {k: v for k, v in attributes.items() if v is not None}
    return parent, attrs


def turn_started(turn_id: str, session_id: str, team_id: str | None, at: float) -> None:
    """Write the turn's root span (ids from the turn id), so its trace has a root whatever process
    works on it later."""
    if _tracer is None:
        return
    from opentelemetry.context import Context

    token = _forced_ids.set(_ids_of_turn(turn_id))
    try:
        root = _tracer.start_span(
            "turn",
            context=Context(),
            start_time=int(at * 1e9),
            attributes={
                "hitl.turn_id": turn_id,
                "hitl.session_id": session_id,
                **({"hitl.team_id": team_id} if team_id else {}),
            },
        )
    finally:
        _forced_ids.reset(token)
    root.end(end_time=max(int(time.time() * 1e9), int(at * 1e9)))


def slack_trace_config() -> Any:
    """An aiohttp TraceConfig making a span of each Slack Web API request (None when tracing is off)."""
    if _tracer is None:
        return None
    import aiohttp
    from opentelemetry.trace import Status, StatusCode

    config = aiohttp.TraceConfig()

    # started and ended in different callbacks: plain spans, never made "current" (that would need the
    # same context on both sides)
    async def on_start(session: Any, ctx: Any, params: Any) -> None:
        if _tracer is None:
            return
        method = str(params.url).split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1][:64]
        parent, attrs = _parent_and_attributes({"slack.method": method, "http.request.method": params.method})
        ctx.span = _tracer.start_span(f"slack {method}", context=parent, attributes=attrs)

    async def on_end(session: Any, ctx: Any, params: Any) -> None:
        if (span_ := getattr(ctx, "span", None)) is not None:
            span_.set_attribute("http.response.status_code", params.response.status)
            if params.response.status >= 400:
                span_.set_status(Status(StatusCode.ERROR, f"HTTP {params.response.status}"))
            span_.end()

    async def on_error(session: Any, ctx: Any, params: Any) -> None:
        if (span_ := getattr(ctx, "span", None)) is not None:
            span_.set_status(Status(StatusCode.ERROR, type(params.exception).__name__))
            span_.end()

    config.on_request_start.append(on_start)
    config.on_request_end.append(on_end)
    config.on_request_exception.append(on_error)
    return config
