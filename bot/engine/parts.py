"""What the runtime's parts share: settings, the turns' store interface and the objects they all use.

The :class:`bot.engine.turns.Runtime` façade builds one :class:`Parts` and hands it to intake, settle,
drive, execute and the outbox, so each job lives in its own module and none owns another.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from bot.approval import PolicySource
from bot.engine.installed import Installed
from bot.engine.outbox import Outbox, PassOpening
from bot.engine.tool_registry import ToolRegistry
from bot.models.base import ChatModel
from bot.ports import LiveText, Workspace
from bot.principals import Principal
from bot.protocol import (
    Event,
    Grant,
    HeldLease,
    RequestRecord,
    Responders,
    SessionSnapshot,
    SettleCommand,
    SettleResult,
)
from bot.session import SessionRef
from bot.state import SavedState

RESPONSE_POLICY_TIMEOUT = 10.0
REQUEST_POLICY_TIMEOUT = 30.0  # auto() asks a model and bounds itself at 30 s; a hung custom policy denies


class GrantRegistry(Protocol):
    """Standing approvals beyond one conversation ("don't ask this requester again"), and the listing
    of all of a workspace's grants (``store.grants.GrantStore``)."""

    async def add(self, grant: Grant) -> None: ...
    async def for_requester(self, team_id: str | None, requester: Principal, keys: Iterable[str],
                            now: datetime) -> dict[str, Grant]: ...
    async def in_conversation(self, session_id: str, approval_key: str) -> Grant | None: ...


class TurnStore(Protocol):
    """What the turn loop needs from persistence (``store.turns.RedisTurns``). The delivery of committed
    events has its own port (``bot.engine.outbox.OutboxStore``, ``store.outbox.RedisOutbox``), which the runtime
    takes beside this one and hands to its outbox only."""

    grants: GrantRegistry
    lease_ms: int

    async def snapshot(self, session_id: str, *, known_state: SavedState = None) -> SessionSnapshot: ...
    async def request_cancel(self, session_id: str, turn_id: str) -> None: ...
    async def acquire_lease(self, session_id: str) -> str | None: ...
    async def renew_lease(self, session_id: str, token: str) -> tuple[bool, str | None]: ...
    async def acquire_lease_and_read(self, session_id: str) -> tuple[str | None, SessionSnapshot | None]: ...
    async def release_lease(self, session_id: str, token: str, *, still_active: bool,
                            retry_after_ms: int = 0, read: bool = False) -> SessionSnapshot | None: ...
    async def mark_active(self, session_id: str, *, delay_ms: int = 0) -> None: ...
    async def due_sessions(self, *, limit: int = 100) -> list[str]: ...
    async def commit(self, session_id: str, token: str | None, state: SavedState,
                     events: list[Event] = ..., requests: list[RequestRecord] = ..., *,
                     ref: SessionRef | None = None, take: list[dict[str, Any]] = ...,
                     unless_cancelled: str | None = None) -> list[Event]: ...
    async def commit_then_read(self, session_id: str, token: str | None, state: SavedState,
                               events: list[Event] = ..., requests: list[RequestRecord] = ..., *,
                               ref: SessionRef | None = None, take: list[dict[str, Any]] = ...,
                               unless_cancelled: str | None = None, read: bool = True,
                               release: bool = False, opening: PassOpening | None = None,
                               finished: dict[str, str] | None = None,
                               ) -> tuple[list[Event], SessionSnapshot | None]: ...
    async def commit_and_begin(self, session_id: str, token: str, state: SavedState, events: list[Event], *,
                               markers: list[str], ref: SessionRef | None = None,
                               take: list[dict[str, Any]] = ..., unless_cancelled: str | None = None,
                               ) -> tuple[list[Event], dict[str, tuple[bool, str | None]]]: ...
    async def emit(self, session_id: str, events: list[Event]) -> list[Event]: ...
    async def get_request(self, request_id: str) -> RequestRecord: ...
    async def get_requests(self, request_ids: list[str]) -> list[RequestRecord]: ...
    async def settle(self, command: SettleCommand) -> SettleResult: ...
    async def record_message(self, session_id: str, message: dict[str, Any], *, message_id: str | None) -> bool: ...
    async def record_message_and_read(self, session_id: str, message: dict[str, Any], *, message_id: str | None,
                                      read: bool = True) -> SessionSnapshot | None: ...
    async def record_message_and_lease(self, session_id: str, message: dict[str, Any], *, message_id: str | None
                                       ) -> tuple[SessionSnapshot, HeldLease | None] | None: ...
    async def take_inbox(self, session_id: str, message: dict[str, Any]) -> bool: ...
    async def state(self, session_id: str) -> dict[str, Any] | None: ...
    async def begin_execution(self, session_id: str, marker: str, token: str) -> tuple[bool, str | None]: ...
    async def finish_execution(self, session_id: str, marker: str, result_json: str) -> None: ...
    async def drive_failures(self, session_id: str, *, failed: bool) -> int: ...
    async def timers_due(self, now_ms: int, *, limit: int = 100) -> list[tuple[str, int]]: ...
    async def timer_done(self, member: str, claim: int) -> None: ...
    async def retire_due(self, *, limit: int = 100) -> int: ...
    async def remind_once(self, record: RequestRecord, event: Event) -> bool: ...
    async def escalate_once(self, record: RequestRecord, people: list[Principal], event: Event) -> bool: ...
    async def pending_for_team(self, team_id: str | None, *, limit: int = 200) -> list[RequestRecord]: ...
    async def change_responders(self, record: RequestRecord, responders: Responders, event: Event, *,
                                version: int) -> bool: ...


