"""The OpenAI Agents SDK's ``Agent`` as an agent backend (DESIGN §14).

How the SDK's own pieces carry the engine's contract:

- **Gate.** Every function tool of the agent, of every agent it can hand off to and of every agent it uses
  as a tool gets a ``needs_approval`` of ours. It asks our request policy (``turn.gate``) and the tool's own
  ``needs_approval`` and notes the verdict, then always answers True: every step pauses as an SDK
  interruption before any of its tools runs. That pause is the step's checkpoint (``RunState.to_json``);
  calls the verdict lets run are approved by us and the run goes straight on, calls that ask become
  :class:`PendingCall` s, calls refused are rejected with the reason for the model to read.
- **Fence.** Each function tool's ``on_invoke_tool`` runs through ``turn.fence``, keyed by the SDK's call id,
  so a resume replayed after a kill returns the recorded result instead of running the tool again.
- **Answers.** ``RunState.approve(item)``; ``RunState.reject(item, rejection_message=...)`` carries the
  canceller's words to the model. The SDK has no edited arguments and no questions: a pending call's
  decisions are approve and reject only.
- **Saved.** JSON: the SDK's ``RunState.to_json()`` with our verdicts while a run is paused, the
  conversation (``result.to_input_list()``) once it finished.

Tools the provider runs (web search, file search, code interpreter, hosted MCP) are beyond any fence: they
are named ``hosted``. Tools that run on this machine without being function tools (shell, computer,
apply_patch, custom tools) and local MCP servers would run past the gate and the fence: such an agent is
refused when it is wrapped, rather than run ungated.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from importlib.metadata import version as installed_version
from typing import Any

from agents import Agent, FunctionTool, Handoff, HostedMCPTool, RunConfig, Runner, RunState
from agents.items import ToolApprovalItem
from agents.tool_context import ToolContext
from openai.types.responses import ResponseTextDeltaEvent
from pydantic import BaseModel

from bot.backends import (
    Answer,
    Approve,
    BackendTurn,
    Failed,
    Finished,
    GateVerdict,
    Outcome,
    Parked,
    PendingCall,
    Reject,
    Stopped,
    ToolInfo,
)

FRAMEWORK = "openai-agents"
log = logging.getLogger(__name__)


# --- one run's link to the engine, visible to the tools' hooks ------------------------------------


@dataclass
class _Run:
    turn: BackendTurn
    verdicts: dict[str, GateVerdict] = field(default_factory=dict)  # call id → verdict, this step
    engine_error: BaseException | None = None  # the fence's own failure (a lost lease), raised as is


# set while the backend drives a run: tools called outside the bot behave as the SDK made them
_current_run: ContextVar[_Run | None] = ContextVar("openai_agents_run", default=None)


class _Gate:
    """The ``needs_approval`` we install: notes our verdict for the call and pauses the step."""

    def __init__(self, tool: FunctionTool, original: Any):
        self.tool_name = tool.name
        self.original = original  # the tool's own needs_approval: a bool or a (maybe async) callable

    async def framework_asks(self, context: Any, params: dict[str, Any], call_id: str) -> bool:
        if not callable(self.original):
            return bool(self.original)
        asked = self.original(context, params, call_id)
        return bool(await asked if inspect.isawaitable(asked) else asked)

    async def __call__(self, context: Any, params: dict[str, Any], call_id: str) -> bool:
        run = _current_run.get()
        if run is None:
            return await self.framework_asks(context, params, call_id)
        verdict = await run.turn.gate(call_id, self.tool_name, params)
        if verdict.action == "run" and await self.framework_asks(context, params, call_id):
            verdict = GateVerdict(action="ask")  # a tool the framework gates itself always asks
        run.verdicts[call_id] = verdict
        return True  # every call waits: the step is stored before any of its tools runs


class _FencedInvoke:
    """The ``on_invoke_tool`` we install: the tool's body runs inside ``turn.fence``, keyed by call id."""

    def __init__(self, tool: FunctionTool, original: Callable[[ToolContext[Any], str], Awaitable[Any]],
                 idempotent: bool):
        self.tool_name = tool.name
        self.original = original
        self.idempotent = idempotent

    async def __call__(self, context: ToolContext[Any], arguments: str) -> Any:
        run = _current_run.get()
        if run is None:
            return await self.original(context, arguments)
        call_id = context.tool_call_id
        tool_raised = False

        async def body() -> Any:
            nonlocal tool_raised
            try:
                return _jsonable(await self.original(context, arguments))
            except Exception:
                tool_raised = True  # the tool's own failure: the SDK's failure handling has it
                raise

        run.turn.tool_started(call_id, self.tool_name, _parsed(arguments))
        try:  # the fence reports the result (tool_finished), recorded or replayed
            return _for_model(await run.turn.fence(call_id, self.tool_name, body, idempotent=self.idempotent))
        except Exception as exc:
            if not tool_raised:
                run.engine_error = exc  # the SDK would wrap it as the tool's error: the run re-raises it
            raise


