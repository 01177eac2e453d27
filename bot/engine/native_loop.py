"""The bot's own loop on the runtime's tools through the backend interface (DESIGN §14): ``BOT_LOOP=native``.

:class:`~bot.backends.native.NativeBackend` with, in place of a fixed list, the runtime's
:class:`~bot.engine.tool_registry.ToolRegistry` as it is at each model call: the built-ins (``ask_question``,
``request_info``), BOT_TOOLS' modules, the OpenAPI operations and the MCP servers' tools (which join, change
and leave as the servers list them). Each is the real :class:`~bot.tools.Tool`, not a proxy: the engine's gate
and cards read it from the same registry (its approval policy, card options, previews and deadlines). Its
instructions are the runtime's ``system_prompt``, read when used (the history's window and bound come with
each turn, as for any native run). It lives in the engine, not beside the adapters: it stands on the engine's
registry and settings.

A paused run is held only to the tools its pause waits on (``live_tools``: ``FrameworkTurns`` checks each
one's ``tool_registry.tool_fingerprint``), so a deploy that adds a tool, or an MCP server listing a new one,
leaves parked turns alone.

Tools a person runs elsewhere (``external=True``) and ``delegate`` are offered too: native parks on them and the
engine settles them (their cards and requests are the built-in loop's). A sub-agent of BOT_TOOLS is driven by
a native backend of its own, on the same model, with its instructions and tools (:meth:`RegistryBackend.sub_agent`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from bot.agents import SubAgent
from bot.backends import PendingCall, WrappedAgent, wrap
from bot.backends.native import NativeBackend
from bot.engine.execute import ToolUnavailable
from bot.engine.parts import RuntimeSettings
from bot.engine.passes import DrivePass, TurnLoop
from bot.engine.tool_registry import ToolRegistry, tool_fingerprint
from bot.models.base import ChatModel
from bot.state import FrameworkRun, SessionState
from bot.tools import Tool

log = logging.getLogger(__name__)

CHANGED_TOOL = ("This turn paused on {tool}, which changed since (its arguments or its approval), so it was not "
                "resumed into different code. Ask again to start over.")
# a run's fingerprint on the live registry: held to the tools it waits on instead (``FrameworkRun.called``); a
# run of the same framework on fixed tools, or the reverse, is a different agent (``framework_turns.CHANGED``)
LIVE = "live-registry"


def native_on_registry(model: ChatModel, registry: ToolRegistry, settings: RuntimeSettings) -> WrappedAgent:
    """The bot's own loop on ``model`` and the main agent's tools of ``registry``. No policies of its own:
    each tool's approval is the tool's, read from the registry by the engine (no proxy is registered)."""
    return wrap(RegistryBackend(model, registry, settings))


class RegistryBackend(NativeBackend):
    live_tools = True

    def __init__(self, model: ChatModel, registry: ToolRegistry, settings: RuntimeSettings):
        super().__init__(model, ())
        self.registry, self.settings = registry, settings
        self._children: dict[str, NativeBackend] = {}

    @property
    def by_name(self) -> Mapping[str, Tool]:
        found = (self.registry.get(name) for name in self.registry.names())
        return {t.name: t for t in found if t is not None}

    def engine_tools(self) -> list[Tool | SubAgent]:
        return []  # the registry holds them all as they are already

    def sub_agent(self, name: str) -> NativeBackend | None:
        """A BOT_TOOLS sub-agent's own native backend: its instructions and its tools, on the same model."""
        agent = self.registry.agent(name)
        if agent is None:
            return None
        if name not in self._children:
            self._children[name] = NativeBackend(self.model, agent.tools, instructions=agent.instructions)
        return self._children[name]

    @property
    def instructions(self) -> str | None:
        return self.settings.system_prompt or None


def waits_on(registry: ToolRegistry, pending: Iterable[PendingCall]) -> dict[str, str]:
    """The tools a pause waits on, each with its fingerprint (``FrameworkRun.called``)."""
    tools = {c.tool_name: registry.get(c.tool_name) for c in pending}
    return {name: tool_fingerprint(t) for name, t in tools.items() if t is not None}


async def resumable_on_registry(driver: TurnLoop, p: DrivePass, state: SessionState, run: FrameworkRun) -> bool:
    """Whether a run paused on the live registry may resume: no tool it waits on changed its schema or approval
    since (else its turn fails with a plain message). One gone from this process raises ToolUnavailable, as for
    the built-in loop: retried, another replica (or the MCP server back) may have it, and the turn fails visibly
    after the drive's failures in a row."""
    for name, kept in sorted(run.called.items()):
        tool = driver.p.tools.get(name)
        if tool is None:
            raise ToolUnavailable(f"tool {name!r} is not loaded in this process")
        if tool_fingerprint(tool) != kept:
            log.warning("session %s: %s changed since its turn paused on it", p.session_id, name)
            await driver.fail_turn(p, state, CHANGED_TOOL.format(tool=name))
            return False
    run.called = {}  # checked: a later resume (from a checkpoint, after the budget) waits on none of them
    return True

