"""A framework agent's tools as the engine's tools: each carries our policies (who must approve, who may
answer), its card's wording and, where the framework gives a model of its arguments, "Edit & approve".
The framework runs them; these never do (``bot.engine.framework_turns`` asks and fences, the framework calls).
"""

from __future__ import annotations

from typing import Any

from bot.approval import always, never
from bot.backends import ToolInfo, WrappedAgent
from bot.tools import Tool, ToolContext


def proxy_tools(agent: WrappedAgent) -> list[Tool]:
    """One engine tool per tool of the agent; a policy named for a tool it lacks is a mistake said plainly."""
    infos = agent.backend.tools()
    unknown = sorted(set(agent.policies) - {t.name for t in infos})
    if unknown:
        raise ValueError(f"policies name tools the agent does not have: {', '.join(unknown)} "
                         f"(its tools: {', '.join(sorted(t.name for t in infos)) or 'none'})")
    return [_proxy(info, agent.policies.get(info.name)) for info in infos]


def _proxy(info: ToolInfo, policy: Any) -> Tool:
    async def runs_in_its_framework(args: Any, ctx: ToolContext) -> Any:
        raise RuntimeError(f"{info.name} runs in its framework, not through the engine")

    # the arguments' annotation is what ``@tool`` reads: the framework's model, else the raw JSON object
    runs_in_its_framework.__annotations__ = {"args": info.args_model or dict, "ctx": ToolContext, "return": Any}
    approval = policy if policy is not None else always() if info.asks else never()
    return Tool(runs_in_its_framework, name=info.name, description=info.description or info.name,
                approval=approval, editable=info.editable and info.args_model is not None,
                idempotent=info.idempotent)