# --- the agent's tools ----------------------------------------------------------------------------

# tools that run on this machine outside a function tool: neither our gate nor our fence reaches them
_UNGATED = ("ComputerTool", "ShellTool", "LocalShellTool", "ApplyPatchTool", "CustomTool",
            "ProgrammaticToolCallingTool")


def _agents(root: Agent[Any]) -> Iterator[Agent[Any]]:
    """The agent and every agent it can hand off to or call as a tool, each once."""
    seen: set[int] = set()
    todo = [root]
    while todo:
        agent = todo.pop()
        if id(agent) in seen:
            continue
        seen.add(id(agent))
        yield agent
        for handoff in agent.handoffs:
            target = handoff._agent_ref() if isinstance(handoff, Handoff) and handoff._agent_ref else handoff
            if isinstance(target, Agent):
                todo.append(target)
        for tool in agent.tools:
            if isinstance(tool, FunctionTool) and isinstance(tool._agent_instance, Agent):
                todo.append(tool._agent_instance)


def _refuse_ungated(root: Agent[Any]) -> None:
    for agent in _agents(root):
        if agent.mcp_servers:
            raise TypeError(f"agent {agent.name!r} has local MCP servers: their tools would run past this "
                            f"bot's approvals and its execution fence; give them as function tools instead")
        for handoff in agent.handoffs:
            if isinstance(handoff, Handoff) and (handoff._agent_ref is None or handoff._agent_ref() is None):
                raise TypeError(f"agent {agent.name!r} hands off to {handoff.agent_name!r} through a Handoff that "
                                f"does not name its agent: its tools could not be gated; use handoff(agent)")
        for tool in agent.tools:
            if type(tool).__name__ in _UNGATED:
                raise TypeError(f"agent {agent.name!r} has a {type(tool).__name__}: it would run past this "
                                f"bot's approvals and its execution fence")


def _install(root: Agent[Any], idempotent: frozenset[str]) -> None:
    """Put our gate and fence on every function tool, in place (once: wrapping again changes nothing but
    which tools are safe to repeat)."""
    for agent in _agents(root):
        for tool in agent.tools:
            if not isinstance(tool, FunctionTool):
                continue
            if not isinstance(tool.needs_approval, _Gate):
                tool.needs_approval = _Gate(tool, tool.needs_approval)
            # an agent used as a tool is not fenced: its run resumes through it; its own tools are fenced
            if tool._is_agent_tool:
                continue
            if isinstance(tool.on_invoke_tool, _FencedInvoke):
                tool.on_invoke_tool.idempotent = tool.name in idempotent
            else:
                tool.on_invoke_tool = _FencedInvoke(tool, tool.on_invoke_tool, idempotent=tool.name in idempotent)


def _tool_info(tool: Any) -> ToolInfo:
    """A function tool as it is; any other tool left (those beyond the fence are refused) runs at the provider."""
    if isinstance(tool, FunctionTool):
        gate, invoke = tool.needs_approval, tool.on_invoke_tool
        asks = (gate.original if isinstance(gate, _Gate) else gate) is True
        return ToolInfo(name=tool.name, description=tool.description, parameters=tool.params_json_schema,
                        asks=asks, idempotent=isinstance(invoke, _FencedInvoke) and invoke.idempotent)
    hosted_asks = isinstance(tool, HostedMCPTool) and tool.tool_config.get("require_approval") not in (
        None, "never")
    return ToolInfo(name=tool.name, description=getattr(tool, "description", None) or "", hosted=True,
                    asks=hosted_asks)


# --- the saved state ------------------------------------------------------------------------------


