"""The runtime's public façade (DESIGN §7, §8, §12).

Every entry point (a message, an answer, a cancel, the recovery sweep) first writes its input to
Redis and then moves the session forward with :meth:`Runtime.drive`, which is idempotent. The jobs
live in their own modules, behind this one class:

- ``bot.engine.intake``  — messages in: record durably, typed answers
- ``bot.engine.settle``  — the one settle path: workspace boundary, response policy, atomic settle
- ``bot.engine.drive``   — the turn loop under a fenced lease
- ``bot.engine.execute`` — request policies and exactly-once tool execution
- ``bot.engine.outbox``  — committed events out to Slack, App Home and the audit log
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from bot.approval import Decision, PolicySource
from bot.backends import AgentBackend
from bot.engine.drive import Driver
from bot.engine.execute import Executor
from bot.engine.installed import Installed
from bot.engine.intake import Intake, QueuedMessage
from bot.engine.outbox import Outbox, OutboxStore
from bot.engine.parts import Parts, RuntimeSettings, TurnStore
from bot.engine.responders import refresh_responders
from bot.engine.schedules import ScheduleStorePort, parse_member
from bot.engine.schedules import fire as fire_schedule
from bot.engine.settle import AnswerResult, Settler
from bot.engine.subagent_relay import SubAgentRelay
from bot.engine.timers import Timers
from bot.engine.tool_registry import ToolRegistry
from bot.engine.turn_commands import CancelTurn, RequestsRead, SessionRead, Sweep
from bot.models.base import ChatModel
from bot.models.history import model_view
from bot.ops import logs
from bot.ops.background import Background
from bot.ops.metrics import ANSWERS, SETTLE
from bot.ports import Channel, LiveText, Workspace
from bot.principals import Principal
from bot.protocol import EndedBy, HeldLease, InputResponse, RequestRecord
from bot.session import SessionRef
from bot.state import SessionState, TurnState, state_of, turn_id_for

__all__ = ["AnswerResult", "PostResult", "Runtime", "RuntimeSettings", "StopResult", "TurnStore", "model_view"]

log = logging.getLogger(__name__)

FRONTEND = "frontend"


StopResult = Literal["stopped", "not theirs", "over", "nothing"]


def _queued_at(message: dict[str, Any]) -> datetime:
    """When a queued message was recorded (``bot.engine.intake.new_message``)."""
    at = datetime.fromisoformat(str(message.get("at")))
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


@dataclass
class PostResult:
    state: Literal["duplicate", "answered", "queued", "nothing waiting"]
    answer: AnswerResult | None = None


class _InBackground:
    """How a timer starts a turn (a schedule's tick): the message is recorded durably in the timer's time,
    and the turn is driven in a tracked background task. A timer never waits on a model or a tool; if this
    process dies first, the recorded message makes the session due for any replica's sweep."""

    def __init__(self, runtime: Runtime):
        self.runtime = runtime

    async def post_message(self, ref: SessionRef, principal: Principal | None, text: str, *,
                           message_id: str | None = None, automated: bool = False) -> object:
        return await self.runtime.receive_message(ref, principal, text, message_id=message_id, automated=automated)


class Runtime:
    """Drives sessions: one turn per session at a time, any number of sessions and replicas."""

    # this process drives the sessions it records and settles in (role ``all`` or ``worker``), so the writes
    # that start work may take the turn lease for it (``bot.engine.roles.WebRuntime``: a web process hands over)
    drives_here = True

    def __init__(
        self,
        *,
        store: TurnStore,
        outbox_store: OutboxStore,
        model: ChatModel,
        tools: ToolRegistry,
        channel: Channel,
        settings: RuntimeSettings | None = None,
        reviewer: ChatModel | None = None,
        workspace: Workspace | None = None,
        schedules: ScheduleStorePort | None = None,
        live: LiveText | None = None,
        policies: PolicySource | None = None,
        installed: Installed | None = None,
        agent: AgentBackend | None = None,
    ):
        """``store``: the turns (``TurnStore``); ``outbox_store``: their delivery (``bot.engine.outbox.OutboxStore``),
        which only the outbox uses. ``live``: where answers are shown while the model writes them
        (``bot.ports.LiveText``);
        ``policies``: the approver lists, workspace rules and admins the policies read (``ctx.policies``;
        None: those rules fail closed); ``installed``: which workspaces the app is installed in
        (``bot.engine.installed``; None: all); ``agent``: a framework's agent that drives the main agent's turns
        in place of the built-in loop (``bot.backends``, DESIGN §14)."""
        self.background = Background()  # its tracked tasks (``spawn``)
        self._recovering: set[str] = set()  # sessions the sweep is driving in the background (``recover``)
        self.outbox = self._outbox(outbox_store, channel)
        self.parts = Parts(store=store, model=model, reviewer=reviewer or model, tools=tools,
                           settings=settings or RuntimeSettings(), outbox=self.outbox, spawn=self.spawn,
                           workspace=workspace, live=live, policies=policies,
                           installed=installed or Installed())
        self.settler = Settler(self.parts)
        self.intake = Intake(self.parts, self.settler)
        self.executor = Executor(self.parts)
        self.driver = Driver(self.parts, self.settler, self.intake, self.executor, agent)
        self.timers = Timers(self.parts, self.settler, on_schedule=self._fire_schedule)
        self.schedules = schedules  # scheduled turns (``bot.engine.schedules``), where the frontend offers them
        # sub-agents: delegations start, report and stop through committed events. Every replica relays,
        # also one without sub-agents loaded: a consumer missing from the replica that happens to deliver
        # a session's events would never be offered them again (the session leaves the outbox list), and
        # the parent would wait forever. Without delegations it only looks at each event's type.
        self.add_consumer("subagents", SubAgentRelay(self))

    def _outbox(self, store: OutboxStore, channel: Channel) -> Outbox:
        """The outbox every part delivers through (``bot.engine.roles.WebRuntime`` hands its deliveries over)."""
        return Outbox(store, {FRONTEND: channel}, self.spawn)

    # the parts' shared objects, for callers that held them before the split
    @property
    def store(self) -> TurnStore:
        return self.parts.store

    @property
    def installed(self) -> Installed:
        return self.parts.installed

    @property
    def tools(self) -> ToolRegistry:
        return self.parts.tools

    @property
    def model(self) -> ChatModel:
        return self.parts.model

    @property
    def settings(self) -> RuntimeSettings:
        return self.parts.settings

    @property
    def channel(self) -> Channel:
        """The frontend consumer (Slack, App Home); other consumers are added with ``add_consumer``."""
        return self.outbox.consumers[FRONTEND]

    @channel.setter
    def channel(self, channel: Channel) -> None:
        self.outbox.consumers[FRONTEND] = channel

    def add_consumer(self, name: str, channel: Channel) -> None:
        """Another reader of committed events with its own cursor (e.g. the audit log)."""
        self.outbox.consumers[name] = channel

    async def _fire_schedule(self, member: str) -> None:
        parsed = parse_member(member)
        if parsed is None or self.schedules is None:
            log.warning("a schedule's timer %r cannot be fired here; dropped", member)
            return
        await fire_schedule(self.schedules, self.parts.workspace, _InBackground(self), *parsed,
                            policies=self.parts.policies, installed=self.parts.installed)

    # --- entry points ----------------------------------------------------------------------------

    async def record_message(
        self, ref: SessionRef, principal: Principal | None, text: str, *, message_id: str | None = None,
        automated: bool = False, lease: bool = False,
    ) -> dict[str, Any] | None:
        """Durably queue a message (call this before acknowledging it); None for a repeat. ``lease``: the
        caller calls :meth:`process_message` next (always: the lease is the drive's), so the record may take
        the turn lease for that drive."""
        return await self.intake.record(ref, principal, text, message_id=message_id, automated=automated,
                                        lease=lease and self.drives_here)

    async def process_message(self, session_id: str, message: dict[str, Any]) -> PostResult:
        """After the ack: answer a request with it, or let the turn loop steer, queue or start a turn."""
        held = QueuedMessage.held_in(message, session_id)
        answered = await self.intake.try_answer(session_id, message)
        # an answer or a dropped "approve" changed what the record read: the drive reads it again
        stale = held.model_copy(update={"snapshot": None}) if held is not None else None
        if answered is not None:
            own = answered.record.session_id == session_id
            if answered.batch_complete and not own:  # (a sub-agent's session, when it answered one of its requests)
                await self.drive(answered.record.session_id)
            if stale is not None or (answered.batch_complete and own):  # (the record's lease is never left unused)
                await self.drive(session_id, stale)
            return PostResult("answered", answered)
        if await self.intake.nothing_waiting(session_id, message):
            if stale is not None:
                await self.drive(session_id, stale)
            return PostResult("nothing waiting")
        await self.drive(session_id, held)
        return PostResult("queued")

    async def post_message(
        self, ref: SessionRef, principal: Principal | None, text: str, *, message_id: str | None = None,
        automated: bool = False,
    ) -> PostResult:
        """A person wrote in the session: record it, then answer, steer, queue or start a turn.
        ``automated``: the app sent it itself (a schedule) on behalf of ``principal``."""
        message = await self.record_message(ref, principal, text, message_id=message_id, automated=automated,
                                            lease=True)
        if message is None:
            return PostResult("duplicate")
        return await self.process_message(ref.session_id, message)

    async def receive_message(
        self, ref: SessionRef, principal: Principal | None, text: str, *, message_id: str | None = None,
        automated: bool = False,
    ) -> asyncio.Task[PostResult] | None:
        """A message arrived (call this before acknowledging it): it is recorded durably now, with the turn
        lease when free, and answered, steered, queued or started in the engine's own tracked task, which
        drives the turn with that lease. None for a repeat; else that task, whose result says what the
        message did (the caller may wait on it for its own notes, never to resume the turn)."""
        message = await self.record_message(ref, principal, text, message_id=message_id, automated=automated,
                                            lease=True)
        if message is None:
            return None
        return self.spawn(self.process_message(ref.session_id, message), what=f"message in {ref.session_id}")

    def receive_answer(
        self, response: InputResponse, *, record: RequestRecord | None = None, note: str | None = None,
    ) -> asyncio.Task[AnswerResult]:
        """An answer arrived (a click, a modal, a result): settle it in a tracked task of the engine's, whose
        result is the settle's outcome (the caller waits on it, within its budget, to acknowledge a click that
        is recorded and to tell the clicker). When the settle is the step's last, the turn resumes in another
        task of the engine's, in this process, with the turn lease that settle took: the lease never leaves
        the engine, and the caller's wait is the settle's alone (as a signal to a workflow)."""
        return self.spawn(self._settle_then_resume(response, record, note), what=f"answer {response.request_id}")

    async def _settle_then_resume(self, response: InputResponse, record: RequestRecord | None,
                                  note: str | None) -> AnswerResult:
        result = await self.answer(response, note=note, resume=False, record=record, lease=True)
        if result.batch_complete:
            self.spawn(self.drive(result.record.session_id, result.held), what=f"resume {result.record.session_id}")
        return result

    async def answer(
        self,
        response: InputResponse,
        *,
        note: str | None = None,
        resume: bool = True,
        record: RequestRecord | None = None,
        lease: bool | None = None,
    ) -> AnswerResult:
        """Someone answered a request (click, select, modal or matching text).

        One read, the checks, one atomic settle: at most two round trips. When the step's last open
        request settles, the turn resumes here — or, with ``resume=False``, the caller resumes it
        (``drive``) after acknowledging the click. (The settle already told the sweep to look.)
        ``lease`` (default: ``resume``): whoever resumes it does so in this process with ``result.held``, the
        turn lease the settle then takes for it (``drive(session, result.held)``; unused, it lapses).
        """
        with logs.bound(request_id=response.request_id):
            started = time.perf_counter()
            lease = (resume if lease is None else lease) and self.drives_here
            result = await self.settler.answer(response, note=note, record=record, lease=lease)
            SETTLE.labels(result.state).observe(time.perf_counter() - started)
            ANSWERS.labels(result.state).inc()
            if result.batch_complete and resume:
                await self.drive(result.record.session_id, result.held)
        return result

    async def check_response(
        self, record: RequestRecord, principal: Principal, decision: Literal["approve", "cancel"] = "approve",
        *, within_s: float | None = None,
    ) -> Decision | None:
        """Would this person's answer count? A dry run of the request's response policy (for "Waiting on
        you" lists); None when it cannot be known. Response policies must therefore have no side effects."""
        return await self.settler.check(record, principal, decision, within_s=within_s)

    async def cancel_turn(self, session_id: str, principal: Principal | None, *, resume: bool = True,
                          ended_by: EndedBy = "stop") -> bool:
        """Stop the current turn: pending calls never run; late answers authorize nothing. With
        ``resume=False`` the caller drives the session to end the turn (or the sweep does: it is due).
        ``principal``: who stops it (None: the app); its open requests are audited as ended by them, for
        ``ended_by``'s reason."""
        snap = await self.store.read(SessionRead(session_id))
        state = state_of(snap)
        turn = state.turn if state is not None else None
        if turn is None:
            return await self._cancel_unwritten(session_id, state, snap.inbox, principal, resume=resume)
        if turn.owner is not None and principal is not None and not turn.owner.same_as(principal):
            return False
        await self._cancel(session_id, turn, principal, ended_by, resume=resume)
        return True

    async def stop_pressed(self, session_id: str, principal: Principal, *, pressed_at: datetime | None,
                           background: bool = False) -> StopResult:
        """A person pressed a stop button at ``pressed_at`` (the frontend's own time of the press; None: not
        known). It stops the turn it was pressed on, and no other: a press that reaches the bot late (a
        frontend's redelivery, minutes later) finds that turn over, and a later turn goes on. Like
        :meth:`cancel_turn`, only the turn's owner stops it. ``"over"``: the turn it was pressed on has ended
        (another may run now); ``"nothing"``: no turn runs or is queued. The press's time is the frontend's
        clock, a turn's start this server's: a button shown under a turn comes seconds after its start (the
        status delay), so clocks a little apart decide nothing. ``background``: return once the stop is written
        (a frontend acknowledges the press then, and a kill after that loses nothing: the session is due), and
        end the turn in a background task."""
        snap = await self.store.read(SessionRead(session_id))
        state = state_of(snap)
        turn = state.turn if state is not None else None
        if turn is None:
            if not snap.inbox:
                return "nothing"
            if pressed_at is not None and _queued_at(snap.inbox[0]) > pressed_at:
                return "over"  # the next turn's message came after the press
            stopped = await self._cancel_unwritten(session_id, state, snap.inbox, principal, resume=not background)
            if stopped and background:
                self.spawn(self.drive(session_id), what=f"stop {session_id}")
            return "stopped" if stopped else "not theirs"
        if pressed_at is not None and turn.started_at > pressed_at:
            return "over"
        if turn.owner is not None and not turn.owner.same_as(principal):
            return "not theirs"
        await self._cancel(session_id, turn, principal, "stop", resume=not background)
        if background:
            self.spawn(self.drive(session_id), what=f"stop {session_id}")
        return "stopped"

    async def _cancel(self, session_id: str, turn: TurnState, by: Principal | None, ended_by: EndedBy, *,
                      resume: bool) -> None:
        await self.store.cancel(CancelTurn(session_id, turn.turn_id))
        # a tool or a framework's run of this turn in this process is told now; on another replica, by its lease
        # renewal or its next write
        self.driver.stop_running(session_id, turn.turn_id)
        for record in await self.store.requests(RequestsRead(turn.open_request_ids())):
            await self.settler.resolve_unanswered(record, "cancelled", ended_by=ended_by, by=by)
        if resume:
            await self.drive(session_id)

    async def _cancel_unwritten(self, session_id: str, state: SessionState | None, inbox: list[dict[str, Any]],
                                principal: Principal | None, *, resume: bool) -> bool:
        """Stop the turn the first queued message starts, whose start may not be written yet (bot.engine.drive writes
        it with the turn's first checkpoint): its id is known in advance, and that checkpoint is refused."""
        if not inbox:
            return False
        message = inbox[0]
        owner = Principal.model_validate(message["principal"]) if message.get("principal") else None
        if owner is not None and principal is not None and not owner.same_as(principal):
            return False
        turn_id = turn_id_for(session_id, (state.turns if state else 0) + 1, message)
        await self.store.cancel(CancelTurn(session_id, turn_id))
        if resume:
            await self.drive(session_id)
        return True

    async def drive(self, session_id: str, held: HeldLease | None = None) -> None:
        """Move the session forward if this worker can take its lease; safe to call any time. ``held``: the
        turn lease a record or settle took for this drive (``Driver.drive``)."""
        with logs.bound(session_id=session_id):  # its log lines say which session (and turn: bot.engine.drive)
            await self.driver.drive(session_id, held)

    async def recover(self) -> int:
        """One sweep (any replica, at start-up and every few seconds): fire due deadlines, hand turns whose
        worker died to background drives, deliver events nobody delivered, retire sessions whose end has
        passed (DESIGN §12, Retention: their keys deleted; never one that something still holds). Returns how
        much it found.

        It never waits on a tool or a model: a turn it finds is continued in a tracked
        background task, so one slow tool cannot hold up every expiry, reminder, escalation, schedule and
        delivery of this replica, nor its start-up."""
        await self.parts.installed.refresh()  # each sweep reads the install marks: clicks then read none
        count = await self.timers.sweep()  # first: an expiry makes its session due for the loop below
        for session_id in (await self.store.sweep(Sweep("sessions"))).sessions:
            count += self._continue_in_background(session_id)
        count += await self.outbox.sweep()
        count += (await self.store.sweep(Sweep("retire"))).retired
        return count

    def _continue_in_background(self, session_id: str) -> bool:
        """Drive a session the sweep found due, in a tracked task (``abandon`` cancels it at shutdown). One
        per session, and at most ``max_active_turns`` at once: the others stay due for a later sweep (or
        another replica's). False when it was left for later."""
        if session_id in self._recovering or len(self._recovering) >= max(1, self.settings.max_active_turns):
            return False
        self._recovering.add(session_id)
        task = self.spawn(self.drive(session_id), what=f"continue {session_id}")
        task.add_done_callback(lambda _: self._recovering.discard(session_id))
        return True

    async def flush(self, session_id: str) -> bool:
        """Deliver a session's committed events now (tests, tools); True when nothing is left."""
        return await self.outbox.flush(session_id)

    async def refresh_responders(self, team_id: str, resource: str, version: int) -> int:
        """An approver list changed: the open requests whose rule reads it say who may answer now
        (``bot.engine.responders``); returns how many changed."""
        return await refresh_responders(self.parts, team_id, resource, version)

    def spawn(self, coro: Any, *, what: str) -> asyncio.Task[Any]:
        """Run slow work after an ack; failures are logged with context, never lost silently."""
        return self.background.spawn(coro, what=what)

    async def wait_idle(self) -> None:
        """Wait for spawned background work, deliveries included (tests, graceful shutdown)."""
        await self.background.wait_idle()

    async def abandon(self, *, within_s: float = 2.0) -> int:
        """Cancel the background work still running (shutdown, after the grace period) and wait a bounded
        time for it to stop, so none of it outlives the connections it uses. Safe: whatever it had not
        committed is redone from the last checkpoint by whoever drives the session next. Returns how
        many tasks were still running."""
        return await self.background.abandon(within_s=within_s)
