"""Sub-agents (issue 13, item 4): a ``delegate`` tool runs a named agent with its own instructions,
tools and policies, in a session of its own, and the parent turn waits for it durably.

Nothing here is a second engine. A delegation is a request of the one protocol (kind ``delegation``):

- the parent's call to ``delegate`` parks the parent turn on a ``delegation`` request (Cancel only);
- :class:`SubAgentRelay`, a consumer of committed events like the audit log (at least once, any
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
  themselves (:func:`delegation_live`, fail closed), so a click on the child's card in between runs nothing.

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

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from bot.principals import APP_PRINCIPAL
from bot.protocol import Event, InputRequest, InputRequested, InputResolved, InputResponse, UnknownRequest
from bot.session import SessionRef
from bot.state import CallResult, SessionState
from bot.tools import Tool

if TYPE_CHECKING:
    from bot.turns import Runtime

log = logging.getLogger(__name__)

DELEGATE = "delegate"  # the built-in tool's name (bot.builtin.delegate)
VIA = "subagent"  # InputResponse.via of a sub-agent's answer
NO_ANSWER = "(the sub-agent finished without saying anything)"
ENDED = ("turn.completed", "turn.failed", "turn.cancelled")


class SubAgent(BaseModel):
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


def child_ref(parent: SessionRef, req: InputRequest) -> SessionRef:
    """The child's ref: the parent's workspace and Slack thread (its cards land there), and a link back."""
    assert req.child_session_id and req.agent and req.action is not None
    return SessionRef(
        session_id=req.child_session_id,
        team_id=parent.team_id,
        enterprise_id=parent.enterprise_id,
        channel=dict(parent.channel),
        parent={
            "session_id": parent.session_id,
            "request_id": req.request_id,
            "call_id": req.action.call_id,
            "agent": req.agent,
        },
    )


def task_message_id(request_id: str) -> str:
    return f"delegation:{request_id}"


def final_answer(state: SessionState) -> str:
    """What the child said last: its answer to the task."""
    for message in reversed(state.history):
        if (
            message.get("role") == "assistant"
            and isinstance(message.get("content"), str)
            and message["content"].strip()
        ):
            return message["content"]
        if message.get("role") == "user":
            break
    return NO_ANSWER


def out_of_time(agent: str | None) -> str:
    """The ``delegate`` call's result when its deadline passed first (the model reads it)."""
    return f"{agent or 'The sub-agent'} did not finish in time and was stopped; its work is not done."


def delegation_result(values: dict[str, Any] | None) -> CallResult:
    """The ``delegate`` call's result from the answer the relay gave its request."""
    values = values or {}
    if values.get("error"):
        return CallResult(status="failed", error=str(values["error"]))
    return CallResult(status="completed", output=values.get("result", NO_ANSWER))


async def delegation_live(store: Any, delegation_id: str | None) -> bool:
    """Is the delegation a sub-agent works under still waiting for it (None: not a sub-agent's)?

    The second line of defence behind the relay: whatever ends a delegation (Cancel, the parent's turn
    cancelled, failed or steered past, a deadline) makes the relay stop the child, but the relay delivers
    later, from any replica. Until it has, the child's settle and its turn loop ask this, and fail closed:
    a delegation that is gone is over."""
    if not delegation_id:
        return True
    try:
        record = await store.get_request(delegation_id)
    except UnknownRequest:
        return False
    return record.status == "open"


class SubAgentRelay:
    """Moves delegations along, as a consumer of committed events (every ``Runtime`` has it, so any
    replica moves them along, whether it has the sub-agent loaded or not). Every step is idempotent, so a repeated event changes nothing: the task is queued once per
    request id, an answer to a settled request is stale, cancelling an ended turn does nothing."""

    def __init__(self, runtime: Runtime):
        self.runtime = runtime

    async def deliver(self, event: Event, session: SessionRef) -> None:
        if isinstance(event, InputRequested):
            for req in event.requests:
                if req.kind == "delegation":
                    await self._start(req, session)
        elif isinstance(event, InputResolved):
            for resolution in event.resolutions:
                if resolution.kind == "delegation" and resolution.outcome != "answered":
                    await self._stop(resolution.request_id)
        elif event.type in ENDED and session.parent:
            await self._report(event, session)

    async def _start(self, req: InputRequest, parent: SessionRef) -> None:
        rt = self.runtime
        try:
            record = await rt.store.get_request(req.request_id)
        except UnknownRequest:
            return
        if record.status != "open" or req.action is None:
            return  # cancelled before the child started: it never starts
        ref = child_ref(parent, req)
        task = str((req.action.input or {}).get("task", ""))
        # on behalf of the parent turn's owner, and automated when the parent turn was (a schedule)
        automated = bool(record.session_info.get("automated"))
        await rt.record_message(
            ref, req.principal, task, message_id=task_message_id(req.request_id), automated=automated
        )
        rt.spawn(rt.drive(ref.session_id), what=f"run sub-agent {req.agent} for {parent.session_id}")

    async def _stop(self, request_id: str) -> None:
        """The delegation ended without the child's answer: stop the child's turn (or its queued task)."""
        rt = self.runtime
        try:
            record = await rt.store.get_request(request_id)
        except UnknownRequest:
            return
        child = record.request.child_session_id
        if not child:
            return
        for _ in range(5):
            # not driven here: this runs inside an outbox pass, which must never wait for a drive slot that
            # slow tools hold (issue 25, item 12); the turn ends in the background
            if await rt.cancel_turn(child, None, resume=False):
                rt.spawn(rt.drive(child), what=f"end the turn of sub-agent session {child}")
                return
            snap = await rt.store.snapshot(child)
            queued = next((m for m in snap.inbox if m.get("id") == task_message_id(request_id)), None)
            if queued is None:
                if snap.state and snap.state.get("turn"):
                    continue  # its turn started meanwhile: cancel that
                return  # never started, or over
            if await rt.store.take_inbox(child, queued):
                return  # taken before any turn started: nothing of it will run
        log.warning("could not stop sub-agent session %s; its turn goes on", child)

    async def _report(self, event: Event, session: SessionRef) -> None:
        """The child's turn ended: answer the parent's delegation with its answer (or why there is none)."""
        rt = self.runtime
        parent = session.parent or {}
        agent = parent.get("agent", "the sub-agent")
        if event.type == "turn.completed":
            raw = await rt.store.state(session.session_id)
            values: dict[str, Any] = {
                "result": final_answer(SessionState.model_validate(raw)) if raw else NO_ANSWER
            }
        elif event.type == "turn.failed":
            values = {"error": f"{agent} failed: {getattr(event, 'reason', 'unknown reason')}"}
        else:
            values = {"error": f"{agent} was stopped before it finished."}
        response = InputResponse(
            request_id=parent["request_id"], values=values, principal=APP_PRINCIPAL, via=VIA
        )
        try:
            result = await rt.answer(response, resume=False)
        except UnknownRequest:
            return
        if result.state not in ("settled", "stale"):
            log.warning(
                "the answer of %s to %s was not taken: %s %s",
                agent,
                parent["request_id"],
                result.state,
                result.reason,
            )
        if result.batch_complete:
            rt.spawn(rt.drive(parent["session_id"]), what=f"resume {parent['session_id']} after {agent}")
