"""``BOT_MCP_CONFIG``: the MCP servers to connect to, in the ``mcpServers`` shape other MCP clients use,
plus our approval policies (see :mod:`bot.connections.mcp`). Read once at start; a file that can't be used stops
the bot with one line naming the server, the field or the variable, and the fix."""

from __future__ import annotations

import fnmatch
import json
import os
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, ConfigDict, Field, ValidationError, model_validator

from bot.approval import check_policy_name
from bot.deferred import DeferredModel
from bot.ops import logs

DEFAULT_TIMEOUT_S = 30.0
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# a policy a config file names, from the one registry of named policies (bot.approval.policy_named)
PolicyName = Annotated[str, AfterValidator(check_policy_name)]


class McpConfigError(ValueError):
    """``BOT_MCP_CONFIG`` can't be used; the message names the server, the field or variable, and the fix."""


class ServerConfig(DeferredModel):
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


class McpConfig(DeferredModel):
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
