"""The contract between the engine and every frontend (DESIGN §4).

Requests ask a person for something; responses answer them; events tell frontends (Slack, the
console, an audit reader) what happened, in order. Every event is appended to the session's Redis
stream before any frontend renders it. Field names are snake_case; camelCase aliases are accepted
and produced with ``by_alias=True`` for HTTP/streaming clients.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import AliasGenerator, ConfigDict, Field, TypeAdapter
from pydantic.alias_generators import to_camel

from bot.deferred import DeferredModel
from bot.principals import Principal

GrantScope = Literal["conversation", "requester"]  # "don't ask again": here, or for this requester for N days
RequestKind = Literal["tool-approval", "question", "session-limit", "user-input", "external-result", "delegation"]
Display = Literal["confirmation", "select", "text", "form"]
ChoiceStyle = Literal["select", "buttons", "radio"]  # how a question's options are shown
ResolutionOutcome = Literal["answered", "approved", "denied", "ignored", "cancelled", "invalid", "expired"]
CandidateOutcome = Literal["pending", "rejected", "failed", "timed-out", "stale"]
# "responded": a person answered in the tool's place (a framework's "respond", ``allow_free_text`` on an
# approval): the tool did not run, and the agent reads their words as its result
SettledOutcome = Literal["approved", "cancelled", "responded"]
# what ended a request nobody answered: its turn was stopped (a stop button, ``Runtime.cancel_turn``), a newer
# message steered past it, its deadline passed, its turn failed, its delegation ended, or its turn was gone
EndedBy = Literal["stop", "message", "expiry", "turn-failed", "delegation-ended", "turn-over"]
ActionStatus = Literal["completed", "failed", "rejected"]

APPROVE = "approve"
CANCEL = "cancel"
CONTINUE = "continue"
STOP = "stop"


def utcnow() -> datetime:
    return datetime.now(UTC)


class Contract(DeferredModel):
    model_config = ConfigDict(
        alias_generator=AliasGenerator(serialization_alias=to_camel, validation_alias=None),
        populate_by_name=True,
    )


class InputOption(Contract):
    id: str
    label: str
    description: str | None = None
    style: Literal["primary", "danger"] | None = None


class ActionRef(Contract):
    call_id: str
    tool_name: str
    input: dict[str, Any] | None = None
    shown_as: dict[str, str] = Field(default_factory=dict)  # input field → how cards show it ("money:USD")
    labels: dict[str, str] = Field(default_factory=dict)  # input field → its title (Field(title=…)); else its key


class Responders(Contract):
    """Who may settle a request, as its response policy describes itself when the request is made.

    ``rule``: ``requester`` (only ``people[0]``, who asked), ``people`` (any of ``people``), ``anyone``,
    ``anyone_but`` (anyone except ``people``), ``nobody`` (no one is set up yet), ``custom`` (a rule of
    the tool's own, in its ``description`` if it gave one). ``required``: distinct approvals needed."""

    rule: Literal["requester", "people", "anyone", "anyone_but", "nobody", "custom"]
    people: list[Principal] = Field(default_factory=list)
    required: int = 1
    description: str | None = None


class GrantOffer(Contract):
    """A "don't ask again" an approver may give with their approval (the tool's policy offers it)."""

    scope: GrantScope
    days: int | None = None  # requester grants: for how long


class Grant(Contract):
    """A standing approval: calls under ``approval_key`` run without asking — in one conversation
    (``session_id``), or for one requester in any conversation of the workspace until ``expires_at``."""

    team_id: str | None = None
    scope: GrantScope
    approval_key: str
    tool_name: str
    session_id: str | None = None  # conversation grants
    channel: dict[str, str] = Field(default_factory=dict)  # a conversation grant's SessionRef.channel (its link)
    requester: Principal | None = None  # requester grants
    granted_by: Principal | None = None
    request_id: str
    granted_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime | None = None

    @property
    def grant_id(self) -> str:
        holder = self.session_id if self.scope == "conversation" else (self.requester.principal_id
                                                                      if self.requester else "-")
        return grant_id(self.scope, holder or "-", self.approval_key)


def grant_id(scope: GrantScope, holder: str, approval_key: str) -> str:
    return f"{scope}|{holder}|{approval_key}"


class InputRequest(Contract):
    request_id: str
    kind: RequestKind
    prompt: str
    action: ActionRef | None = None
    options: list[InputOption] = Field(default_factory=list)
    display: Display = "confirmation"
    # a question: people may type their own answer; a tool approval: people may answer in the tool's place
    # instead of approving or cancelling it (a framework's "respond": the tool does not run, the agent reads
    # their words as its result)
    allow_free_text: bool = False
    principal: Principal | None = None
    session_id: str = ""
    turn_id: str = ""
    dangerous: bool = False
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime | None = None  # unanswered by then, it resolves "expired" and the turn goes on
    remind_at: datetime | None = None  # still open then, the people who may answer are reminded (once)
    escalate_at: datetime | None = None  # still open then, the people on ``escalate_to`` may answer too
    escalate_to: str | None = None  # an approver list resource ("tool:refund_managers")
    responders: Responders | None = None  # who may settle it (shown on cards); None: not described
    notify: Literal["dm", "thread", "none"] | None = None  # how approvers are told; None: the default
    editable: bool = False  # an approver may change the call's input before approving (``@tool(editable=True)``)
    # a framework's call it takes only as proposed (its setup allows no edit), though a form of its input could
    # be shown: the card says so where "Edit & approve" would be
    fixed_input: bool = False
    style: ChoiceStyle = "select"  # a question's options: a select menu (default), buttons or radio buttons
    form: dict[str, Any] | None = None  # a "user-input" request's form, as a flat JSON schema (``bot.forms``)
    grants: list[GrantOffer] = Field(default_factory=list)  # "don't ask again" scopes an approver may choose
    # sub-agents (``bot.agents``): the sub-agent that asks (its requests), or that a "delegation" went to
    agent: str | None = None
    child_session_id: str | None = None  # a "delegation": the sub-agent's own session
    # a sub-agent's request: the parent's "delegation" request it works under. Once that has ended, this
    # request settles nothing and its call never runs (``bot.engine.settle.delegation_live``: fail closed)
    delegation_id: str | None = None
    # ``@tool(preview=fn)``: what the call would do ("47 records will be deleted"), computed once when the
    # request is made and kept here so every replica renders the same text; PREVIEW_UNAVAILABLE if it
    # failed or ran past its bound; None: the tool has no preview
    preview: str | None = None

    def displayed_options(self) -> list[InputOption]:
        """Options in the order people see them; typed numbers index this order (DESIGN §8)."""
        if self.kind == "tool-approval":
            order = {APPROVE: 0, CANCEL: 1}
            return sorted(self.options, key=lambda o: order.get(o.id, 2))
        return list(self.options)

    def option(self, option_id: str) -> InputOption | None:
        return next((o for o in self.options if o.id == option_id), None)


PREVIEW_UNAVAILABLE = "preview unavailable"  # a preview that failed or ran past its bound


def approval_options() -> list[InputOption]:
    return [InputOption(id=APPROVE, label="Approve", style="primary"), InputOption(id=CANCEL, label="Cancel")]


def session_limit_options() -> list[InputOption]:
    return [
        InputOption(id=CONTINUE, label="Approve", style="primary"),
        InputOption(id=STOP, label="Stop", style="danger"),
    ]


class InputResponse(Contract):
    request_id: str
    option_id: str | None = None
    text: str | None = None
    principal: Principal | None = None
    note: str | None = None  # why, in the answerer's words (a cancel's reason); quoted to the model as theirs
    edited_input: dict[str, Any] | None = None  # approve with these arguments instead (editable tools only)
    # the card's question for the edited input (the tool's ``prompt=``), set by the settle path only, so the
    # settled card leads with what ran ("Refund $300.00 …"), not what was proposed
    edited_prompt: str | None = None
    values: dict[str, Any] | None = None  # a submitted form ("user-input"), keyed by the form's field names
    grant: GrantScope | None = None  # approve, and don't ask again in this scope (one of the request's offers)
    # how it came when not from a person's own click: "api" (a result token), "subagent" (a sub-agent's answer)
    via: Literal["api", "subagent"] | None = None
    # where it was given, as the frontend routes a private note back there (opaque here: a refusal answers
    # where the click was made, e.g. in an approver's DM copy rather than the thread)
    reply_to: dict[str, str] = Field(default_factory=dict)


class Resolution(Contract):
    request_id: str
    kind: RequestKind
    outcome: ResolutionOutcome
    response: InputResponse | None = None  # the answer that settled it (who answered: its principal)
    # nobody answered it: what ended it, and the person who did (who stopped the turn, wrote the message)
    ended_by: EndedBy | None = None
    by: Principal | None = None


class Answer(Contract):
    """What ``ctx.ask()`` returns inside a tool."""

    status: Literal["answered", "interrupted", "unavailable", "expired"]  # expired: nobody answered in time
    option_id: str | None = None
    text: str | None = None
    responder: Principal | None = None
    values: dict[str, Any] | None = None  # a submitted form (``ctx.form()``)

    @property
    def value(self) -> str | None:
        """The chosen option's label/id or the person's own words."""
        return self.option_id if self.option_id is not None else self.text


# --- events ---------------------------------------------------------------------------------


class EventBase(Contract):
    session_id: str
    turn_id: str | None = None
    seq: int = 0
    at: datetime = Field(default_factory=utcnow)


class InputReminded(EventBase):
    """A request is still open at its ``remind_at``: the people who may answer are reminded (once)."""

    type: Literal["input.reminded"] = "input.reminded"
    request_id: str


class InputEscalated(EventBase):
    """A request is still open at its ``escalate_at``: ``people`` (its ``escalate_to`` list) may now answer."""

    type: Literal["input.escalated"] = "input.escalated"
    request_id: str
    people: list[Principal] = Field(default_factory=list)


class InputRespondersChanged(EventBase):
    """An approver list a request's rule reads changed while it waits: its ``responders`` were described
    again (stored on the request). ``added`` may answer now and are told; ``removed`` no longer may."""

    type: Literal["input.responders"] = "input.responders"
    request_id: str
    added: list[Principal] = Field(default_factory=list)
    removed: list[Principal] = Field(default_factory=list)


class TurnStarted(EventBase):
    type: Literal["turn.started"] = "turn.started"
    principal: Principal | None = None


class MessageCompleted(EventBase):
    type: Literal["message.completed"] = "message.completed"
    text: str
    step: int | None = None  # the turn's model step that wrote it (bot.ports.LiveText streamed it live)


class ActionStarted(EventBase):
    type: Literal["action.started"] = "action.started"
    call_id: str
    tool_name: str
    input: dict[str, Any] | None = None
    standing: Grant | None = None  # it runs without asking under this standing approval ("don't ask again")


class ActionResult(EventBase):
    type: Literal["action.result"] = "action.result"
    call_id: str
    tool_name: str
    status: ActionStatus
    output: Any = None
    error: str | None = None


class InputRequested(EventBase):
    type: Literal["input.requested"] = "input.requested"
    requests: list[InputRequest]


class TurnWaiting(EventBase):
    type: Literal["turn.waiting"] = "turn.waiting"
    on: Literal["input", "tasks"] = "input"


class ApprovalCandidate(EventBase):
    type: Literal["approval.candidate"] = "approval.candidate"
    request_id: str
    outcome: CandidateOutcome
    responder: Principal | None = None
    reason: str | None = None
    approvals: int = 0
    required: int = 1
    reply_to: dict[str, str] = Field(default_factory=dict)  # where a refusal is told (the answer's reply_to)


class ApprovalSettled(EventBase):
    type: Literal["approval.settled"] = "approval.settled"
    request_id: str
    outcome: SettledOutcome
    responder: Principal | None = None
    note: str | None = None
    grants: list[Grant] = Field(default_factory=list)  # what approving granted ("don't ask again")
    as_admin: bool = False  # a workspace admin cancelled it, past a rule that names others (never an approval)
    ended_by: EndedBy | None = None  # cancelled without a click: how ``responder`` ended it (a stop, a message)


class InputResolved(EventBase):
    type: Literal["input.resolved"] = "input.resolved"
    resolutions: list[Resolution]


class TurnCompleted(EventBase):
    type: Literal["turn.completed"] = "turn.completed"


class TurnFailed(EventBase):
    type: Literal["turn.failed"] = "turn.failed"
    reason: str


class TurnCancelled(EventBase):
    type: Literal["turn.cancelled"] = "turn.cancelled"


class SessionWaiting(EventBase):
    type: Literal["session.waiting"] = "session.waiting"


Event = Annotated[
    TurnStarted
    | MessageCompleted
    | ActionStarted
    | ActionResult
    | InputRequested
    | TurnWaiting
    | ApprovalCandidate
    | ApprovalSettled
    | InputResolved
    | InputReminded
    | InputEscalated
    | InputRespondersChanged
    | TurnCompleted
    | TurnFailed
    | TurnCancelled
    | SessionWaiting,
    Field(discriminator="type"),
]
# built when an event is first read back, as the models are (bot.deferred)
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event, config=ConfigDict(defer_build=True))


