"""The bench's agents, one per framework, as a team would write them: ``BOT_AGENT=benchmarks.http.framework_agents:<name>``.

Each has the bench's one tool, ``refund_charge`` (as ``tools.refund_charge``: it returns at once, its result
carrying the wall-clock time it was made), gated in its framework's own way (pydantic-ai
``requires_approval=True``, the Agents SDK ``needs_approval=True``, LangChain's ``create_agent`` with its
``HumanInTheLoopMiddleware`` on the tool), and a model that is the framework's
OpenAI-compatible Chat Completions client pointed at the bench model (``model.py``).

The bot imports the agent by name, so the model's URL comes from the environment (``MODEL_URL_ENV``, set
by ``project.py --agent``); an attribute of this module is built on first use, so a framework whose extra
is not installed costs nothing until it is named. The framework-alone peers (``framework_apps.py``) build
theirs with the builders, given the URL.
"""

from __future__ import annotations

import os
import time
from typing import Any

MODEL_URL_ENV = "BENCH_MODEL_URL"
API_KEY = "sk-bench"
INSTRUCTIONS = "You refund charges when asked."
FRAMEWORKS = {  # agent name → the modules its framework needs (the bench skips one not installed)
    "pydantic_ai": ("pydantic_ai",),
    "openai_agents": ("agents",),
    "langgraph": ("langchain.agents", "langchain_openai", "langgraph.checkpoint.sqlite", "aiosqlite"),
}


def installed(name: str) -> bool:
    import importlib.util

    return all(importlib.util.find_spec(module) is not None for module in FRAMEWORKS[name])


def refund_charge(charge_id: str, amount: float) -> dict[str, Any]:
    """Refund a charge.

    Args:
        charge_id: the charge to refund, like ch_1001
        amount: how much to refund, in dollars
    """
    return {"refunded": charge_id, "at": time.time()}


def pydantic_ai_agent(model_url: str, output_type: Any = str) -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("bench-model", provider=OpenAIProvider(base_url=model_url, api_key=API_KEY))
    agent = Agent(model, instructions=INSTRUCTIONS, output_type=output_type)
    agent.tool_plain(requires_approval=True)(refund_charge)
    return agent


def openai_agents_agent(model_url: str, bots_tools: bool = False) -> Any:
    """``bots_tools``: offer the model the tool the bot adds to an Agents SDK agent too (``ask_user``, for
    questions), so that the agent alone is asked exactly what the bot's copy of it is asked."""
    from agents import Agent, OpenAIChatCompletionsModel, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # no export to OpenAI's servers from a bench (the bot turns it off for its runs)
    model = OpenAIChatCompletionsModel("bench-model", openai_client=AsyncOpenAI(base_url=model_url, api_key=API_KEY))
    tools = [function_tool(refund_charge, needs_approval=True)]
    if bots_tools:
        from bot.backends.openai_agents import question_tool

        tools.append(question_tool())
    return Agent(name="Refunds", instructions=INSTRUCTIONS, model=model, tools=tools)


def langgraph_agent(model_url: str, checkpointer: Any = None) -> Any:
    from langchain.agents import create_agent
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(model="bench-model", base_url=model_url, api_key=API_KEY)
    return create_agent(model=model, tools=[tool(refund_charge)], system_prompt=INSTRUCTIONS, checkpointer=checkpointer,
                        middleware=[HumanInTheLoopMiddleware(interrupt_on={
                            "refund_charge": {"allowed_decisions": ["approve", "reject"]}})])


def native_agent(model_url: str) -> Any:
    """The bot's own loop as a backend (``bot.backends.native``) on the built-in bench's parts: the bot's model
    client, the project's ``refund_charge`` (``tools.refund_charge``, ``always()``: the requester answers) and
    the built-in loop's system prompt, so that it does the project's cycle (contenders ``p`` and ``pN``). It
    offers the built-in tools too, as the project does, so that its model requests are the project's, byte for
    byte (the bench model never calls them; this backend has no ``ctx.ask`` for them)."""
    from bot.backends.native import native
    from bot.builtin import BUILTIN_TOOLS
    from bot.engine.parts import RuntimeSettings
    from bot.models.openai import OpenAIChatModel

    from .tools import refund_charge

    model = OpenAIChatModel("bench-model", base_url=model_url, api_key=API_KEY)
    return native(model, [*BUILTIN_TOOLS, refund_charge], instructions=RuntimeSettings().system_prompt)


_BUILDERS = {"native": native_agent, "pydantic_ai": pydantic_ai_agent, "openai_agents": openai_agents_agent,
             "langgraph": langgraph_agent}
_built: dict[str, Any] = {}


def __getattr__(name: str) -> Any:  # BOT_AGENT=benchmarks.http.framework_agents:<name>
    if name not in _BUILDERS:
        raise AttributeError(name)
    if name not in _built:
        _built[name] = _BUILDERS[name](os.environ[MODEL_URL_ENV])
    return _built[name]
