"""An MCP server's tools as agent tools: :class:`McpTool` (its arguments checked against its
``inputSchema``, then called on its server), what the model reads of a call's result, and the
server's form requests (``elicitation/create``) answered through ``ctx.form``."""

from __future__ import annotations

import json
from typing import Any, Protocol

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from mcp import types

from bot.approval import RequestPolicy
from bot.connections.schema_tools import SchemaTool
from bot.connections.tool_names import model_safe_name
from bot.forms import FormSchemaError, model_from_schema
from bot.ops import logs
from bot.tools import AskParked, ToolContext

RESULT_CHARS = 20_000  # of a tool's text handed to the model


class McpToolError(RuntimeError):
    """What the model reads when an MCP call fails: the server's name and what happened, in words."""


class ToolCaller(Protocol):
    """The server a tool is called on (``bot.connections.mcp.server.McpServer``)."""

    name: str

    async def call(self, remote_name: str, arguments: dict[str, Any], ctx: ToolContext) -> Any: ...


def tool_name(server: str, tool: str) -> str:
    """The registry's name for ``server``'s ``tool``: ``<server>__<tool>``, stable across restarts.

    OpenAI takes ``^[a-zA-Z0-9_-]{1,64}$``; MCP allows dots and 128 characters. A name that had to
    be changed to fit (characters replaced, or cut) ends in 6 hex digits of a hash of the original,
    so two tools never share a name ("files.read" and "files_read" stay apart)."""
    return model_safe_name(f"{server}__{tool}", identity=f"{server}.{tool}")

class McpTool(SchemaTool):
    """One tool of an MCP server: its arguments checked against its ``inputSchema``, then called."""

    def __init__(self, server: ToolCaller, listed: types.Tool, policy: RequestPolicy, preview: str | None = None):
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


class Elicitation:
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


def call_result(server: str, tool: str, result: types.CallToolResult) -> Any:
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
