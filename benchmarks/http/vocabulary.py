"""Rung 5 of the ladder (``ladder.py``): the events of an approve cycle in the contract's vocabulary.

DESIGN §4 names the events every session's stream carries, and their fields: an approve cycle writes ten
of them (rung 4 writes four small ones of its own) and audits four decisions (rung 4: three). These
functions build them with the contract's own pydantic models (``bot.protocol``, what a custom frontend
reads), dumped as the project dumps them, and read a stream entry back with the contract's adapter. No
engine: nothing here decides anything; the ladder's scripts and pass stay as plain as rung 4's.

The turn's routing (channel, thread) is not in the contract's events: it is read from the session id,
``slack:<team>:<channel>:<thread ts>``, as the project's session ids are made.
"""

from __future__ import annotations

import json
from typing import Any

from bot.principals import Principal
from bot.protocol import (
    APPROVE,
    CANCEL,
    ActionRef,
    ActionResult,
    ActionStarted,
    ApprovalSettled,
    Event,
    InputOption,
    InputRequest,
    InputRequested,
    InputResolved,
    InputResponse,
    MessageCompleted,
    Resolution,
    Responders,
    SessionWaiting,
    TurnCompleted,
    TurnStarted,
    TurnWaiting,
    event_from_json,
)

POSTS = ("input.requested", "message.completed")  # the events whose delivery is a new message
AUDITED = {"input.requested": "request", "approval.settled": "settlement", "input.resolved": "resolution",
           "action.result": "execution"}  # event type → audit kind, the four the project audits
PROMPT = "Refund a charge."  # the tool's description, the card's prompt (and the session's status title)

Pair = tuple[str, str]  # (event type, its JSON) as the ladder's scripts XADD them


def session_id(team: str, channel: str, thread_ts: str) -> str:
    return f"slack:{team}:{channel}:{thread_ts}"


def where(session: str) -> tuple[str, str]:
    """(channel, thread ts) of a session id made by :func:`session_id`."""
    _, _, channel, thread_ts = session.split(":", 3)
    return channel, thread_ts


def person(team: str, user: str) -> Principal:
    return Principal(authenticator="slack", issuer=f"slack:{team}", principal_type="user",
                     principal_id=f"slack:{team}:{user}", attributes={"user_id": user, "user_team_id": team})


def turn_of(request_id: str) -> str:
    return f"turn_{request_id[:12]}"


def _pairs(*events: Event) -> list[Pair]:
    return [(e.type, e.model_dump_json(exclude_none=True)) for e in events]


def asked(session: str, request_id: str, requester: Principal, call_id: str, tool: str, arguments: str) -> list[Pair]:
    """The park's events: the turn began, its call needs the requester's approval, it waits."""
    turn = turn_of(request_id)
    request = InputRequest(request_id=request_id, kind="tool-approval", prompt=PROMPT,
                           action=ActionRef(call_id=call_id, tool_name=tool, input=json.loads(arguments)),
                           options=[InputOption(id=APPROVE, label="Approve", style="primary"),
                                    InputOption(id=CANCEL, label="Cancel")],
                           principal=requester, session_id=session, turn_id=turn,
                           responders=Responders(rule="requester", people=[requester]))
    return _pairs(TurnStarted(session_id=session, turn_id=turn, principal=requester),
                  InputRequested(session_id=session, turn_id=turn, requests=[request]),
                  TurnWaiting(session_id=session, turn_id=turn, on="input"))


def settled(session: str, request_id: str, responder: Principal) -> list[Pair]:
    """The settle's events: approved, and the request resolved."""
    turn = turn_of(request_id)
    response = InputResponse(request_id=request_id, option_id=APPROVE, principal=responder)
    return _pairs(ApprovalSettled(session_id=session, turn_id=turn, request_id=request_id, outcome="approved",
                                  responder=responder),
                  InputResolved(session_id=session, turn_id=turn, resolutions=[
                      Resolution(request_id=request_id, kind="tool-approval", outcome="approved", response=response)]))


def started(session: str, request_id: str, call_id: str, tool: str, arguments: str) -> Pair:
    return _pairs(ActionStarted(session_id=session, turn_id=turn_of(request_id), call_id=call_id, tool_name=tool,
                                input=json.loads(arguments)))[0]


def ran(session: str, request_id: str, call_id: str, tool: str, output: dict[str, Any]) -> Pair:
    return _pairs(ActionResult(session_id=session, turn_id=turn_of(request_id), call_id=call_id, tool_name=tool,
                               status="completed", output=output))[0]


def answered(session: str, request_id: str, text: str) -> list[Pair]:
    """The answer's events: the agent's text, the turn done, the session waiting for the next message."""
    turn = turn_of(request_id)
    return _pairs(MessageCompleted(session_id=session, turn_id=turn, text=text, step=2),
                  TurnCompleted(session_id=session, turn_id=turn), SessionWaiting(session_id=session))


def read(raw: bytes) -> Event:
    return event_from_json(raw)


def decision(event: Event) -> tuple[str | None, str | None, dict[str, Any]]:
    """(actor, subject, data) of an audited event's entry: who decided, on what, and the event itself."""
    data = event.model_dump(mode="json", exclude_none=True, exclude={"seq", "at"})
    if isinstance(event, InputRequested):
        first = event.requests[0]
        return (first.principal.principal_id if first.principal else None), first.request_id, data
    if isinstance(event, ApprovalSettled):
        return (event.responder.principal_id if event.responder else None), event.request_id, data
    if isinstance(event, InputResolved):
        response = event.resolutions[0].response
        actor = response.principal.principal_id if response and response.principal else None
        return actor, event.resolutions[0].request_id, data
    if isinstance(event, ActionResult):
        return None, event.call_id, data
    raise ValueError(f"{event.type} is not audited")
