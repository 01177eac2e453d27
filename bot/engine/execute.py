"""Deciding and running a step's tool calls: request policies, approval requests, execution (DESIGN §7).

The exactly-once rules live here. A call runs under an execution marker keyed by the step's
session-unique id, the call id and how many of its ``ctx.ask()`` questions were answered. Starting
a call is fenced by the turn lease's token: a worker that lost the lease can start nothing. A marker
found "started" on recovery means the call was interrupted: it is reported, not run again, unless
the tool declares itself idempotent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.agents import DELEGATE, child_session_id
from bot.approval import (
    AnswerersContext,
    RequestView,
    describe_responders,
    evaluate_request_policy,
    grant_offers,
    records_grant,
)
from bot.engine.parts import Parts, TurnStore
from bot.engine.turn_commands import CallMark
from bot.ops import logs, tracing
from bot.ops.metrics import TOOL_RUNS, TOOL_SECONDS
from bot.protocol import (
    CANCEL,
    ActionRef,
    ActionStarted,
    Grant,
    InputOption,
    InputRequest,
    RequestRecord,
    approval_options,
)
from bot.session import SessionAuth, SessionInfo, new_request_id
from bot.state import CallResult, CallState, SessionState, StepState
from bot.tools import AskParked, Tool, ToolContext, as_dict

log = logging.getLogger(__name__)

DENIED_MESSAGE = "Tool execution was denied."
INTERRUPTED = ("The call was interrupted before it finished (the worker stopped). It was not run again, "
               "because it may have had effects; check before retrying.")


class ToolUnavailable(RuntimeError):
    """This process has no tool of that name (a rolling deploy, another BOT_TOOLS): another replica may."""


def session_info(state: SessionState) -> SessionInfo:
    turn = state.turn
    return SessionInfo(
        id=state.ref.session_id,
        auth=SessionAuth(current=turn.owner if turn else None, initiator=state.initiator),
        turn=turn.number if turn else state.turns,
        team_id=state.ref.team_id,
        enterprise_id=state.ref.enterprise_id,
        automated=bool(turn and turn.automated),
    )


def _what_it_does(tool: Tool) -> str:
    """The card's line under the tool's name: the first line of its description (what it does)."""
    first = tool.description.strip().splitlines()[0].strip() if tool.description.strip() else ""
    return first or f"Run {tool.name}?"


def marker_of(turn_id: str, step: StepState, call: CallState) -> str:
    """The call's identity for exactly-once: unique for the session's life (endpoints reuse call ids)."""
    return f"{turn_id}:{step.step_id or step.index}:{call.call_id}:{len(call.asks)}"


STOPPED = "The turn was stopped while this call ran: the tool was told (cancelled) and did not finish."


class Executor:
    def __init__(self, parts: Parts):
        self.p = parts
        # the calls running in this process, per session: (turn id, its context, the tool's task to cancel;
        # None for a sync tool: its thread cannot be stopped, so it is only told and its result kept)
        self._running: dict[str, list[tuple[str, ToolContext, asyncio.Task[Any] | None]]] = {}

    # --- a stopped turn's running tools -------------------------------------------------------------

    def runs_tools(self, session_id: str) -> bool:
        """Is a tool of this session running here? (Its lease renewal then looks for a stop every second.)"""
        return bool(self._running.get(session_id))

    def stop_running(self, session_id: str, turn_id: str) -> None:
        """Tell the tools running here for this turn that it was stopped: ``ctx.stopped`` is set and an async
        tool's task cancelled. Idempotent: a stop seen again (each renewal reads it) tells nobody twice."""
        for running_turn, ctx, task in self._running.get(session_id, []):
            if running_turn == turn_id and not ctx.stopped:
                log.info("turn %s stopped: telling its running call %s", turn_id, ctx.call_id)
                ctx.stop()
                if task is not None:
                    task.cancel()

    # --- request policies ------------------------------------------------------------------------

    async def apply_request_policies(self, state: SessionState, grants: set[str],
                                     calls: list[CallState] | None = None) -> None:
        """Decide each call by its tool's request policy, with the conversation's ``grants`` and the ones the
        turn's owner holds; a call a standing approval lets run notes whose it was. ``calls``: the step's,
        unless given (a framework's call, one at a time)."""
        turn = state.turn
        assert turn is not None
        calls = calls if calls is not None else turn.step.calls if turn.step is not None else []
        info = session_info(state)
        held = await self._requester_grants(state, calls)
        everyone = grants | set(held)
        await asyncio.gather(*(self.decide(call, info, everyone, turn.owner, state.agent) for call in calls))
        await asyncio.gather(*(self._standing(state, call, grants, held) for call in calls))

    async def _standing(self, state: SessionState, call: CallState, conversation: set[str],
                        held: dict[str, Grant]) -> None:
        """Note on a call that runs without asking which standing approval let it (its thread is told
        whose it is and where to revoke it): a call its tool would otherwise ask about, whose approval
        key is granted here (the record is read only then) or held by the requester."""
        tool = self.p.tools.get(call.tool_name)
        if call.status != "ready" or tool is None or not (records_grant(tool.approval) or grant_offers(tool.approval)):
            return
        try:
            key = tool.approval_key(tool.parse(call.arguments))
        except ValueError:
            return
        if key in conversation:
            call.standing = await self.p.store.grants.in_conversation(state.ref.session_id, key) or Grant(
                scope="conversation", approval_key=key, tool_name=tool.name, session_id=state.ref.session_id,
                request_id="")  # granted before grants were recorded: whose it was is not known
        elif key in held:
            call.standing = held[key]

    async def _requester_grants(self, state: SessionState, calls: list[CallState]) -> dict[str, Grant]:
        """The approval keys the turn's owner holds "don't ask me again" grants for, among ``calls`` whose
        tools offer them (read only then: one command)."""
        turn = state.turn
        assert turn is not None
        if turn.owner is None:
            return {}
        keys = []
        for call in calls:
            tool = self.p.tools.get(call.tool_name)
            if tool is None or not any(o.scope == "requester" for o in grant_offers(tool.approval)):
                continue
            try:
                keys.append(tool.approval_key(tool.parse(call.arguments)))
            except ValueError:
                continue  # decide reports the bad arguments
        now = datetime.fromtimestamp(self.p.settings.clock(), UTC)
        return await self.p.store.grants.for_requester(state.ref.team_id, turn.owner, keys, now) if keys else {}

    async def decide(self, call: CallState, info: SessionInfo, grants: set[str], owner: Any,
                      agent: str | None = None) -> None:
        tool = self.p.tools.get(call.tool_name)
        if tool is None or not self.p.tools.offers(call.tool_name, agent):  # another agent's tools are not its own
            call.status, call.result = "done", CallResult(
                status="failed",
                error=f"unknown tool {call.tool_name!r}; available: {', '.join(self.p.tools.names(agent))}")
            return
        try:
            args = tool.parse(call.arguments)
            if tool.delegates and self.p.tools.agent(args.agent) is None:  # type: ignore[union-attr]
                known = ", ".join(a.name for a in self.p.tools.agents())
                raise ValueError(f"unknown sub-agent {args.agent!r}; available: {known}")  # type: ignore[union-attr]
        except ValueError as exc:
            call.status, call.result = "done", CallResult(status="failed", error=str(exc))
            return
        ctx = tool.approval_context(args, session=info, call_id=call.call_id, reviewer=self.p.reviewer,
                                    approved_tools=frozenset(grants), policies=self.p.policies)
        try:
            status = await evaluate_request_policy(tool.approval.request, ctx,
                                                   timeout=self.p.settings.request_policy_timeout)
        except Exception as exc:  # noqa: BLE001 - a broken or hung policy denies, never allows
            log.warning("request policy of %s failed (%r); denying", tool.name, exc)
            call.status, call.result = "done", CallResult(
                status="rejected", output=denied_output("The approval policy failed, so the call was denied."))
            return
        call.principal = owner
        if status.type == "denied":
            call.status, call.result = "done", CallResult(
                status="rejected", output=denied_output(status.reason or DENIED_MESSAGE))
        elif status.type == "user-approval" or tool.external or tool.delegates:
            call.status = "awaiting"  # an external call or a delegation always waits for its result
        else:
            call.status = "ready"

    # --- requests for people ---------------------------------------------------------------------

    def requests_for(self, state: SessionState) -> list[RequestRecord]:
        """Approval requests for calls awaiting a person, and questions for calls that asked."""
        turn = state.turn
        assert turn is not None and turn.step is not None
        records: list[RequestRecord] = []
        for call in turn.step.calls:
            if call.status == "awaiting" and call.request_id is None:
                records.append(self.approval_request(state, call))
            elif call.status == "asking" and call.ask_request_id is None and call.result is not None:
                records.append(self._question(state, call))
        batch = [r.request_id for r in records]
        for r in records:
            r.batch = batch
        return records

    async def describe_responders(self, state: SessionState, records: list[RequestRecord]) -> None:
        """Say on each new approval request who may settle it (its tool's response policy describes
        itself), so cards can name them instead of people finding out by being refused."""
        info = session_info(state)

        async def describe(record: RequestRecord) -> None:
            req = record.request
            tool = self.p.tools.get(req.action.tool_name) if req.action else None
            if req.kind not in ("tool-approval", "external-result") or tool is None or req.action is None:
                return
            view = RequestView(request_id=req.request_id, call_id=req.action.call_id, tool_name=tool.name,
                               tool_input=req.action.input, principal=req.principal)
            req.responders = await describe_responders(tool.approval.response,
                                                       AnswerersContext(request=view, session=info,
                                                                        policies=self.p.policies))

        await asyncio.gather(*(describe(r) for r in records))

    async def preview_requests(self, state: SessionState, records: list[RequestRecord],
                               calls: list[CallState] | None = None) -> None:
        """Put each new call card's preview on its request (``@tool(preview=…)``), all at once, each
        within its tool's bound. Done here, before the park is committed, so the preview is kept with the
        request in Redis: computed once, and every replica (after a restart too) renders the same text.
        ``calls``: the step's, unless given (a framework's pause)."""
        turn = state.turn
        assert turn is not None
        step = turn.step
        by_id = {c.call_id: c for c in (calls if calls is not None else step.calls if step is not None else [])}
        info = session_info(state)

        def key(call: CallState) -> str:
            return f"{marker_of(turn.turn_id, step, call) if step is not None else f'{turn.turn_id}:fw:{call.call_id}'}:preview"

        async def preview(record: RequestRecord) -> None:
            req = record.request
            if req.kind not in ("tool-approval", "external-result") or req.action is None:
                return
            tool, call = self.p.tools.get(req.action.tool_name), by_id.get(req.action.call_id)
            if tool is None or tool.preview_fn is None or call is None:
                return
            # the session's context, like the tool's own (its tenant is the session's, never the input's);
            # it cannot ask, and has no workspace to post to: a preview only reads
            ctx = ToolContext(session=info, principal=call.principal, call_id=call.call_id,
                              idempotency_key=key(call), can_ask=False)
            req.preview = await tool.preview(tool.parse(call.arguments), ctx)

        await asyncio.gather(*(preview(r) for r in records))

    def approval_request(self, state: SessionState, call: CallState) -> RequestRecord:
        turn = state.turn
        assert turn is not None
        tool = self.require(call.tool_name)
        args = tool.parse(call.arguments)
        if tool.external:
            return self._external_request(state, call, tool, args)
        if tool.delegates:
            return self._delegation_request(state, call, args)
        req = InputRequest(
            request_id=new_request_id(state.ref.session_id),
            kind="tool-approval",
            prompt=tool.approval_prompt(args) or _what_it_does(tool),
            action=ActionRef(call_id=call.call_id, tool_name=tool.name, input=as_dict(args), shown_as=tool.shown_as,
                             labels=tool.labels),
            options=approval_options(),
            display="confirmation",
            principal=turn.owner,
            session_id=state.ref.session_id,
            turn_id=turn.turn_id,
            dangerous=tool.dangerous,
            notify=tool.notify,
            editable=tool.editable,
            grants=grant_offers(tool.approval),
        )
        _set_deadlines(req, tool, self.p.settings.clock())
        call.request_id = req.request_id
        on_approve = records_grant(tool.approval)
        key = tool.approval_key(args) if on_approve or req.grants else None
        record = make_record(state, req, approval_key=key)
        record.grant_on_approve = on_approve
        return record

    def _external_request(self, state: SessionState, call: CallState, tool: Tool, args: Any) -> RequestRecord:
        """A call a person runs elsewhere: the card shows what to run and takes its result."""
        turn = state.turn
        assert turn is not None
        req = InputRequest(
            request_id=new_request_id(state.ref.session_id),
            kind="external-result",
            prompt=tool.approval_prompt(args) or _what_it_does(tool),
            action=ActionRef(call_id=call.call_id, tool_name=tool.name, input=as_dict(args), shown_as=tool.shown_as,
                             labels=tool.labels),
            options=[InputOption(id=CANCEL, label="Cancel")],
            display="form",
            form=tool.result_form,
            principal=turn.owner,
            session_id=state.ref.session_id,
            turn_id=turn.turn_id,
            dangerous=tool.dangerous,
            notify=tool.notify,
        )
        _set_deadlines(req, tool, self.p.settings.clock())
        call.request_id = req.request_id
        return make_record(state, req)

    def _delegation_request(self, state: SessionState, call: CallState, args: Any) -> RequestRecord:
        """A call to ``delegate``: the parent waits on this request while the sub-agent works in its own
        session (``bot.agents``); its answer is the sub-agent's, and Cancel stops the sub-agent."""
        turn = state.turn
        assert turn is not None
        # a framework's run has no step of ours: its call ids are the turn's own (as its execution markers are)
        step_id = (turn.step.step_id or str(turn.step.index)) if turn.step is not None else f"{turn.turn_id}:fw"
        req = InputRequest(
            request_id=new_request_id(state.ref.session_id),
            kind="delegation",
            prompt=f"Delegated to *{args.agent}*: {args.task}",
            action=ActionRef(call_id=call.call_id, tool_name=DELEGATE, input=as_dict(args)),
            options=[InputOption(id=CANCEL, label="Cancel")],
            display="confirmation",
            principal=turn.owner,
            session_id=state.ref.session_id,
            turn_id=turn.turn_id,
            agent=args.agent,
            child_session_id=child_session_id(state.ref.session_id, args.agent, step_id, call.call_id),
        )
        req.created_at = datetime.fromtimestamp(self.p.settings.clock(), UTC)
        agent = self.p.tools.agent(args.agent)
        if agent is not None and agent.expires_after is not None:  # a deadline ends it like Cancel (the relay)
            req.expires_at = req.created_at + agent.expires_after
        call.request_id = req.request_id
        return make_record(state, req)

    def _question(self, state: SessionState, call: CallState) -> RequestRecord:
        turn = state.turn
        assert turn is not None and call.result is not None
        ask = call.result.output  # the pending ask, parked by run_call
        form = ask.get("form")  # ctx.form(): a form to fill in, not a question to answer
        req = InputRequest(
            request_id=new_request_id(state.ref.session_id),
            kind="user-input" if form else "question",
            prompt=ask["prompt"],
            action=ActionRef(call_id=call.call_id, tool_name=call.tool_name),
            options=[InputOption.model_validate(o) for o in ask["options"]],
            display="form" if form else "select" if ask["options"] else "text",
            allow_free_text=ask["allow_free_text"] and not form,
            style=ask.get("style") or "select",
            form=form,
            principal=turn.owner,
            session_id=state.ref.session_id,
            turn_id=turn.turn_id,
        )
        if ask.get("timeout_s"):  # ctx.ask(timeout=…): unanswered by then, the ask returns "expired"
            req.created_at = datetime.fromtimestamp(self.p.settings.clock(), UTC)
            req.expires_at = req.created_at + timedelta(seconds=ask["timeout_s"])
        call.ask_request_id = req.request_id
        call.result = None
        return make_record(state, req)

    # --- running ---------------------------------------------------------------------------------

    def require(self, name: str) -> Tool:
        tool = self.p.tools.get(name)
        if tool is None:
            raise ToolUnavailable(f"tool {name!r} is not loaded in this process")
        return tool

    def ensure_tools(self, state: SessionState) -> None:
        turn = state.turn
        assert turn is not None and turn.step is not None
        for call in turn.step.calls:
            if call.status == "ready":
                self.require(call.tool_name)

    def started_events(self, session_id: str, state: SessionState) -> list[ActionStarted]:
        turn = state.turn
        assert turn is not None and turn.step is not None
        return [ActionStarted(session_id=session_id, turn_id=turn.turn_id, call_id=c.call_id,
                              tool_name=c.tool_name, input=safe_input(self.p.tools.get(c.tool_name), c),
                              standing=c.standing)
                for c in turn.step.calls if c.status == "ready" and not c.asks]

    def ready_markers(self, state: SessionState) -> list[str]:
        """The execution markers of the calls ready to run (a checkpoint may start them: ``run_ready``'s
        ``begun``)."""
        turn = state.turn
        assert turn is not None and turn.step is not None
        return [marker_of(turn.turn_id, turn.step, c) for c in turn.step.calls if c.status == "ready"]

    async def run_ready(self, session_id: str, token: str, state: SessionState,
                        begun: dict[str, tuple[bool, str | None]] | None = None) -> dict[str, str]:
        """Run the calls that are ready; ``begun``: markers the last checkpoint started already, with its
        answer (a call not in it starts itself). Returns the result of the last call to finish (marker →
        JSON), not written yet: the caller's next checkpoint writes it in its own script (``Finishes``)."""
        turn = state.turn
        assert turn is not None and turn.step is not None
        ready = [c for c in turn.step.calls if c.status == "ready"]
        self.ensure_tools(state)
        begun = begun or {}
        finishes = Finishes(len(ready))
        await asyncio.gather(*(self.run_call(session_id, token, state, c, begun.get(marker_of(turn.turn_id, turn.step, c)),
                                             finishes=finishes) for c in ready))
        return finishes.last

    async def record_results(self, session_id: str, results: dict[str, str]) -> None:
        """Write results ``run_ready`` left to a checkpoint that will not come at once (marker → JSON)."""
        for marker, result_json in results.items():
            await self.p.store.mark_call(CallMark(session_id, marker, result_json=result_json))

    async def run_call(self, session_id: str, token: str, state: SessionState, call: CallState,
                       begun: tuple[bool, str | None] | None = None, *, finishes: Finishes | None = None) -> None:
        """Run one call at most once per approval (markers survive crashes and rival workers). ``begun``:
        its marker was started by the checkpoint that made it ready (that script's answer, fenced alike).
        ``finishes``: the step's calls running together (the last one's result is left to the caller)."""
        finishes = finishes or Finishes(0)
        tool = self.require(call.tool_name)
        turn = state.turn
        assert turn is not None and turn.step is not None
        marker = marker_of(turn.turn_id, turn.step, call)
        # fenced: LeaseLost
        fresh, recorded = begun or await self.p.store.mark_call(CallMark(session_id, marker, token))
        if not fresh:
            if recorded and recorded != "started":
                apply_recorded(call, json.loads(recorded))
                finishes.skip()
                return
            if not tool.idempotent:
                call.status, call.result = "done", CallResult(status="failed", error=INTERRUPTED)
                finishes.skip()
                return
        ctx = ToolContext(
            session=session_info(state),
            principal=call.principal,
            call_id=call.call_id,
            idempotency_key=f"{session_id}:{turn.turn_id}:{turn.step.step_id or turn.step.index}:{call.call_id}",
            answers=call.asks,
            workspace=self.p.workspace,
        )
        started = time.perf_counter()
        task = asyncio.create_task(tool.invoke(tool.parse(call.arguments), ctx))
        running = (turn.turn_id, ctx, task if tool.cancellable else None)
        self._running.setdefault(session_id, []).append(running)
        try:
            output = await task
        except AskParked:
            pass
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not ctx.stopped or (current is not None and current.cancelling()):
                raise  # not our stop (e.g. shutdown): the marker stays "started", reported on recovery
            # recorded like any result, so the marker says "done": a successor never runs it again
            call.status, call.result = "done", CallResult(status="rejected",
                                                          output={"code": "TURN_CANCELLED", "message": STOPPED})
        except Exception as exc:  # noqa: BLE001 - a tool error is the model's to handle
            log.info("tool %s raised %s: %s", tool.name, type(exc).__name__, logs.content(exc))  # may quote its input
            call.status, call.result = "done", CallResult(status="failed", error=f"{type(exc).__name__}: {exc}")
        else:
            call.status, call.result = "done", CallResult(status="completed", output=jsonable(output))
        finally:
            runs = self._running.get(session_id, [])
            if running in runs:
                runs.remove(running)
            if not runs:
                self._running.pop(session_id, None)
        asked = ctx.parked is not None or call.result is None
        observe_tool_run(tool.name, "asked" if asked else call.result.status, time.perf_counter() - started)
        if ctx.parked is not None:  # the tool asked (even if it caught the park signal): the turn parks
            ask = ctx.parked.model_dump(mode="json")
            call.status, call.result = "asking", CallResult(status="failed", output=ask)
            await finishes.record(self.p.store, session_id, marker, json.dumps({"asked": ask}))
            return
        assert call.result is not None
        await finishes.record(self.p.store, session_id, marker, call.result.model_dump_json())


