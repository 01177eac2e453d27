"""MCP servers' tools as agent tools, with the official ``mcp`` SDK as the client.

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
same arguments is the card's preview (``@tool(preview=…)``); it runs before anyone approves, so the server
must list it with ``readOnlyHint: true`` (any other is refused, by name, and the card has no preview).

Connections live as long as the app: :class:`McpServers` opens them at start, re-lists a server's
tools when it says its list changed, reconnects a server that went away, and closes them at shutdown.
A server that is down or slow never stops the bot and never crashes a turn: the model gets a tool
error saying so. A tool the server lists as callable only as a task (``execution.taskSupport:
"required"``) is left out, as the bot makes plain calls; a server that answers with the old HTTP+SSE
transport is named as such (it is not supported: streamable HTTP is). A server's ``elicitation/create`` becomes a form card in the calling session's
thread through ``ctx.form`` — durable by replay, so a tool that elicits is called again when the form
is answered (see :class:`bot.connections.mcp.tools.Elicitation`).

The package's rooms: ``config`` (the file), ``tools`` (a server's tools as agent tools) and ``server``
(the connections and the calls on them).
"""

from bot.connections.mcp.config import McpConfig, McpConfigError, ServerConfig, load_config
from bot.connections.mcp.server import START_WAIT_S, McpServer, McpServers
from bot.connections.mcp.tools import McpTool, McpToolError, tool_name

__all__ = [
    "START_WAIT_S",
    "McpConfig",
    "McpConfigError",
    "McpServer",
    "McpServers",
    "McpTool",
    "McpToolError",
    "ServerConfig",
    "load_config",
    "tool_name",
]