def event_from_json(raw: str | bytes) -> Event:
    return EVENT_ADAPTER.validate_json(raw)


# --- persisted request records (the contract between the engine and store/) ----------------

RequestStatus = Literal["open", "settled"]


class RequestRecord(Contract):
    """A request as stored while it waits: the request, where it belongs, and how it ended."""

    request: InputRequest
    session_id: str
    turn_id: str
    team_id: str | None = None
    channel: dict[str, str] = Field(default_factory=dict)  # the frontend's routing data (SessionRef.channel)
    session_info: dict[str, Any] = Field(default_factory=dict)  # SessionInfo as asked, for policies
    approval_key: str | None = None
    grant_on_approve: bool = True  # approving grants ``approval_key`` in the conversation (once(), custom rules)
    status: RequestStatus = "open"
    outcome: ResolutionOutcome | None = None
    response: InputResponse | None = None
    responder: Principal | None = None
    note: str | None = None
    settled_at: datetime | None = None
    approvals: list[str] = Field(default_factory=list)  # principal ids that approved (n-of-m)
    batch: list[str] = Field(default_factory=list)  # request ids parked together with this one
    undeliverable: str | None = None  # why its card could not be shown (the channel is gone): App Home says so
    escalated_to: list[Principal] = Field(default_factory=list)  # who may answer too since it was escalated
    # counts every change of the stored record (1 when parked): a settle checked against an older one is
    # refused with the fresh record (``RequestChanged``), so no answer is decided on a stale copy
    rev: int = 0

    @property
    def request_id(self) -> str:
        return self.request.request_id


