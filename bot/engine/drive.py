"""The turn loop (DESIGN §7, §8): step → policy → run or park → resume / steer / cancel.

:meth:`Driver.drive` is idempotent: whoever holds the session's turn lease looks at the stored
state and moves it forward until the turn parks or ends, checkpointing as it goes. The lease's
token fences every commit and every tool start, and the lease never outlives the work it guards:
its renewer is stopped by a flag with bounded waits. An unexpected error is retried with backoff a
bounded number of times; then the turn fails visibly and the session takes new messages again.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import Any

from bot.backends import AgentBackend
from bot.engine.call_outcomes import apply_resolutions, unreported_results
from bot.engine.early_start import EarlyStart
from bot.engine.execute import Executor, ToolUnavailable, make_record
from bot.engine.framework_turns import FrameworkTurns
from bot.engine.installed import RETRY_MS, NotInstalled
from bot.engine.intake import Intake
from bot.engine.lease_keeper import LeaseKeeper
from bot.engine.parts import Parts
from bot.engine.passes import DrivePass
from bot.engine.settle import Settler, delegation_live
from bot.engine.turn_commands import CommitCommand, FailureCount, LeaseCommand, RequestsRead, SessionRead
from bot.models.base import TextCallback
from bot.models.history import compact, model_view, user_message
from bot.models.words import answer_words, logged_failure_words
from bot.ops import logs
from bot.ports import LiveText, StepText
from bot.principals import Principal
from bot.protocol import (
    CONTINUE,
    CancelRequested,
    EndedBy,
    Event,
    HeldLease,
    InputRequest,
    InputRequested,
    LeaseLost,
    MessageCompleted,
    MessageTaken,
    RequestRecord,
    SessionSnapshot,
    SessionWaiting,
    TurnCancelled,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    TurnWaiting,
    session_limit_options,
)
from bot.session import SessionRef, new_request_id
from bot.state import CallResult, CallState, SessionState, StepState, TurnState, state_of, turn_id_for

log = logging.getLogger(__name__)

FAILED_RETRY_BASE_MS = 1_000
FAILED_RETRY_MAX_MS = 60_000


class Driver:
    def __init__(self, parts: Parts, settler: Settler, intake: Intake, executor: Executor,
                 agent: AgentBackend | None = None):
        self.p = parts
        self.settler = settler
        self.intake = intake
        self.exec = executor
        self._slots: asyncio.Semaphore | None = None
        # a framework's agent drives the main agent's turns in place of the built-in model step (DESIGN §14)
        self.frameworks = FrameworkTurns(self, agent) if agent is not None else None

    async def drive(self, session_id: str, held: HeldLease | None = None) -> None:
        """Move the session forward if this worker can take its lease; safe to call any time. ``held``: the
        lease the write that started this work took for it (a message's record, a step's last settle), so
        the drive starts from what that write read instead of taking the lease itself.

        At most ``max_active_turns`` sessions are driven at once by this process; a session waiting
        for a slot holds no lease, so another replica may take it meanwhile."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(max(1, self.p.settings.max_active_turns))
        if held is not None and self._slots.locked():  # no room now: let the lease go while waiting for a slot
            await self.p.store.lease(LeaseCommand(session_id, "release", held.token, still_active=True))
            held = None
        async with self._slots:
            await self._drive(session_id, held)

    async def _drive(self, session_id: str, held: HeldLease | None) -> None:
        store = self.p.store
        while True:
            if held is not None:  # (once: a drive that goes round again takes the lease again)
                if not await self._still_held(session_id, held):
                    return  # it lapsed while this process stalled: another worker drives the session
                (token, snap), held = (held.token, held.snapshot), None
            else:
                token, _, _, snap = await store.lease(LeaseCommand(session_id, "take"))
            if token is None:
                return  # another worker drives it and re-checks for work before letting go
            keeper = LeaseKeeper(store, session_id, token, int(getattr(store, "lease_ms", 30_000)),
                                 told=lambda turn_id: self.stop_running(session_id, turn_id),
                                 busy=lambda: self._runs(session_id))
            keeper.start()
            failed = waits = False
            work = DrivePass(session_id, token, read=snap)
            try:
                await self._drive_locked(work)
                if work.failures:
                    await store.count_failures(FailureCount(session_id, failed=False))
            except NotInstalled as exc:  # not a failure: it goes on once the app is installed again
                waits = True
                log.info("session %s waits: %s", session_id, exc)
            except LeaseLost:
                log.warning("lost the turn lease of %s; another worker continues it", session_id)
                return
            except ToolUnavailable as exc:  # expected in a rolling deploy: no traceback, but retried as a failure
                failed = True
                log.warning("session %s: %s; leaving it to a replica that has it", session_id, exc)
            except Exception:
                failed = True
                log.exception("driving session %s failed", session_id)
            finally:
                await self._let_go(work)
                await keeper.stop()
            if work.released and not (failed or waits):
                after = work.after  # the last checkpoint let the lease go and read what came meanwhile
            else:  # (a session that waits for a reinstall stays due, looked at again a while later)
                retry_ms = await self._after_failure(session_id, token) if failed else RETRY_MS if waits else 0
                after = (await store.lease(LeaseCommand(session_id, "release", token, still_active=failed or waits,
                                                        retry_after_ms=retry_ms, read=not (failed or waits)))).snapshot
            if after is None or not await self._has_work(after, parked_now=work.parked_now):
                return

    def stop_running(self, session_id: str, turn_id: str) -> None:
        """A stop of the turn: its tools and its framework's run in this process are told at once."""
        self.exec.stop_running(session_id, turn_id)
        if self.frameworks is not None:
            self.frameworks.stop_running(session_id, turn_id)

    def _runs(self, session_id: str) -> bool:
        """Is work of this session running here that a stop must reach (a tool, a framework's run)?"""
        return self.exec.runs_tools(session_id) or (self.frameworks is not None and self.frameworks.runs(session_id))

    async def _still_held(self, session_id: str, held: HeldLease) -> bool:
        """Is a lease an earlier write took for this drive still ours? Asked (one round trip) only when it was
        taken a while ago: nothing is written before the model is asked (bot.engine.early_start), so a holder that
        stalled past its lease would otherwise ask the model for a turn another worker has taken over."""
        lease_s = int(getattr(self.p.store, "lease_ms", 30_000)) / 1000
        if time.monotonic() - held.taken_at < lease_s / 3:
            return True
        return (await self.p.store.lease(LeaseCommand(session_id, "renew", held.token))).held

    async def _after_failure(self, session_id: str, token: str) -> int:
        """Count the failure; past the limit fail the turn visibly. Returns the delay before a retry."""
        count = await self.p.store.count_failures(FailureCount(session_id, failed=True))
        if count < self.p.settings.max_drive_failures:
            delay = min(FAILED_RETRY_BASE_MS * 2 ** (count - 1), FAILED_RETRY_MAX_MS)
            log.warning("session %s: attempt %d failed; retrying in %.1fs", session_id, count, delay / 1000)
            return delay
        try:
            await self._abandon_turn(DrivePass(session_id, token))
            await self.p.store.count_failures(FailureCount(session_id, failed=False))
            return 0
        except Exception:
            log.exception("could not fail the turn of %s visibly; retrying later", session_id)
            return FAILED_RETRY_MAX_MS

    async def _abandon_turn(self, p: DrivePass) -> None:
        snap = await self.p.store.read(SessionRead(p.session_id))
        state = state_of(snap)
        if state is None or state.turn is None:
            if not snap.inbox:
                return
            # it failed before its first checkpoint (its start goes with that one): nothing of it is saved but
            # the message that starts it, which would start it again forever; it starts here, to fail
            state = await self._start_turn(p, state, snap.inbox[0])
        turn = state.turn
        assert turn is not None
        log.error("session %s: giving up on turn %s after %d failed attempts", p.session_id, turn.turn_id,
                  snap.failures)
        # nothing is left waiting on people: its open cards end "no longer needed" (a late click settles
        # nothing), and a delegation's child is stopped by the relay
        await self._close_open_requests(turn, "ignored", ended_by="turn-failed")
        reports = self._close_step(p, state, "TURN_FAILED", "The turn failed before this call could run.")
        await self._end_turn(p, state, TurnFailed(
            session_id=p.session_id, turn_id=turn.turn_id,
            reason="Something went wrong while working on this, several times in a row."), reports)

    # --- the loop --------------------------------------------------------------------------------

    async def _has_work(self, snap: SessionSnapshot, *, parked_now: bool = False) -> bool:
        """Is there work the lease holder must do? ``parked_now``: the drive ended by parking on requests it
        created with the lease's release; whoever answers one since finds the lease free and drives."""
        state = state_of(snap)
        turn = state.turn if state is not None else None
        if turn is None:
            return bool(snap.inbox)
        if snap.cancel == turn.turn_id or turn.status == "running":
            return True
        if not turn.limit_request_id and any(_same(m, turn.owner) for m in snap.inbox):
            return True  # the owner answers or steers past what is still open
        return not parked_now and await self._all_settled(turn)

    async def _all_settled(self, turn: TurnState) -> bool:
        return all(r.status != "open" for r in await self.p.store.requests(RequestsRead(turn.open_request_ids())))

    async def _drive_locked(self, p: DrivePass) -> None:
        while True:
            try:
                if not await self._drive_step(p):
                    return
            except (MessageTaken, CancelRequested):
                # it answered a request, or someone asked to stop the turn, meanwhile: nothing was
                # written; look again at Redis (a requested cancel then ends the turn from there)
                await self._let_go(p)
                p.taking, p.committed, p.read, p.carry, p.carry_unless = [], None, None, [], None

    async def _drive_step(self, p: DrivePass) -> bool:
        """One step of the turn loop from a fresh snapshot; False when nothing more can be done now."""
        known, p.committed, snap = p.committed, None, p.read
        p.read = None
        if snap is None:  # the first step uses what was read with the lease
            snap = await self.p.store.read(SessionRead(p.session_id, known))
        p.failures = max(p.failures, snap.failures)
        state = state_of(snap)
        inbox = snap.inbox
        ref = state.ref if state is not None else SessionRef.model_validate(inbox[0]["ref"]) if inbox else None
        self._require_agent(ref)
        await self.p.installed.require(ref.team_id if ref else None)  # none where the app was uninstalled
        if state is None or state.turn is None:
            if not inbox:
                return False
            # the new turn goes on from what was just read and committed (no second read before the model)
            state, inbox = await self._start_turn(p, state, inbox[0]), inbox[1:]
        turn = state.turn
        assert turn is not None
        logs.bind(turn_id=turn.turn_id, team_id=state.ref.team_id)  # for this drive's log lines (bot.ops.logs)
        if snap.cancel == turn.turn_id:
            await self._finish_cancelled(p, state)
            return True
        if state.ref.parent and not await delegation_live(self.p.store, state.ref.parent.get("request_id")):
            await self._end_orphaned(p, state)  # the relay has not stopped this sub-agent yet: stop it here
            return True
        owner_message = next((m for m in inbox if _same(m, turn.owner)), None)
        waits = turn.step is not None or turn.limit_request_id or (turn.run is not None and turn.run.request_ids)
        if owner_message is not None and waits:
            # a typed answer recorded but not yet tried (its process died after the ack): try it first
            if await self.intake.try_answer(p.session_id, owner_message, state):
                return True
        # the agent's, or a sub-agent it brought; a turn the built-in loop began ends in it
        if self.frameworks is not None and self.frameworks.drives(state) and not turn.builtin_began:
            return await self.frameworks.step(p, state, snap, owner_message)
        if turn.limit_request_id:
            return await self._resume_limit(p, state, snap.requests)
        if turn.step is not None:
            return await self._resume_step(p, state, snap.grants, owner_message, snap.requests)
        for message in [m for m in inbox if _same(m, turn.owner)]:
            state.history.append(user_message(message))
            p.taking.append(message)  # steering: it leaves the queue with the next checkpoint
        if turn.steps >= turn.step_budget or turn.tokens >= turn.token_budget:
            await self._park_on_limit(p, state)
            return False
        return await self._model_step(p, state, snap.grants)

    def _require_agent(self, ref: SessionRef | None) -> None:
        """A sub-agent's session is driven only where that sub-agent is loaded: elsewhere (a rolling deploy,
        another BOT_TOOLS) it would run on this process's prompt, model and tools. Like a missing tool, it
        is left to a replica that has it (retried with backoff; failed visibly if none ever does)."""
        name = ref.parent.get("agent") if ref is not None and ref.parent else None
        if name and self.p.tools.agent(name) is None:
            raise ToolUnavailable(f"sub-agent {name!r} is not loaded in this process")

    async def _start_turn(self, p: DrivePass, state: SessionState | None, message: dict[str, Any]) -> SessionState:
        p.taking.append(message)
        principal = Principal.model_validate(message["principal"]) if message.get("principal") else None
        if state is None:
            state = SessionState(ref=SessionRef.model_validate(message["ref"]), initiator=principal)
        state.turns += 1
        agent = self.p.tools.agent(state.agent)  # a sub-agent's session: its instructions (bot.agents)
        system_prompt = agent.instructions if agent is not None else self.p.settings.system_prompt
        if not state.history and system_prompt:
            state.history.append({"role": "system", "content": system_prompt})
        state.history.append(user_message(message))
        state.turn = TurnState(
            turn_id=turn_id_for(p.session_id, state.turns, message),
            number=state.turns,
            owner=principal,
            step_budget=self.p.settings.step_budget,
            token_budget=self.p.settings.token_budget,
            automated=bool(message.get("automated")),
        )
        # written with the turn's first checkpoint (or alone, if that is slow to come: bot.engine.early_start)
        p.carry.append(TurnStarted(session_id=p.session_id, turn_id=state.turn.turn_id, principal=principal))
        return state

    async def _model_step(self, p: DrivePass, state: SessionState, grants: set[str]) -> bool:
        """One model call and what follows it; False when the turn ended or parked (nothing more to do now:
        what arrived meanwhile is read when the lease is let go)."""
        turn = state.turn
        assert turn is not None
        if p.carry and p.early is None:
            p.early = EarlyStart(self.p, p.session_id, p.token, state, p.carry, p.taking)
        try:
            response = await self.p.model.complete(
                model_view(state.history, self.p.settings.history_window), self.p.tools.specs(state.agent),
                on_text=_live_text(self.p.live, state, turn.steps + 1),
            )
        except Exception as exc:  # noqa: BLE001 - any model failure ends the turn visibly, never silently
            await self._end_turn(p, state, TurnFailed(session_id=p.session_id, turn_id=turn.turn_id,
                                                      reason=logged_failure_words(exc, p.session_id)))
            return False
        # stopped while the model thought: run nothing it asked for, say nothing it wrote. The checkpoints
        # below are refused if a cancel was asked (CancelRequested), and the loop then ends the turn.
        turn.steps += 1
        turn.tokens += response.usage.total_tokens
        events: list[Event] = []
        shown, unanswered = answer_words(response)
        if unanswered is not None:  # nothing to show (empty, filtered, cut): said plainly, never silence
            log.warning("model answered nothing to show in session %s (finish_reason %s)", p.session_id,
                        response.finish_reason)
            await self._end_turn(p, state, TurnFailed(session_id=p.session_id, turn_id=turn.turn_id,
                                                      reason=unanswered))
            return False
        if shown:
            events.append(MessageCompleted(session_id=p.session_id, turn_id=turn.turn_id, text=shown,
                                           step=turn.steps))
        if not response.tool_calls:
            state.history.append(response.to_message())
            await self._end_turn(p, state, TurnCompleted(session_id=p.session_id, turn_id=turn.turn_id), events,
                                 unless_cancelled=turn.turn_id, last=True)
            return False
        turn.step = StepState(
            index=turn.steps,
            step_id=secrets.token_hex(6),
            assistant=response.to_message(),
            calls=[CallState(call_id=c.id, tool_name=c.name, arguments=c.arguments) for c in response.tool_calls],
        )
        await self.exec.apply_request_policies(state, grants)
        # the step goes with its next write (its calls' start, the park, or its results), which is refused,
        # writing nothing, if a stop was asked meanwhile: then nothing it asked for runs
        p.carry.extend(events)
        p.carry_unless = turn.turn_id
        return await self._resume_step(p, state, grants, None)

    async def _resume_step(
        self, p: DrivePass, state: SessionState, grants: set[str], steer: dict[str, Any] | None,
        read: dict[str, RequestRecord] | None = None,
    ) -> bool:
        """Apply answers, run what may run, park on what still needs a person. False = parked.

        ``read``: request records read with the lease (``SessionSnapshot.requests``); the step's are taken
        from there when all of them were, else read now.
        A requested cancel was looked for a moment ago by the caller (in the snapshot, or by the
        checkpoint after the model); the checkpoint before any call starts looks again."""
        turn = state.turn
        assert turn is not None and turn.step is not None
        step = turn.step
        records = await self._records(step.request_ids, read)
        open_ids = [rid for rid, r in records.items() if r.status == "open"]
        if open_ids and steer is not None:
            author = Principal.model_validate(steer["principal"]) if steer.get("principal") else None
            for rid in open_ids:
                await self.settler.resolve_unanswered(records[rid], "ignored", ended_by="message", by=author)
            records = {r.request_id: r for r in await self.p.store.requests(RequestsRead(step.request_ids))}
            open_ids = [rid for rid, r in records.items() if r.status == "open"]
        if open_ids:
            return False  # still waiting on people
        apply_resolutions(step, records, self.p.tools)
        step.request_ids = []
        self.exec.ensure_tools(state)  # a replica without a ready call's tool leaves the step to one that has it
        started = self.exec.started_events(p.session_id, state)
        begun: dict[str, tuple[bool, str | None]] = {}
        if started:  # nothing starts once a cancel is asked: this checkpoint is refused then
            begun = await self._commit_and_begin(p, state, started, self.exec.ready_markers(state))
        p.finished = await self.exec.run_ready(p.session_id, p.token, state, begun)
        results = unreported_results(p.session_id, turn)
        new_requests = self.exec.requests_for(state)
        if new_requests:  # describing and previewing them may take a while: the last result is written first
            await self.exec.record_results(p.session_id, p.finished)
            p.finished = {}
            await asyncio.gather(self.exec.describe_responders(state, new_requests),
                                 self.exec.preview_requests(state, new_requests))  # both bounded, side by side
            step.request_ids = [r.request_id for r in new_requests]
            turn.status = "parked"
            events = [*results,
                      InputRequested(session_id=p.session_id, turn_id=turn.turn_id,
                                     requests=[r.request for r in new_requests]),
                      TurnWaiting(session_id=p.session_id, turn_id=turn.turn_id, on="input")]
            await self._commit(p, state, events, new_requests, last=True)
            p.parked_now = True  # (only once written: a refused park goes on under the lease)
            return False
        # the step is complete: its calls and results join the history together
        state.history.append(step.assistant)
        for call in step.calls:
            state.history.append({"role": "tool", "tool_call_id": call.call_id, "content": call.tool_message()})
        turn.step = None
        turn.status = "running"
        await self._commit(p, state, results, then_step=True, no_hurry=True)
        return True

    async def _park_on_limit(self, p: DrivePass, state: SessionState, before: list[Event] = ()) -> None:  # type: ignore[assignment]
        turn = state.turn
        assert turn is not None
        req = InputRequest(
            request_id=new_request_id(state.ref.session_id),
            kind="session-limit",
            prompt=f"The agent has used this turn's budget ({turn.steps} steps, {turn.tokens} tokens). Keep going?",
            options=session_limit_options(),
            display="confirmation",
            principal=turn.owner,
            session_id=state.ref.session_id,
            turn_id=turn.turn_id,
        )
        record = make_record(state, req)
        record.batch = [req.request_id]
        turn.limit_request_id = req.request_id
        turn.status = "parked"
        await self._commit(p, state, [*before,
                                      InputRequested(session_id=p.session_id, turn_id=turn.turn_id, requests=[req]),
                                      TurnWaiting(session_id=p.session_id, turn_id=turn.turn_id, on="input")],
                           [record])

    async def _records(self, request_ids: list[str], read: dict[str, RequestRecord] | None) -> dict[str, RequestRecord]:
        """The records of ``request_ids`` by id: those ``read`` with the lease if it has them all, else read now."""
        if read and all(rid in read for rid in request_ids):
            return {rid: read[rid] for rid in request_ids}
        return {r.request_id: r for r in await self.p.store.requests(RequestsRead(request_ids))}

    async def _resume_limit(self, p: DrivePass, state: SessionState, read: dict[str, RequestRecord] | None = None) -> bool:
        turn = state.turn
        assert turn is not None and turn.limit_request_id is not None
        record = (await self._records([turn.limit_request_id], read)).get(turn.limit_request_id)
        if record is not None and record.status == "open":
            return False
        turn.limit_request_id = None
        turn.status = "running"
        if record is not None and record.outcome == "approved" and record.response and record.response.option_id == CONTINUE:
            # a fresh budget; step ids stay unique, so no execution marker of this turn is ever reused
            turn.steps, turn.tokens = 0, 0
            await self._commit(p, state, [])
            return True
        if turn.run is not None and turn.run.saved is not None:  # a framework's run: the next turn follows it
            state.agent_memory = turn.run.saved
        await self._end_turn(p, state, TurnCompleted(session_id=p.session_id, turn_id=turn.turn_id), [
            MessageCompleted(session_id=p.session_id, turn_id=turn.turn_id,
                             text="Stopped: this turn reached its budget and was not continued.")])
        return True

    def _close_step(self, p: DrivePass, state: SessionState, code: str, message: str) -> list[Event]:
        """End a step whose calls will not run: every call gets a result, in the history too."""
        turn = state.turn
        assert turn is not None
        if turn.step is None:
            return []
        state.history.append(turn.step.assistant)
        for call in turn.step.calls:
            if call.status != "done" or call.result is None:
                call.status, call.result = "done", CallResult(status="rejected", output={"code": code, "message": message})
            state.history.append({"role": "tool", "tool_call_id": call.call_id, "content": call.result.content()})
        return unreported_results(p.session_id, turn)

    async def _end_orphaned(self, p: DrivePass, state: SessionState) -> None:
        """A sub-agent's turn whose delegation ended: nothing more of it runs. Its open requests end "no
        longer needed" (their cards are updated) and the turn ends cancelled, as the relay's stop would."""
        assert state.turn is not None
        await self._close_open_requests(state.turn, "cancelled", ended_by="delegation-ended")
        await self._finish_cancelled(p, state)

    async def _close_open_requests(self, turn: TurnState, outcome: str, *, ended_by: EndedBy) -> None:
        """End the turn's requests still open (its step's and a session-limit prompt) as ``outcome``: their
        cards are updated and a late click settles nothing."""
        for record in await self.p.store.requests(RequestsRead(turn.open_request_ids())):
            if record.status == "open":
                await self.settler.resolve_unanswered(record, outcome, ended_by=ended_by)

    async def _finish_cancelled(self, p: DrivePass, state: SessionState, before: list[Event] = ()) -> None:  # type: ignore[assignment]
        turn = state.turn
        assert turn is not None
        reports = self._close_step(p, state, "TURN_CANCELLED", "The turn was cancelled.")
        if self.frameworks is not None:
            self.frameworks.keep_stopped(state)
        await self._end_turn(p, state, TurnCancelled(session_id=p.session_id, turn_id=turn.turn_id),
                             [*before, *reports])

    # --- what a framework's turn (bot.engine.framework_turns) does through the loop -------------------

    async def park(self, p: DrivePass, state: SessionState, events: list[Event], requests: list[RequestRecord]) -> None:
        await self._commit(p, state, events, requests, last=True)
        p.parked_now = True

    async def fail_turn(self, p: DrivePass, state: SessionState, reason: str, before: list[Event] = ()) -> None:  # type: ignore[assignment]
        assert state.turn is not None
        await self._end_turn(p, state, TurnFailed(session_id=p.session_id, turn_id=state.turn.turn_id, reason=reason),
                             before)


    async def _end_turn(self, p: DrivePass, state: SessionState, final: Event, before: list[Event] = (),  # type: ignore[assignment]
                        *, unless_cancelled: str | None = None, last: bool = False) -> None:
        state.turn = None
        state.history = compact(state.history, self.p.settings.history_limit)
        await self._commit(p, state, [*before, final, SessionWaiting(session_id=p.session_id)],
                           unless_cancelled=unless_cancelled, last=last)

    async def _commit_and_begin(self, p: DrivePass, state: SessionState, events: list[Event],
                                markers: list[str]) -> dict[str, tuple[bool, str | None]]:
        """The checkpoint that makes calls ready (more work follows: a tool run), starting them in its own
        fenced script (``CommitCommand.begin``); refused, like any, if a cancel was asked."""
        assert state.turn is not None
        events = [*await self._carried(p), *events]
        saved = state.model_dump_json()  # serialized once, as written
        committed, _, begun = await self.p.store.commit(CommitCommand(
            p.session_id, p.token, saved, events, ref=state.ref, take=p.taking, unless_cancelled=state.turn.turn_id,
            begin=markers))
        p.taking, p.committed, p.read, p.carry, p.carry_unless = [], saved, None, [], None
        if committed:
            self.p.outbox.kick_later(p.session_id, committed[-1].seq, self.p.settings.unhurried_seconds)
        return begun

    async def _carried(self, p: DrivePass) -> list[Event]:
        """The events folded into the next checkpoint: the turn's start's too, unless it was written alone
        (then neither its events nor the messages it took are this checkpoint's)."""
        early, p.early = p.early, None
        if early is not None and await early.settle():
            p.carry = p.carry[len(early.events):]
            p.taking = [m for m in p.taking if m not in early.take]
        return p.carry

    async def _let_go(self, p: DrivePass) -> None:
        """What a pass folded into a checkpoint that will not come: the early start is stopped (fenced: it
        could write nothing once the lease is gone), a call's result is written (never lost)."""
        early, p.early = p.early, None
        if early is not None:
            await early.stop()
        finished, p.finished = p.finished, {}
        try:
            await self.exec.record_results(p.session_id, finished)
        except Exception:  # noqa: BLE001 - the marker then says "started": reported as interrupted
            log.exception("could not record a call's result in %s", p.session_id)

    async def _commit(
        self, p: DrivePass, state: SessionState, events: list[Event], requests: list[RequestRecord] = (),  # type: ignore[assignment]
        *, unless_cancelled: str | None = None, then_step: bool = False, no_hurry: bool = False, last: bool = False,
    ) -> None:
        """Checkpoint; ``then_step``: another step follows at once, so read its snapshot in the same round trip.
        ``no_hurry``: more work follows (a model call, a tool run), so its events may wait up to
        ``RuntimeSettings.unhurried_seconds`` to go out with the next checkpoint's in one delivery pass. What people wait
        on (a card, an answer, a settled card) is at the end of a drive, or a settle, and goes out at once.
        ``last``: nothing follows under this lease: it goes with the checkpoint (if written) in its round trip.
        What earlier checkpoints folded into this one (``DrivePass.carry``, ``.finished``) goes with it."""
        events = [*await self._carried(p), *events]
        unless_cancelled = unless_cancelled or p.carry_unless
        finished, p.finished = p.finished, {}
        saved = state.model_dump_json()  # serialized once, as written
        # events that go out at once: this checkpoint's round trip begins their delivery pass too
        opening = self.p.outbox.open_pass(p.session_id, state.ref.team_id) if events and not no_hurry else None
        try:
            committed, read, _ = await self.p.store.commit(CommitCommand(
                p.session_id, p.token, saved, events, requests, ref=state.ref, take=p.taking,
                unless_cancelled=unless_cancelled, read=then_step or last, release=last, opening=opening,
                finished=finished))
        finally:
            if opening is not None:
                opening.opened()  # the pass goes on: from what it read, else (not begun) with a begin of its own
        p.taking, p.committed, p.carry, p.carry_unless = [], saved, [], None
        if last:
            p.released, p.after = True, read
        else:
            p.read = read
        if committed and no_hurry:
            self.p.outbox.kick_later(p.session_id, committed[-1].seq, self.p.settings.unhurried_seconds)
        elif committed and opening is None:
            self.p.outbox.kick(p.session_id, committed[-1].seq)

    end_turn = _end_turn
    finish_cancelled = _finish_cancelled
    park_on_limit = _park_on_limit
    resume_limit = _resume_limit
    commit_and_begin = _commit_and_begin
    carried = _carried
    records_of = _records


# --- helpers -------------------------------------------------------------------------------------


def _live_text(live: LiveText | None, state: SessionState, step: int) -> TextCallback | None:
    """The model's text so far, handed to the frontend as it streams (not durable: see bot.ports.LiveText)."""
    if live is None or state.turn is None or state.agent:  # a sub-agent's words reach people through its parent
        return None
    return StepText(live, state.ref, state.turn.turn_id, step, state.turn.owner)  # a retry starts it over


def _same(message: dict[str, Any], owner: Principal | None) -> bool:
    if owner is None:
        return True
    raw = message.get("principal")
    return raw is not None and owner.same_as(Principal.model_validate(raw))
