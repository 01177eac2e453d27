"""A pydantic-ai ``Agent`` driven by the engine (DESIGN §14): ``backend(agent) -> AgentBackend``.

pydantic-ai pauses a run on people by itself: a tool with ``requires_approval=True`` or one raising
``ApprovalRequired`` becomes an approval, one raising ``CallDeferred`` a question, and the run ends with
``DeferredToolRequests`` as its output. The next run goes on from the message history with a
``DeferredToolResults`` (``ToolApproved(override_args=…)``, ``ToolDenied(message)``, a question's value).
This module only translates, and adds our part as a wrapper around the run's toolset, put on the run's tool
manager before its first step (pydantic-ai carries a wrapper toolset from step to step): our request policy
(``turn.gate``) before a call people have not approved, and the fence (``turn.fence``) around every execution,
keyed by the model's tool call id. Every tool of the run goes through it, the agent's own, its toolsets', its
dynamic and its capabilities' toolsets'; the agent itself is left as it was. (A capability of ours would do the
same through pydantic-ai's public hook, but any capability makes pydantic-ai wrap every streamed event and node of
a run in its hooks, and giving the run other toolsets (``override``) splits it into two: ~3.6 and ~4 M
instructions an approve cycle, 3 % of it, docs/PERFORMANCE.md.)

``saved`` is JSON: the message history in pydantic-ai's own serde (``ModelMessagesTypeAdapter``) and the ids
of the pending calls that are questions (their answers go back as call results, not approvals).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, get_type_hints

from pydantic import BaseModel, Field, create_model
from pydantic_ai import (
    Agent,
    AgentRun,
    ApprovalRequired,
    CallDeferred,
    DeferredToolRequests,
    DeferredToolResults,
    ToolApproved,
    ToolDenied,
    ToolFailed,
)
from pydantic_ai import __version__ as pydantic_ai_version
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.messages import (
    BaseToolCallPart,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
)
from pydantic_ai.tools import Tool
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, WrapperToolset
from pydantic_core import to_jsonable_python

from bot.backends import (
    Answer,
    Approve,
    BackendTurn,
    Failed,
    Finished,
    Outcome,
    Parked,
    PendingCall,
    Reject,
    Reply,
    Stopped,
    ToolInfo,
)
from bot.models.wire import new_call_id

FRAMEWORK = "pydantic-ai"


def backend(agent: AbstractAgent[Any, Any], *, deps: Any = None) -> PydanticAIBackend:
    """The engine's hold on a pydantic-ai agent; ``deps``: what its tools' ``RunContext.deps`` are, if any."""
    return PydanticAIBackend(agent, deps=deps)


class _Saved(BaseModel):
    """What a run goes on from: the message history, which of its pending calls are questions, and which
    paused from inside their tool (their approved run is fenced apart: see :class:`_Gated`)."""

    messages: list[Any]  # ModelMessagesTypeAdapter's JSON form
    questions: list[str] = Field(default_factory=list)
    paused_in_tool: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, messages: Sequence[ModelMessage], questions: Sequence[str] = (),
           paused_in_tool: Sequence[str] = ()) -> str:
        dumped = ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")
        return cls(messages=dumped, questions=list(questions), paused_in_tool=sorted(paused_in_tool)).model_dump_json()

    def history(self) -> list[ModelMessage]:
        return ModelMessagesTypeAdapter.validate_python(self.messages)


class PydanticAIBackend:
    framework = FRAMEWORK
    version = pydantic_ai_version

    def __init__(self, agent: AbstractAgent[Any, Any], *, deps: Any = None):
        self.agent = agent
        self.deps = deps
        self.tools_by_name = {info.name: info for info in _tool_infos(agent)}

    def tools(self) -> list[ToolInfo]:
        return list(self.tools_by_name.values())

    async def start(self, turn: BackendTurn, text: str, saved: str | None) -> Outcome:
        history = _Saved.model_validate_json(saved).history() if saved else None
        return await _Run(self, turn).drive(text, history, None)

    async def resume(self, turn: BackendTurn, saved: str, answers: dict[str, Answer]) -> Outcome:
        """From :class:`Parked` with people's answers, or (``answers`` empty) from a checkpoint taken after a
        model response: pydantic-ai then runs that response's tool calls, each through the fence again."""
        state = _Saved.model_validate_json(saved)
        history = state.history()
        last = history[-1] if history else None
        if not answers and isinstance(last, ModelResponse) and not last.tool_calls:
            # checkpointed with the answer, stopped before it was kept: pydantic-ai would ask the model again
            return Finished(text=last.text or "", saved=saved)
        results = _deferred_results(answers, set(state.questions)) if answers else None
        return await _Run(self, turn, set(state.paused_in_tool)).drive(None, history, results)


