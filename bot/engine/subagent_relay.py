"""The relay that moves delegations along (``bot.agents``): it starts a sub-agent when its parent's
``delegation`` request is committed, stops it when that request ends without its answer, and answers the
request with the sub-agent's final answer when its turn ends.

It is a consumer of committed events, like the audit log (at least once, any replica, after crashes), and
it works the sessions only through the runtime's entry points (:class:`SessionControl`), as a frontend does.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from bot.agents import NO_ANSWER
from bot.engine.parts import TurnStore
from bot.engine.settle import AnswerResult
from bot.engine.turn_commands import RequestsRead, SessionRead, TakeMessage
from bot.principals import APP_PRINCIPAL, Principal
from bot.protocol import (
    EndedBy,
    Event,
    InputRequest,
    InputRequested,
    InputResolved,
    InputResponse,
    UnknownRequest,
)
from bot.session import SessionRef
from bot.state import SessionState

log = logging.getLogger(__name__)

VIA = "subagent"  # InputResponse.via of a sub-agent's answer
ENDED = ("turn.completed", "turn.failed", "turn.cancelled")


class SessionControl(Protocol):
    """What the relay does to sessions: the runtime's own entry points (``bot.engine.turns.Runtime``)."""

    @property
    def store(self) -> TurnStore: ...

    async def record_message(self, ref: SessionRef, principal: Principal | None, text: str, *,
                             message_id: str | None = None, automated: bool = False) -> dict[str, Any] | None: ...
    async def drive(self, session_id: str) -> None: ...
    async def cancel_turn(self, session_id: str, principal: Principal | None, *, resume: bool = True,
                          ended_by: EndedBy = "stop") -> bool: ...
    async def answer(self, response: InputResponse, *, resume: bool = True) -> AnswerResult: ...
    def spawn(self, coro: Any, *, what: str) -> asyncio.Task[Any]: ...


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


class SubAgentRelay:
    """Moves delegations along, as a consumer of committed events (every ``Runtime`` has it, so any
    replica moves them along, whether it has the sub-agent loaded or not). Every step is idempotent, so a repeated event changes nothing: the task is queued once per
    request id, an answer to a settled request is stale, cancelling an ended turn does nothing."""

    def __init__(self, runtime: SessionControl):
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
        records = await rt.store.requests(RequestsRead((req.request_id,)))
        record = records[0] if records else None
        if record is None or record.status != "open" or req.action is None:
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
        records = await rt.store.requests(RequestsRead((request_id,)))
        child = records[0].request.child_session_id if records else None
        if not child:
            return
        for _ in range(5):
            # not driven here: this runs inside an outbox pass, which must never wait for a drive slot that
            # slow tools hold; the turn ends in the background
            if await rt.cancel_turn(child, None, resume=False, ended_by="delegation-ended"):
                rt.spawn(rt.drive(child), what=f"end the turn of sub-agent session {child}")
                return
            snap = await rt.store.read(SessionRead(child))
            queued = next((m for m in snap.inbox if m.get("id") == task_message_id(request_id)), None)
            if queued is None:
                if snap.state and snap.state.get("turn"):
                    continue  # its turn started meanwhile: cancel that
                return  # never started, or over
            if await rt.store.take_message(TakeMessage(child, queued)):
                return  # taken before any turn started: nothing of it will run
        log.warning("could not stop sub-agent session %s; its turn goes on", child)

    async def _report(self, event: Event, session: SessionRef) -> None:
        """The child's turn ended: answer the parent's delegation with its answer (or why there is none)."""
        rt = self.runtime
        parent = session.parent or {}
        agent = parent.get("agent", "the sub-agent")
        if event.type == "turn.completed":
            raw = (await rt.store.read(SessionRead(session.session_id, state_only=True))).state
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
