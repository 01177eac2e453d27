"""The tools one runtime offers (``ToolRegistry``): the main agent's, its sub-agents' and ``delegate``.

It sits above the tool definitions (``bot.tools``) and the sub-agents (``bot.agents``), which know
nothing of it: a tool is defined once, and where it is offered (to whom) is the registry's business.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable

from bot.agents import DELEGATE, SubAgent
from bot.builtin.delegate import delegate_tool, describe
from bot.models.base import ToolSpec
from bot.tools import Tool

log = logging.getLogger(__name__)


class ToolRegistry:
    """The tools one runtime offers, by name, and its sub-agents (``bot.agents``).

    Every tool has one name here, so the settle path and response policies find it whoever calls it;
    a tool only sub-agents list is *private*: the main agent is neither shown it nor allowed to call it.
    """

    def __init__(self, tools: Iterable[Tool | SubAgent] = ()):
        self._tools: dict[str, Tool] = {}
        self._main: set[str] = set()  # the main agent's tools
        self._agents: dict[str, SubAgent] = {}
        for t in tools:
            self.register(t)

    def register(self, t: Tool | SubAgent, *, replace: bool = False) -> None:
        """Add a ``Tool`` for the main agent, or a ``SubAgent`` (with its tools, and ``delegate``).

        A name is one tool's: another tool of a name already taken is a ValueError naming both, since the
        second would silently take the first's calls under its own approval policy. ``replace``: the caller
        owns the name and swaps its own tool (an MCP server's tools listed again)."""
        if not isinstance(t, Tool):
            self.register_agent(t)
            return
        known = self._tools.get(t.name)
        if known is not None and known is not t and not replace:
            raise ValueError(_taken(t, known))
        self._tools[t.name] = t
        self._main.add(t.name)

    def register_agent(self, agent: SubAgent) -> None:
        if not isinstance(agent, SubAgent):
            raise TypeError(f"not a Tool or a SubAgent: {agent!r}")
        if DELEGATE in self._tools and not self._tools[DELEGATE].delegates:
            raise ValueError(f"sub-agent {agent.name}: a tool of yours is named {DELEGATE!r}, the built-in's name")
        for t in agent.tools:
            known = self._tools.get(t.name)
            if known is not None and known is not t:
                raise ValueError(f"sub-agent {agent.name}: another tool is named {t.name!r} (tool names are unique)")
            self._tools[t.name] = t
        self._agents[agent.name] = agent
        if DELEGATE not in self._tools:
            self._tools[DELEGATE] = delegate_tool()
            self._main.add(DELEGATE)
        self._tools[DELEGATE].description = describe(self._agents.values())

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def unregister(self, name: str) -> None:
        """Take a main-agent tool away (``bot.connections.mcp``: its server no longer lists it)."""
        if name in self._main:
            self._main.discard(name)
            self._tools.pop(name, None)

    def __iter__(self):
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def agents(self) -> list[SubAgent]:
        return list(self._agents.values())

    def agent(self, name: str | None) -> SubAgent | None:
        """The sub-agent of that name (None: the main agent, or no such sub-agent)."""
        return self._agents.get(name) if name else None

    def _offered(self, agent: str | None) -> list[str]:
        if agent is None:
            return [n for n in self._tools if n in self._main]
        found = self._agents.get(agent)
        return [t.name for t in found.tools] if found is not None else []

    def offers(self, name: str, agent: str | None = None) -> bool:
        """Whether ``agent`` (None: the main agent) has the tool ``name``."""
        return name in self._offered(agent)

    def names(self, agent: str | None = None) -> list[str]:
        """The tools ``agent`` (None: the main agent) has."""
        return sorted(self._offered(agent))

    def specs(self, agent: str | None = None) -> list[ToolSpec]:
        """What ``agent``'s model (None: the main agent's) is told about its tools."""
        return [self._tools[n].spec() for n in self._offered(agent)]

    def load_modules(self, module_paths: Iterable[str]) -> None:
        """Register every module-level ``Tool`` and ``SubAgent`` of each module (``BOT_TOOLS``)."""
        for path in module_paths:
            path = path.strip()
            if not path:
                continue
            try:
                module = importlib.import_module(path)
            except ImportError as exc:
                raise ValueError(f"BOT_TOOLS: cannot import {path!r}: {exc}") from exc
            agents = [v for v in vars(module).values() if isinstance(v, SubAgent)]
            # a tool the module's sub-agents list is theirs (private), not the main agent's
            private = {id(t) for agent in agents for t in agent.tools}
            found = [v for v in vars(module).values() if isinstance(v, Tool) and id(v) not in private]
            if not found and not agents:
                log.warning("BOT_TOOLS: module %s defines no tools", path)
            for t in found:
                self.register(t)
            for agent in agents:
                self.register_agent(agent)


def _origin(t: Tool) -> str:
    """Where a tool was defined, for messages: its function's module and name."""
    fn = getattr(t, "fn", None)
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    return f"{module}.{name}" if module and name else repr(t)


def _taken(t: Tool, known: Tool) -> str:
    if str(getattr(getattr(known, "fn", None), "__module__", "")).startswith("bot.builtin"):
        return (f"the tool {t.name!r} ({_origin(t)}) takes a built-in tool's name: rename it "
                f"(@tool(name=...))")
    return (f"two tools are named {t.name!r}: {_origin(known)} and {_origin(t)} (tool names are unique: "
            f"rename one with @tool(name=...))")
