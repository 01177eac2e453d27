"""``delegate``: hand a task to a named sub-agent and wait for its answer (``bot.agents``).

Registered by ``bot.engine.tool_registry.ToolRegistry`` as soon as it holds a sub-agent; its description lists them. Like an
``external=True`` tool its function never runs: the executor turns the call into a ``delegation``
request, and the call's result is the sub-agent's final answer.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import Field

from bot.agents import DELEGATE, SubAgent
from bot.deferred import DeferredModel
from bot.tools import Tool, ToolContext

LEAD = (
    "Hand a task to one of your sub-agents and wait for its answer. It works on its own, with its "
    "own tools; people may be asked to approve what it does. Give it everything it needs in `task`. "
    "Sub-agents:"
)


class Delegation(DeferredModel):
    agent: str = Field(description="The sub-agent's name.")
    task: str = Field(description="What it should do, self-contained: it does not see this conversation.")


async def _delegate(args: Delegation, ctx: ToolContext) -> str:
    raise AssertionError("delegate never runs: the executor makes it a delegation request")


def describe(agents: Iterable[SubAgent]) -> str:
    lines = [f"- {a.name}: {' '.join(a.description.split())}" for a in agents]
    return "\n".join([LEAD, *lines])


class DelegateTool(Tool):
    """``delegate``: each call becomes a delegation request (``Tool.delegates``), never a run."""

    delegates = True


def delegate_tool() -> Tool:
    """A fresh ``delegate`` for one registry (its description lists that registry's sub-agents)."""
    return DelegateTool(_delegate, name=DELEGATE, description=LEAD, prompt="{task}")
