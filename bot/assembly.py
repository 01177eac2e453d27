"""What every frontend builds from the settings: the model and the tools (no Slack in it).

The composition root (``bot/app.py``) adds what Slack needs on top (the editable tools' forms are checked
there); the terminal chat (``python -m bot chat``) uses these as they are, so it loads no Slack code.
"""

from __future__ import annotations

from typing import Any

from bot.builtin import BUILTIN_TOOLS
from bot.config import ConfigError, Settings
from bot.engine.tool_registry import ToolRegistry
from bot.models.base import ChatModel
from bot.tools import Tool


def build_model(settings: Settings) -> ChatModel:
    if settings.openai_api_key:
        from bot.models.openai import OpenAIChatModel

        return OpenAIChatModel(
            settings.model, base_url=settings.openai_base_url, api_key=settings.openai_api_key
        )
    from bot.models.demo import DemoModel

    return DemoModel()


def load_tools(settings: Settings, extra: list[Tool] | None = None) -> ToolRegistry:
    """The built-in tools, BOT_TOOLS' modules, the OpenAPI operations and ``extra``; a bad setting is a
    ConfigError naming it."""
    registry = ToolRegistry(BUILTIN_TOOLS)
    try:
        registry.load_modules(settings.tool_modules)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if settings.openapi_config:  # OpenAPI operations as tools (bot.connections.openapi)
        # imported here: it brings YAML and jsonschema, which a bot without connections never needs
        # (start-up time counts: a restarted replica serves no click before it has imported)
        from bot.connections.openapi import OpenAPIError, openapi_tools

        try:
            for t in openapi_tools(settings.openapi_config):
                registry.register(t)
        except OpenAPIError as exc:
            raise ConfigError(str(exc)) from exc
    if settings.mcp_config:  # checked here, so `check` and a bad file stop at once; connected at the start
        mcp_config(settings.mcp_config)
    for t in extra or []:
        registry.register(t)
    return registry


def mcp_config(path: str) -> Any:
    """BOT_MCP_CONFIG, read and checked; what is wrong stops the bot naming it (exit 2)."""
    # imported here: the MCP SDK is for bots that use MCP servers (start-up time counts)
    from bot.connections.mcp import McpConfigError, load_config

    try:
        return load_config(path)
    except McpConfigError as exc:
        raise ConfigError(str(exc)) from exc
