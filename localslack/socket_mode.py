"""Socket Mode: Slack's WebSocket transport for events, interactions and slash commands.

The app calls ``apps.connections.open`` with its app-level token and gets a single-use URL; on connecting it
receives ``hello``, then envelopes ``{"envelope_id", "type", "payload", "accepts_response_payload"[,
"retry_attempt", "retry_reason"]}`` which it acks with ``{"envelope_id"[, "payload"]}`` within 3 seconds.
``disconnect`` messages ask it to fetch a new URL. Nothing is signed: the app-level token authenticated the
connection. Shapes follow slack_sdk's ``socket_mode`` client and its test fixtures.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import WSCloseCode, WSMsgType, web
from pydantic import BaseModel, ValidationError

from localslack.models import APP_ID

log = logging.getLogger(__name__)

SOCKET_ROUTE = "/socket/{ticket}"
DEBUG_HOST = "applink-localslack"
CONNECTION_LIFETIME_S = 18_060  # what Slack's hello reports (~5 h before a refresh)
DEFAULT_PING_INTERVAL_S = 30.0  # server pings; a client that stops answering is dropped
DEFAULT_REFRESH_GRACE_S = 10.0  # "warning" means: closed in about ten seconds

_connection_ids = itertools.count(1)

EnvelopeType = Literal["events_api", "interactive", "slash_commands"]
DisconnectReason = Literal["warning", "refresh_requested", "link_disabled", "too_many_websockets"]


class Envelope(BaseModel):
    """What Slack sends over the socket; ``retry_*`` only for ``events_api`` (0 and "" on a first try)."""

    envelope_id: str
    type: EnvelopeType
    payload: dict[str, Any]
    accepts_response_payload: bool
    retry_attempt: int | None = None
    retry_reason: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class Ack(BaseModel):
    """What the app sends back; ``payload`` plays the part of an HTTP response body."""

    envelope_id: str
    payload: dict[str, Any] | None = None


@dataclass
class SocketReply:
    """How one envelope went: acked (``ack``), or ``error`` = http_timeout | connection_failed."""

    ack: Ack | None = None
    error: str | None = None
    detail: str = ""
    elapsed_s: float = 0.0


@dataclass
class SocketConnection:
    id: str
    ws: web.WebSocketResponse
    draining: bool = False  # was sent a disconnect: gets no new envelopes while another socket is open

    @property
    def open(self) -> bool:
        return not self.ws.closed


class SocketModeServer:
    """The WebSocket endpoint plus bookkeeping: tickets, open connections, envelopes awaiting their ack."""

    def __init__(
        self,
        *,
        app_id: str = APP_ID,
        on_change: Callable[[], None] | None = None,
        ping_interval_s: float | None = DEFAULT_PING_INTERVAL_S,
        refresh_grace_s: float = DEFAULT_REFRESH_GRACE_S,
    ) -> None:
        self.app_id = app_id
        self.on_change = on_change
        self.ping_interval_s = ping_interval_s
        self.refresh_grace_s = refresh_grace_s
        self.connections: list[SocketConnection] = []
        self.sent: list[Envelope] = []  # every envelope sent, oldest first
        self.acks: list[Ack] = []  # every ack received, also late or unknown ones
        self.connection_count = 0  # connections ever accepted
        self._tickets: set[str] = set()
        self._pending: dict[str, asyncio.Future[Ack]] = {}
        self._pending_on: dict[str, str] = {}  # envelope_id -> connection id
        self._turn = itertools.count()
        self._background: set[asyncio.Task[Any]] = set()

    # ---- apps.connections.open -----------------------------------------------------------------------

    def issue_url(self, base_url: str) -> str:
        """A fresh single-use WebSocket URL on the server at ``base_url`` (``http://host:port``)."""
        ticket = secrets.token_urlsafe(16)
        self._tickets.add(ticket)
        return f"{base_url.replace('http', 'ws', 1)}{SOCKET_ROUTE.format(ticket=ticket)}"

    # ---- state ---------------------------------------------------------------------------------------

    @property
    def open_connections(self) -> list[SocketConnection]:
        return [c for c in self.connections if c.open]

    @property
    def connected(self) -> bool:
        """True while an app holds a socket: deliveries then go over it instead of HTTP."""
        return bool(self.open_connections)

    # ---- the WebSocket endpoint ----------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        ticket = request.match_info["ticket"]
        if ticket not in self._tickets:
            return web.json_response({"ok": False, "error": "invalid_ticket"}, status=401)
        self._tickets.discard(ticket)
        # autoping answers the client's pings (slack_sdk measures liveness by their pongs); heartbeat sends ours
        ws = web.WebSocketResponse(autoping=True, heartbeat=self.ping_interval_s)
        await ws.prepare(request)
        connection = SocketConnection(id=f"s{next(_connection_ids)}", ws=ws)
        await ws.send_json(self._hello(len(self.open_connections) + 1))
        self.connections.append(connection)
        self.connection_count += 1
        self._changed()
        try:
            async for message in ws:
                if message.type == WSMsgType.TEXT:
                    self._receive(str(message.data))
        finally:
            self._forget(connection)
        return ws

    def _hello(self, num_connections: int) -> dict[str, Any]:
        return {
            "type": "hello",
            "num_connections": num_connections,
            "debug_info": {
                "host": DEBUG_HOST,
                "build_number": 1,
                "approximate_connection_time": CONNECTION_LIFETIME_S,
            },
            "connection_info": {"app_id": self.app_id},
        }

    def _receive(self, text: str) -> None:
        try:
            ack = Ack.model_validate_json(text)
        except ValidationError:
            log.info("socket mode: ignoring a message that is not an ack: %.200s", text)
            return
        self.acks.append(ack)
        future = self._pending.get(ack.envelope_id)
        if future is not None and not future.done():
            future.set_result(ack)

    def _forget(self, connection: SocketConnection) -> None:
        if connection in self.connections:
            self.connections.remove(connection)
        for envelope_id, connection_id in list(self._pending_on.items()):
            future = self._pending.get(envelope_id)
            if connection_id == connection.id and future is not None and not future.done():
                future.set_exception(ConnectionResetError("the socket closed before the ack"))
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    # ---- sending envelopes ---------------------------------------------------------------------------

    def _pick(self) -> SocketConnection | None:
        """Round-robin over open sockets, preferring ones not asked to reconnect (Slack spreads the load)."""
        candidates = [c for c in self.open_connections if not c.draining] or self.open_connections
        if not candidates:
            return None
        return candidates[next(self._turn) % len(candidates)]

    async def request(
        self,
        envelope_type: EnvelopeType,
        payload: dict[str, Any],
        *,
        accepts_response_payload: bool,
        timeout_s: float,
        retry_attempt: int | None = None,
        retry_reason: str | None = None,
    ) -> SocketReply:
        """Send one envelope and wait up to ``timeout_s`` for its ack."""
        started = time.monotonic()
        connection = self._pick()
        if connection is None:
            return SocketReply(error="connection_failed", detail="no socket connected")
        envelope = Envelope(
            envelope_id=str(uuid.uuid4()),
            type=envelope_type,
            payload=payload,
            accepts_response_payload=accepts_response_payload,
            retry_attempt=retry_attempt,
            retry_reason=retry_reason,
        )
        future: asyncio.Future[Ack] = asyncio.get_running_loop().create_future()
        self._pending[envelope.envelope_id] = future
        self._pending_on[envelope.envelope_id] = connection.id
        try:
            await connection.ws.send_str(json.dumps(envelope.to_wire()))
            self.sent.append(envelope)
            ack = await asyncio.wait_for(future, timeout_s)
            return SocketReply(ack=ack, elapsed_s=time.monotonic() - started)
        except TimeoutError:
            return SocketReply(
                error="http_timeout",
                detail=f"no ack within {timeout_s:g}s",
                elapsed_s=time.monotonic() - started,
            )
        except (ConnectionError, RuntimeError) as exc:  # aiohttp raises both for a closing socket
            return SocketReply(
                error="connection_failed", detail=str(exc) or "socket closed", elapsed_s=time.monotonic() - started
            )
        finally:
            self._pending.pop(envelope.envelope_id, None)
            self._pending_on.pop(envelope.envelope_id, None)

    # ---- connection management -----------------------------------------------------------------------

    async def disconnect(self, reason: DisconnectReason = "refresh_requested") -> int:
        """Send ``disconnect`` to every open socket, as Slack does before recycling one; they get no new
        envelopes while a fresh socket is open and are closed after ``refresh_grace_s``. Returns how many."""
        told = 0
        for connection in self.open_connections:
            if connection.draining:
                continue
            connection.draining = True
            message = {"type": "disconnect", "reason": reason, "debug_info": {"host": DEBUG_HOST}}
            with contextlib.suppress(ConnectionError, RuntimeError):
                await connection.ws.send_json(message)
                told += 1
            self._spawn(self._close_later(connection, self.refresh_grace_s))
        self._changed()
        return told

    async def _close_later(self, connection: SocketConnection, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        await connection.ws.close(code=WSCloseCode.GOING_AWAY, message=b"refresh")

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        """Close every socket (the server is going away) and stop pending timers."""
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        for connection in list(self.connections):
            with contextlib.suppress(ConnectionError, RuntimeError):
                await connection.ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutdown")
        self._tickets.clear()
