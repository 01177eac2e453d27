"""What one drive of a session holds under its turn lease (``bot.engine.drive``), and what a framework's turn
(``bot.engine.framework_turns``) may do through the loop that holds it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from bot.engine.early_start import EarlyStart
from bot.protocol import Event, RequestRecord, SessionSnapshot
from bot.state import SavedState, SessionState

if TYPE_CHECKING:
    from bot.engine.execute import Executor
    from bot.engine.parts import Parts
    from bot.engine.settle import Settler


@dataclass
class DrivePass:
    """Work done under one lease."""

    session_id: str
    token: str
    failures: int = 0  # earlier failed attempts seen in the snapshot (cleared when this pass succeeds)
    # queued messages taken into the in-memory history; they leave the inbox with the next commit
    taking: list[dict[str, Any]] = field(default_factory=list)
    # the state as this pass last committed it (fenced by the lease, so still what Redis holds); the
    # next step starts from it instead of reading it back. Used once: a step that commits sets it again.
    committed: SavedState = None
    read: SessionSnapshot | None = None  # read with the lease, for the first step
    # the last checkpoint let the lease go (``_commit(last=True)``); ``after``: what was read then
    released: bool = False
    after: SessionSnapshot | None = None
    parked_now: bool = False  # that checkpoint parked on requests it created: none can be answered yet
    # events of checkpoints folded into the next write (the turn's start, the model's step): while the model
    # thinks nothing needs to be durable that the inbox does not keep (the message stays queued until then)
    carry: list[Event] = field(default_factory=list)
    carry_unless: str | None = None  # the model's step is carried: the next write is refused if its turn was stopped
    early: EarlyStart | None = None  # the turn's start, written alone if the next write is slow to come
    # a step's last call's result (marker → JSON), written by the step's next checkpoint in its own script
    finished: dict[str, str] = field(default_factory=dict)


class TurnLoop(Protocol):
    """The driver, as a framework's turn sees it: its checkpoints and endings, fenced by the pass's lease."""

    p: Parts
    exec: Executor
    settler: Settler

    async def carried(self, p: DrivePass) -> list[Event]: ...
    async def commit_and_begin(self, p: DrivePass, state: SessionState, events: list[Event],
                               markers: list[str]) -> dict[str, tuple[bool, str | None]]: ...
    async def park(self, p: DrivePass, state: SessionState, events: list[Event],
                   requests: list[RequestRecord]) -> None: ...
    async def fail_turn(self, p: DrivePass, state: SessionState, reason: str, before: list[Event] = ...) -> None: ...
    async def end_turn(self, p: DrivePass, state: SessionState, final: Event, before: list[Event] = ..., *,
                       unless_cancelled: str | None = None, last: bool = False) -> None: ...
    async def finish_cancelled(self, p: DrivePass, state: SessionState, before: list[Event] = ...) -> None: ...
    async def records_of(self, request_ids: list[str],
                         read: dict[str, RequestRecord] | None) -> dict[str, RequestRecord]: ...
    async def park_on_limit(self, p: DrivePass, state: SessionState, before: list[Event] = ...) -> None: ...
    async def resume_limit(self, p: DrivePass, state: SessionState,
                           read: dict[str, RequestRecord] | None = None) -> bool: ...
