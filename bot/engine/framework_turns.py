"""Turns of a framework's agent (DESIGN §14): the engine drives a backend (``bot.backends``) instead of its
own model step, and keeps everything else its own.

A run goes on under the session's turn lease, in one task this process can stop. Each framework step's
checkpoint rides the turn's next write, fenced and refused once a stop is asked: the start of the step's
first tool call (``CommitCommand.begin``), or the pause, or the end. So a step is stored before any of its
tools runs, in a round trip the turn makes anyway (what LangGraph calls durability "exit", plus a write
before each step's tools). Every tool execution goes through an execution marker keyed by the framework's
call id, and a pause becomes requests of the one protocol (cards, response policies, settle, audit). Once every request of the pause has settled, the
lease holder, and only it, resumes the run with the answers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.backends import (
    AgentBackend,
    Answer,
    Approve,
    Finished,
    GateVerdict,
    Outcome,
    Parked,
    PendingCall,
    Reject,
    Stopped,
    fingerprint,
)
from bot.engine.early_start import EarlyStart
from bot.engine.execute import INTERRUPTED, STOPPED, jsonable, make_record, observe_tool_run, session_info
from bot.engine.framework_answers import answer_of, policy_refusals, told_at_once
from bot.engine.installed import NotInstalled
from bot.engine.native_loop import LIVE, resumable_on_registry, waits_on
from bot.engine.passes import DrivePass, TurnLoop
from bot.engine.turn_commands import CallMark, RequestsRead, SessionRead
from bot.models.words import logged_failure_words
from bot.principals import Principal
from bot.protocol import (
    APPROVE,
    CANCEL,
    ActionRef,
    ActionResult,
    ActionStarted,
    CancelRequested,
    Event,
    Grant,
    InputOption,
    InputRequest,
    InputRequested,
    LeaseLost,
    MessageCompleted,
    MessageTaken,
    RequestRecord,
    SessionSnapshot,
    TurnCompleted,
    TurnWaiting,
)
from bot.session import SessionInfo, new_request_id
from bot.state import CallState, FrameworkRun, SessionState
from bot.tools import AskParked, AskRequest, Tool

log = logging.getLogger(__name__)

CHANGED = ("This turn paused under a different version of the agent (its tools changed since), so it was "
           "not resumed into different code. Ask again to start over.")


class EngineTurn:
    """The engine's side of one framework run (``bot.backends.BackendTurn``)."""

    def __init__(self, driver: TurnLoop, work: DrivePass, state: SessionState, grants: set[str],
                 approved: set[str] = frozenset(), *, inbox: list[dict[str, Any]] | None = None):  # type: ignore[assignment]
        assert state.turn is not None
        self._driver, self._work, self._state, self._grants = driver, work, state, grants
        self.session_id = work.session_id
        self.turn_id = state.turn.turn_id
        self.owner = state.turn.owner
        self.owner_id = self.owner.principal_id if self.owner else None
        self.workspace = driver.p.workspace
        self.history_window, self.history_limit = driver.p.settings.history_window, driver.p.settings.history_limit
        self._session: SessionInfo | None = None
        # the queue as the pass read it: the run's first look at it, unless a tool started since (then it reads)
        self._inbox = inbox
        self._taken: set[str] = set()  # ids of the messages this run took
        self._stopped = False
        self._on_stop: list[Callable[[], None]] = []
        self._events: list[Event] = []  # tool events, written with the next checkpoint
        self._started: set[str] = set()
        self._standing: dict[str, Grant] = {}  # call id → the standing approval that let it run without asking
        self._finished: set[str] = set()
        self._words: list[str] = []
        self._saved: str | Callable[[], str] | None = None  # the last step's checkpoint, for the next write
        self._begin = asyncio.Lock()  # a step's parallel calls: the first one's start writes the checkpoint
        self.calls_running = 0  # fenced calls running now: a stop asked on another replica is polled for then
        self.approved = set(approved)  # call ids people approved in this resume: not gated again
        self.gated: set[str] = set()  # call ids the backend asked our gate about in this run

    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        self._stopped = True
        listeners, self._on_stop = self._on_stop, []
        for listener in listeners:  # before the run's task is cancelled: a tool's finally sees ctx.stopped
            listener()

    def on_stop(self, listener: Callable[[], None]) -> None:
        self._on_stop.append(listener)

    @property
    def session(self) -> SessionInfo:
        """The session as the built-in loop's tools see it (made when a tool first needs it)."""
        if self._session is None:
            self._session = session_info(self._state)
        return self._session

    async def take_messages(self) -> list[str]:
        """The owner's queued messages this run has not taken yet (others wait for the turn's end, as in the
        built-in loop). They join the pass's ``taking``: they leave the queue with the turn's next write, in
        the script that stores the state holding them, so a worker killed before it leaves them queued for
        the next (nothing lost) and nothing is taken twice. The first look uses the queue as the pass read it,
        unless a tool started since; later ones read it (one round trip)."""
        # the workspace still has the app (as the built-in loop checks before each step): NotInstalled ends the
        # run as it is, and the turn waits for a reinstall
        await self._driver.p.installed.require(self._state.ref.team_id)
        inbox, self._inbox = self._inbox, None
        if inbox is None:
            inbox = (await self._driver.p.store.read(SessionRead(self.session_id, known_state=self._work.committed))).inbox
        taking = self._work.taking
        held = self._taken | {m.get("id") for m in taking}
        new = [m for m in inbox if m.get("id") not in held and _from_owner(m, self.owner)]
        taking.extend(new)
        self._taken.update(m.get("id") for m in new)
        return [str(m.get("text") or "") for m in new]

    async def gate(self, call_id: str, tool_name: str, arguments: Mapping[str, Any]) -> GateVerdict:
        """Our request policy for the call (the tool's proxy carries it: ``bot.backends.proxies``)."""
        self.gated.add(call_id)
        if call_id in self.approved:
            return GateVerdict(action="run")
        call = CallState(call_id=call_id, tool_name=tool_name, arguments=json.dumps(dict(arguments), default=str))
        turn = self._state.turn
        assert turn is not None
        # a sub-agent's session is offered its own tools only; the owner's "don't ask me again" counts too, and
        # a call it lets run says so in its thread (its start event carries whose approval it was)
        await self._driver.exec.apply_request_policies(self._state, self._grants, [call])
        if call.standing is not None:
            self._standing[call_id] = call.standing
        if call.status == "awaiting":
            return GateVerdict(action="ask")
        if call.status == "done":  # refused (or its arguments failed): its task ends in error, as the built-in loop's
            result = call.result
            if result is not None:
                self._finished.add(call_id)
                self._events.append(ActionResult(session_id=self.session_id, turn_id=self.turn_id, call_id=call_id,
                                                 tool_name=tool_name, status=result.status, output=result.output,
                                                 error=result.error))
            await self._store_refusal()
            return GateVerdict(action="refuse", reason=result.content() if result else "Not allowed.")
        return GateVerdict(action="run")

    def model_used(self, tokens: int) -> None:
        turn = self._state.turn
        assert turn is not None and turn.run is not None
        turn.run.counts_steps = True
        turn.steps += 1
        turn.tokens += tokens

    @property
    def over_budget(self) -> bool:
        turn = self._state.turn
        assert turn is not None
        return turn.steps >= turn.step_budget or turn.tokens >= turn.token_budget

    async def fence(self, call_id: str, tool_name: str, run: Callable[[], Awaitable[Any]], *,
                    idempotent: bool = False, arguments: Mapping[str, Any] | None = None, answered: int = 0) -> Any:
        """At most once per call id and answered questions (the marker is fenced by the lease: a worker that lost
        it gets LeaseLost)."""
        store = self._driver.p.store
        marker = f"{self.turn_id}:fw:{call_id}" + (f"#{answered}" if answered else "")
        async with self._begin:
            fresh, recorded = await self._start_call(marker)
        if not fresh:
            if recorded and recorded != "started":
                kept = json.loads(recorded)
                if "asked" in kept and not answered:  # its first run asked, and the pause was never stored
                    self.tool_started(call_id, tool_name, arguments or {})
                return _replayed(kept)
            if not idempotent:  # what the model reads, in the shape of any failed call's result
                self._result(call_id, tool_name, "failed", None, INTERRUPTED)
                return {"status": "failed", "error": INTERRUPTED}
        if not answered:  # a run after an answer goes on with the call people saw start
            self.tool_started(call_id, tool_name, arguments or {})
            await self._flush_later()  # shown if the tool is slow
        self.calls_running += 1
        started = time.perf_counter()
        try:
            output = await run()
        except AskParked as parked:  # it asked (not a death mid-run): the question is its marker's record
            observe_tool_run(tool_name, "asked", time.perf_counter() - started)
            asked = json.dumps({"asked": parked.ask.model_dump(mode="json")})
            await store.mark_call(CallMark(self.session_id, marker, result_json=asked))
            raise
        except asyncio.CancelledError:
            observe_tool_run(tool_name, "rejected", time.perf_counter() - started)  # stopped, as the built-in loop counts it
            if self._stopped:  # our stop: recorded like any result (a successor never runs it), its task says so
                stopped = {"code": "TURN_CANCELLED", "message": STOPPED}
                self._finished.add(call_id)
                self._events.append(ActionResult(session_id=self.session_id, turn_id=self.turn_id, call_id=call_id,
                                                 tool_name=tool_name, status="rejected", output=stopped))
                await store.mark_call(CallMark(self.session_id, marker, result_json=json.dumps({"error": STOPPED})))
            raise  # a shutdown: the marker says "started", reported as interrupted if replayed
        except Exception as exc:
            observe_tool_run(tool_name, "failed", time.perf_counter() - started)
            error = f"{type(exc).__name__}: {exc}"
            await store.mark_call(CallMark(self.session_id, marker, result_json=json.dumps({"error": error})))
            self._result(call_id, tool_name, "failed", None, error)
            await self._flush_later()
            raise
        finally:
            self.calls_running -= 1
        observe_tool_run(tool_name, "completed", time.perf_counter() - started)
        kept = jsonable(output)
        await store.mark_call(CallMark(self.session_id, marker, result_json=json.dumps({"output": kept}, default=str)))
        self.tool_finished(call_id, tool_name, kept)
        await self._flush_later()
        return output

    async def _store_refusal(self) -> None:
        """A refused call's task shows while the run goes on, as the built-in loop's step results do: the step's
        checkpoint, if one waits, is written now with it (the model is called next: no other write comes
        until then); else it goes with the next write or alone a moment later."""
        async with self._begin:
            saved, self._saved = self._saved, None
            if saved is None:
                await self._flush_later()
                return
            turn = self._state.turn
            assert turn is not None and turn.run is not None
            turn.run.checkpointed(saved() if callable(saved) else saved)
            await self._driver.commit_and_begin(self._work, self._state, self.take_events(), [])

    async def _flush_later(self) -> None:
        """A call's events go with the turn's next write, or alone once ``unhurried_seconds`` pass without one:
        a slow tool shows its task, and a slow model call after it the task done (the built-in loop writes each
        step's start and results). The state it writes is the one stored with the call's start: messages the
        run took since stay queued until a write stores them."""
        p = self._work
        if p.early is not None and p.early.task.done():  # the last one was written: its events are out
            await self._driver.carried(p)
        if p.early is not None or p.carry or not self._events or self._saved is not None:
            return  # something else goes first, or a checkpoint waits: the next write takes them along
        events = self.take_events()
        p.carry.extend(events)
        p.early = EarlyStart(self._driver.p, p.session_id, p.token, self._state, events, [], as_it_is_then=True)

    async def _start_call(self, marker: str) -> tuple[bool, str | None]:
        """The call's execution marker, started with the step's checkpoint when one waits (one script)."""
        saved, self._saved = self._saved, None
        if saved is None:
            return await self._driver.p.store.mark_call(CallMark(self.session_id, marker, self._work.token))
        turn = self._state.turn
        assert turn is not None and turn.run is not None
        turn.run.checkpointed(saved() if callable(saved) else saved)
        begun = await self._driver.commit_and_begin(self._work, self._state, self.take_events(), [marker])
        return begun[marker]

    async def checkpoint(self, saved: str | Callable[[], str]) -> None:
        """Kept for the turn's next write (a call's start, the pause, the end); a callable is serialized then,
        and only if that write needs it (a pause or an end carries the outcome's state instead)."""
        self._saved = saved

    def text(self, delta: str) -> None:
        live, turn = self._driver.p.live, self._state.turn
        if live is None or turn is None or not delta or self._state.agent:  # a sub-agent speaks through its parent
            return
        self._words.append(delta)
        try:
            live.text_so_far(self._state.ref, self.turn_id, turn.steps + 1, "".join(self._words), turn.owner)
        except Exception:  # noqa: BLE001 - showing words early is a courtesy; the answer is committed anyway
            log.exception("live text failed in %s", self.session_id)

    def tool_started(self, call_id: str, tool_name: str, arguments: Mapping[str, Any]) -> None:
        self._inbox = None  # the queue as the pass read it is old news by the time the tool ends
        if call_id in self._started:
            return
        self._started.add(call_id)
        self._events.append(ActionStarted(session_id=self.session_id, turn_id=self.turn_id, call_id=call_id,
                                          tool_name=tool_name, input=dict(arguments) or None,
                                          standing=self._standing.get(call_id)))

    def tool_finished(self, call_id: str, tool_name: str, output: Any) -> None:
        self._result(call_id, tool_name, "completed", output, None)

    def _result(self, call_id: str, tool_name: str, status: str, output: Any, error: str | None) -> None:
        if call_id in self._finished:  # reported by the fence already
            return
        self._finished.add(call_id)
        self._events.append(ActionResult(session_id=self.session_id, turn_id=self.turn_id, call_id=call_id,
                                         tool_name=tool_name, status=status, output=jsonable(output), error=error))

    def take_events(self) -> list[Event]:
        events, self._events = self._events, []
        return events


