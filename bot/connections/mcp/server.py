"""Connections to MCP servers (the official ``mcp`` SDK as the client): :class:`McpServers` opens them at
start, re-lists a server's tools when it says its list changed, reconnects a server that went away, and
closes them at shutdown; :class:`McpServer` holds one connection and makes the calls on it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

import anyio
import httpx
from mcp import ClientSession, McpError, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from bot.approval import policy_named
from bot.connections.mcp.config import McpConfig, ServerConfig
from bot.connections.mcp.tools import Elicitation, McpTool, McpToolError, call_result
from bot.engine.tool_registry import ToolRegistry
from bot.ops import logs
from bot.tools import Tool, ToolContext

log = logging.getLogger(__name__)

CONNECT_MIN_S = 10.0  # to start and list a server's tools, whatever its call timeout
START_WAIT_S = 10.0  # the bot's start waits this long for its servers at most; slower ones join later
RECONNECT_MAX_S = 30.0  # a server that is away is tried again after 1, 2, 4… seconds, up to this
PING_EVERY_S = 15.0  # an idle connection is checked this often, so a server that went away is noticed
TASK_REQUIRED = 'execution.taskSupport: "required"'
SSE_PROBE_S = 3.0  # how long a server that refused streamable HTTP is given to show it speaks old SSE
SSE_NOT_SUPPORTED = (
    "it speaks the old HTTP+SSE transport, which is not supported: serve it over streamable HTTP "
    "(MCP 2025-03-26 and later, often at /mcp) and put that URL in BOT_MCP_CONFIG"
)


class McpServer:
    """One configured server: its connection (held by a task of its own, as the SDK's transports
    must be entered and left in one task), its tools in the registry, and calls to it."""

    def __init__(self, name: str, config: ServerConfig, policies: McpConfig, registry: ToolRegistry):
        self.name = name
        self.config = config
        self._policies = policies
        self._registry = registry
        self._tool_names: set[str] = set()
        self._session: ClientSession | None = None
        self._call_lock = asyncio.Lock()
        self._current: Elicitation | None = None
        self._wake = asyncio.Event()
        self._relist = False
        self._broken = False
        self._closing = False
        self._first_try = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_problem: str | None = None
        self._left_out: set[tuple[str, str]] = set()  # (tool, why), each logged once

    @property
    def connected(self) -> bool:
        # a session a call found broken is not connected, though its loop may not have let it go yet
        return self._session is not None and not self._broken

    @property
    def tools(self) -> list[str]:
        return sorted(self._tool_names)

    @property
    def last_problem(self) -> str | None:
        """Why the last connection attempt failed (secret-free), if it did."""
        return self._last_problem

    def start(self) -> None:
        self._task = asyncio.create_task(self._hold(), name=f"mcp:{self.name}")

    async def first_try(self) -> None:
        await self._first_try.wait()

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 5)
            except Exception:  # noqa: BLE001 - closing: a transport stuck (or failed) on its way out is cancelled
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task

    # --- the connection's life -----------------------------------------------------------------

    async def _hold(self) -> None:
        delay = 1.0
        while not self._closing:
            try:
                await self._connected_session()
                delay = 1.0
            except Exception as exc:  # noqa: BLE001 - a server's trouble is logged, never the bot's end
                self._went_away(await self._why(exc))
            finally:
                self._session = None
                self._first_try.set()
            if self._closing:
                break
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            delay = min(delay * 2, RECONNECT_MAX_S)

    async def _connected_session(self) -> None:
        async with contextlib.AsyncExitStack() as stack:
            if self.config.stdio:
                assert self.config.command is not None
                params = StdioServerParameters(
                    command=self.config.command,
                    args=self.config.args,
                    env=self.config.env or None,
                    cwd=self.config.cwd,
                )
                read, write = await stack.enter_async_context(stdio_client(params))
            else:
                assert self.config.url is not None
                # the SDK's way to send headers: a client of our own (read: its event streams stay open)
                http = httpx.AsyncClient(
                    headers=self.config.headers, timeout=httpx.Timeout(self.config.timeout, read=300)
                )
                await stack.enter_async_context(http)
                read, write, _ = await stack.enter_async_context(
                    streamable_http_client(self.config.url, http_client=http)
                )
            session = await stack.enter_async_context(
                ClientSession(
                    read,
                    write,
                    elicitation_callback=self._on_elicitation,
                    message_handler=self._on_message,
                )
            )
            # a stdio server starts its interpreter first: a short call timeout is no limit for that
            with anyio.fail_after(max(self.config.timeout, CONNECT_MIN_S)):
                await session.initialize()
                await self._list_tools(session)
            self._session = session
            self._broken = False
            if self._last_problem is not None:
                log.info("MCP server %r is back: %d tools", self.name, len(self._tool_names))
            else:
                log.info(
                    "MCP server %r: %d tools (%s)", self.name, len(self._tool_names), ", ".join(self.tools)
                )
            self._last_problem = None
            self._first_try.set()
            await self._serve(session)

    async def _serve(self, session: ClientSession) -> None:
        """Wait for a list change, a broken call or closing; check an idle connection now and then."""
        while not self._closing and not self._broken:
            self._wake.clear()
            if self._relist:
                self._relist = False
                with anyio.fail_after(self.config.timeout):
                    await self._list_tools(session)
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), PING_EVERY_S)
            except TimeoutError:
                with anyio.fail_after(self.config.timeout):
                    await session.send_ping()
        if self._broken and not self._closing:
            raise McpToolError("the connection was lost")

    async def _why(self, exc: BaseException) -> str:
        """The reason for a log line; a server that refused streamable HTTP is asked whether it speaks the
        old HTTP+SSE transport, which would otherwise read as a bare "HTTP 405" or "Session terminated"."""
        if self.config.url and _refused_http(exc) and await _speaks_old_sse(self.config.url, self.config):
            return SSE_NOT_SUPPORTED
        return _reason(exc)

    def _went_away(self, reason: str) -> None:
        # one line per outage, not one per retry; the reason never carries the headers or env
        if self._last_problem is None:
            meanwhile = (
                f"its {len(self._tool_names)} tools answer with an error until it is back"
                if self._tool_names
                else "its tools are offered once it answers"
            )
            log.warning(
                "MCP server %r is unavailable (%s); the bot runs on and tries again; %s",
                self.name,
                reason,
                meanwhile,
            )
        self._last_problem = reason

    async def _list_tools(self, session: ClientSession) -> None:
        listed: list[types.Tool] = []
        cursor: str | None = None
        while True:
            page = await session.list_tools(
                params=types.PaginatedRequestParams(cursor=cursor) if cursor else None
            )
            listed.extend(page.tools)
            cursor = page.nextCursor
            if not cursor:
                break
        self._update_registry(listed)

    def _update_registry(self, listed: Iterable[types.Tool]) -> None:
        """Swap this server's tools in the registry in one go (no await in between: a turn sees the old
        list or the new one, never half of each)."""
        fresh: dict[str, Tool] = {}
        listed = list(listed)
        by_name = {item.name: item for item in listed}
        for item in listed:
            if item.execution is not None and item.execution.taskSupport == "required":
                # callable only as a task (tasks/get, tasks/result…), which this client does not do: offered
                # to the model it could never run
                self._leave_out(item.name, f"it can only be called as a task ({TASK_REQUIRED}), "
                                           "and the bot makes plain tool calls")
                continue
            try:
                made = McpTool(self, item, policy_named(self._policies.policy_name(self.name, item.name)),
                               self._preview_of(item.name, by_name))
            except McpToolError as exc:
                self._leave_out(item.name, str(exc))
                continue
            if made.name in fresh or (
                self._registry.get(made.name) is not None and made.name not in self._tool_names
            ):
                self._leave_out(item.name, f"the name {made.name} is taken")
                continue
            fresh[made.name] = made
        for gone in self._tool_names - set(fresh):
            self._registry.unregister(gone)
        for made in fresh.values():
            self._registry.register(made, replace=made.name in self._tool_names)  # its own, listed again
        self._tool_names = set(fresh)

    def _preview_of(self, tool: str, listed: dict[str, types.Tool]) -> str | None:
        """The configured preview of ``tool``, if the server lists it as read-only; else none, said once.

        A preview runs whenever a card is drawn, before anyone approves, so it must only read. The MCP
        spec's defaults are the careful ones (no ``readOnlyHint`` means it may write), so only a declared
        ``readOnlyHint: true`` is taken."""
        preview = self.config.previews.get(tool)
        if preview is None:
            return None
        found = listed.get(preview)
        if found is None:
            self._leave_out(f"{tool}'s preview", f"the server lists no tool {preview!r}")
            return None
        read_only = found.annotations.readOnlyHint if found.annotations is not None else None
        if read_only is not True:
            said = "no readOnlyHint" if read_only is None else "readOnlyHint: false"
            self._leave_out(f"{tool}'s preview", f"{preview!r} is listed with {said}; a preview runs before "
                                                 "anyone approves, so it must be declared readOnlyHint: true")
            return None
        return preview

    def _leave_out(self, tool: str, why: str) -> None:
        """Log a tool left out once, not at every listing of the server's tools."""
        if (tool, why) not in self._left_out:
            self._left_out.add((tool, why))
            log.warning("MCP server %r: tool %r is left out: %s", self.name, tool, why)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ToolListChangedNotification
        ):
            self._relist = True  # listed again by the connection's task: this one reads the server's messages
            self._wake.set()

    async def _on_elicitation(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        current = self._current
        if current is None:  # not during one of our calls: nobody to ask
            return types.ElicitResult(action="decline")
        return await current.answer(params)

    # --- calls ---------------------------------------------------------------------------------

    async def call(self, remote_name: str, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        """Call a tool; every failure is an :class:`McpToolError` the model can read.

        Calls to one server take turns: a server's elicitation request does not say which call it
        belongs to, and a form must go to the thread (and workspace) of the call that asked. The
        call's ``_meta`` carries ``idempotencyKey`` (``ctx.idempotency_key``: the same when a call is
        made again after a form), so a server can tell a replay from a new call."""
        timeout = self.config.timeout
        elicitation = Elicitation(self.name, ctx)
        started = False
        try:
            async with asyncio.timeout(timeout), self._call_lock:
                session = self._session if not self._broken else None
                if session is None:
                    why = f" ({self._last_problem})" if self._last_problem else ""
                    raise McpToolError(f"MCP server {self.name!r} is not connected{why}; try again later")
                started = True
                self._current = elicitation
                try:
                    result = await session.call_tool(
                        remote_name,
                        arguments,
                        read_timeout_seconds=timedelta(seconds=timeout),
                        meta={"idempotencyKey": ctx.idempotency_key},
                    )
                finally:
                    self._current = None
        except TimeoutError:
            if not started:  # never sent: the server was busy with other calls all along
                raise McpToolError(
                    f"MCP server {self.name!r} was busy with other calls for {timeout:g} s; try again later"
                ) from None
            raise McpToolError(f"MCP server {self.name!r} did not answer within {timeout:g} s") from None
        except McpError as exc:
            raise self._call_error(exc) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            self._lost()
            raise McpToolError(
                f"MCP server {self.name!r} is not connected (the connection was lost)"
            ) from None
        if elicitation.parked is not None:
            raise elicitation.parked  # the turn parks on the form; the call is made again once it is answered
        if elicitation.refused is not None:
            raise McpToolError(f"MCP server {self.name!r}: {elicitation.refused}")
        return call_result(self.name, remote_name, result)

    def _call_error(self, exc: McpError) -> McpToolError:
        if exc.error.code == httpx.codes.REQUEST_TIMEOUT:
            return McpToolError(f"MCP server {self.name!r} did not answer within {self.config.timeout:g} s")
        if exc.error.code == types.CONNECTION_CLOSED:
            self._lost()
            return McpToolError(f"MCP server {self.name!r} closed the connection during the call")
        return McpToolError(f"MCP server {self.name!r} refused the call: {exc.error.message}")

    def _lost(self) -> None:
        self._broken = True
        self._wake.set()


class McpServers:
    """Every server of ``BOT_MCP_CONFIG``, kept connected for the app's lifetime."""

    def __init__(self, config: McpConfig, registry: ToolRegistry):
        self.servers = {
            name: McpServer(name, server, config, registry)
            for name, server in config.mcpServers.items()
            if not server.disabled
        }

    async def start(self, *, wait: float = START_WAIT_S) -> None:
        """Connect to every server; return once each has answered or failed once (at most ``wait`` s)."""
        for server in self.servers.values():
            server.start()
        if self.servers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(s.first_try() for s in self.servers.values())), wait)

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self.servers.values()))


