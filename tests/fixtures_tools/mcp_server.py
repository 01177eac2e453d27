"""A real MCP server for tests/test_mcp_tools.py, written with the SDK's FastMCP.

``python mcp_server.py stdio``, ``python mcp_server.py http PORT`` or ``python mcp_server.py sse PORT`` (the
old HTTP+SSE transport, which the bot refuses by name). Every run of a tool that does
something is appended to the file ``MCP_RUNS_FILE`` names, so tests see what the server really did.
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp import types
from mcp.server.fastmcp import Context, FastMCP
from pydantic import BaseModel, Field

server = FastMCP("crm", log_level="WARNING")


def _ran(line: str) -> None:
    with open(os.environ["MCP_RUNS_FILE"], "a") as runs:
        runs.write(line + "\n")


@server.tool(annotations=types.ToolAnnotations(readOnlyHint=True))
def lookup_customer(customer_id: str) -> str:
    """Look up a customer by id."""
    return f"customer {customer_id}: Acme Corp"


@server.tool(annotations=types.ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def note_customer(customer_id: str) -> str:
    """Add a note to a customer's file (it writes, but destroys nothing: additive)."""
    _ran(f"noted {customer_id}")
    return f"customer {customer_id}: noted"


@server.tool()
def peek_customer(customer_id: str) -> str:
    """Look at a customer (it says nothing of what it does: by the MCP spec, it may write)."""
    _ran(f"peeked {customer_id}")
    return f"customer {customer_id}: peeked"


@server.tool()
def delete_customer(customer_id: str) -> str:
    """Delete a customer for good."""
    _ran(f"deleted {customer_id}")
    return f"deleted {customer_id}"


@server.tool()
def stats(day: str) -> dict:
    """Numbers of one day, as structured content."""
    return {"day": day, "orders": 3}


@server.tool()
async def slow(seconds: float) -> str:
    """Take a while."""
    await asyncio.sleep(seconds)
    return "done"


@server.tool()
def fail() -> str:
    """Always fails."""
    raise ValueError("the CRM database is read-only today")


@server.tool()
def crash() -> str:
    """The server process dies."""
    os._exit(3)


@server.tool()
def whoami(ctx: Context) -> str:
    """The Authorization header this call came with (HTTP only)."""
    request = ctx.request_context.request
    return str(request.headers.get("authorization")) if request is not None else "stdio"


class Shipment(BaseModel):
    address: str = Field(min_length=5, title="Delivery address")
    boxes: int = Field(ge=1, le=20, title="Boxes")


@server.tool()
async def ship_order(order: str, ctx: Context) -> str:
    """Ship an order; asks where to."""
    with open(os.environ["MCP_RUNS_FILE"] + ".keys", "a") as keys:  # the bot's idempotency key, every call
        keys.write(str(getattr(ctx.request_context.meta, "idempotencyKey", None)) + "\n")
    answer = await ctx.elicit(f"Where should order {order} go?", schema=Shipment)
    if answer.action != "accept":
        return f"not shipped ({answer.action})"
    # after the form: side effects last
    _ran(f"shipped {order} to {answer.data.address} x{answer.data.boxes}")
    return f"shipped {order} to {answer.data.address} in {answer.data.boxes} boxes"


@server.tool()
async def nested_form(ctx: Context) -> str:
    """Asks for a form no Slack input can show (a nested object)."""
    schema = {
        "type": "object",
        "properties": {"where": {"type": "object", "properties": {"x": {"type": "string"}}}},
    }
    result = await ctx.request_context.session.elicit_form(
        "Where exactly?",
        schema,  # type: ignore[arg-type]
        related_request_id=ctx.request_id,
    )
    return f"the client said {result.action}"


@server.tool()
async def add_report_tool(ctx: Context) -> str:
    """Offers a new tool, and tells the client its list changed."""

    def monthly_report(month: str) -> str:
        """The month's report."""
        return f"report for {month}: all good"

    server.add_tool(monthly_report)
    await ctx.request_context.session.send_tool_list_changed()
    return "added monthly_report"


@server.tool()
def render_video(script: str) -> str:
    """Render a long video (listed as needing task-augmented calls: see _list_tools_with_tasks)."""
    _ran(f"rendered {script}")
    return "rendered"


# what the tools' listing says of task support (MCP 2025-11-25 ``execution.taskSupport``): FastMCP has no
# parameter for it, so the listing is amended here, as a server that runs long jobs as tasks would list them
TASK_SUPPORT = {"render_video": "required", "stats": "optional"}
_listed = server.list_tools


async def _list_tools_with_tasks() -> list[types.Tool]:
    if os.environ.get("MCP_LIST_ERROR"):  # a server that refuses, quoting what it was given
        raise ValueError(os.environ["MCP_LIST_ERROR"])
    tools = await _listed()
    for tool in tools:
        if tool.name in TASK_SUPPORT:
            tool.execution = types.ToolExecution(taskSupport=TASK_SUPPORT[tool.name])
    return tools


server._mcp_server.list_tools()(_list_tools_with_tasks)


if __name__ == "__main__":
    if sys.argv[1] in ("http", "sse"):  # sse: the old HTTP+SSE transport (GET /sse, POST /messages/)
        server.settings.port = int(sys.argv[2])
        server.run(transport="streamable-http" if sys.argv[1] == "http" else "sse")
    else:
        server.run(transport="stdio")