class SessionSnapshot(Contract):
    """What the turn loop reads about a session before moving it forward."""

    # the state as its writer saved it, JSON text (None: a session nobody wrote in yet): the engine validates
    # it in one pass (``bot.state.state_of``) rather than decoded to ``state`` and then validated
    saved_state: str | bytes | None = Field(default=None, repr=False)
    grants: set[str] = Field(default_factory=set)  # once() approval keys granted in this session
    cancel: str | None = None  # the turn id someone asked to cancel
    inbox: list[dict[str, Any]] = Field(default_factory=list)  # messages waiting for the turn
    failures: int = 0  # unexpected errors in a row while driving it
    # read with the lease: the records of the requests the turn waits on (TurnState.open_request_ids), by id
    requests: dict[str, RequestRecord] = Field(default_factory=dict)

    @cached_property
    def state(self) -> dict[str, Any] | None:
        """The state as plain data (None: a session nobody wrote in yet)."""
        return json.loads(self.saved_state) if self.saved_state else None


class HeldLease(Contract):
    """A turn lease taken by the write that started work (a new message's record, the settle that completes
    a step) for the drive that follows in the same process, the same token-fenced lease a drive takes.
    ``snapshot``: what its holder starts from, read with it; None when this process changed the session
    since (the drive reads it again)."""

    token: str
    snapshot: SessionSnapshot | None = None
    # when it was taken (this process's monotonic clock): a drive that starts long after checks it is still
    # held before asking the model anything (bot.engine.drive: nothing is written before the model is asked)
    taken_at: float = Field(default_factory=time.monotonic, exclude=True)


