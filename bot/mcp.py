"""MCP servers' tools as agent tools (issue 13, item 1), with the official ``mcp`` SDK as the client.

Servers are listed in the file ``BOT_MCP_CONFIG`` names, in the ``mcpServers`` shape other MCP clients
use, plus our approval policies::

    {
      "mcpServers": {
        "files":  {"command": "python", "args": ["-m", "files_server"], "env": {"ROOT": "/srv/files"}},
        "github": {"url": "https://api.githubcopilot.com/mcp/",
                   "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"},
                   "approval": "always", "policies": {"get_*": "never", "list_*": "never"}, "timeout": 30}
      },
      "policies": {"*delete*": "always"}
    }

Each tool a server lists becomes a tool of the runtime's registry, named ``<server>__<tool>`` (what
OpenAI accepts as a function name; see :func:`tool_name`), and runs under the same request policies,
cards, settle path and audit as any tool. Its policy: the server's ``policies`` (patterns over the
tool's name or ``<server>.<tool>``), then the file's top-level ``policies`` (patterns over
``<server>.<tool>``), first match wins; else the server's ``approval``; else ``always()``. A server's
``previews`` (``{"delete_file": "stat_file"}``) names, per tool, another of its tools whose answer to the
same arguments is the card's preview (``@tool(preview=…)``); it must only read, and one the server marks
destructive is not used.

Connections live as long as the app: :class:`McpServers` opens them at start, re-lists a server's
tools when it says its list changed, reconnects a server that went away, and closes them at shutdown.
A server that is down or slow never stops the bot and never crashes a turn: the model gets a tool
error saying so. A tool the server lists as callable only as a task (``execution.taskSupport:
"required"``) is left out, as the bot makes plain calls; a server that answers with the old HTTP+SSE
transport is named as such (it is not supported: streamable HTTP is). A server's ``elicitation/create`` becomes a form card in the calling session's
thread through ``ctx.form`` — durable by replay, so a tool that elicits is called again when the form
is answered (see :class:`_Elicitation`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
import logging
import os
import re
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
import httpx
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from mcp import ClientSession, McpError, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from bot import logs
from bot.approval import RequestPolicy, check_policy_name, policy_named
from bot.forms import FormSchemaError, model_from_schema
from bot.schema_tools import SchemaTool
from bot.tool_names import model_safe_name
from bot.tool_registry import ToolRegistry
from bot.tools import AskParked, Tool, ToolContext

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0
CONNECT_MIN_S = 10.0  # to start and list a server's tools, whatever its call timeout
START_WAIT_S = 10.0  # the bot's start waits this long for its servers at most; slower ones join later
RECONNECT_MAX_S = 30.0  # a server that is away is tried again after 1, 2, 4… seconds, up to this
PING_EVERY_S = 15.0  # an idle connection is checked this often, so a server that went away is noticed
RESULT_CHARS = 20_000  # of a tool's text handed to the model
TASK_REQUIRED = 'execution.taskSupport: "required"'
SSE_PROBE_S = 3.0  # how long a server that refused streamable HTTP is given to show it speaks old SSE
SSE_NOT_SUPPORTED = (
    "it speaks the old HTTP+SSE transport, which is not supported: serve it over streamable HTTP "
    "(MCP 2025-03-26 and later, often at /mcp) and put that URL in BOT_MCP_CONFIG"
)
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# a policy a config file names, from the one registry of named policies (bot.approval.policy_named)
PolicyName = Annotated[str, AfterValidator(check_policy_name)]


class McpConfigError(ValueError):
    """``BOT_MCP_CONFIG`` can't be used; the message names the server, the field or variable, and the fix."""


class McpToolError(RuntimeError):
    """What the model reads when an MCP call fails: the server's name and what happened, in words."""


# --- configuration ---------------------------------------------------------------------------------


class ServerConfig(BaseModel):
    """One entry of ``mcpServers``: a stdio command or a streamable HTTP URL, and our policies."""

    model_config = ConfigDict(extra="forbid")  # a misspelt "polices" must not quietly mean "always"

    # other clients write it; it must fit the server's command or url
    type: Literal["stdio", "http", "streamable-http", "streamableHttp"] | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    approval: PolicyName | None = None  # this server's default policy
    policies: dict[str, PolicyName] = Field(default_factory=dict)  # name patterns, first match wins
    timeout: float = Field(default=DEFAULT_TIMEOUT_S, gt=0, le=600)  # seconds for one call (and to connect)
    disabled: bool = False
    # a tool's card preview (``@tool(preview=…)``): another tool of this server, called with the same
    # arguments when the card is made ({"delete_file": "stat_file"}); it must only read
    previews: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def one_transport(self) -> ServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (a stdio server) or url (a streamable HTTP server)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must be http(s)://…, not {self.url[:40]!r}")
        for tool, preview in self.previews.items():
            if preview == tool:  # its preview would run the very call people are asked about
                raise ValueError(f"previews.{tool}: a tool cannot be its own preview (name a read-only tool)")
        if (self.type == "stdio" and self.command is None) or (
            self.type not in (None, "stdio") and self.url is None
        ):
            raise ValueError(
                f"type {self.type!r} does not fit the server's {'url' if self.url else 'command'}"
            )
        return self

    @property
    def stdio(self) -> bool:
        return self.command is not None


class McpConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mcpServers: dict[str, ServerConfig]  # noqa: N815 - the file's name for it, shared with other clients
    policies: dict[str, PolicyName] = Field(default_factory=dict)  # patterns over "<server>.<tool>"

    @model_validator(mode="after")
    def server_names(self) -> McpConfig:
        for name in self.mcpServers:
            if not re.fullmatch(r"[a-zA-Z0-9_-]{1,30}", name):
                raise ValueError(
                    f"server name {name!r}: use 1 to 30 letters, digits, _ or - (it prefixes tool names)"
                )
        return self

    def policy_name(self, server: str, tool: str) -> PolicyName:
        """The policy of ``server``'s ``tool``: patterns first (the server's, then the file's), then defaults."""
        config, full = self.mcpServers[server], f"{server}.{tool}"
        for pattern, policy in config.policies.items():
            if fnmatch.fnmatchcase(tool, pattern) or fnmatch.fnmatchcase(full, pattern):
                return policy
        for pattern, policy in self.policies.items():
            if fnmatch.fnmatchcase(full, pattern):
                return policy
        return config.approval or "always"


def load_config(path: str) -> McpConfig:
    """``BOT_MCP_CONFIG``: read, ``${VAR}``s filled in from the environment, checked (raises McpConfigError)."""
    try:
        raw = json.loads(Path(path).read_text())
    except OSError as exc:
        raise McpConfigError(f"BOT_MCP_CONFIG: cannot read {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise McpConfigError(f"BOT_MCP_CONFIG: {path} is not JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("mcpServers"), dict):
        raise McpConfigError(f'BOT_MCP_CONFIG: {path} needs an "mcpServers" object')
    try:
        config = McpConfig.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "file"
        message = str(err["ctx"]["error"]) if err["type"] == "value_error" else err["msg"]
        raise McpConfigError(f"BOT_MCP_CONFIG: {where}: {message}") from None
    for name, server in config.mcpServers.items():
        _expand_server(name, server)
    return config


def _expand_server(name: str, server: ServerConfig) -> None:
    """Fill in ``${VAR}``s wherever they are (a token may be in a header, an env value, an argument or
    the URL's query); every value filled in is a secret to the logs."""
    where = f"BOT_MCP_CONFIG: mcpServers.{name}"
    if server.command is not None:
        server.command = _expand(server.command, f"{where}.command")
    server.args = [_expand(a, f"{where}.args[{i}]") for i, a in enumerate(server.args)]
    server.env = {k: _expand(v, f"{where}.env.{k}") for k, v in server.env.items()}
    server.headers = {k: _expand(v, f"{where}.headers.{k}") for k, v in server.headers.items()}
    if server.url is not None:
        server.url = _expand(server.url, f"{where}.url")
    if server.cwd is not None:
        server.cwd = _expand(server.cwd, f"{where}.cwd")


def _expand(value: str, where: str) -> str:
    def value_of(match: re.Match[str]) -> str:
        found = os.environ.get(match.group(1))
        if found is None:
            raise McpConfigError(f"{where} uses ${{{match.group(1)}}}, but {match.group(1)} is not set")
        logs.add_secrets(found)
        return found

    return _VARIABLE.sub(value_of, value)


def tool_name(server: str, tool: str) -> str:
    """The registry's name for ``server``'s ``tool``: ``<server>__<tool>``, stable across restarts.

    OpenAI takes ``^[a-zA-Z0-9_-]{1,64}$``; MCP allows dots and 128 characters. A name that had to
    be changed to fit (characters replaced, or cut) ends in 6 hex digits of a hash of the original,
    so two tools never share a name ("files.read" and "files_read" stay apart)."""
    return model_safe_name(f"{server}__{tool}", identity=f"{server}.{tool}")


# --- tools -----------------------------------------------------------------------------------------