def _innermost(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _refused_http(exc: BaseException) -> bool:
    """What a streamable-HTTP client meets at an old SSE server: a 4xx to its POST (405 at ``/sse``, 400
    or 404 at ``/messages/``), or the SDK's "Session terminated" (its reading of a 404)."""
    exc = _innermost(exc)
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code in (400, 404, 405, 406)
    return isinstance(exc, McpError) and "session terminated" in exc.error.message.lower()


async def _speaks_old_sse(url: str, config: ServerConfig) -> bool:
    """Whether ``url`` (or the ``sse`` endpoint beside it) opens an event stream whose first event is
    ``endpoint``: the handshake of the HTTP+SSE transport of MCP 2024-11-05."""
    here = httpx.URL(url)
    candidates = dict.fromkeys([here, here.join("sse"), here.join("../sse")])
    try:
        with anyio.fail_after(SSE_PROBE_S):  # all of it: the server's connection task waits on this
            async with httpx.AsyncClient(headers=config.headers, timeout=SSE_PROBE_S) as http:
                for candidate in candidates:
                    async with http.stream("GET", candidate, headers={"Accept": "text/event-stream"}) as answer:
                        if answer.status_code != 200 or not answer.headers.get("content-type", "").startswith(
                            "text/event-stream"
                        ):
                            continue
                        async for line in answer.aiter_lines():
                            if line.startswith("event:"):
                                if line.removeprefix("event:").strip() == "endpoint":
                                    return True
                                break
    except (httpx.HTTPError, TimeoutError):
        return False
    return False


def _reason(exc: BaseException) -> str:
    """A short, secret-free reason for a log line (an ExceptionGroup says little by itself)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if isinstance(exc, httpx.ConnectError):
        return "connection refused"
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    if isinstance(exc, McpError):  # the server's own words: it may quote what it was given
        return logs.redact(exc.error.message)[:200]
    return logs.redact(f"{type(exc).__name__}: {exc}")[:200]