@dataclass
class _Paused:
    """A run paused at a step: the SDK's RunState (its own JSON) and our verdict on each call of the step."""

    state: dict[str, Any]
    verdicts: dict[str, GateVerdict]

    def dumps(self) -> str:
        # the state is the SDK's JSON already: written as is, not walked by pydantic (one per model response)
        return json.dumps({"openai_agents_state": self.state,
                           "verdicts": {cid: v.model_dump() for cid, v in self.verdicts.items()}})

    @classmethod
    def loads(cls, saved: str) -> _Paused:
        data = json.loads(saved)
        if not isinstance(data, dict) or not isinstance(data.get("openai_agents_state"), dict):
            raise ValueError("not a paused OpenAI Agents SDK run")
        verdicts = {cid: GateVerdict.model_validate(v) for cid, v in (data.get("verdicts") or {}).items()}
        return cls(state=data["openai_agents_state"], verdicts=verdicts)


class _Conversation(BaseModel):
    """A finished run: its items, the input of the session's next turn."""

    openai_agents_items: list[Any]


def _load_conversation(saved: str | None) -> list[Any]:
    """The session's earlier turns; none when they were kept by another agent (a thread that began before a
    deploy changed the bot's agent goes on without them rather than failing every message)."""
    if not saved:
        return []
    try:
        return _Conversation.model_validate_json(saved).openai_agents_items
    except ValueError:
        log.warning("a conversation kept by another agent: this turn starts without it")
        return []


# --- the backend ----------------------------------------------------------------------------------


class OpenAIAgentsBackend:
    """An OpenAI Agents SDK agent, driven by the engine. ``idempotent``: names of its tools that are safe to
    run again after their process died mid-run (the SDK has no way to say so): such a call is re-run, any
    other is reported to the model as interrupted. ``wrap(OpenAIAgentsBackend(agent, idempotent={...}))``."""

    framework = FRAMEWORK

    def __init__(self, agent: Agent[Any], *, idempotent: frozenset[str] | set[str] = frozenset()):
        _refuse_ungated(agent)
        _install(agent, frozenset(idempotent))
        self.agent = agent
        self.version = installed_version("openai-agents")

    def tools(self) -> list[ToolInfo]:
        found: dict[str, ToolInfo] = {}
        for agent in _agents(self.agent):
            for tool in agent.tools:
                found.setdefault(tool.name, _tool_info(tool))
        return list(found.values())

    async def start(self, turn: BackendTurn, text: str, saved: str | None) -> Outcome:
        return await self._drive(turn, [*_load_conversation(saved), {"role": "user", "content": text}])

    async def resume(self, turn: BackendTurn, saved: str, answers: Mapping[str, Answer]) -> Outcome:
        try:
            paused = _Paused.loads(saved)
            state = await RunState.from_json(self.agent, paused.state)
        except Exception:  # noqa: BLE001 - the SDK's own reading of its state: whatever fails, fails closed
            return Failed(reason="this paused run cannot be read back by the agent as it is now")
        waiting = _decide(state, paused.verdicts, answers)
        if isinstance(waiting, Failed):
            return waiting
        if waiting:
            return Parked(pending=waiting, saved=saved)
        return await self._drive(turn, state)

    async def _drive(self, turn: BackendTurn, first: list[Any] | RunState[Any]) -> Outcome:
        """Run step by step: each step pauses, is stored, and goes on unless people must answer."""
        run = _Run(turn)
        token = _current_run.set(run)
        try:
            given: list[Any] | RunState[Any] = first
            while True:
                step = await self._step(run, given)
                if not isinstance(step, _Step):
                    return step
                await turn.checkpoint(step.saved)
                waiting = _decide(step.state, step.verdicts, {})
                if isinstance(waiting, Failed):
                    return waiting
                if waiting:
                    return Parked(pending=waiting, saved=step.saved)
                if turn.stopped:
                    return Stopped()
                given = step.state
        finally:
            _current_run.reset(token)

    async def _step(self, run: _Run, given: list[Any] | RunState[Any]) -> _Step | Outcome:
        """One SDK step, up to its pause (or the end); the framework's failures become :class:`Failed`."""
        run.verdicts = {}
        try:
            result = Runner.run_streamed(self.agent, given, run_config=_run_config())
            if await _stream(run.turn, result):
                return Stopped()
            if not result.interruptions:
                items = _Conversation(openai_agents_items=result.to_input_list()).model_dump_json()
                return Finished(text=_final_text(result.final_output), saved=items)
            state = result.to_state()
            verdicts = {item.call_id: run.verdicts.get(item.call_id, GateVerdict(action="ask"))
                        for item in result.interruptions if item.call_id}
            saved = _Paused(state=state.to_json(), verdicts=verdicts).dumps()
        except Exception as exc:
            if run.engine_error is not None:
                raise run.engine_error from None  # the engine's own (a lost lease): never the agent's failure
            return Failed(reason=_plain_reason(exc))
        return _Step(state=state, verdicts=verdicts, saved=saved)


