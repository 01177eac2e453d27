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
from bot.engine.outbox import Outbox
from bot.engine.tool_registry import ToolRegistry
from bot.engine.turn_commands import (
    AmendRequest,
    CallMark,
    CallStart,
    CancelTurn,
    CommitCommand,
    Committed,
    FailureCount,
    LeaseAnswer,
    LeaseCommand,
    RecordedMessage,
    RecordMessage,
    RequestsRead,
    SessionRead,
    Sweep,
    Swept,
    TakeMessage,
)
from bot.models.base import ChatModel
from bot.ports import LiveText, Workspace
from bot.principals import Principal
from bot.protocol import Grant, RequestRecord, SessionSnapshot, SettleCommand, SettleResult

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
    """What the turn loop needs from persistence (``store.turns.RedisTurns``): a dozen verbs, each taking one
    typed command (bot.engine.turn_commands; the settle's is the contract's ``SettleCommand``). A command says
    what the engine needs done together (a checkpoint that also lets the lease go, starts calls and reads
    what follows); how few round trips that takes is the store's business. The delivery of committed events
    has its own port (``bot.engine.outbox.OutboxStore``, ``store.outbox.RedisOutbox``), which the runtime takes
    beside this one and hands to its outbox only."""

    grants: GrantRegistry
    lease_ms: int

    async def read(self, query: SessionRead) -> SessionSnapshot: ...
    async def requests(self, query: RequestsRead) -> list[RequestRecord]: ...
    async def lease(self, command: LeaseCommand) -> LeaseAnswer: ...
    async def commit(self, command: CommitCommand) -> Committed: ...
    async def record_message(self, command: RecordMessage) -> RecordedMessage | None: ...
    async def take_message(self, command: TakeMessage) -> bool: ...
    async def settle(self, command: SettleCommand) -> SettleResult: ...
    async def cancel(self, command: CancelTurn) -> None: ...
    async def mark_call(self, command: CallMark) -> CallStart: ...
    async def amend(self, command: AmendRequest) -> bool: ...
    async def count_failures(self, command: FailureCount) -> int: ...
    async def sweep(self, command: Sweep) -> Swept: ...


UNHURRIED_S = 0.5  # a turn's start and events nobody waits on wait this long for the next write


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
    # how long a turn's start, and events nobody waits on, may wait to go out with the turn's next write
    # (UNHURRIED_S times BOT_DELAY_SCALE): well under the frontends' status-line delay, which counts from the
    # event's time
    unhurried_seconds: float = UNHURRIED_S
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