class _Run:
    """One ``agent.iter`` from start or resume to its outcome."""

    def __init__(self, backend: PydanticAIBackend, turn: BackendTurn, paused_in_tool: set[str] | None = None):
        self.backend = backend
        self.turn = turn
        self.paused_in_tool = paused_in_tool or set()  # call ids whose tool paused from inside the fence
        self.engine_failure: BaseException | None = None  # LeaseLost and the like: the engine's, never Failed
        self.tool_failures: set[int] = set()  # ids of exceptions the tools themselves raised

    async def drive(self, prompt: str | None, history: list[ModelMessage] | None,
                    results: DeferredToolResults | None) -> Outcome:
        agent = self.backend.agent
        try:
            async with agent.iter(prompt, message_history=history, deferred_tool_results=results,
                                  output_type=_with_deferred(agent.output_type), deps=self.backend.deps) as run:
                _gate_tools_of(run, self)
                return await self._steps(run)
        except Exception as exc:
            if self.engine_failure is not None:
                raise self.engine_failure from exc
            return Failed(reason=_plain(exc))

    async def _steps(self, run: AgentRun[Any, Any]) -> Outcome:
        responded = False  # a model response came in this run, not with the history
        async for node in run:
            if self.turn.stopped:
                return Stopped(saved=_Saved.of(_whole(run.all_messages())))
            if Agent.is_model_request_node(node):
                async with node.stream(run.ctx) as events:
                    async for event in events:
                        self._stream(event)
                        if self.turn.stopped:
                            return Stopped(saved=_Saved.of(_whole(run.all_messages())))
                responded = True
            elif Agent.is_call_tools_node(node) and responded:
                _distinct_call_ids(node.model_response, run.all_messages())
                # the new model response is stored before any of its tools run (serialized only
                # if the engine writes it: a pause or an end stores the outcome's state instead)
                await self.engine(self.turn.checkpoint(partial(_Saved.of, list(run.all_messages()))))
                responded = False
        assert run.result is not None
        return self._outcome(run.result.output, run.result.all_messages())

    async def engine(self, call: Awaitable[Any]) -> Any:
        """Await one of the engine's verbs; what it raises (other than a tool's own error passed through the
        fence) ends the run as it is, never as the agent's failure."""
        try:
            return await call
        except Exception as exc:
            if id(exc) not in self.tool_failures:
                self.engine_failure = exc
            raise

    def _stream(self, event: Any) -> None:
        if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart) and event.part.content:
            self.turn.text(event.part.content)
        elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
            if event.delta.content_delta:
                self.turn.text(event.delta.content_delta)

    def _outcome(self, output: Any, messages: list[ModelMessage]) -> Outcome:
        if not isinstance(output, DeferredToolRequests):
            return Finished(text=_as_text(output), saved=_Saved.of(messages))
        pending = [_approval(call, output) for call in output.approvals]
        pending += [_question(call, output) for call in output.calls]
        return Parked(pending=pending, saved=_Saved.of(messages, [call.tool_call_id for call in output.calls],
                                                       self.paused_in_tool))


def _gate_tools_of(run: AgentRun[Any, Any], ours: _Run) -> None:
    """Put our gate and fence around every tool call of ``run``, before its first step: a wrapper around its tool
    manager's toolset (all of the run's tools, the agent's output tools too, which pass through it as they are).
    Should pydantic-ai move its tool manager, this raises before any tool ran: the run fails, never ungated."""
    deps = run.ctx.deps
    deps.tool_manager = replace(deps.tool_manager, toolset=_Gated(deps.tool_manager.toolset, run=ours))


