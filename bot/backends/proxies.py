"""A framework agent's tools as the engine's tools: each carries our policies (who must approve, who may
answer), its card's wording and, where the framework gives a model of its arguments, "Edit & approve".
The framework runs them; these never do (``bot.engine.framework_turns`` asks and fences, the framework calls).
"""

# no ``from __future__ import annotations`` here: a proxy's parameter is annotated with the framework's
# model when its function is defined (what ``@tool`` reads), not with a name resolved later

from typing import Any

from bot.agents import DELEGATE, SubAgent
from bot.approval import always, never
from bot.backends import ToolInfo, WrappedAgent
from bot.tools import Tool, ToolContext


def proxy_tools(agent: WrappedAgent) -> list[Tool | SubAgent]:
    """One engine tool per tool of the agent; a policy named for a tool it lacks is a mistake said plainly.
    What the backend gives the engine as it is (``engine_tools``: the native backend's external-result tools and
    sub-agents, which the engine settles itself) is registered as it is, under its own policies."""
    infos = agent.backend.tools()
    unknown = sorted(set(agent.policies) - {t.name for t in infos})
    if unknown:
        raise ValueError(f"policies name tools the agent does not have: {', '.join(unknown)} "
                         f"(its tools: {', '.join(sorted(t.name for t in infos)) or 'none'})")
    engine_tools = getattr(agent.backend, "engine_tools", None)
    own: list[Tool | SubAgent] = engine_tools() if engine_tools is not None else []
    held = {t.name for t in own if isinstance(t, Tool)}
    if any(isinstance(t, SubAgent) for t in own):  # its sub-agents bring the registry's own ``delegate``
        held.add(DELEGATE)
    overridden = sorted(held & set(agent.policies))
    if overridden:
        raise ValueError(f"{', '.join(overridden)}: the engine settles these calls under the tool's own approval "
                         f"(set it on the tool), not a policy given here")
    return [*own, *(_proxy(info, agent.policies.get(info.name)) for info in infos if info.name not in held)]


def _proxy(info: ToolInfo, policy: Any) -> Tool:
    arguments = info.args_model or dict  # the framework's model of its arguments, else the raw JSON object

    async def runs_in_its_framework(args: arguments, ctx: ToolContext) -> Any:  # type: ignore[valid-type]
        raise RuntimeError(f"{info.name} runs in its framework, not through the engine")
    # where a clash of names says it comes from (``tool_registry``): the agent, not this module
    runs_in_its_framework.__module__, runs_in_its_framework.__qualname__ = "BOT_AGENT", f"{info.name} (the agent's tool)"
    approval = policy if policy is not None else always() if info.asks else never()
    return Tool(runs_in_its_framework, name=info.name, description=info.description or info.name,
                approval=approval, editable=info.editable and info.args_model is not None,
                idempotent=info.idempotent)
