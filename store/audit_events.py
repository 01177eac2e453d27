"""The engine's events, recorded in the workspace's audit log (a ``bot.ports.Channel``).

``bot/app.py`` adds :class:`AuditChannel` as an outbox consumer of its own (``audit``), so every
governance-relevant event of a Slack session becomes one hash-chained entry in
``hitl:{ws:<team>}:audit`` (see :mod:`store.audit`). Kinds written here:

==============  ==========================  ==========================================================
kind            from event                  actor / subject / data
==============  ==========================  ==========================================================
``request``     ``input.requested``         who asked / request id / kind, tool, input, prompt
``candidate``   ``approval.candidate``      who answered / request id / outcome, reason, approvals
``settlement``  ``approval.settled``        who decided / request id / outcome, note
``grant``       ``approval.settled`` (ok)   who decided / request id / approval key now granted
``resolution``  ``input.resolved``          who answered (if anyone) / request id / outcome, answer,
                                            the edited input (when approved with changes)
``execution``   ``action.result``           — / call id / tool, status, error, sha256 of the output
==============  ==========================  ==========================================================

Policy changes and refused edits are written by ``store.policies.PolicyStore`` itself.

It is a consumer of the outbox (``bot.outbox``) with a cursor of its own, so it audits what was
*committed*, whether or not Slack showed it, and never holds Slack up. Each event is audited once:
a repeat after a crash is recognised by the event's session, sequence number and time (a mark written
with its entries; the time too, because a thread revived after its retention numbers its events from 1
again). A turn's run of events is one write (``AuditLog.append_groups``). A failure raises, so the
outbox retries it later. Sessions without a workspace (the console) are skipped.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from bot.principals import Principal
from bot.protocol import (
    ActionResult,
    ApprovalCandidate,
    ApprovalSettled,
    Event,
    InputRequested,
    InputResolved,
)
from bot.session import SessionRef
from store.audit import AuditGroup, AuditLog, workspace_key

log = logging.getLogger(__name__)



def _mark(team: str, session: SessionRef, event: Event) -> str | None:
    """The "already audited" mark of one event. A sequence number alone is not enough: a session's
    counter ends with its retention, so a thread used again after that counts from 1 again, and its new
    events would find the old marks; the event's own time (kept with it in the stream, so a repeat
    after a crash carries the same one) tells the two lives apart."""
    if event.seq is None:
        return None
    at_us = int(event.at.timestamp() * 1_000_000)
    return workspace_key(team, "audited", f"{session.session_id}:{event.seq}:{at_us}")


def _who(principal: Principal | None) -> str | None:
    return principal.principal_id if principal else None


def _digest(value: Any) -> str:
    raw = json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()


class AuditChannel:
    """Appends requests, candidates, settlements, grants, resolutions and executions to the audit log."""

    # first in each delivery pass: what people are shown (a settled card, the answer that follows) has been
    # audited by then, also when one pass carries a settle and the answer after it (bot.outbox)
    deliver_first = True

    def __init__(self, audit: AuditLog) -> None:
        self.audit = audit

    async def deliver(self, event: Event, session: SessionRef) -> None:
        await self.deliver_batch([event], session)

    async def deliver_batch(self, events: list[Event], session: SessionRef) -> None:
        """Audit a run of a session's events in one write (``bot.ports.BatchChannel``)."""
        team = session.team_id
        if not team:
            return
        groups = []
        for event in events:
            entries = await self._entries(event, session)
            if not entries:
                continue
            mark = _mark(team, session, event)
            groups.append(AuditGroup(mark=mark, entries=[(kind, actor, subject, {**data, "event_seq": event.seq})
                                                         for kind, actor, subject, data in entries]))
        if groups:
            await self.audit.append_groups(team, groups)

    async def _entries(self, event: Event, session: SessionRef) -> list[tuple[str, str | None, str | None, dict]]:
        base = {"session_id": session.session_id, "turn_id": event.turn_id}
        if isinstance(event, InputRequested):
            return [
                (
                    "request",
                    _who(req.principal),
                    req.request_id,
                    {
                        **base,
                        "request_kind": req.kind,
                        "tool": req.action.tool_name if req.action else None,
                        "call_id": req.action.call_id if req.action else None,
                        "input": req.action.input if req.action else None,
                        "prompt": req.prompt,
                    },
                )
                for req in event.requests
            ]
        if isinstance(event, ApprovalCandidate):
            data = {**base, "outcome": event.outcome, "reason": event.reason,
                    "approvals": event.approvals, "required": event.required}
            return [("candidate", _who(event.responder), event.request_id, data)]
        if isinstance(event, ApprovalSettled):
            entries = [("settlement", _who(event.responder), event.request_id,
                        {**base, "outcome": event.outcome, "note": event.note, "as_admin": event.as_admin})]
            for grant in event.grants:
                entries.append(("grant", _who(event.responder), event.request_id, {
                    **base, "approval_key": grant.approval_key, "scope": grant.scope, "tool": grant.tool_name,
                    "requester": _who(grant.requester) if grant.requester else None,
                    "expires_at": grant.expires_at.isoformat() if grant.expires_at else None}))
            return entries
        if isinstance(event, InputResolved):
            return [
                (
                    "resolution",
                    _who(r.response.principal if r.response else None),
                    r.request_id,
                    {
                        **base,
                        "request_kind": r.kind,
                        "outcome": r.outcome,
                        "option_id": r.response.option_id if r.response else None,
                        "text": r.response.text if r.response else None,
                        # "Edit & approve": what ran; the proposed input is in the request's entry
                        **({"edited_input": r.response.edited_input}
                           if r.response and r.response.edited_input is not None else {}),
                        **({"values": r.response.values} if r.response and r.response.values is not None else {}),
                        **({"via": r.response.via} if r.response and r.response.via else {}),
                    },
                )
                for r in event.resolutions
            ]
        if isinstance(event, ActionResult):
            data = {**base, "tool": event.tool_name, "status": event.status, "error": event.error,
                    "output_sha256": _digest(event.output)}
            return [("execution", None, event.call_id, data)]
        return []
