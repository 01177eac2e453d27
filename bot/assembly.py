"""What every frontend builds from the settings: the model and the tools (no Slack in it).

The composition root (``bot/app.py``) adds what Slack needs on top (the editable tools' forms are checked
there); the terminal chat (``python -m bot chat``) uses these as they are, so it loads no Slack code.
"""

from __future__ import annotations

import importlib
from typing import Any

from bot.backends import MissingExtra, WrappedAgent, wrap
from bot.backends.proxies import proxy_tools
from bot.builtin import BUILTIN_TOOLS
from bot.config import ConfigError, Settings
from bot.engine.tool_registry import ToolRegistry
from bot.models.base import ChatModel
from bot.tools import Tool

# a framework's import root → the extra that installs it
FRAMEWORK_OF_MODULE = {"pydantic_ai": "pydantic-ai", "agents": "openai-agents", "langgraph": "langgraph",
                       "langchain": "langgraph", "langchain_openai": "langgraph"}


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
        except ValueError as exc:  # an operation named like a tool of BOT_TOOLS or a built-in
            raise ConfigError(f"BOT_OPENAPI: {exc}") from exc
    if settings.mcp_config:  # checked here, so `check` and a bad file stop at once; connected at the start
        mcp_config(settings.mcp_config)
    for t in extra or []:
        registry.register(t)
    return registry


def load_agent(settings: Settings) -> WrappedAgent | None:
    """BOT_AGENT's agent, wrapped for the engine (``bot.backends``); a bad setting, or a framework that is not
    installed, is a ConfigError naming the fix."""
    if not settings.agent:
        return None
    module_name, _, attribute = settings.agent.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"BOT_AGENT={settings.agent!r}: name the agent as module:attribute (myapp.agent:agent)")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except ImportError as exc:
        missing = FRAMEWORK_OF_MODULE.get((exc.name or "").split(".")[0])
        fix = f"pip install '.[{missing}]'" if missing else "check the module path"
        raise ConfigError(f"BOT_AGENT: cannot import {module_name!r} ({exc}): {fix}") from exc
    except AttributeError as exc:
        raise ConfigError(f"BOT_AGENT: {module_name} has no {attribute!r}") from exc
    except Exception as exc:  # noqa: BLE001 - the agent's module failed to build it: said plainly, not a traceback
        raise ConfigError(f"BOT_AGENT: importing {module_name} failed: {type(exc).__name__}: {exc}") from exc
    try:
        return wrap(found)
    except (TypeError, MissingExtra) as exc:
        raise ConfigError(f"BOT_AGENT: {exc}") from exc


def with_agent_tools(registry: ToolRegistry, agent: WrappedAgent | None) -> ToolRegistry:
    """The agent's tools, as the engine's (their policies, cards and who may answer: ``bot.backends.proxies``)."""
    if agent is not None:
        try:
            for t in proxy_tools(agent):
                # the built-ins serve the built-in loop; the agent's own tool of such a name (an ``ask_question``
                # of its own) is the one its calls name
                registry.register(t, replace=registry.get(t.name) in BUILTIN_TOOLS)
        except ValueError as exc:
            raise ConfigError(f"BOT_AGENT: {exc}") from exc
    return registry


def mcp_config(path: str) -> Any:
    """BOT_MCP_CONFIG, read and checked; what is wrong stops the bot naming it (exit 2)."""
    # imported here: the MCP SDK is for bots that use MCP servers (start-up time counts)
    from bot.connections.mcp import McpConfigError, load_config

    try:
        return load_config(path)
    except McpConfigError as exc:
        raise ConfigError(str(exc)) from exc