@dataclass
class _Step:
    """A step paused before its tools run: the state to go on from, our verdicts, and it as saved."""

    state: RunState[Any]
    verdicts: dict[str, GateVerdict]
    saved: str


def _run_config() -> RunConfig:
    """A run's settings: the SDK's tracing would export the conversation to OpenAI's servers, so it is off.
    One per run, as the SDK makes one per run itself (its model provider reads the environment then)."""
    return RunConfig(tracing_disabled=True)


async def _stream(turn: BackendTurn, result: Any) -> bool:
    """Pass the model's text on as it streams; True when someone pressed stop."""
    async for event in result.stream_events():
        if turn.stopped:
            result.cancel()
            return True
        if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent):
            turn.text(event.data.delta)
    return turn.stopped


def _decide(state: RunState[Any], verdicts: Mapping[str, GateVerdict],
            answers: Mapping[str, Answer]) -> list[PendingCall] | Failed:
    """Apply people's answers and our verdicts to the paused step; what still waits on people."""
    waiting: list[PendingCall] = []
    for item in state.get_interruptions():
        call_id = item.call_id or ""
        answer = answers.get(call_id)
        verdict = verdicts.get(call_id, GateVerdict(action="ask"))
        if isinstance(answer, Approve):
            if answer.arguments is not None:
                return Failed(reason="this agent's framework cannot run a call with changed arguments")
            state.approve(item)
        elif isinstance(answer, Reject):
            state.reject(item, rejection_message=answer.message)
        elif answer is not None:
            return Failed(reason=f"{item.tool_name} waits on an approval, not on a reply")
        elif verdict.action == "run":
            state.approve(item)
        elif verdict.action == "refuse":
            state.reject(item, rejection_message=verdict.reason or "This call is not allowed.")
        else:
            waiting.append(_pending_call(item))
    return waiting


def _pending_call(item: ToolApprovalItem) -> PendingCall:
    return PendingCall(call_id=item.call_id or "", tool_name=item.tool_name or "",
                       arguments=_parsed(item.arguments))


def _parsed(arguments: str | None) -> dict[str, Any]:
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return {"arguments": arguments}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def _jsonable(output: Any) -> Any:
    """A tool's output as the fence records it (JSON): the model reads the same, first time or replayed."""
    if isinstance(output, BaseModel):
        return output.model_dump(mode="json")
    try:
        json.dumps(output)
    except (TypeError, ValueError):
        return str(output)
    return output


# the SDK's structured tool outputs, as dicts (ToolOutputText, ToolOutputImage, ToolOutputFileContent)
_STRUCTURED = ("text", "image", "file")


def _for_model(output: Any) -> Any:
    """What the SDK hands the model: its structured outputs as they are, other dicts and lists as JSON (the
    SDK would write them as ``str()`` does; JSON is what our own loop sends, and the engine's notes, such as
    an interrupted call's, are dicts a model and a program both read)."""
    def structured(item: Any) -> bool:
        return isinstance(item, dict) and item.get("type") in _STRUCTURED

    if structured(output) or (isinstance(output, list) and output and all(structured(i) for i in output)):
        return output
    if isinstance(output, dict | list):
        return json.dumps(output)
    return output


def _final_text(output: Any) -> str:
    if output is None:
        return ""
    if isinstance(output, BaseModel):
        return output.model_dump_json()
    return output if isinstance(output, str) else json.dumps(output, default=str)


def _plain_reason(exc: BaseException) -> str:
    return f"the agent stopped with an error ({type(exc).__name__}): {str(exc)[:300]}"


def backend(agent: Agent[Any]) -> OpenAIAgentsBackend:
    """The engine's hold on an OpenAI Agents SDK ``Agent`` (its function tools get our gate and fence)."""
    return OpenAIAgentsBackend(agent)