def _distinct_call_ids(response: ModelResponse, messages: list[ModelMessage]) -> None:
    """A call of the model's new response whose id the history already holds gets a new one, before any of its
    tools run and before the response is stored: some servers number calls per answer (``call_0`` every time),
    and the fence knows a call by its id, so the second would replay the first's result instead of running.
    In place: the response is the history's own last message (pydantic-ai appends it as the node carries it)."""
    seen = {part.tool_call_id for message in messages if message is not response and isinstance(message, ModelResponse)
            for part in message.parts if isinstance(part, BaseToolCallPart)}
    for part in response.parts:
        if isinstance(part, BaseToolCallPart):
            if part.tool_call_id in seen:
                part.tool_call_id = new_call_id()
            seen.add(part.tool_call_id)


@dataclass
class _Gated(WrapperToolset[Any]):
    """Every call of the agent's tools: our request policy first (unless people approved it in this resume),
    then the tool inside the fence, so a replay after a kill returns what it returned before.

    A tool may itself pause (raise ``ApprovalRequired`` or ``CallDeferred``) from inside the fence. That pause
    is recorded as the call's result, so a replay pauses the same way, and the run people then approve is
    fenced apart (``<call id>:approved``): it runs once, however often either is replayed. Every other call,
    approved or not, is fenced under its own call id. The agent's output tools (its structured answer) are
    not calls of a tool: they pass through as they are."""

    run: _Run | None = None

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: Any, tool: Any) -> Any:
        run = self.run
        if tool.tool_def.kind == "output":
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        assert run is not None and ctx.tool_call_id is not None
        call_id, turn = ctx.tool_call_id, run.turn
        if not ctx.tool_call_approved:
            verdict = await run.engine(turn.gate(call_id, name, tool_args))
            if verdict.action == "ask":
                raise ApprovalRequired(metadata={"asked_by": "policy"})
            if verdict.action == "refuse":
                raise ToolFailed(verdict.reason or f"{name} is not allowed here.")

        async def execute() -> Any:
            try:
                # JSON both times: the model reads the same thing from a first run and from a replay
                return to_jsonable_python(await self.wrapped.call_tool(name, tool_args, ctx, tool),
                                          serialize_unknown=True)
            except (ApprovalRequired, CallDeferred) as pause:
                return _paused(pause)
            except BaseException as exc:
                run.tool_failures.add(id(exc))
                raise

        info = run.backend.tools_by_name.get(name)
        # the fence itself reports the call started and finished, and only when it runs (not on a replay)
        fenced = f"{call_id}:approved" if ctx.tool_call_approved and call_id in run.paused_in_tool else call_id
        result = await run.engine(turn.fence(fenced, name, execute, idempotent=bool(info and info.idempotent)))
        if isinstance(result, dict) and PAUSED in result:  # it paused, now or before a replay
            run.paused_in_tool.add(call_id)
            _pause_again(result)
        return result


PAUSED = "pydantic_ai_paused"  # the key of a call's recorded result when the tool paused instead of returning


def _paused(pause: ApprovalRequired | CallDeferred) -> dict[str, Any]:
    kind = "approval" if isinstance(pause, ApprovalRequired) else pause.kind
    return {PAUSED: kind, "metadata": to_jsonable_python(pause.metadata, serialize_unknown=True)}


def _pause_again(paused: dict[str, Any]) -> None:
    """pydantic-ai hears the pause the tool raised (now or before a replay)."""
    if paused[PAUSED] == "approval":
        raise ApprovalRequired(metadata=paused.get("metadata"))
    raise CallDeferred(metadata=paused.get("metadata"), kind=paused[PAUSED])


# --- translating pydantic-ai's pause and our answers ---------------------------------------------


def _approval(call: ToolCallPart, requests: DeferredToolRequests) -> PendingCall:
    metadata = requests.metadata.get(call.tool_call_id) or {}
    reason = metadata.get("reason")
    return PendingCall(call_id=call.tool_call_id, tool_name=call.tool_name,
                       arguments=requests.validated_args.get(call.tool_call_id) or call.args_as_dict(),
                       prompt=str(reason) if reason else None,
                       decisions=frozenset({"approve", "edit", "reject"}))