class Finishes:
    """A step's calls running together. Each records its result in its execution marker as it finishes, so
    a crash loses none, except the last to finish: its result is handed back (``last``) for the step's next
    checkpoint to write in the same script, one write instead of two, with nothing awaited in between. A
    call that raises never counts down, so then nobody is last and every result is written at once."""

    def __init__(self, running: int):
        self.running = running
        self.last: dict[str, str] = {}

    def skip(self) -> None:
        """A call that ran nothing (its result was recorded before, or it was interrupted)."""
        self.running -= 1

    async def record(self, store: TurnStore, session_id: str, marker: str, result_json: str) -> None:
        self.running -= 1
        if self.running == 0:
            self.last[marker] = result_json
            return
        await store.mark_call(CallMark(session_id, marker, result_json=result_json))


def observe_tool_run(tool: str, outcome: str, seconds: float) -> None:
    """hitl_tool_runs_total / hitl_tool_run_seconds (the tool is a registered one: a bounded label)."""
    TOOL_RUNS.labels(tool, outcome).inc()
    TOOL_SECONDS.labels(tool).observe(seconds)
    tracing.record("tool.run", seconds, {"tool.name": tool, "tool.outcome": outcome},
                   error="failed" if outcome == "failed" else None)


def make_record(state: SessionState, req: InputRequest, *, approval_key: str | None = None) -> RequestRecord:
    assert state.turn is not None
    if state.agent and req.agent is None:  # a sub-agent asks: cards say which one
        req.agent = state.agent
    if state.ref.parent:  # ... and under which delegation: once that ends, the request settles nothing
        req.delegation_id = state.ref.parent.get("request_id")
    return RequestRecord(
        request=req,
        session_id=state.ref.session_id,
        turn_id=state.turn.turn_id,
        team_id=state.ref.team_id,
        channel=state.ref.channel,
        session_info=session_info(state).model_dump(mode="json"),
        approval_key=approval_key,
    )


