"""What the engine asks of the turns' store (``bot.engine.parts.TurnStore``): one typed command per verb, and
what each verb answers (DESIGN §13: the port says what the engine needs; how few round trips that takes is
the store's business, ``store.turns.RedisTurns``).

Commands are frozen slotted dataclasses: built once per call on the hot path and read once by the store,
so nothing is validated or copied on the way. Answers with more than one part are named tuples (a tuple's
cost, and callers unpack them). The settle's command and answer are the contract's own
(``bot.protocol.SettleCommand``, ``SettleResult``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, NamedTuple

from bot.engine.outbox import PassOpening
from bot.principals import Principal
from bot.protocol import Event, HeldLease, RequestRecord, Responders, SessionSnapshot
from bot.session import SessionRef
from bot.state import SavedState

# --- reads ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionRead:
    """A session's snapshot, in one round trip. ``known_state``: the state this lease holder committed last
    (nobody else can have written it since): not read again, nor the failure count. ``state_only``: the
    saved state alone (one command), for callers that need nothing else."""

    session_id: str
    known_state: SavedState = None
    state_only: bool = False


@dataclass(frozen=True, slots=True)
class RequestsRead:
    """Request records with their approvals: those of ``ids``, in order (missing ones left out; with
    ``must_exist``, ``UnknownRequest`` instead); or, with ``pending``, the open requests of workspace
    ``team_id``, oldest first, up to ``limit``."""

    ids: Sequence[str] = ()
    must_exist: bool = False
    pending: bool = False
    team_id: str | None = None
    limit: int = 200


# --- the turn lease -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaseCommand:
    """The turn lease of a session (a fencing token: DESIGN §12).

    ``take``: take it if free, with the snapshot its holder starts from (``LeaseAnswer.token`` None: another
    worker holds it). ``renew``: extend it if ``token`` still holds it, reading a requested stop with it.
    ``release``: let it go; ``still_active``: the unit of work is not over (the session stays due in
    ``retry_after_ms``), else a session with no open request gets its end; ``read``: then read the snapshot
    (what arrived while the lease was held)."""

    session_id: str
    action: Literal["take", "renew", "release"]
    token: str = ""
    still_active: bool = False
    retry_after_ms: int = 0
    read: bool = False


class LeaseAnswer(NamedTuple):
    token: str | None = None  # take: the lease's token (None: taken by another); renew, release: the one given
    held: bool = False  # take, renew: the lease is this worker's now
    cancel: str | None = None  # renew: the turn id someone asked to stop
    snapshot: SessionSnapshot | None = None  # take; release with ``read``


# --- writes ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommitCommand:
    """One atomic checkpoint: the state, the requests it parks on and the events it appends, fenced by the
    lease ``token`` (None: events only, no lease needed, ``state`` None).

    ``ref``: the frontend's routing data, kept for the deliverer. ``take``: queued messages this state took in
    (they leave the inbox in the same write; ``MessageTaken`` if another worker took one first).
    ``unless_cancelled``: a turn id; ``CancelRequested``, nothing written, if someone asked to stop it.
    ``read``: then read the snapshot the next step starts from. ``release``: nothing follows under this lease:
    it goes with the checkpoint. ``begin``: execution markers of calls to start with it (refused: none
    starts). ``finished``: calls' results (marker → JSON), recorded even if the checkpoint is refused.
    ``opening``: the delivery pass of its events, begun in the same round trip."""

    session_id: str
    token: str | None
    state: SavedState
    events: Sequence[Event] = ()
    requests: Sequence[RequestRecord] = ()
    ref: SessionRef | None = None
    take: Sequence[dict[str, Any]] = ()
    unless_cancelled: str | None = None
    read: bool = False
    release: bool = False
    begin: Sequence[str] = ()
    finished: Mapping[str, str] | None = None
    opening: PassOpening | None = None


CallStart = tuple[bool, str | None]  # (True, None): run the call; else (False, what was recorded for it)
NOTHING_BEGUN: Mapping[str, CallStart] = MappingProxyType({})


class Committed(NamedTuple):
    events: list[Event]  # as written, numbered
    snapshot: SessionSnapshot | None = None  # with ``read``
    begun: Mapping[str, CallStart] = NOTHING_BEGUN  # per marker of ``begin``


@dataclass(frozen=True, slots=True)
class RecordMessage:
    """Queue a message durably, once per ``message_id`` (Slack sends some twice; None: a repeat), with the
    session put on the sweep's list in the same round trip. ``then``: "read" the session's inbox and state
    after it; "lease": this process drives the session next, so take the turn lease too if it is free, with
    what its holder starts from."""

    session_id: str
    message: dict[str, Any]
    message_id: str | None
    then: Literal["nothing", "read", "lease"] = "nothing"


class RecordedMessage(NamedTuple):
    snapshot: SessionSnapshot  # with ``then`` "read" or "lease" (else empty)
    held: HeldLease | None = None  # with "lease", when the lease was free


@dataclass(frozen=True, slots=True)
class TakeMessage:
    """Remove one queued message (False: another worker took it first)."""

    session_id: str
    message: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CancelTurn:
    """Ask for a turn to stop: its lease holder sees it at its next checkpoint or lease renewal."""

    session_id: str
    turn_id: str


@dataclass(frozen=True, slots=True)
class CallMark:
    """A call's execution marker (exactly-once execution). Without ``result_json``: start it, fenced by the
    lease ``token`` (``LeaseLost`` if it is gone), answering ``CallStart``. With it: record what the call did
    (not fenced: a fact about the world, which a successor uses instead of reporting the call interrupted)."""

    session_id: str
    marker: str
    token: str = ""
    result_json: str | None = None


@dataclass(frozen=True, slots=True)
class AmendRequest:
    """Change an open request and append ``event`` (False: it was settled meanwhile, or already changed so).
    ``remind``: mark it reminded, once. ``escalate``: let ``people`` answer too, once. ``responders``: store
    who may settle it now, described from policy ``version`` (a newer description stored: False)."""

    record: RequestRecord
    what: Literal["remind", "escalate", "responders"]
    event: Event
    people: Sequence[Principal] = ()
    responders: Responders | None = None
    version: int = 0


@dataclass(frozen=True, slots=True)
class FailureCount:
    """Count a session's unexpected drive failures in a row (``failed`` False: reset); answers the count."""

    session_id: str
    failed: bool


# --- sweeps ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sweep:
    """What the recovery sweep asks. ``sessions``: sessions whose lease lapsed while work remained.
    ``timers``: claim timers due at ``now_ms``, each to one caller only. ``timer_done``: forget a fired
    timer (``member``, ``claim``) unless it was claimed again meanwhile. ``retire``: retire sessions whose end
    has passed. At most ``limit`` of each."""

    what: Literal["sessions", "timers", "timer_done", "retire"]
    now_ms: int = 0
    limit: int = 100
    member: str = ""
    claim: int = 0


class Swept(NamedTuple):
    sessions: Sequence[str] = ()
    timers: Sequence[tuple[str, int]] = ()  # (member, claim)
    retired: int = 0
