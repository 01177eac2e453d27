"""What a framework's paused run is told when it goes on: people's answers, and our request policy's refusals.

People's answers come from the pause's request records, as ``bot.backends`` answers (:func:`answer_of`).

A framework may pause a call for a person before any code of ours sees it (pydantic-ai's
``requires_approval``, LangGraph's human-in-the-loop middleware): its backend parks it as an approval our gate
was never asked about. Our request policy still decides first (:func:`policy_refusals`): a call it refuses gets
no card, since no one may approve what the policy forbids, and the framework hears the refusal as a cancel
carrying the policy's reason, at once or, beside calls people must answer, with their answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from bot.backends import AgentBackend, Answer, Approve, GateVerdict, Outcome, Parked, Reject, Reply
from bot.engine.call_outcomes import rejection
from bot.protocol import RequestRecord
from bot.tools import Tool


class Gate(Protocol):
    """The engine's side of a run, as far as its request policy goes (``EngineTurn``)."""

    gated: set[str]
    approved: set[str]

    async def gate(self, call_id: str, tool_name: str, arguments: Mapping[str, Any]) -> GateVerdict: ...


async def policy_refusals(turn: Gate, outcome: Outcome) -> dict[str, Reject]:
    """A pause's approvals our gate was not asked about that our request policy refuses, each with its reason."""
    refused: dict[str, Reject] = {}
    for pending in outcome.pending if isinstance(outcome, Parked) else ():
        if pending.kind != "approval" or pending.call_id in turn.gated or pending.call_id in turn.approved:
            continue
        verdict = await turn.gate(pending.call_id, pending.tool_name, pending.arguments)
        if verdict.action == "refuse":
            refused[pending.call_id] = Reject(message=verdict.reason or f"{pending.tool_name} is not allowed here.")
    return refused


def told_at_once(backend: AgentBackend, saved: str, refused: dict[str, Reject]) -> Callable[[Any], Awaitable[Outcome]]:
    """The run going on at once from a pause whose every call our policy refused."""
    return lambda turn: backend.resume(turn, saved, dict(refused))


def answer_of(record: RequestRecord, tool: Tool | None) -> Answer:
    """A settled request's answer, as the framework takes it."""
    by = record.responder.principal_id if record.responder else None
    response = record.response
    if record.request.kind == "question":
        if record.outcome == "answered" and response is not None:
            labels = {o.id: o.label for o in record.request.options}
            value = labels.get(response.option_id or "", response.option_id) if response.option_id else response.text
            return Reply(value=value, by=by, principal=record.responder)
    elif record.request.kind in ("external-result", "delegation", "user-input"):
        if record.outcome == "answered" and response is not None:  # a posted result, a sub-agent's answer, a form's values
            return Reply(value=response.values, by=by, principal=record.responder)
    elif record.outcome == "approved":
        return Approve(arguments=response.edited_input if response else None, by=by, principal=record.responder)
    elif record.outcome == "answered" and response is not None and response.text is not None:
        return Reply(value=response.text, by=by, principal=record.responder)  # an approval answered in the tool's place ("respond")
    said = rejection(record, tool.denied_message if tool else None)
    message = " ".join(str(said[k]) for k in ("message", "note") if said.get(k))
    outcome = record.outcome if record.outcome in ("expired", "ignored", "cancelled") else None
    return Reject(message=message, by=by, outcome=outcome, details=said)