class SettleResult(Contract):
    """What one settle attempt did, as the store saw it atomically."""

    # gone: the request's turn no longer exists, so it was closed "no longer needed" instead
    state: Literal["settled", "rejected", "partial", "stale", "gone"]
    batch_complete: bool = False  # every request of the parked step is now settled
    approvals: int = 0
    record: RequestRecord | None = None  # the record after the attempt (stale: who settled it)
    events: list[Event] = Field(default_factory=list)  # what was appended, with sequence numbers
    held: HeldLease | None = None  # the turn lease, taken for the resume (``settle(lease=True)``)


@dataclass(frozen=True, slots=True)
class SettleCommand:
    """One settle attempt, whole, as the engine's settler hands it to the store (``TurnStore.settle``), which
    applies it atomically in one round trip. A plain frozen dataclass: it is built once per click and read
    once by the store, so nothing is validated or copied on the way.

    ``mode``: "settle" counts the answer, "reject" records a refusal and settles nothing. ``outcome``: the
    resolution written. ``required``: the distinct approvals that settle it. ``grant``: the conversation
    grant the settle writes with its record. ``batch``: the other requests of the step. ``on_*``: the events
    appended for each way it ends (the store appends only those of the way it did). ``lease``: this process
    resumes the turn next, so a settle that completes the step takes the turn lease if it is free. ``rev``:
    the revision of the record the answer was checked against (``RequestChanged`` if it changed since)."""

    record: RequestRecord
    mode: Literal["settle", "reject"]
    outcome: str
    response: InputResponse | None = None
    responder_id: str = ""
    required: int = 1
    grant: Grant | None = None
    note: str | None = None
    batch: Sequence[str] = ()
    on_settled: Sequence[Event] = ()
    on_partial: Sequence[Event] = ()
    on_rejected: Sequence[Event] = ()
    on_stale: Sequence[Event] = ()
    lease: bool = False
    rev: int | None = None


class RequestChanged(Exception):
    """The request changed since the record an answer was checked against (``RequestRecord.rev``): nothing
    was written; ``record`` is the stored one now, to check the answer against again."""

    def __init__(self, record: RequestRecord):
        super().__init__(f"request {record.request_id} changed (now revision {record.rev})")
        self.record = record


class UnknownRequest(LookupError):
    """No request with that id: never asked, or long gone."""

    def __init__(self, request_id: str):
        super().__init__(f"no request with id {request_id!r} (it may have expired or never existed)")
        self.request_id = request_id


class LeaseLost(Exception):  # noqa: N818 - a condition the caller handles, not a bug
    """Another worker holds the turn now; this worker must stop without writing."""


class CancelRequested(Exception):  # noqa: N818 - a condition the caller handles, not a bug
    """Someone asked to cancel the turn this checkpoint belonged to: nothing was written; look at the
    session again (the turn loop then ends the turn as cancelled)."""


class MessageTaken(Exception):  # noqa: N818 - a condition the caller handles, not a bug
    """A queued message this commit meant to take in was taken first (it answered a request): nothing
    was written; look at the session again."""