@dataclass
class RuntimeSettings:
    step_budget: int = 20  # model steps per turn before a session-limit prompt
    token_budget: int = 200_000  # tokens per turn before a session-limit prompt
    system_prompt: str = (
        "You are a helpful assistant working inside a Slack thread. Use the tools you have. Some tools "
        "need a person's approval; if a call is denied, do not retry it unless asked. Keep answers short."
    )
    response_policy_timeout: float = RESPONSE_POLICY_TIMEOUT
    request_policy_timeout: float = REQUEST_POLICY_TIMEOUT
    history_window: int = 200  # newest messages the model sees (the system prompt always); 0 = all
    history_limit: int = 1_000  # stored messages kept after a turn ends (older ones are dropped); 0 = all
    max_drive_failures: int = 6  # unexpected errors in a row before a turn is failed visibly
    # turns this process works on at once; the rest wait (durably due in Redis, any replica may take
    # them). Bounded so that acknowledging Slack never queues behind an unbounded pile of turn work.
    max_active_turns: int = 8
    clock: Callable[[], float] = time.time  # epoch seconds for deadlines (tests move it forward)


Spawn = Callable[..., "asyncio.Task[Any]"]


@dataclass(frozen=True)
class Parts:
    """The shared objects of one runtime, given whole when it is built (none is set afterwards)."""

    store: TurnStore  # the turns' port; their delivery goes through ``outbox`` and its own port (OutboxStore)
    model: ChatModel
    reviewer: ChatModel
    tools: ToolRegistry
    settings: RuntimeSettings
    outbox: Outbox
    spawn: Spawn
    workspace: Workspace | None = None  # what tools may do in their session's workspace (ctx.workspace)
    live: LiveText | None = None  # answers shown while the model writes them (bot.ports.LiveText)
    # approver lists, workspace rules and admins for the policies (bot.approval.PolicySource): the app's
    # wiring builds it before the runtime; every policy context carries it (ctx.policies). None: those rules
    # fail closed
    policies: PolicySource | None = None
    # which workspaces the app is installed in (bot.engine.installed): an uninstalled one's work waits
    installed: Installed = field(default_factory=Installed)