def _question(call: ToolCallPart, requests: DeferredToolRequests) -> PendingCall:
    """A ``CallDeferred``: its metadata's ``question`` and ``options``; an external call without them is asked
    of people too (its answer is the call's result)."""
    metadata = requests.metadata.get(call.tool_call_id) or {}
    prompt = metadata.get("question") or metadata.get("prompt") or f"What should {call.tool_name} return?"
    options = metadata.get("options") or []
    return PendingCall(call_id=call.tool_call_id, tool_name=call.tool_name, arguments=call.args_as_dict(),
                       kind="question", prompt=str(prompt), options=[str(option) for option in options],
                       decisions=frozenset({"respond", "reject"}))


def _deferred_results(answers: Mapping[str, Answer], questions: set[str]) -> DeferredToolResults:
    results = DeferredToolResults()
    for call_id, answer in answers.items():
        if answer.by:
            results.answered_by[call_id] = answer.by
        if call_id in questions:
            results.calls[call_id] = ToolFailed(answer.message) if isinstance(answer, Reject) else _value(answer)
        elif isinstance(answer, Approve):
            results.approvals[call_id] = ToolApproved(override_args=answer.arguments)
        else:  # a rejection, or words typed instead of a click: the model reads them
            message = answer.message if isinstance(answer, Reject) else str(answer.value)
            results.approvals[call_id] = ToolDenied(message)
    return results


def _value(answer: Approve | Reply) -> Any:
    return answer.value if isinstance(answer, Reply) else (answer.arguments or "approved")


# --- the agent's tools as the engine sees them -----------------------------------------------------


def _tool_infos(agent: AbstractAgent[Any, Any]) -> list[ToolInfo]:
    """The agent's function tools (an MCP server's tools are listed only inside a run: not here)."""
    leaves: list[AbstractToolset[Any]] = []
    for toolset in agent.toolsets:
        toolset.apply(leaves.append)
    return [_tool_info(tool) for leaf in leaves if isinstance(leaf, FunctionToolset)
            for tool in leaf.tools.values()]


def _tool_info(tool: Tool[Any]) -> ToolInfo:
    metadata = tool.metadata or {}
    parameters = tool.function_schema.json_schema
    return ToolInfo(name=tool.name, description=tool.description or "", parameters=parameters,
                    asks=bool(tool.requires_approval), editable=True,
                    idempotent=bool(metadata.get("idempotent")), args_model=_args_model(tool, parameters))


def _args_model(tool: Tool[Any], parameters: Mapping[str, Any]) -> type[BaseModel] | None:
    """The tool's parameters as a pydantic model (for "Edit & approve"), from its signature; None when its
    arguments are not plain named parameters."""
    if tool.function_schema.single_arg_name is not None:  # one model-like argument, flattened by pydantic-ai
        return None
    try:
        signature = inspect.signature(tool.function)
        hints = get_type_hints(tool.function, include_extras=True)
    except (TypeError, ValueError, NameError):
        return None
    described = parameters.get("properties", {})
    fields: dict[str, Any] = {}
    for index, param in enumerate(signature.parameters.values()):
        if index == 0 and tool.takes_ctx:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            return None
        default = ... if param.default is param.empty else param.default
        description = (described.get(param.name) or {}).get("description")
        fields[param.name] = (hints.get(param.name, Any), Field(default, description=description))
    return create_model(f"{tool.name}_arguments", **fields)


# --- small helpers -------------------------------------------------------------------------------


def _with_deferred(output_type: Any) -> list[Any]:
    """The agent's own output type, or DeferredToolRequests: what lets a run pause instead of fail."""
    types = list(output_type) if isinstance(output_type, Sequence) and not isinstance(output_type, str) \
        else [output_type]
    return types if DeferredToolRequests in types else [*types, DeferredToolRequests]


def _whole(messages: list[ModelMessage]) -> list[ModelMessage]:
    """The history without a trailing model response whose tool calls never ran: the next turn can follow it."""
    if messages and isinstance(messages[-1], ModelResponse) and messages[-1].tool_calls:
        return messages[:-1]
    return messages


def _as_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    return json.dumps(to_jsonable_python(output, serialize_unknown=True), ensure_ascii=False)


def _plain(exc: Exception) -> str:
    words = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"The agent stopped with an error ({type(exc).__name__}{': ' + words[:200] if words else ''})."