class McpTool(SchemaTool):
    """One tool of an MCP server: its arguments checked against its ``inputSchema``, then called."""

    def __init__(self, server: McpServer, listed: types.Tool, policy: RequestPolicy, preview: str | None = None):
        self.server = server
        self.remote_name = listed.name
        self.preview_remote = preview  # the server's tool whose answer is this one's card preview
        schema = dict(listed.inputSchema or {})
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            raise McpToolError(f"its input schema is not valid JSON Schema: {exc.message}") from None
        about = (listed.description or listed.title or "").strip() or f"{listed.name} (an MCP tool)"
        destructive = bool(listed.annotations and listed.annotations.destructiveHint is True)
        super().__init__(
            self._call,
            schema,
            name=tool_name(server.name, listed.name),
            description=f"{about}\n(MCP server {server.name!r}, tool {listed.name!r})",
            approval=policy,
            dangerous=destructive,
            preview=self._preview if preview else None,
        )

    async def _call(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        return await self.server.call(self.remote_name, args, ctx)

    async def _preview(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """The configured preview tool's answer to the proposed arguments (redacted like any result)."""
        assert self.preview_remote is not None
        result = await self.server.call(self.preview_remote, args, ctx)
        if isinstance(result, dict) and len(result) == 1:  # one field (FastMCP wraps a str as {"result": …})
            [result] = result.values()
        return result if isinstance(result, str) else json.dumps(result, default=str)


class _Elicitation:
    """The form requests of one call, answered from what people already submitted (replay).

    ``ctx.form`` is durable by replay: the first time it parks the turn, and when the form is
    submitted the tool runs again from the top with the answer recorded. An MCP server can't wait
    for a park, so: an elicitation whose answer is recorded is answered with it (accept, or cancel
    if nobody answered in time); one that isn't is answered ``cancel`` at once, the call's result
    is thrown away, and the turn parks on the form card. On resume the call is made again, the
    server elicits again, and this time the answer is there. Servers should therefore elicit before
    any side effect (like ``ctx.ask``'s determinism rule)."""

    def __init__(self, server: str, ctx: ToolContext):
        self.server = server
        self.ctx = ctx
        self.parked: AskParked | None = None
        self.refused: str | None = None  # why a form could not be shown: the call fails, saying so

    async def answer(self, params: types.ElicitRequestParams) -> types.ElicitResult:
        if self.parked is not None or self.refused is not None:
            return types.ElicitResult(action="cancel")  # the call's result is thrown away anyway
        if not isinstance(params, types.ElicitRequestFormParams):
            self.refused = "it asked the person to open a link (URL elicitation), which this bot does not do"
            return types.ElicitResult(action="decline")
        try:
            form = model_from_schema(dict(params.requestedSchema), name="Elicitation")
            answer = await self.ctx.form(form, params.message or f"{self.server} asks for details")
        except AskParked as parked:
            self.parked = parked
            return types.ElicitResult(action="cancel")
        except (FormSchemaError, ValueError) as exc:
            self.refused = f"it asked for a form the bot cannot show: {exc}"
            return types.ElicitResult(action="decline")
        if answer.status == "unavailable":
            return types.ElicitResult(action="decline")
        if answer.status != "answered" or answer.values is None:
            return types.ElicitResult(action="cancel")  # nobody answered in time, or the turn moved on
        content = {
            k: v for k, v in answer.values.model_dump(mode="json", by_alias=True).items() if v is not None
        }
        return types.ElicitResult(action="accept", content=content)


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
        self._current: _Elicitation | None = None
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
            self._registry.register(made)
        self._tool_names = set(fresh)

    def _preview_of(self, tool: str, listed: dict[str, types.Tool]) -> str | None:
        """The configured preview of ``tool``, if the server lists it and does not call it destructive
        (a preview runs before anyone approves: it must only read); else none, said once."""
        preview = self.config.previews.get(tool)
        if preview is None:
            return None
        found = listed.get(preview)
        if found is None:
            self._leave_out(f"{tool}'s preview", f"the server lists no tool {preview!r}")
            return None
        if found.annotations is not None and found.annotations.destructiveHint is True:
            self._leave_out(f"{tool}'s preview", f"{preview!r} is marked destructive; a preview must only read")
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
        elicitation = _Elicitation(self.name, ctx)
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
        return _result(self.name, remote_name, result)

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


def _result(server: str, tool: str, result: types.CallToolResult) -> Any:
    """What the model reads: structured content as JSON, else the text parts joined; errors raise."""
    # a server may quote a configured secret back (a header, an env value): the model never reads it
    text = logs.redact("\n".join(_content_text(part) for part in result.content)[:RESULT_CHARS])
    if result.isError:
        raise McpToolError(f"MCP tool {server}.{tool} failed: {text or 'no details given'}")
    if result.structuredContent is not None:
        structured = logs.redact_value(result.structuredContent)
        as_json = json.dumps(structured, default=str)
        # the model's context is not the place for megabytes: cut, like text, and say so
        return structured if len(as_json) <= RESULT_CHARS else as_json[:RESULT_CHARS] + " …(cut)"
    return text


def _content_text(part: Any) -> str:
    if isinstance(part, types.TextContent):
        return part.text
    if isinstance(part, types.EmbeddedResource) and isinstance(part.resource, types.TextResourceContents):
        return part.resource.text
    kind = getattr(part, "mimeType", None) or getattr(part, "type", "content")
    return f"[{kind} not shown]"


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
    if isinstance(exc, McpError):
        return exc.error.message
    return logs.redact(f"{type(exc).__name__}: {exc}")[:200]


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
