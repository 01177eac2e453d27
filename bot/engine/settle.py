"""The one settle path (DESIGN §7, §12): boundary → response policy → atomic settle → outbox.

Every answer — a click, a select, a modal, a typed reply, and the engine's own "ignored" and
"cancelled" — goes through :class:`Settler`. Fail closed: a principal from another workspace, a
request whose tool this process does not have, and a policy that raises or hangs never settle.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from bot.approval import (
    DEFAULT_GRANT_DAYS,
    Decision,
    RequestView,
    ResponseContext,
    ResponseView,
    allowed,
    as_policy,
    delegation_responses,
    evaluate_request_policy,
    evaluate_response_policy,
    grant_offers,
    requester_only,
)
from bot.engine.admission import GUEST_REFUSAL, admits
from bot.engine.installed import NOT_INSTALLED
from bot.engine.parts import Parts, TurnStore
from bot.engine.turn_commands import RequestsRead
from bot.forms import checked_values, validated_result
from bot.governance import escalated_answer, workspace_admin
from bot.ops import logs
from bot.ops.metrics import SETTLED
from bot.principals import Principal
from bot.protocol import (
    APPROVE,
    CANCEL,
    CONTINUE,
    STOP,
    ApprovalCandidate,
    ApprovalSettled,
    EndedBy,
    Event,
    Grant,
    HeldLease,
    InputRequest,
    InputResolved,
    InputResponse,
    RequestChanged,
    RequestRecord,
    Resolution,
    SettleCommand,
    SettledOutcome,
)
from bot.session import SessionInfo
from bot.tools import as_dict

log = logging.getLogger(__name__)

VERIFY_FAILED = "We couldn’t verify your response. Please try again."
POLICY_UNAVAILABLE = "Approval authorization is temporarily unavailable. Please try again."
FOREIGN = "This request belongs to another workspace, so your answer cannot count."
NO_TOOL = ("This request's tool ({tool}) is not available right now, so nobody can be checked as allowed to "
           "answer it. Try again in a minute.")
ANONYMOUS = "Authentication is required to respond."
NOT_EDITABLE = "This request can only be approved as proposed."
NO_EDITS_WITH_SEVERAL = "This request needs several approvals, so it can only be approved as proposed."
NOT_GRANTABLE = "This request can only be approved this once."
FORM_ONLY = "This request is answered by filling in its form: use “Open form” on the card."
NOTE_LIMIT = 2000  # characters of a reason kept (a card quotes it; the model reads it)
CHECKS_AGAINST_CHANGES = 3  # a request that keeps changing under an answer: it fails (try again) after this


@dataclass
class AnswerResult:
    """What happened to one answer, for the frontend to explain to the person."""

    state: Literal["settled", "rejected", "failed", "partial", "stale", "invalid", "forbidden"]
    record: RequestRecord
    reason: str | None = None
    approvals: int = 0
    required: int = 1
    batch_complete: bool = False  # the step can resume now
    held: HeldLease | None = None  # the turn lease the settle took for the resume (``answer(lease=True)``)


class Settler:
    def __init__(self, parts: Parts):
        self.p = parts

    async def _record(self, request_id: str) -> RequestRecord:
        """The stored record of one request (UnknownRequest if there is none)."""
        [record] = await self.p.store.requests(RequestsRead((request_id,), must_exist=True))
        return record

    async def answer(
        self, response: InputResponse, *, note: str | None = None, record: RequestRecord | None = None,
        lease: bool = False,
    ) -> AnswerResult:
        """One read (unless the caller has the record), the checks, one atomic settle. ``lease``: the caller
        resumes the turn next, so a settle that completes the step takes the turn lease for it.

        The settle (and a refusal) is refused if the request changed since the record the checks read (its
        ``rev``: the caller's copy may be one this process kept, ``recent_request``): the answer is then
        checked again, from the start, against the record the refusal returned. Fail closed: an answer is
        never decided on a stale record."""
        for _ in range(CHECKS_AGAINST_CHANGES):
            try:
                return await self._answer(response, note=note, record=record, lease=lease)
            except RequestChanged as changed:
                record = changed.record
        log.warning("request %s kept changing under an answer; not settled", response.request_id)
        assert record is not None
        return AnswerResult("failed", record, reason=POLICY_UNAVAILABLE)

    async def _answer(self, response: InputResponse, *, note: str | None, record: RequestRecord | None,
                      lease: bool) -> AnswerResult:
        if record is None or record.request_id != response.request_id:
            record = await self._record(response.request_id)  # raises UnknownRequest
        logs.bind(session_id=record.session_id, turn_id=record.turn_id, team_id=record.team_id)
        if record.status != "open":
            return AnswerResult("stale", record)
        if not await self.p.installed.installed(record.team_id):  # its workspace uninstalled the app: it waits
            return AnswerResult("forbidden", record, reason=NOT_INSTALLED)
        req = record.request
        if not await delegation_live(self.p.store, req.delegation_id):
            return await self._orphaned(record)
        outcome = answer_outcome(req, response)
        if outcome is None:
            return AnswerResult("invalid", record, reason=FORM_ONLY if req.kind == "user-input"
                                else "That is not one of the options.")
        if req.kind in ("user-input", "external-result") and outcome == "answered":
            values, refusal = _checked_form(req, response)
            if values is not None and req.kind == "external-result":
                values, refusal = self._checked_result(req, values)
            if values is None:
                return AnswerResult("invalid", record, reason=refusal)
            response = response.model_copy(update={"values": values})
        if response.grant is not None and (refusal := self._grant_refusal(record, outcome, response)):
            return AnswerResult("invalid", record, reason=refusal)
        if response.edited_input is not None and not (req.editable and outcome == "approved"):
            return AnswerResult("invalid", record, reason=NOT_EDITABLE)
        if response.edited_input is not None:
            edited, refusal = await self._checked_edit(record, response.edited_input)
            if edited is None:
                return AnswerResult("invalid", record, reason=refusal)
            response = response.model_copy(update={"edited_input": edited,
                                                    "edited_prompt": self._edited_prompt(record, edited)})
        elif response.edited_prompt is not None:  # only the settle path words it, from an accepted edit
            response = response.model_copy(update={"edited_prompt": None})
        note = note if note is not None else _clean_note(response.note)
        principal = response.principal
        if principal is None:
            return AnswerResult("rejected", record, reason=ANONYMOUS)
        policy, custom = self.response_policy(req)
        if not _same_workspace(record, principal, policy):
            # before any policy, and without a trace in the session: it is not that workspace's business
            log.warning("refused an answer to %s from %s: another workspace", record.request_id, principal.principal_id)
            return AnswerResult("forbidden", record, reason=FOREIGN)
        if policy is None:  # a tool-approval whose tool this process lacks: never fall back to another rule
            reason = NO_TOOL.format(tool=req.action.tool_name if req.action else "?")
            return await self._refuse(record, response, outcome, None, reason, custom=False)
        # an approval answered in the tool's place is judged as an approval: who may let the tool run may
        # answer for it, and nobody else puts words in its result
        decision_kind = "cancel" if outcome in ("cancelled", "stop") else "approve"
        policy = with_escalation(policy, record)
        decision, failure = await self._run_policy(
            policy, response_context(record, principal, decision_kind, note, edited=response.edited_input,
                                     policies=self.p.policies))
        if decision is None or decision.type == "rejected":
            if await self._admin_cancels(record, principal, decision_kind):
                return await self._settle(record, response, outcome, allowed(), custom, note, as_admin=True,
                                          lease=lease)
            reason = failure or (decision.reason if decision else None) or VERIFY_FAILED
            return await self._refuse(record, response, outcome, decision, reason, custom=custom)
        if not await admits(principal, record.channel.get("channel_id"), source=self.p.policies, via="answer"):
            # whom the rule lets answer must also be admitted, as it reads now: a guest whose channel was closed
            # since she asked answers nothing, as she could type nothing there (no trace in the session, like
            # the workspace boundary; the refusal is audited). Asked last: for a member it costs nothing.
            return AnswerResult("forbidden", record, reason=GUEST_REFUSAL)
        return await self._settle(record, response, outcome, decision, custom, note, lease=lease)

    async def _admin_cancels(self, record: RequestRecord, principal: Principal, decision: str) -> bool:
        """A workspace admin cancelling an approval its rule refuses them (a stuck request): allowed, and
        audited as an admin's cancel. An admin never approves this way."""
        return (decision == "cancel" and record.request.kind == "tool-approval"
                and await workspace_admin(self.p.policies, record.team_id, principal))

    def response_policy(self, req: InputRequest) -> tuple[Any, bool]:
        """The policy that decides who may settle ``req`` (None: cannot be known here), and whether
        the tool brought its own."""
        if req.kind == "delegation":
            return delegation_responses(), False
        if req.kind not in ("tool-approval", "external-result") or req.action is None:
            return requester_only(), False
        tool = self.p.tools.get(req.action.tool_name)
        if tool is None:
            return None, True
        return tool.approval.effective_response, tool.approval.response is not None

    async def check(
        self, record: RequestRecord, principal: Principal, decision: Literal["approve", "cancel"] = "approve",
        *, within_s: float | None = None,
    ) -> Decision | None:
        """Would this person's answer count? A dry run (no side effects); None when it cannot be known."""
        policy, _ = self.response_policy(record.request)
        if policy is None or not _same_workspace(record, principal, policy):
            return None
        policy = with_escalation(policy, record)
        decided, _ = await self._run_policy(policy, response_context(record, principal, decision, None,
                                                                      policies=self.p.policies), within_s=within_s)
        if (decided is None or decided.type == "rejected") and await self._admin_cancels(record, principal, decision):
            return allowed()
        return decided

    def _grant_refusal(self, record: RequestRecord, outcome: str, response: InputResponse) -> str | None:
        """Why this "approve and don't ask again" cannot be given (None: it can): the request must have
        offered that scope and the tool, as loaded here, must still offer it."""
        req = record.request
        action = req.action
        tool = self.p.tools.get(action.tool_name) if action else None
        offered = any(o.scope == response.grant for o in req.grants)
        still = tool is not None and any(o.scope == response.grant for o in grant_offers(tool.approval))
        if outcome != "approved" or not offered or not still or record.approval_key is None:
            return NOT_GRANTABLE
        if response.grant == "requester" and req.principal is None:
            return NOT_GRANTABLE
        if response.edited_input is not None:
            return "Approve an edited request on its own; “don’t ask again” is for requests approved as proposed."
        return None

    def _grants(self, record: RequestRecord, response: InputResponse) -> list[Grant]:
        """What approving ``record`` with ``response`` grants: the scope the approver chose (the
        conversation, or the requester for some days), else the conversation for once() and custom rules."""
        req = record.request
        key = record.approval_key
        if req.kind != "tool-approval" or key is None or req.action is None:
            return []
        now = datetime.fromtimestamp(self.p.settings.clock(), UTC)
        base = {"team_id": record.team_id, "approval_key": key, "tool_name": req.action.tool_name,
                "requester": req.principal, "granted_by": response.principal, "request_id": record.request_id,
                "granted_at": now}
        grants = []
        # one click, one standing approval: a chosen scope replaces once()'s implied conversation grant
        # (a "don't ask this requester again" must not leave a second, unnamed one behind)
        if response.grant == "conversation" or (record.grant_on_approve and response.grant is None):
            grants.append(Grant(scope="conversation", session_id=record.session_id, channel=record.channel, **base))
        offer = next((o for o in req.grants if o.scope == "requester"), None)
        if response.grant == "requester" and offer is not None:
            grants.append(Grant(scope="requester", expires_at=now + timedelta(days=offer.days or DEFAULT_GRANT_DAYS),
                                **base))
        return grants

    def _checked_result(self, req: InputRequest, values: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
        """An external result as the tool's ``result=`` model takes it (its validators too), or None and why.
        A tool this process lacks is refused later, by the response policy step (fail closed)."""
        tool = self.p.tools.get(req.action.tool_name) if req.action else None
        if tool is None or tool.result_model is None:
            return values, ""
        try:
            return validated_result(tool.result_model, values), ""
        except ValueError as exc:
            return None, str(exc)

    def _edited_prompt(self, record: RequestRecord, edited: dict[str, Any]) -> str | None:
        """The tool's ``prompt=`` filled in with the edited input (None: it has none, or it would not change)."""
        action = record.request.action
        tool = self.p.tools.get(action.tool_name) if action else None
        if tool is None:
            return None
        try:
            prompt = tool.approval_prompt(tool.parse(edited))
        except ValueError:
            return None
        return prompt if prompt and prompt != record.request.prompt else None

    async def _checked_edit(self, record: RequestRecord, edited: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
        """The edited input as the tool will get it, or None and why not: it must be valid for the tool,
        and the tool's request policy must not deny it (an edit never gets past a rule the proposal met)."""
        action = record.request.action
        tool = self.p.tools.get(action.tool_name) if action else None
        if action is None or tool is None or not tool.editable:
            return None, NOT_EDITABLE
        try:
            args = tool.parse(edited)
        except ValueError as exc:
            return None, f"Those changes are not valid: {exc}"
        session = SessionInfo.model_validate(record.session_info or {"id": record.session_id})
        ctx = tool.approval_context(args, session=session, call_id=action.call_id, reviewer=self.p.reviewer,
                                    policies=self.p.policies)
        try:
            status = await evaluate_request_policy(tool.approval.request, ctx,
                                                   timeout=self.p.settings.response_policy_timeout)
        except Exception as exc:  # noqa: BLE001 - a broken or hung policy refuses the edit
            log.warning("request policy of %s failed on an edit (%r); refusing it", tool.name, exc)
            return None, VERIFY_FAILED
        if status.type == "denied":
            return None, f"Those changes are not allowed: {status.reason or 'the tool’s policy denies them'}"
        return as_dict(args), ""

    async def _run_policy(
        self, policy: Any, ctx: ResponseContext, *, within_s: float | None = None
    ) -> tuple[Decision | None, str | None]:
        try:
            decided = await evaluate_response_policy(policy, ctx, timeout=within_s or self.p.settings.response_policy_timeout)
            return decided, None
        except TimeoutError:
            return None, POLICY_UNAVAILABLE
        except Exception as exc:  # noqa: BLE001 - a broken policy fails closed
            log.warning("response policy for %s raised %r; failing closed", ctx.request.request_id, exc)
            return None, VERIFY_FAILED

    async def _refuse(
        self, record: RequestRecord, response: InputResponse, outcome: str, decision: Decision | None,
        reason: str, *, custom: bool,
    ) -> AnswerResult:
        sid, tid, rid = record.session_id, record.turn_id, record.request_id
        principal = response.principal
        kind = "failed" if decision is None else "rejected"
        pending = [ApprovalCandidate(session_id=sid, turn_id=tid, request_id=rid, outcome="pending",
                                     responder=principal)] if custom else []
        refusal = ApprovalCandidate(session_id=sid, turn_id=tid, request_id=rid, outcome=kind,
                                    responder=principal, reason=reason, reply_to=response.reply_to)
        result = await self.p.store.settle(SettleCommand(record, mode="reject", outcome=outcome, response=response,
                                                         on_rejected=(*pending, refusal), rev=record.rev))
        self.p.outbox.kick(sid)
        if result.state in ("stale", "gone"):  # say who settled it meanwhile, or that it is no longer needed
            return AnswerResult("stale", await self._record(rid))
        return AnswerResult(kind, record, reason=reason)

    async def _settle(
        self, record: RequestRecord, response: InputResponse, outcome: str, decision: Decision,
        custom: bool, note: str | None, *, as_admin: bool = False, lease: bool = False,
    ) -> AnswerResult:
        req = record.request
        sid, tid, rid = record.session_id, record.turn_id, record.request_id
        principal = response.principal
        pending: list[Event] = [ApprovalCandidate(session_id=sid, turn_id=tid, request_id=rid, outcome="pending",
                                                  responder=principal)] if custom else []
        required = decision.required if outcome == "approved" else 1
        if (response.edited_input is not None or response.grant is not None) and (required > 1 or record.approvals):
            # each of several approvers must approve the same thing: no one of them may change it or widen it
            return AnswerResult("invalid", record, reason=NO_EDITS_WITH_SEVERAL)
        grants = self._grants(record, response) if outcome == "approved" else []
        settled_events: list[Event] = list(pending)
        if req.kind == "tool-approval":
            settled_events.append(ApprovalSettled(session_id=sid, turn_id=tid, request_id=rid,
                                                  outcome=_settled_as(outcome),
                                                  responder=principal, note=note, grants=grants,
                                                  as_admin=as_admin))
        resolution = resolution_outcome(req, outcome)
        settled_events.append(InputResolved(session_id=sid, turn_id=tid, resolutions=[
            Resolution(request_id=rid, kind=req.kind, outcome=resolution, response=response)]))
        partial = [*pending, ApprovalCandidate(session_id=sid, turn_id=tid, request_id=rid, outcome="pending",
                                               responder=principal, approvals=-1, required=required)]
        stale = [ApprovalCandidate(session_id=sid, turn_id=tid, request_id=rid, outcome="stale",
                                   responder=principal, reason="Another response settled this approval.")]
        result = await self.p.store.settle(SettleCommand(
            record,
            mode="settle",
            outcome=resolution,
            response=response,
            responder_id=principal.principal_id if principal else "",
            required=required,
            grant=next((g for g in grants if g.scope == "conversation"), None),
            note=note,
            batch=record.batch,
            on_settled=settled_events,
            on_partial=partial,
            on_stale=stale,
            lease=lease,
            rev=record.rev,
        ))
        if result.state == "settled":
            SETTLED.labels(req.kind, resolution).inc()
            # a requester grant is its own listing (one write, its end in it), written once the settle
            # counted; lost in a crash here, it is simply not there (the requester is asked again). A
            # conversation grant was written by the settle itself, with its listing (store.settle)
            await asyncio.gather(*(self.p.store.grants.add(g) for g in grants if g.scope == "requester"))
        if result.state == "settled" and result.batch_complete and result.events:
            # the turn resumes now: a quick resume's answer takes the settled card along in one delivery pass;
            # a slow one (a long tool) lets it go out on its own within RuntimeSettings.unhurried_seconds
            self.p.outbox.kick_later(sid, result.events[-1].seq or 0, self.p.settings.unhurried_seconds)
        else:
            self.p.outbox.kick(sid)
        if result.state in ("stale", "gone"):  # gone: its turn expired or was removed; the card now says so
            return AnswerResult("stale", await self._record(rid))
        if result.state == "partial":
            return AnswerResult("partial", record, approvals=result.approvals, required=required)
        return AnswerResult("settled", record, approvals=result.approvals, required=required,
                            batch_complete=result.batch_complete, held=result.held)

    async def _orphaned(self, record: RequestRecord) -> AnswerResult:
        """A sub-agent's request whose delegation ended before the relay stopped the sub-agent: it ends "no
        longer needed" instead of counting (its card is updated), and the caller drives the child's session,
        whose turn loop ends the turn for the same reason (``bot.engine.drive``)."""
        await self.resolve_unanswered(record, "cancelled", ended_by="delegation-ended")
        return AnswerResult("stale", await self._record(record.request_id), batch_complete=True)

    async def resolve_unanswered(self, record: RequestRecord, outcome: str, *, ended_by: EndedBy,
                                 by: Principal | None = None) -> bool:
        """Settle an open request nobody answered: ignored (steered past), cancelled (turn cancelled) or
        expired. ``ended_by`` says what ended it and ``by`` the person who did, if one did (the audit names
        them). An approval a person stopped is also settled ``cancelled`` by them, as their Cancel click would
        be; one a message steered past was decided by nobody (it is ``ignored``: its author is named only)."""
        req = record.request
        sid, tid = record.session_id, record.turn_id
        events: list[Event] = []
        if req.kind == "tool-approval" and by is not None and ended_by == "stop":
            events.append(ApprovalSettled(session_id=sid, turn_id=tid, request_id=req.request_id,
                                          outcome="cancelled", responder=by, ended_by=ended_by))
        events.append(InputResolved(session_id=sid, turn_id=tid, resolutions=[
            Resolution(request_id=req.request_id, kind=req.kind, outcome=outcome,  # type: ignore[arg-type]
                       ended_by=ended_by, by=by)]))
        result = await self.p.store.settle(SettleCommand(record, mode="settle", outcome=outcome, batch=record.batch,
                                                         on_settled=events))
        self.p.outbox.kick(record.session_id)
        if result.state == "settled":
            SETTLED.labels(req.kind, outcome).inc()
        return result.state == "settled"


def with_escalation(policy: Any, record: RequestRecord) -> Any:
    """``policy``, or, once the request was escalated (``bot.engine.timers``), ``policy`` that also lets the
    people it was escalated to answer — under everything the rule requires (``escalated_answer``)."""
    people = record.escalated_to
    if not people:
        return policy

    async def escalated(ctx: ResponseContext) -> Decision:
        decided = await evaluate_response_policy(policy, ctx)
        if decided.type == "allowed" or not any(p.same_as(ctx.response.principal) for p in people):
            return decided  # the rule's own answer (its quorum, its reasons) stands
        return await escalated_answer(policy, ctx)

    return escalated


def _same_workspace(record: RequestRecord, principal: Principal, policy: Any) -> bool:
    """The answerer belongs to the request's installation (its Enterprise org counts too), unless the
    response policy says it admits people from outside (``Policy.admits_external``)."""
    if record.team_id is None or (policy is not None and as_policy(policy).admits_external):
        return True
    if principal.team_id == record.team_id:
        return True
    org = (record.session_info or {}).get("enterprise_id")
    return bool(org) and principal.attributes.get("enterprise_id") == org


def response_context(record: RequestRecord, principal: Principal, decision: str, note: str | None,
                     *, edited: dict[str, Any] | None = None, policies: Any = None) -> ResponseContext:
    req = record.request
    proposed = req.action.input if req.action else None
    return ResponseContext(
        request=RequestView(
            request_id=req.request_id,
            call_id=req.action.call_id if req.action else None,
            tool_name=req.action.tool_name if req.action else None,
            tool_input=edited if edited is not None else proposed,
            principal=req.principal,
            proposed_input=proposed if edited is not None else None,
        ),
        response=ResponseView(decision=decision, principal=principal, note=note),  # type: ignore[arg-type]
        session=SessionInfo.model_validate(record.session_info or {"id": record.session_id}),
        approvals=record.approvals,
        policies=policies,
    )


def _clean_note(note: str | None) -> str | None:
    text = (note or "").strip()
    return text[:NOTE_LIMIT] or None


def _checked_form(req: InputRequest, response: InputResponse) -> tuple[dict[str, Any] | None, str]:
    """A form's submitted values as the form reads them, or None and why not."""
    try:
        return checked_values(req.form or {}, response.values), ""
    except ValueError as exc:
        return None, str(exc)


def answer_outcome(req: InputRequest, response: InputResponse) -> str | None:
    """The resolution an answer asks for, or None when it is not a valid answer to this request."""
    if req.kind == "user-input":  # only a submitted form answers it (typed replies and options don't)
        return "answered" if response.values is not None and response.option_id is None else None
    if req.kind == "external-result":  # its result (a submitted form, or posted by a system), or Cancel
        if response.values is not None and response.option_id is None:
            return "answered"
        return "cancelled" if response.option_id == CANCEL and response.values is None else None
    if req.kind == "delegation":  # the sub-agent's answer (sent by the app: bot.agents), or Cancel
        if response.values is not None and response.option_id is None:
            return "answered"
        return "cancelled" if response.option_id == CANCEL and response.values is None else None
    if req.kind == "tool-approval":
        if response.option_id is None and req.allow_free_text and response.text and response.text.strip():
            return "answered"  # in the tool's place (a framework's "respond"): it does not run
        if req.options and req.option(response.option_id or "") is None:
            return None  # not offered (a framework that takes no cancel)
        return {APPROVE: "approved", CANCEL: "cancelled"}.get(response.option_id or "")
    if req.kind == "session-limit":
        return {CONTINUE: "approved", STOP: "stop"}.get(response.option_id or "")
    if response.option_id is not None:
        return "answered" if req.option(response.option_id) else None
    if response.text and response.text.strip() and (req.allow_free_text or not req.options):
        return "answered"
    return None


def _settled_as(outcome: str) -> SettledOutcome:
    """An approval's ``approval.settled`` outcome: approved, answered in the tool's place, or cancelled."""
    return "approved" if outcome == "approved" else "responded" if outcome == "answered" else "cancelled"


def resolution_outcome(req: InputRequest, outcome: str) -> str:
    if req.kind == "tool-approval" and outcome == "answered":
        return "answered"
    if req.kind in ("tool-approval", "session-limit"):
        return "approved" if outcome == "approved" else "denied"
    if req.kind in ("external-result", "delegation"):
        return "answered" if outcome == "answered" else "denied"
    return "answered"


async def delegation_live(store: TurnStore, delegation_id: str | None) -> bool:
    """Is the delegation a sub-agent works under still waiting for it (None: not a sub-agent's)?

    The second line of defence behind the relay: whatever ends a delegation (Cancel, the parent's turn
    cancelled, failed or steered past, a deadline) makes the relay stop the child, but the relay delivers
    later, from any replica. Until it has, the child's settle and its turn loop ask this, and fail closed:
    a delegation that is gone is over."""
    if not delegation_id:
        return True
    records = await store.requests(RequestsRead((delegation_id,)))
    return bool(records) and records[0].status == "open"
