"""Slack's side of ``/metrics``: every Web API request by method and result, and how fast Slack is acked.

- :class:`SlackApiMeter` is a slack_sdk retry handler that never retries: placed first in every
  client's list (``bot.app.slack_retry_handlers``), it sees each HTTP attempt's response or error
  before the real retry handlers decide, so 429s that a client waits out and retries are counted too.
  Bolt copies a client's retry handlers into the per-request clients it makes for listeners, so their
  calls (``views.open``, private notes) are counted without wrapping anything else.
- :class:`MeteredApp` is Bolt's ``AsyncApp`` timing ``async_dispatch``: with ``process_before_response``
  our listeners ack when they return, so that is the time to the ack, in HTTP and Socket Mode alike.
"""

from __future__ import annotations

import re
import time
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState

from bot.ops.metrics import SLACK_ACK, SLACK_CALLS

_METHOD = re.compile(r"[a-zA-Z][a-zA-Z0-9_.]{0,63}")
PAYLOADS = frozenset(
    {
        "event_callback",
        "block_actions",
        "block_suggestion",
        "view_submission",
        "view_closed",
        "shortcut",
        "message_action",
        "url_verification",
        "slash_command",
    }
)


def api_method(url: str) -> str:
    """``https://slack.com/api/chat.postMessage?x=1`` → ``chat.postMessage`` (anything odd: ``other``)."""
    name = url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return name if _METHOD.fullmatch(name) else "other"


def call_result(response: HttpResponse | None, error: Exception | None) -> str:
    if error is not None or response is None:
        return "exception"  # no usable answer: a connection error, a timeout, a body that does not parse
    if response.status_code == 429:
        return "ratelimited"
    if response.status_code >= 500:
        return "server_error"
    body = response.body if isinstance(response.body, dict) else {}
    if body.get("error") == "ratelimited":
        return "ratelimited"
    return "ok" if body.get("ok", response.status_code < 400) else "error"


class SlackApiMeter(AsyncRetryHandler):
    """Counts every attempt (``hitl_slack_api_calls_total{method,result}``); never asks for a retry."""

    def __init__(self) -> None:
        super().__init__(max_retry_count=0)

    async def can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        SLACK_CALLS.labels(api_method(request.url), call_result(response, error)).inc()
        return False


def payload_type(body: Any) -> str:
    if not isinstance(body, dict):
        return "other"
    kind = body.get("type") or ("slash_command" if "command" in body else None)
    return kind if kind in PAYLOADS else "other"


class MeteredApp(AsyncApp):
    """``AsyncApp`` observing the time to ack each request (``hitl_slack_ack_seconds{payload}``)."""

    async def async_dispatch(self, req: AsyncBoltRequest) -> BoltResponse:
        started = time.perf_counter()
        try:
            return await super().async_dispatch(req)
        finally:
            SLACK_ACK.labels(payload_type(req.body)).observe(time.perf_counter() - started)