def apply_recorded(call: CallState, recorded: dict[str, Any]) -> None:
    """Take what an earlier run of this call recorded: its result, or the question it parked on."""
    if "asked" in recorded:
        ask = recorded["asked"]
        if isinstance(ask, dict):  # a crash lost the question: ask it again
            call.status, call.result = "asking", CallResult(status="failed", output=ask)
            return
        call.status, call.result = "done", CallResult(status="failed", error=INTERRUPTED)
        return
    call.status, call.result = "done", CallResult.model_validate(recorded)


def denied_output(message: str, *, status: str = "denied", request_id: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"code": "TOOL_EXECUTION_DENIED", "message": message, "tool": {"result": "not_run"}}
    if request_id:
        out["approval"] = {"requestId": request_id, "status": status}
    return out


def safe_input(tool: Tool | None, call: CallState) -> dict[str, Any] | None:
    if tool is None:
        return None
    try:
        return as_dict(tool.parse(call.arguments))
    except ValueError:
        return None


def jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    try:
        json.dumps(value)
        return value
    except TypeError:
        return json.loads(json.dumps(value, default=str))


def _set_deadlines(req: InputRequest, tool: Tool, now: float) -> None:
    """A request's deadlines from its tool's; reminders and escalations past the expiry are never seen."""
    start = datetime.fromtimestamp(now, UTC)
    req.created_at = start
    if tool.expires_after is not None:
        req.expires_at = start + tool.expires_after
    if tool.remind_after is not None and (req.expires_at is None or start + tool.remind_after < req.expires_at):
        req.remind_at = start + tool.remind_after
    if tool.escalate_after is not None and (req.expires_at is None or start + tool.escalate_after < req.expires_at):
        req.escalate_at, req.escalate_to = start + tool.escalate_after, tool.escalate_to