def _from_owner(message: dict[str, Any], owner: Principal | None) -> bool:
    if owner is None:  # a turn of nobody in particular: any message steers it
        return True
    raw = message.get("principal")
    return raw is not None and owner.same_as(Principal.model_validate(raw))


def _replayed(recorded: dict[str, Any]) -> Any:
    if "asked" in recorded:  # it asked when it ran: the same question again
        raise AskParked(AskRequest.model_validate(recorded["asked"]))
    if "error" in recorded:
        raise RuntimeError(recorded["error"])  # it failed when it ran: the framework hears the same
    return recorded.get("output")


class FrameworkTurns:
    """Drives the turns of the framework agent this process runs (the main agent's sessions)."""

    def __init__(self, driver: TurnLoop, backend: AgentBackend):
        self.driver, self.backend = driver, backend
        self._live = bool(getattr(backend, "live_tools", False))  # its tools: the registry as it is now (native_loop)
        tools = backend.tools()
        self._fingerprint = fingerprint(tools)
        self._formable = {t.name for t in tools if t.args_model is not None}  # an edit form could be shown
        self._running: dict[str, tuple[str, EngineTurn, asyncio.Task[Any]]] = {}
        # the backends of the sub-agents the agent brings (``native(..., agents=[...])``): each drives the
        # sessions of its sub-agent; a sub-agent of BOT_TOOLS stays the built-in loop's
        self._sub_agents: dict[str, tuple[AgentBackend, str]] = {}
        sub_agent = getattr(backend, "sub_agent", None)
        for agent in driver.p.tools.agents() if sub_agent is not None else []:
            if (child := sub_agent(agent.name)) is not None:
                self._sub_agents[agent.name] = (child, fingerprint(child.tools()))
                self._formable |= {t.name for t in child.tools() if t.args_model is not None}

    def drives(self, state: SessionState) -> bool:
        """Whether the session's turns are this agent's: the main agent's, or a sub-agent's it brought."""
        return not state.agent or state.agent in self._sub_agents

    def keep_stopped(self, state: SessionState) -> None:
        """A turn stopped while its run waited on people: the next turn follows its conversation where the
        backend can carry on from a paused run (``follows_stopped_runs``), else from the turn before it."""
        turn = state.turn
        if turn is None or turn.run is None or turn.run.saved is None or turn.status != "parked" \
                or not self.drives(state):
            return  # (a run stopped while it ran left its conversation with its outcome: _ended)
        if getattr(self._agent_of(state)[0], "follows_stopped_runs", False):
            state.agent_memory = turn.run.saved

    def _agent_of(self, state: SessionState) -> tuple[AgentBackend, str]:
        """The backend that drives the session, and its tools' fingerprint."""
        if state.agent:
            return self._sub_agents[state.agent]
        return self.backend, LIVE if self._live else self._fingerprint

    def runs(self, session_id: str) -> bool:
        """A tool of the session's run is running here: the lease keeper then polls for a stop every second
        (a stop asked in this process reaches the run at once; one asked elsewhere while the model thinks is
        seen by the run's next write, refused then, as for the built-in loop)."""
        running = self._running.get(session_id)
        return running is not None and running[1].calls_running > 0

    def stop_running(self, session_id: str, turn_id: str) -> None:
        """A stop seen by the lease renewal: the run is told and its task cancelled (idempotent)."""
        running = self._running.get(session_id)
        if running is not None and running[0] == turn_id and not running[1].stopped:
            log.info("turn %s stopped: stopping its framework run", turn_id)
            running[1].stop()
            running[2].cancel()

    async def step(self, p: DrivePass, state: SessionState, snap: SessionSnapshot,
                   steer: dict[str, Any] | None) -> bool:
        """One step of a framework turn; False when nothing more can be done now (parked or ended)."""
        turn = state.turn
        assert turn is not None
        backend, tools_fingerprint = self._agent_of(state)
        if turn.run is None:
            turn.run = FrameworkRun(framework=backend.framework, version=backend.version,
                                    fingerprint=tools_fingerprint)
            return await self._start(p, state, snap)
        run = turn.run
        if turn.limit_request_id:  # paused on its budget: continue resumes it below, stop ends the turn
            return await self.driver.resume_limit(p, state, snap.requests)
        if run.request_ids:
            answers = await self._answers(p, state, snap, steer)
            if answers is None:
                return False  # still waiting on people
            answers = {**{cid: Reject(message=why) for cid, why in run.refused.items()}, **answers}
        else:
            answers = {}
        if tools_fingerprint == LIVE and (run.framework, run.fingerprint) == (backend.framework, LIVE):
            if not await resumable_on_registry(self.driver, p, state, run):  # held only to the tools it waits on
                return False
        elif (run.framework, run.fingerprint) != (backend.framework, tools_fingerprint):
            log.warning("session %s: turn %s paused under %s %s (tools %s), this process runs %s %s (tools %s)",
                        p.session_id, turn.turn_id, run.framework, run.version, run.fingerprint,
                        backend.framework, backend.version, tools_fingerprint)
            await self.driver.fail_turn(p, state, CHANGED)
            return False
        if run.saved is None:  # killed before its first checkpoint: it starts over (no tool ran outside one)
            return await self._start(p, state, snap)
        saved = run.saved
        return await self._go(p, state, snap, lambda t: backend.resume(t, saved, answers),
                              approved={cid for cid, a in answers.items() if isinstance(a, Approve)})

    async def _start(self, p: DrivePass, state: SessionState, snap: SessionSnapshot) -> bool:
        """The run from the person's message (the history's last, put there by the turn's start)."""
        text = state.history[-1]["content"] if state.history else ""
        backend, _ = self._agent_of(state)
        return await self._go(p, state, snap, lambda t: backend.start(t, text, state.agent_memory))

    async def _answers(self, p: DrivePass, state: SessionState, snap: SessionSnapshot,
                       steer: dict[str, Any] | None) -> dict[str, Answer] | None:
        turn = state.turn
        assert turn is not None and turn.run is not None
        run = turn.run
        records = await self.driver.records_of(run.request_ids, snap.requests)
        if steer is not None and any(r.status == "open" for r in records.values()):
            author = Principal.model_validate(steer["principal"]) if steer.get("principal") else None
            for record in records.values():
                if record.status == "open":
                    await self.driver.settler.resolve_unanswered(record, "ignored", ended_by="message", by=author)
            records = {r.request_id: r for r in await self.driver.p.store.requests(RequestsRead(run.request_ids))}
        if any(r.status == "open" for r in records.values()):
            return None
        turn.status = "running"  # its requests stay the state's until a checkpoint holds their answers (run.checkpointed)
        tools = self.driver.p.tools
        return {r.request.action.call_id: answer_of(r, tools.get(r.request.action.tool_name))
                for r in records.values() if r.request.action}

    async def _go(self, p: DrivePass, state: SessionState, snap: SessionSnapshot,
                  call: Callable[[EngineTurn], Awaitable[Outcome]], *, approved: set[str] = frozenset()) -> bool:  # type: ignore[assignment]
        turn = state.turn
        assert turn is not None and turn.run is not None
        if p.carry and p.early is None:  # the turn's start is written alone if the first step is slow to come
            p.early = EarlyStart(self.driver.p, p.session_id, p.token, state, p.carry, p.taking)
        engine_turn = EngineTurn(self.driver, p, state, snap.grants, approved, inbox=snap.inbox)
        while (outcome := await self._run(p, state, engine_turn, call)) is not None:
            turn.run.refused = {}  # (only the pause it parks on now carries refusals)
            if (refused := await policy_refusals(engine_turn, outcome)) and isinstance(outcome, Parked):
                if waiting := [c for c in outcome.pending if c.call_id not in refused]:  # told with people's answers
                    turn.run.refused = {cid: r.message for cid, r in refused.items()}
                else:  # or at once, a step like any run (a model asking again and again ends on the budget)
                    if not turn.run.counts_steps:
                        turn.steps += 1
                    if not engine_turn.over_budget:
                        call = told_at_once(self._agent_of(state)[0], outcome.saved, refused)
                        continue
                outcome = Parked(pending=waiting, saved=outcome.saved)  # none waiting: the budget's pause
            return await self._ended(p, state, engine_turn, outcome)
        return False

    async def _run(self, p: DrivePass, state: SessionState, engine_turn: EngineTurn,
                   call: Callable[[EngineTurn], Awaitable[Outcome]]) -> Outcome | None:
        """The backend's run to its outcome (None: it failed, and the turn ended saying so)."""
        task = asyncio.ensure_future(call(engine_turn))
        self._running[p.session_id] = (engine_turn.turn_id, engine_turn, task)
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not engine_turn.stopped or (current is not None and current.cancelling()):
                raise
            return Stopped()
        except (CancelRequested, LeaseLost, MessageTaken, NotInstalled):
            raise  # a stop asked, the lease lost, a message taken first, the app uninstalled: the driver's loop's
        except Exception as exc:  # noqa: BLE001 - a backend's own failure ends the turn visibly
            await self.driver.fail_turn(p, state, logged_failure_words(exc, p.session_id), engine_turn.take_events())
            return None
        finally:
            self._running.pop(p.session_id, None)

    async def _ended(self, p: DrivePass, state: SessionState, engine_turn: EngineTurn, outcome: Outcome) -> bool:
        turn = state.turn
        assert turn is not None and turn.run is not None
        if not turn.run.counts_steps:  # a backend that reports no model calls: each run is a step
            turn.steps += 1
        events = engine_turn.take_events()
        if isinstance(outcome, Finished):
            state.agent_memory = outcome.saved
            if state.ref.parent and outcome.text:  # a sub-agent's answer: the relay reads it from the history
                state.history.append({"role": "assistant", "content": outcome.text})
            if outcome.text:
                events.append(MessageCompleted(session_id=p.session_id, turn_id=turn.turn_id, text=outcome.text,
                                               step=turn.steps))
            await self.driver.end_turn(p, state, TurnCompleted(session_id=p.session_id, turn_id=turn.turn_id),
                                       events, unless_cancelled=turn.turn_id, last=True)
            return False
        if isinstance(outcome, Parked) and not outcome.pending:  # its budget is used: people say whether to go on
            turn.run.checkpointed(outcome.saved)
            await self.driver.park_on_limit(p, state, events)
            return False
        if isinstance(outcome, Parked):
            await self._park(p, state, outcome, events)
            return False
        if isinstance(outcome, Stopped):
            if outcome.saved is not None:
                state.agent_memory = outcome.saved
            await self.driver.finish_cancelled(p, state, events)
            return True
        if outcome.saved is not None:
            state.agent_memory = outcome.saved
        await self.driver.fail_turn(p, state, outcome.reason, events)
        return False

    async def _park(self, p: DrivePass, state: SessionState, outcome: Parked, events: list[Event]) -> None:
        turn = state.turn
        assert turn is not None and turn.run is not None
        turn.run.saved = outcome.saved
        turn.run.called = waits_on(self.driver.p.tools, outcome.pending) if self._live else {}
        records = [self._request(state, pending) for pending in outcome.pending]
        batch = [r.request_id for r in records]
        for record in records:
            record.batch = batch
        # who may answer, and the tools' previews (both bounded, side by side), as the built-in loop's cards have
        calls = [CallState(call_id=c.call_id, tool_name=c.tool_name, arguments=json.dumps(c.arguments, default=str),
                           principal=turn.owner) for c in outcome.pending if c.kind == "approval"]
        await asyncio.gather(self.driver.exec.describe_responders(state, records),
                             self.driver.exec.preview_requests(state, records, calls))
        turn.run.request_ids = batch
        turn.status = "parked"
        events = [*events,
                  InputRequested(session_id=p.session_id, turn_id=turn.turn_id, requests=[r.request for r in records]),
                  TurnWaiting(session_id=p.session_id, turn_id=turn.turn_id, on="input")]
        await self.driver.park(p, state, events, records)

    def _request(self, state: SessionState, pending: PendingCall) -> RequestRecord:
        turn = state.turn
        assert turn is not None
        if pending.kind == "approval" and self.driver.p.tools.get(pending.tool_name) is not None:
            call = CallState(call_id=pending.call_id, tool_name=pending.tool_name,
                             arguments=json.dumps(pending.arguments, default=str))
            record = self.driver.exec.approval_request(state, call)
            req = record.request
            if req.kind != "tool-approval":  # an external result or a delegation: its own card, as it is
                return record
            # the card offers only what the framework takes
            if "edit" not in pending.decisions:
                req.editable = False
                # where an edit form could be shown, the card says why there is none
                req.fixed_input = not self._live and pending.tool_name in self._formable and bool(pending.arguments)
            if "respond" in pending.decisions:  # people may answer in the tool's place
                req.allow_free_text = True
            if not {"reject", "respond"} & pending.decisions:  # nothing a cancel could be told as
                req.options = [o for o in req.options if o.id != CANCEL]
            if not {"approve", "edit"} & pending.decisions:  # nothing lets the call run
                req.options = [o for o in req.options if o.id != APPROVE]
                req.editable = False
            if (words := _framework_words(pending.prompt, req.prompt, self.driver.p.tools.get(pending.tool_name))):
                req.prompt = words
            return record
        options = [InputOption(id=f"o{i}", label=o) if isinstance(o, str) else o.model_copy(update={"id": f"o{i}"})
                   for i, o in enumerate(pending.options)]  # the answer goes back by label
        req = InputRequest(
            request_id=new_request_id(state.ref.session_id),
            kind="user-input" if pending.form else "question",  # a tool's ctx.form: a form to fill in
            prompt=pending.prompt or f"{pending.tool_name} asks for an answer.",
            action=ActionRef(call_id=pending.call_id, tool_name=pending.tool_name),
            options=options,
            display="form" if pending.form else "select" if options else "text",
            allow_free_text=not pending.form and (pending.allow_free_text or not options),
            style=pending.style, form=pending.form,
            principal=turn.owner,
            session_id=state.ref.session_id,
            turn_id=turn.turn_id,
        )
        if pending.expires_after_s:  # unanswered by then, the timer ends it "expired"
            req.created_at = datetime.fromtimestamp(self.driver.p.settings.clock(), UTC)
            req.expires_at = req.created_at + timedelta(seconds=pending.expires_after_s)
        return make_record(state, req)


def _framework_words(asked: str | None, ours: str, tool: Tool | None) -> str | None:
    """The card's line from the framework's own description of the request (the middleware's
    ``description``, Agent Inbox's), or None to keep ours: when it says nothing else (the tool's own
    description again, or the words we already show), never the same words twice."""
    words = (asked or "").strip()
    if not words:
        return None
    shown = {_spaced(ours)}
    if tool is not None and tool.description.strip():
        shown |= {_spaced(tool.description), _spaced(tool.description.strip().splitlines()[0])}
    return None if _spaced(words) in shown else words


def _spaced(text: str) -> str:
    return " ".join(text.split())
