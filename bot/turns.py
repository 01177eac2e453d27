"""The turn loop (DESIGN §7, §8): step → policy → run or park → resume / steer / cancel.

Every entry point (a message, an answer, a cancel, the recovery sweep) first writes its input to
Redis and then calls :meth:`Runtime.drive`, which is idempotent: whoever holds the session's turn
lease looks at the stored state and moves it forward until the turn parks or ends, checkpointing
as it goes. Nothing needed to continue lives only in this process, so a turn resumes in any
replica, after any restart.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from bot.approval import (
    ApprovalContext,
    RequestView,
    ResponseContext,
    ResponseDecision,
    ResponseView,
    evaluate_request_policy,
    evaluate_response_policy,
    requester_only,
)
from bot.inputs import first_open_input, match_text
from bot.models.base import ChatModel, ModelError
from bot.ports import Channel
from bot.principals import Principal
from bot.protocol import (
    APPROVE,
    CANCEL,
    CONTINUE,
    STOP,
    ActionRef,
    ActionResult,
    ActionStarted,
    Answer,
    ApprovalCandidate,
    ApprovalSettled,
    Event,
    InputOption,
    InputRequest,
    InputRequested,
    InputResolved,
    InputResponse,
    LeaseLost,
    MessageCompleted,
    RequestRecord,
    Resolution,
    SessionSnapshot,
    SessionWaiting,
    SettleResult,
    TurnCancelled,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    TurnWaiting,
    approval_options,
    session_limit_options,
    utcnow,
)
from bot.session import SessionAuth, SessionInfo, SessionRef, new_request_id
from bot.state import CallResult, CallState, SessionState, StepState, TurnState
from bot.tools import AskParked, Tool, ToolContext, ToolRegistry

log = logging.getLogger(__name__)

RESPONSE_POLICY_TIMEOUT = 10.0
FAILED_DRIVE_RETRY_MS = 30_000
IGNORED_MESSAGE = "Ignored because the user continued without responding."
DENIED_MESSAGE = "Tool execution was denied."
VERIFY_FAILED = "We couldn’t verify your response. Please try again."


class TurnStore(Protocol):
    """What the runtime needs from persistence (implemented by ``store.sessions.SessionStore``)."""

    async def load(self, session_id: str) -> tuple[dict[str, Any] | None, set[str], str | None]: ...
    async def snapshot(self, session_id: str) -> SessionSnapshot: ...
    async def request_cancel(self, session_id: str, turn_id: str) -> None: ...
    async def cancel_requested(self, session_id: str) -> str | None: ...
    async def acquire_lease(self, session_id: str) -> str | None: ...
    async def renew_lease(self, session_id: str, token: str) -> bool: ...
    async def release_lease(self, session_id: str, token: str, *, still_active: bool,
                            retry_after_ms: int = 0) -> None: ...
    async def mark_active(self, session_id: str, *, delay_ms: int = 0) -> None: ...
    async def due_sessions(self, *, limit: int = 100) -> list[str]: ...
    async def commit(self, session_id: str, token: str | None, state: dict[str, Any] | None,
                     events: list[Event] = ..., requests: list[RequestRecord] = ...) -> list[Event]: ...
    async def emit(self, session_id: str, events: list[Event]) -> list[Event]: ...
    async def get_request(self, request_id: str) -> RequestRecord: ...
    async def get_requests(self, request_ids: list[str]) -> list[RequestRecord]: ...
    async def settle(self, record: RequestRecord, **kwargs: Any) -> SettleResult: ...
    async def mark_delivered(self, request_ids: list[str]) -> None: ...
    async def undelivered(self, *, older_than_s: float = 5.0, limit: int = 100) -> list[str]: ...
    async def first_sighting(self, session_id: str, message_id: str) -> bool: ...
    async def push_inbox(self, session_id: str, message: dict[str, Any]) -> None: ...
    async def inbox(self, session_id: str) -> list[dict[str, Any]]: ...
    async def take_inbox(self, session_id: str, message: dict[str, Any]) -> bool: ...
    async def begin_execution(self, session_id: str, marker: str) -> tuple[bool, str | None]: ...
    async def finish_execution(self, session_id: str, marker: str, result_json: str) -> None: ...


@dataclass
class RuntimeSettings:
    step_budget: int = 20  # model steps per turn before a session-limit prompt
    token_budget: int = 200_000  # tokens per turn before a session-limit prompt
    system_prompt: str = (
        "You are a helpful assistant working inside a Slack thread. Use the tools you have. Some tools "
        "need a person's approval; if a call is denied, do not retry it unless asked. Keep answers short."
    )
    response_policy_timeout: float = RESPONSE_POLICY_TIMEOUT
    history_window: int = 200  # newest messages the model sees (the system prompt always); 0 = all


@dataclass
class AnswerResult:
    """What happened to one answer, for the frontend to explain to the person."""

    state: Literal["settled", "rejected", "failed", "partial", "stale", "invalid"]
    record: RequestRecord
    reason: str | None = None
    approvals: int = 0
    required: int = 1
    batch_complete: bool = False  # the step can resume now


@dataclass
class PostResult:
    state: Literal["duplicate", "answered", "queued"]
    answer: AnswerResult | None = None


@dataclass
class _Pass:
    """Work done under one lease: events to deliver after each commit."""

    session_id: str
    token: str
    delivered: list[Event] = field(default_factory=list)


class Runtime:
    """Drives sessions: one turn per session at a time, any number of sessions and replicas."""

    def __init__(
        self,
        *,
        store: TurnStore,
        model: ChatModel,
        tools: ToolRegistry,
        channel: Channel,
        settings: RuntimeSettings | None = None,
        reviewer: ChatModel | None = None,
    ):
        self.store = store
        self.model = model
        self.tools = tools
        self.channel = channel
        self.settings = settings or RuntimeSettings()
        self.reviewer = reviewer or model
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- entry points ------------------------------------------------------------------------

    async def post_message(
        self, ref: SessionRef, principal: Principal | None, text: str, *, message_id: str | None = None
    ) -> PostResult:
        """A person wrote in the session: answer an open request, steer, queue or start a turn."""
        sid = ref.session_id
        if message_id and not await self.store.first_sighting(sid, message_id):
            return PostResult("duplicate")
        raw, _grants, _cancel = await self.store.load(sid)
        state = SessionState.model_validate(raw) if raw else None
        answered = await self._typed_answer(state, principal, text)
        if answered is not None:
            return PostResult("answered", answered)
        message = {
            "id": message_id or secrets.token_hex(8),
            "principal": principal.model_dump(mode="json") if principal else None,
            "text": text,
            "ref": ref.model_dump(mode="json"),
            "at": utcnow().isoformat(),
        }
        await self.store.push_inbox(sid, message)
        await self.drive(sid)
        return PostResult("queued")

    async def answer(
        self,
        response: InputResponse,
        *,
        note: str | None = None,
        resume: bool = True,
        record: RequestRecord | None = None,
    ) -> AnswerResult:
        """Someone answered a request (click, select, modal or matching text).

        One read, the response policy, one atomic settle: at most two round trips. When the
        step's last open request settles, the turn resumes here — or, with ``resume=False``,
        the caller resumes it (``drive``) after acknowledging the click.
        """
        if record is None or record.request_id != response.request_id:
            record = await self.store.get_request(response.request_id)  # raises UnknownRequest
        if record.status != "open":
            return AnswerResult("stale", record)
        req = record.request
        outcome = _answer_outcome(req, response)
        if outcome is None:
            return AnswerResult("invalid", record, reason="That is not one of the options.")
        principal = response.principal
        if principal is None:
            return AnswerResult("rejected", record, reason="Authentication is required to respond.")
        decision_kind = "cancel" if outcome in ("cancelled", "stop") else "approve"
        policy, custom = self._response_policy(req)
        ctx = _response_context(record, principal, decision_kind, note)
        decision, failure = await self._run_response_policy(policy, ctx)
        result = await self._settle_answer(record, response, outcome, decision, failure, custom, note)
        if result.batch_complete and resume:
            await self.drive(record.session_id)  # (the settle already told the sweep to look, in case we die)
        return result

    async def check_response(
        self, record: RequestRecord, principal: Principal, decision: Literal["approve", "cancel"] = "approve",
        *, within_s: float | None = None,
    ) -> ResponseDecision | None:
        """Would this person's answer count? A dry run of the request's response policy (for "Waiting on
        you" lists); None when the policy failed. Response policies must therefore have no side effects."""
        policy, _ = self._response_policy(record.request)
        decided, _failure = await self._run_response_policy(
            policy, _response_context(record, principal, decision, None), within_s=within_s)
        return decided

    def _response_policy(self, req: InputRequest) -> tuple[Any, bool]:
        """The policy that decides who may settle ``req``, and whether the tool brought its own."""
        tool = self.tools.get(req.action.tool_name) if req.action else None
        custom = tool.approval.response if (tool and req.kind == "tool-approval") else None
        return (custom or requester_only()), custom is not None

    async def cancel_turn(self, session_id: str, principal: Principal | None) -> bool:
        """Stop the current turn: pending calls never run; late answers authorize nothing."""
        raw, _, _ = await self.store.load(session_id)
        if not raw:
            return False
        state = SessionState.model_validate(raw)
        turn = state.turn
        if turn is None:
            return False
        if turn.owner is not None and principal is not None and not turn.owner.same_as(principal):
            return False
        await self.store.request_cancel(session_id, turn.turn_id)
        open_ids = list(turn.step.request_ids if turn.step else [])
        if turn.limit_request_id:
            open_ids.append(turn.limit_request_id)
        for record in await self.store.get_requests(open_ids):
            await self._resolve_without_answer(record, "cancelled", turn)
        await self.drive(session_id)
        return True

    async def drive(self, session_id: str) -> None:
        """Move the session forward if this worker can take its lease; safe to call any time."""
        while True:
            token = await self.store.acquire_lease(session_id)
            if token is None:
                return  # another worker drives it and re-checks for work before letting go
            renewer = asyncio.create_task(self._keep_lease(session_id, token))
            failed = False
            try:
                await self._drive_locked(_Pass(session_id, token))
            except LeaseLost:
                log.warning("lost the turn lease of %s; another worker continues it", session_id)
                return
            except Exception:
                failed = True
                log.exception("driving session %s failed; the recovery sweep will retry it", session_id)
            finally:
                renewer.cancel()
                await asyncio.wait({renewer})  # unlike awaiting it, this never swallows our own cancellation
            # a turn that failed unexpectedly is retried by the sweep, but not in a tight loop
            await self.store.release_lease(session_id, token, still_active=failed,
                                           retry_after_ms=FAILED_DRIVE_RETRY_MS if failed else 0)
            if failed or not await self._has_work(session_id):
                return

    async def recover(self, *, undelivered_older_than_s: float = 5.0) -> int:
        """Continue turns whose worker died, and re-offer requests no frontend has shown yet."""
        count = 0
        for session_id in await self.store.due_sessions():
            await self.drive(session_id)
            count += 1
        for request_id in await self.store.undelivered(older_than_s=undelivered_older_than_s):
            try:
                record = await self.store.get_request(request_id)
            except LookupError:
                await self.store.mark_delivered([request_id])
                continue
            if record.status != "open":
                await self.store.mark_delivered([request_id])
                continue
            ref = SessionRef(session_id=record.session_id, team_id=record.team_id, channel=record.channel)
            event = InputRequested(session_id=record.session_id, turn_id=record.turn_id, requests=[record.request])
            if await self._deliver(event, ref):
                count += 1
        return count

    def spawn(self, coro: Any, *, what: str) -> asyncio.Task[Any]:
        """Run slow work after an ack; failures are logged with context, never lost silently."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("background task failed: %s", what, exc_info=t.exception())

        task.add_done_callback(done)
        return task

    async def wait_idle(self) -> None:
        """Wait for spawned background work (tests, graceful shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # --- answering -----------------------------------------------------------------------------

    async def _typed_answer(
        self, state: SessionState | None, principal: Principal | None, text: str
    ) -> AnswerResult | None:
        if state is None or state.turn is None:
            return None
        ids = list(state.turn.step.request_ids if state.turn.step else [])
        if state.turn.limit_request_id:
            ids.append(state.turn.limit_request_id)
        records = [r for r in await self.store.get_requests(ids) if r.status == "open"]
        first = first_open_input([r.request for r in records])
        if first is None:
            return None
        response = match_text(first, text, principal)
        if response is None:
            return None
        owner = state.turn.owner
        is_owner = owner is None or owner.same_as(principal)
        if not is_owner and response.option_id is None:
            return None  # someone else's words are a message of theirs, not an answer to this turn
        result = await self.answer(response)
        if not is_owner and result.state in ("rejected", "failed"):
            return None  # it did not count as an answer: it waits as their message
        return result

    async def _run_response_policy(
        self, policy: Any, ctx: ResponseContext, *, within_s: float | None = None
    ) -> tuple[ResponseDecision | None, str | None]:
        try:
            decision = await asyncio.wait_for(
                evaluate_response_policy(policy, ctx), within_s or self.settings.response_policy_timeout
            )
            return decision, None
        except TimeoutError:
            return None, "Approval authorization is temporarily unavailable. Please try again."
        except Exception as exc:  # noqa: BLE001 - a broken policy fails closed
            log.warning("response policy for %s raised %r; failing closed", ctx.request.request_id, exc)
            return None, VERIFY_FAILED

    async def _settle_answer(
        self,
        record: RequestRecord,
        response: InputResponse,
        outcome: str,
        decision: ResponseDecision | None,
        failure: str | None,
        custom: bool,
        note: str | None,
    ) -> AnswerResult:
        req = record.request
        sid, tid = record.session_id, record.turn_id
        principal = response.principal
        pending = [ApprovalCandidate(session_id=sid, turn_id=tid, request_id=req.request_id, outcome="pending",
                                     responder=principal)] if custom else []
        if decision is None or decision.status == "rejected":
            reason = failure or (decision.reason if decision else None) or VERIFY_FAILED
            kind = "failed" if decision is None else "rejected"
            refusal = ApprovalCandidate(session_id=sid, turn_id=tid, request_id=req.request_id, outcome=kind,
                                        responder=principal, reason=reason)
            result = await self.store.settle(record, mode="reject", outcome=outcome, response=response,
                                             on_rejected=[*pending, refusal])
            await self._deliver_all(result.events, record)
            if result.state == "stale":
                return AnswerResult("stale", result.record or record)
            return AnswerResult(kind, record, reason=reason)

        required = decision.required if outcome == "approved" else 1
        settled_events: list[Event] = list(pending)
        if req.kind == "tool-approval":
            settled_events.append(ApprovalSettled(session_id=sid, turn_id=tid, request_id=req.request_id,
                                                  outcome="approved" if outcome == "approved" else "cancelled",
                                                  responder=principal, note=note))
        resolution_outcome = _resolution_outcome(req, outcome)
        settled_events.append(InputResolved(session_id=sid, turn_id=tid, resolutions=[
            Resolution(request_id=req.request_id, kind=req.kind, outcome=resolution_outcome, response=response)]))
        partial = [*pending, ApprovalCandidate(session_id=sid, turn_id=tid, request_id=req.request_id,
                                               outcome="pending", responder=principal, approvals=-1,
                                               required=required)]
        stale = [ApprovalCandidate(session_id=sid, turn_id=tid, request_id=req.request_id, outcome="stale",
                                   responder=principal, reason="Another response settled this approval.")]
        result = await self.store.settle(
            record,
            mode="settle",
            outcome=resolution_outcome,
            response=response,
            responder_id=principal.principal_id if principal else "",
            required=required,
            grant_key=record.approval_key if req.kind == "tool-approval" else None,
            note=note,
            batch=record.batch,
            on_settled=settled_events,
            on_partial=partial,
            on_stale=stale,
        )
        await self._deliver_all(result.events, record)
        if result.state == "stale":
            fresh = await self.store.get_request(req.request_id)
            return AnswerResult("stale", fresh)
        if result.state == "partial":
            return AnswerResult("partial", record, approvals=result.approvals, required=required)
        return AnswerResult("settled", record, approvals=result.approvals, required=required,
                            batch_complete=result.batch_complete)

    async def _resolve_without_answer(self, record: RequestRecord, outcome: str, turn: TurnState) -> bool:
        """Settle an open request nobody answered: ignored (steered past) or cancelled (turn cancelled)."""
        req = record.request
        events = [InputResolved(session_id=record.session_id, turn_id=record.turn_id, resolutions=[
            Resolution(request_id=req.request_id, kind=req.kind, outcome=outcome)])]  # type: ignore[arg-type]
        result = await self.store.settle(record, mode="settle", outcome=outcome, response=None,
                                         batch=record.batch, on_settled=events)
        await self._deliver_all(result.events, record)
        return result.state == "settled"

    # --- the loop ------------------------------------------------------------------------------

    async def _keep_lease(self, session_id: str, token: str) -> None:
        interval = max(self.store_lease_ms() / 3000, 0.05)
        while True:
            await asyncio.sleep(interval)
            if not await self.store.renew_lease(session_id, token):
                return

    def store_lease_ms(self) -> int:
        return int(getattr(self.store, "lease_ms", 30_000))

    async def _has_work(self, session_id: str) -> bool:
        snap = await self.store.snapshot(session_id)
        raw, cancel, inbox = snap.state, snap.cancel, snap.inbox
        if raw is None:
            return bool(inbox)
        state = SessionState.model_validate(raw)
        turn = state.turn
        if turn is None:
            return bool(inbox)
        if cancel == turn.turn_id:
            return True
        if turn.status == "running":
            return True
        if turn.limit_request_id:
            return await self._all_settled(turn)  # other messages wait behind a session-limit prompt
        if any(_same(m, turn.owner) for m in inbox):
            return True  # the owner steers past what is still open
        return await self._all_settled(turn)

    async def _all_settled(self, turn: TurnState) -> bool:
        ids = list(turn.step.request_ids if turn.step else [])
        if turn.limit_request_id:
            ids.append(turn.limit_request_id)
        records = await self.store.get_requests(ids)
        return all(r.status != "open" for r in records)

    async def _drive_locked(self, p: _Pass) -> None:
        while True:
            snap = await self.store.snapshot(p.session_id)
            raw, grants, cancel, inbox = snap.state, snap.grants, snap.cancel, snap.inbox
            state = SessionState.model_validate(raw) if raw else None
            if state is None or state.turn is None:
                if not inbox:
                    return
                state = await self._start_turn(p, state, inbox[0])
                continue
            turn = state.turn
            if cancel == turn.turn_id:
                await self._finish_cancelled(p, state)
                continue
            if turn.limit_request_id:
                if not await self._resume_limit(p, state):
                    return
                continue
            if turn.step is not None:
                steer = _owner_message(inbox, turn.owner)
                if not await self._resume_step(p, state, grants, steer):
                    return
                continue
            steered = [m for m in inbox if _same(m, turn.owner)]
            for message in steered:
                if await self.store.take_inbox(p.session_id, message):
                    state.history.append(_user_message(message))
            if self._over_budget(turn):
                await self._park_on_limit(p, state)
                return
            if not await self._model_step(p, state, grants):
                continue

    async def _start_turn(self, p: _Pass, state: SessionState | None, message: dict[str, Any]) -> SessionState:
        if not await self.store.take_inbox(p.session_id, message):
            raise LeaseLost(p.session_id)
        principal = Principal.model_validate(message["principal"]) if message.get("principal") else None
        if state is None:
            state = SessionState(ref=SessionRef.model_validate(message["ref"]), initiator=principal)
        state.turns += 1
        if not state.history and self.settings.system_prompt:
            state.history.append({"role": "system", "content": self.settings.system_prompt})
        state.history.append(_user_message(message))
        state.turn = TurnState(
            turn_id=f"turn_{secrets.token_hex(6)}",
            number=state.turns,
            owner=principal,
            step_budget=self.settings.step_budget,
            token_budget=self.settings.token_budget,
        )
        await self._commit(p, state, [TurnStarted(session_id=p.session_id, turn_id=state.turn.turn_id,
                                                  principal=principal)])
        return state

    def _over_budget(self, turn: TurnState) -> bool:
        return turn.steps >= turn.step_budget or turn.tokens >= turn.token_budget

    async def _model_step(self, p: _Pass, state: SessionState, grants: set[str]) -> bool:
        """One model call; returns False when the turn ended."""
        turn = state.turn
        assert turn is not None
        try:
            response = await self.model.complete(
                model_view(state.history, self.settings.history_window), self.tools.specs()
            )
        except Exception as exc:  # noqa: BLE001 - any model failure ends the turn visibly, never silently
            reason = exc.reason if isinstance(exc, ModelError) else f"unexpected {type(exc).__name__}"
            if not isinstance(exc, ModelError):
                log.exception("model client failed in session %s", p.session_id)
            await self._end_turn(p, state, TurnFailed(session_id=p.session_id, turn_id=turn.turn_id,
                                                      reason=f"The model could not answer: {reason}"))
            return False
        if await self.store.cancel_requested(p.session_id) == turn.turn_id:
            await self._finish_cancelled(p, state)  # stopped while the model thought: run nothing it asked for
            return False
        turn.steps += 1
        turn.tokens += response.usage.total_tokens
        events: list[Event] = []
        if response.text:
            events.append(MessageCompleted(session_id=p.session_id, turn_id=turn.turn_id, text=response.text))
        if not response.tool_calls:
            state.history.append(response.to_message())
            await self._end_turn(p, state, TurnCompleted(session_id=p.session_id, turn_id=turn.turn_id), events)
            return False
        turn.step = StepState(
            index=turn.steps,
            assistant=response.to_message(),
            calls=[CallState(call_id=c.id, tool_name=c.name, arguments=c.arguments) for c in response.tool_calls],
        )
        await self._apply_request_policies(state, grants)
        await self._commit(p, state, events)
        await self._resume_step(p, state, grants, None)
        return True

    async def _apply_request_policies(self, state: SessionState, grants: set[str]) -> None:
        turn = state.turn
        assert turn is not None and turn.step is not None
        info = self._session_info(state)

        async def decide(call: CallState) -> None:
            tool = self.tools.get(call.tool_name)
            if tool is None:
                call.status, call.result = "done", CallResult(
                    status="failed", error=f"unknown tool {call.tool_name!r}; available: {', '.join(self.tools.names())}")
                return
            try:
                args = tool.parse(call.arguments)
            except ValueError as exc:
                call.status, call.result = "done", CallResult(status="failed", error=str(exc))
                return
            ctx = ApprovalContext(
                session=info,
                tool_name=tool.name,
                tool_input=_as_dict(args),
                call_id=call.call_id,
                approved_tools=frozenset(grants),
                tool_description=tool.description,
                reviewer=self.reviewer,
            )
            try:
                status = await evaluate_request_policy(tool.approval.request, ctx)
            except Exception as exc:  # noqa: BLE001 - a broken policy denies, never allows
                log.warning("request policy of %s raised %r; denying", tool.name, exc)
                call.status, call.result = "done", CallResult(
                    status="rejected", output=_denied_output("The approval policy failed, so the call was denied."))
                return
            call.principal = turn.owner
            if status.type == "denied":
                call.status, call.result = "done", CallResult(
                    status="rejected", output=_denied_output(status.reason or DENIED_MESSAGE))
            elif status.type == "user-approval":
                call.status = "awaiting"
            else:
                call.status = "ready"

        await asyncio.gather(*(decide(c) for c in turn.step.calls))

    async def _resume_step(
        self, p: _Pass, state: SessionState, grants: set[str], steer: dict[str, Any] | None
    ) -> bool:
        """Apply answers, run what may run, park on what still needs a person. False = parked."""
        turn = state.turn
        assert turn is not None and turn.step is not None
        step = turn.step
        records = {r.request_id: r for r in await self.store.get_requests(step.request_ids)}
        open_ids = [rid for rid, r in records.items() if r.status == "open"]
        if open_ids and steer is not None:
            for rid in open_ids:
                await self._resolve_without_answer(records[rid], "ignored", turn)
            records = {r.request_id: r for r in await self.store.get_requests(step.request_ids)}
            open_ids = [rid for rid, r in records.items() if r.status == "open"]
        if open_ids:
            return False  # still waiting on people
        self._apply_resolutions(step, records)
        step.request_ids = []
        if await self.store.cancel_requested(p.session_id) == turn.turn_id:
            await self._finish_cancelled(p, state)
            return True
        new_events = await self._run_ready_calls(p, state)
        new_events += self._unreported_results(p.session_id, turn)
        new_requests = await self._requests_for(state, grants)
        if new_requests:
            step.request_ids = [r.request_id for r in new_requests]
            turn.status = "parked"
            events = [*new_events,
                      InputRequested(session_id=p.session_id, turn_id=turn.turn_id,
                                     requests=[r.request for r in new_requests]),
                      TurnWaiting(session_id=p.session_id, turn_id=turn.turn_id, on="input")]
            await self._commit(p, state, events, new_requests)
            return False
        # the step is complete: its calls and results join the history together
        state.history.append(step.assistant)
        for call in step.calls:
            result = call.result or CallResult(status="failed", error="the call did not run")
            state.history.append({"role": "tool", "tool_call_id": call.call_id, "content": result.content()})
        turn.step = None
        turn.status = "running"
        await self._commit(p, state, new_events)
        return True

    def _apply_resolutions(self, step: StepState, records: dict[str, RequestRecord]) -> None:
        for call in step.calls:
            if call.status == "awaiting" and call.request_id in records:
                record = records[call.request_id]
                call.request_id = None
                if record.outcome == "approved":
                    call.status = "ready"
                    call.principal = record.responder or call.principal
                else:
                    call.status = "done"
                    call.result = CallResult(status="rejected", output=_rejection(record))
            elif call.status == "asking" and call.ask_request_id in records:
                record = records[call.ask_request_id]
                call.ask_request_id = None
                if record.outcome == "answered" and record.response is not None:
                    call.asks.append(Answer(status="answered", option_id=record.response.option_id,
                                            text=record.response.text, responder=record.responder))
                    call.status = "ready"
                elif record.outcome == "ignored":
                    call.asks.append(Answer(status="interrupted"))
                    call.status = "ready"
                else:
                    call.status = "done"
                    call.result = CallResult(status="rejected", output={"status": "cancelled"})

    async def _requests_for(self, state: SessionState, grants: set[str]) -> list[RequestRecord]:
        """Approval requests for calls awaiting a person that have none yet (asks are made while running)."""
        turn = state.turn
        assert turn is not None and turn.step is not None
        records: list[RequestRecord] = []
        for call in turn.step.calls:
            if call.status == "awaiting" and call.request_id is None:
                tool = self.tools.get(call.tool_name)
                assert tool is not None
                args = tool.parse(call.arguments)
                req = InputRequest(
                    request_id=new_request_id(state.ref.session_id),
                    kind="tool-approval",
                    prompt=f"Run {tool.name}?",
                    action=ActionRef(call_id=call.call_id, tool_name=tool.name, input=_as_dict(args)),
                    options=approval_options(),
                    display="confirmation",
                    principal=turn.owner,
                    session_id=state.ref.session_id,
                    turn_id=turn.turn_id,
                    dangerous=tool.dangerous,
                )
                call.request_id = req.request_id
                records.append(self._record(state, req, approval_key=tool.approval_key(args)))
            elif call.status == "asking" and call.ask_request_id is None and call.result is not None:
                ask = call.result.output  # the pending ask, parked by _run_call
                req = InputRequest(
                    request_id=new_request_id(state.ref.session_id),
                    kind="question",
                    prompt=ask["prompt"],
                    action=ActionRef(call_id=call.call_id, tool_name=call.tool_name),
                    options=[InputOption.model_validate(o) for o in ask["options"]],
                    display="select" if ask["options"] else "text",
                    allow_free_text=ask["allow_free_text"],
                    principal=turn.owner,
                    session_id=state.ref.session_id,
                    turn_id=turn.turn_id,
                )
                call.ask_request_id = req.request_id
                call.result = None
                records.append(self._record(state, req))
        batch = [r.request_id for r in records]
        for r in records:
            r.batch = batch
        return records

    def _record(self, state: SessionState, req: InputRequest, *, approval_key: str | None = None) -> RequestRecord:
        assert state.turn is not None
        return RequestRecord(
            request=req,
            session_id=state.ref.session_id,
            turn_id=state.turn.turn_id,
            team_id=state.ref.team_id,
            channel=state.ref.channel,
            session_info=self._session_info(state).model_dump(mode="json"),
            approval_key=approval_key,
        )

    async def _run_ready_calls(self, p: _Pass, state: SessionState) -> list[Event]:
        turn = state.turn
        assert turn is not None and turn.step is not None
        ready = [c for c in turn.step.calls if c.status == "ready"]
        if not ready:
            return []
        started = [ActionStarted(session_id=p.session_id, turn_id=turn.turn_id, call_id=c.call_id,
                                 tool_name=c.tool_name, input=_safe_input(self.tools.get(c.tool_name), c))
                   for c in ready if not c.asks]
        if started:
            await self._commit(p, state, started)
        await asyncio.gather(*(self._run_call(p, state, c) for c in ready))
        return []

    def _unreported_results(self, session_id: str, turn: TurnState) -> list[Event]:
        """An ``action.result`` for every call of the step that ended and was not reported yet —
        run, failed, denied by policy, cancelled or ignored alike."""
        assert turn.step is not None
        events: list[Event] = []
        for c in turn.step.calls:
            if c.status == "done" and c.result is not None and not c.reported:
                c.reported = True
                events.append(ActionResult(session_id=session_id, turn_id=turn.turn_id, call_id=c.call_id,
                                           tool_name=c.tool_name, status=c.result.status, output=c.result.output,
                                           error=c.result.error))
        return events

    async def _run_call(self, p: _Pass, state: SessionState, call: CallState) -> None:
        """Run one call at most once per approval (markers survive crashes and rival workers)."""
        tool = self.tools.get(call.tool_name)
        assert tool is not None
        # some endpoints reuse call ids across steps ("call_0"): the turn and step make the marker unique
        turn = state.turn
        assert turn is not None and turn.step is not None
        call_key = f"{turn.turn_id}:{turn.step.index}:{call.call_id}"
        marker = f"{call_key}:{len(call.asks)}"
        fresh, recorded = await self.store.begin_execution(p.session_id, marker)
        if not fresh:
            if recorded and recorded != "started":
                _apply_recorded(call, json.loads(recorded))
                return
            if not tool.idempotent:
                call.status, call.result = "done", CallResult(
                    status="failed",
                    error="The call was interrupted before it finished (the worker stopped). It was not run "
                          "again, because it may have had effects; check before retrying.")
                return
        ctx = ToolContext(
            session=self._session_info(state),
            principal=call.principal,
            call_id=call.call_id,
            idempotency_key=f"{p.session_id}:{call_key}",
            answers=call.asks,
        )
        try:
            output = await tool.invoke(tool.parse(call.arguments), ctx)
            call.status, call.result = "done", CallResult(status="completed", output=_jsonable(output))
        except AskParked as parked:
            call.status = "asking"
            call.result = CallResult(status="failed", output=parked.ask.model_dump(mode="json"))
            await self.store.finish_execution(p.session_id, marker, json.dumps({"asked": True}))
            return
        except Exception as exc:  # noqa: BLE001 - a tool error is the model's to handle
            log.info("tool %s raised %r", tool.name, exc)
            call.status, call.result = "done", CallResult(status="failed", error=f"{type(exc).__name__}: {exc}")
        await self.store.finish_execution(p.session_id, marker, call.result.model_dump_json())

    async def _park_on_limit(self, p: _Pass, state: SessionState) -> None:
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
        record = self._record(state, req)
        record.batch = [req.request_id]
        turn.limit_request_id = req.request_id
        turn.status = "parked"
        await self._commit(p, state, [InputRequested(session_id=p.session_id, turn_id=turn.turn_id, requests=[req]),
                                      TurnWaiting(session_id=p.session_id, turn_id=turn.turn_id, on="input")],
                           [record])

    async def _resume_limit(self, p: _Pass, state: SessionState) -> bool:
        turn = state.turn
        assert turn is not None and turn.limit_request_id is not None
        [record] = await self.store.get_requests([turn.limit_request_id]) or [None]
        if record is not None and record.status == "open":
            return False
        turn.limit_request_id = None
        turn.status = "running"
        if record is not None and record.outcome == "approved" and record.response and record.response.option_id == CONTINUE:
            turn.steps, turn.tokens = 0, 0
            await self._commit(p, state, [])
            return True
        await self._end_turn(p, state, TurnCompleted(session_id=p.session_id, turn_id=turn.turn_id), [
            MessageCompleted(session_id=p.session_id, turn_id=turn.turn_id,
                             text="Stopped: this turn reached its budget and was not continued.")])
        return True

    async def _finish_cancelled(self, p: _Pass, state: SessionState) -> None:
        turn = state.turn
        assert turn is not None
        reports: list[Event] = []
        if turn.step is not None:
            # the calls never ran: tell the model in the history so the next turn knows
            state.history.append(turn.step.assistant)
            for call in turn.step.calls:
                if call.status != "done" or call.result is None:
                    call.status, call.result = "done", CallResult(
                        status="rejected", output={"code": "TURN_CANCELLED", "message": "The turn was cancelled."})
                state.history.append({"role": "tool", "tool_call_id": call.call_id, "content": call.result.content()})
            reports = self._unreported_results(p.session_id, turn)
        await self._end_turn(p, state, TurnCancelled(session_id=p.session_id, turn_id=turn.turn_id), reports)

    async def _end_turn(self, p: _Pass, state: SessionState, final: Event, before: list[Event] = ()) -> None:  # type: ignore[assignment]
        state.turn = None
        await self._commit(p, state, [*before, final, SessionWaiting(session_id=p.session_id)])

    # --- plumbing ------------------------------------------------------------------------------

    def _session_info(self, state: SessionState) -> SessionInfo:
        turn = state.turn
        return SessionInfo(
            id=state.ref.session_id,
            auth=SessionAuth(current=turn.owner if turn else None, initiator=state.initiator),
            turn=turn.number if turn else state.turns,
            team_id=state.ref.team_id,
        )

    async def _commit(
        self, p: _Pass, state: SessionState, events: list[Event], requests: list[RequestRecord] = ()  # type: ignore[assignment]
    ) -> None:
        stored = await self.store.commit(p.session_id, p.token, state.model_dump(mode="json"), events, list(requests))
        for event in stored:
            await self._deliver(event, state.ref)

    async def _deliver_all(self, events: list[Event], record: RequestRecord) -> None:
        if not events:
            return
        ref = SessionRef(session_id=record.session_id, team_id=record.team_id, channel=record.channel)
        for event in events:
            await self._deliver(event, ref)

    async def _deliver(self, event: Event, ref: SessionRef) -> bool:
        try:
            await self.channel.deliver(event, ref)
        except Exception:
            log.exception("frontend failed to show %s for session %s", event.type, ref.session_id)
            return False
        if isinstance(event, InputRequested):
            await self.store.mark_delivered([r.request_id for r in event.requests])
        return True


# --- helpers -------------------------------------------------------------------------------------


def model_view(history: list[dict[str, Any]], window: int) -> list[dict[str, Any]]:
    """What the model is shown: system messages, then the newest ``window`` messages, starting at a
    user message so no tool result is cut from the call that asked for it. The stored history keeps
    everything."""
    if window <= 0 or len(history) <= window:
        return history
    system = [m for m in history if m.get("role") == "system"]
    rest = [m for m in history if m.get("role") != "system"]
    tail = rest[-window:]
    start = next((i for i, m in enumerate(tail) if m.get("role") == "user"), None)
    if start is None:  # one very long turn: keep it whole rather than break a call from its results
        start = max((i for i, m in enumerate(rest) if m.get("role") == "user"), default=0)
        return system + rest[start:]
    return system + tail[start:]


def _response_context(
    record: RequestRecord, principal: Principal, decision: str, note: str | None
) -> ResponseContext:
    req = record.request
    return ResponseContext(
        request=RequestView(
            request_id=req.request_id,
            call_id=req.action.call_id if req.action else None,
            tool_name=req.action.tool_name if req.action else None,
            tool_input=req.action.input if req.action else None,
            principal=req.principal,
        ),
        response=ResponseView(decision=decision, principal=principal, note=note),  # type: ignore[arg-type]
        session=SessionInfo.model_validate(record.session_info or {"id": record.session_id}),
        approvals=record.approvals,
    )


def _answer_outcome(req: InputRequest, response: InputResponse) -> str | None:
    """The resolution an answer asks for, or None when it is not a valid answer to this request."""
    if req.kind == "tool-approval":
        return {APPROVE: "approved", CANCEL: "cancelled"}.get(response.option_id or "")
    if req.kind == "session-limit":
        return {CONTINUE: "approved", STOP: "stop"}.get(response.option_id or "")
    if response.option_id is not None:
        return "answered" if req.option(response.option_id) else None
    if response.text and response.text.strip() and (req.allow_free_text or not req.options):
        return "answered"
    return None


def _resolution_outcome(req: InputRequest, outcome: str) -> str:
    if req.kind == "tool-approval":
        return "approved" if outcome == "approved" else "denied"
    if req.kind == "session-limit":
        return "approved" if outcome == "approved" else "denied"
    return "answered"


def _rejection(record: RequestRecord) -> dict[str, Any]:
    if record.outcome == "ignored":
        return _denied_output(IGNORED_MESSAGE, status="ignored", request_id=record.request_id)
    if record.outcome == "cancelled":
        return _denied_output("The turn was cancelled.", status="cancelled", request_id=record.request_id)
    output = _denied_output(DENIED_MESSAGE, status="denied", request_id=record.request_id)
    if record.note:
        who = record.responder.principal_id if record.responder else "the person who cancelled"
        output["note"] = f'{who} wrote: "{record.note}"'
    return output


def _denied_output(message: str, *, status: str = "denied", request_id: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"code": "TOOL_EXECUTION_DENIED", "message": message, "tool": {"result": "not_run"}}
    if request_id:
        out["approval"] = {"requestId": request_id, "status": status}
    return out


def _apply_recorded(call: CallState, recorded: dict[str, Any]) -> None:
    if recorded.get("asked"):
        return  # an earlier run parked on an ask; the answer arrives through call.asks
    call.status, call.result = "done", CallResult.model_validate(recorded)


def _same(message: dict[str, Any], owner: Principal | None) -> bool:
    if owner is None:
        return True
    raw = message.get("principal")
    return raw is not None and owner.same_as(Principal.model_validate(raw))


def _owner_message(inbox: list[dict[str, Any]], owner: Principal | None) -> dict[str, Any] | None:
    return next((m for m in inbox if _same(m, owner)), None)


def _user_message(message: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": message["text"]}


def _as_dict(args: Any) -> dict[str, Any]:
    return args.model_dump(mode="json") if hasattr(args, "model_dump") else dict(args)


def _safe_input(tool: Tool | None, call: CallState) -> dict[str, Any] | None:
    if tool is None:
        return None
    try:
        return _as_dict(tool.parse(call.arguments))
    except ValueError:
        return None


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    try:
        json.dumps(value)
        return value
    except TypeError:
        return json.loads(json.dumps(value, default=str))
