"""The engine's events, recorded in the workspace's audit log by the delivery pass that reads them.

``bot/app.py`` gives the outbox store a :class:`PassAudit`, so every governance-relevant event of a Slack
session becomes one hash-chained entry in
``hitl:{ws:<team>}:audit`` (see :mod:`store.audit`). Kinds written here:

==============  ==========================  ==========================================================
kind            from event                  actor / subject / data
==============  ==========================  ==========================================================
``request``     ``input.requested``         who asked / request id / kind, tool, input, prompt
``candidate``   ``approval.candidate``      who answered / request id / outcome, reason, approvals
``settlement``  ``approval.settled``        who decided / request id / outcome, note, ``ended_by`` when
                                            they cancelled it without a click (a stop, a message)
``grant``       ``approval.settled`` (ok)   who decided / request id / approval key now granted
``resolution``  ``input.resolved``          who answered or ended it (if a person did) / request id /
                                            outcome, answer, the edited input (when approved with
                                            changes), ``ended_by`` when nobody answered it (``stop``,
                                            ``message``, ``expiry``, ``turn-failed``, ``delegation-ended``,
                                            ``turn-over``)
``execution``   ``action.result``           — / call id / tool, status, error, sha256 of the output
==============  ==========================  ==========================================================

Policy changes and refused edits are written by ``store.policies.PolicyStore`` itself.

It is no consumer of the outbox with a cursor of its own: it rides the delivery pass (``bot.engine.outbox``,
store/outbox.py). The pass reads the session's audit progress (``hitl:{ws:<team>}:audit:upto:<session>``,
the stream id of its last audited event, in the workspace's hash slot) beside its begin, and appends the
session's new auditable events in the same pipeline as its close, before the close's own script: one
round trip on one server, and on a Redis Cluster each slot's command in turn. The append script refuses a
batch that starts at or before the progress and moves the progress with its entries, so each event is
audited once, also when two replicas' passes offer the same events or a pass is offered them again after a
crash (a thread revived after its retention has a new events stream, whose ids come after the old one's).
When another replica appended first (the chain's compare-and-set), the append is retried in round trips of
its own; if it fails in the end, the session keeps where its audit may lag (``_audit`` in its outbox hash,
written by the pass's close whenever it offers events and dropped once the progress is past it), so the
next pass reads from there and offers them again. That pass is due by the close itself: a close that offers
events puts the session back on the outbox list a lease on (store/outbox.py), so a process killed right after
it still leaves the retry; an append that landed makes it and the floor moot, and the next sweep's read of
the list drops both. Nothing is retired while its audit lags (the retirement compares the floor with the progress). A pass
with nothing to audit sends nothing for it.

What people see comes first: a pass posts to Slack, then its close audits what it delivered, a few
milliseconds later. A reader who has just seen a reply and reads the audit at once may be that early:
wait briefly (tests poll). Sessions without a workspace (the console) are not audited.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
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
from store.audit import AuditGroup, AuditLog, stream_id_after
from store.pipelined import Command

log = logging.getLogger(__name__)



def team_of(session_id: str) -> str | None:
    """The workspace of a Slack session, from its id (``slack:<team>:<channel>:<thread>``), else None."""
    kind, _, rest = session_id.partition(":")
    team = rest.partition(":")[0]
    return team if kind == "slack" and team else None


def _who(principal: Principal | None) -> str | None:
    return principal.principal_id if principal else None


def _digest(value: Any) -> str:
    raw = json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()


Run = Callable[[list[Command]], Awaitable[list[Any]]]


class PassAudit:
    """Audits requests, candidates, settlements, grants, resolutions and executions with a delivery pass."""

    def __init__(self, audit: AuditLog) -> None:
        self.audit = audit

    @property
    def scripts(self) -> list[Any]:
        return self.audit.scripts

    def begin_reads(self, session_id: str, team_id: str | None) -> list[Command]:
        """What the pass's begin reads beside its script: the session's audit progress."""
        return self.audit.progress_reads(team_id, session_id) if team_id else []

    def progress_from(self, team_id: str, replies: list[Any]) -> str | None:
        return self.audit.progress_from(team_id, replies)

    def groups(self, entries: list[tuple[str, Event]], session: SessionRef, progress: str | None) -> list[AuditGroup]:
        """The audit entries of the pass's events past ``progress`` (stream ids), one group per event."""
        if not session.team_id:
            return []
        groups = []
        for entry_id, event in entries:
            if not stream_id_after(entry_id, progress):
                continue
            if items := self._entries(event, session):
                groups.append(AuditGroup(event_id=entry_id, entries=[
                    (kind, actor, subject, {**data, "event_seq": event.seq}) for kind, actor, subject, data in items]))
        return groups

    async def close(self, session: SessionRef, groups: list[AuditGroup], run: Run) -> tuple[list[Any], bool]:
        """Run the pass's closing pipeline (``run``: it sends the commands it is given first, then its own)
        with the append of ``groups`` in it; returns the replies to the pass's own commands and whether the
        groups are audited (else the pass's close kept where the audit lags, and a later pass offers them)."""
        team = session.team_id
        if not groups or not team:
            return await run([]), True
        async with self.audit.lock(team):
            try:
                pending = await self.audit.session_append(team, session.session_id, groups)
            except Exception as exc:  # noqa: BLE001 - the close still runs; a later pass audits them
                log.warning("could not audit session %s's events now (%s: %s); a later pass will",
                            session.session_id, type(exc).__name__, exc)
                return await run([]), False
            if pending is None:
                return await run([]), True
            replies = await run([pending.command])
            try:
                await self.audit.settle(pending, replies[0])
            except Exception as exc:  # noqa: BLE001 - as above
                log.warning("could not audit session %s's events now (%s: %s); a later pass will",
                            session.session_id, type(exc).__name__, exc)
                return replies[1:], False
            return replies[1:], True

    @staticmethod
    def _entries(event: Event, session: SessionRef) -> list[tuple[str, str | None, str | None, dict]]:
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
                        {**base, "outcome": event.outcome, "note": event.note, "as_admin": event.as_admin,
                         **({"ended_by": event.ended_by} if event.ended_by else {})})]
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
                    _who(r.response.principal if r.response else r.by),
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
                        **({"ended_by": r.ended_by} if r.ended_by else {}),
                    },
                )
                for r in event.resolutions
            ]
        if isinstance(event, ActionResult):
            data = {**base, "tool": event.tool_name, "status": event.status, "error": event.error,
                    "output_sha256": _digest(event.output)}
            return [("execution", None, event.call_id, data)]
        return []
