"""Sub-agents: a ``delegate`` tool runs a named agent with its own instructions,
tools and policies, in a session of its own, and the parent turn waits for it durably.

Nothing here is a second engine. A delegation is a request of the one protocol (kind ``delegation``):

- the parent's call to ``delegate`` parks the parent turn on a ``delegation`` request (Cancel only);
- :class:`bot.engine.subagent_relay.SubAgentRelay`, a consumer of committed events like the audit log (at least once, any
  replica, after crashes), starts the child when that request is committed: it queues the task as the
  child session's first message (once, keyed by the request) and drives it with the same turn loop;
- the child's own requests (approvals, questions) are ordinary requests of the child session, shown in
  the parent's thread (the child's ``SessionRef`` copies the parent's) and labelled with the agent's name;
- when the child's turn ends, the relay answers the delegation request through the one settle path, as
  the app (``via="subagent"``), with the child's final answer: the parent resumes with it as the call's
  result, like an external result;
- when the delegation request ends any other way (Cancel on its card, the parent turn cancelled or
  failed, the person steering past it, the agent's ``expires_after`` deadline), the relay cancels the
  child's turn: its open requests end "no longer needed" and its pending calls never run. The relay
  delivers later (any replica); until it has, the child's settle and turn loop find the delegation over
  themselves (``bot.engine.settle.delegation_live``, fail closed), so a click on the child's card in between
  runs nothing.

::

    from bot.agents import SubAgent

    researcher = SubAgent(
        name="researcher",
        description="Looks things up in the wiki and the CRM.",
        instructions="You research questions for a colleague. Answer with facts and sources.",
        tools=[search_wiki, crm_lookup],  # crm_lookup may be approval=always(): the card lands in the thread
    )

A module named in ``BOT_TOOLS`` defines sub-agents at module level, as it defines tools. A tool that
only sub-agents list is theirs alone: the main agent is not shown it and cannot call it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import ConfigDict, Field

from bot.deferred import DeferredModel
from bot.state import CallResult
from bot.tools import Tool

DELEGATE = "delegate"  # the built-in tool's name (bot.builtin.delegate)
NO_ANSWER = "(the sub-agent finished without saying anything)"


class SubAgent(DeferredModel):
    """A named agent the main agent can hand a task to (``delegate``): its own instructions (its system
    prompt), its own tools (with their own approval policies), its own session."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str  # what it is good for: the main model reads it in ``delegate``'s description
    instructions: str  # its system prompt
    tools: list[Tool] = Field(default_factory=list)
    # how long a delegation may take (a timedelta, or seconds): then it ends "expired", the sub-agent is
    # stopped (its open cards end "no longer needed") and the parent goes on without its answer
    expires_after: timedelta | None = None

    def __hash__(self) -> int:
        return hash(self.name)


def child_session_id(parent_session_id: str, agent: str, step_id: str, call_id: str) -> str:
    """A delegation's own session: derived from the parent's call, so a retry of that call finds it again."""
    return f"{parent_session_id}>agent:{agent}:{step_id}:{call_id}"


def out_of_time(agent: str | None) -> str:
    """The ``delegate`` call's result when its deadline passed first (the model reads it)."""
    return f"{agent or 'The sub-agent'} did not finish in time and was stopped; its work is not done."


def delegation_result(values: dict[str, Any] | None) -> CallResult:
    """The ``delegate`` call's result from the answer the relay gave its request."""
    values = values or {}
    if values.get("error"):
        return CallResult(status="failed", error=str(values["error"]))
    return CallResult(status="completed", output=values.get("result", NO_ANSWER))
