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
  canceller's words to the model. The SDK has no edited arguments and no questions of its own; both are
  ours. Edit & approve: the SDK approves the call as the model made it (its approvals are bound to those
  arguments) and our fence runs the tool with the edited ones, which come with every resume from the
  settled request. Questions: a tool of ours (``ask_user``) added to copies of the agent and of the agents
  it hands off to; it pauses as an SDK interruption, and once answered it returns the person's words.
- **Call ids.** The agents' models give a call whose id the conversation holds a new one (``openai_agents_model``).
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
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from importlib.metadata import version as installed_version
from typing import Any

from agents import Agent, FunctionTool, Handoff, HostedMCPTool, RunConfig, Runner, RunState, function_tool
from agents.function_schema import function_schema
from agents.items import ToolApprovalItem
from agents.tool_context import ToolContext
from openai.types.responses import ResponseTextDeltaEvent
from pydantic import BaseModel

from bot.backends import (
    Answer,
    Approve,
    BackendTurn,
    Decision,
    Failed,
    Finished,
    GateVerdict,
    Outcome,
    Parked,
    PendingCall,
    Reject,
    Reply,
    Stopped,
    ToolInfo,
)
from bot.backends.openai_agents_model import run_model_provider, with_distinct_call_ids

FRAMEWORK = "openai-agents"
QUESTION_TOOL = "ask_user"  # the tool we add for asking people (not when the agent has a tool of that name)
log = logging.getLogger(__name__)


# --- one run's link to the engine, visible to the tools' hooks ------------------------------------


@dataclass
class _Run:
    turn: BackendTurn
    verdicts: dict[str, GateVerdict] = field(default_factory=dict)  # call id → verdict, this step
    engine_error: BaseException | None = None  # the fence's own failure (a lost lease), raised as is
    edited: dict[str, str] = field(default_factory=dict)  # call id → the JSON arguments people approved
    replies: dict[str, Any] = field(default_factory=dict)  # call id → a question's answer


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
        self.function = getattr(tool, "__wrapped__", None)  # the function ``@function_tool`` made it from, if so

    async def __call__(self, context: ToolContext[Any], arguments: str) -> Any:
        run = _current_run.get()
        if run is None:
            return await self.original(context, arguments)
        call_id = context.tool_call_id
        if call_id in run.edited:  # approved with changed arguments: the tool runs with those, the SDK's
            arguments = context.tool_arguments = run.edited[call_id]  # own parsing and validation included
            context._function_tool_arguments = None  # the SDK's arguments prepared from the model's call
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


def _agents(root: Agent[Any], *, as_tools: bool = True) -> Iterator[Agent[Any]]:
    """The agent and every agent it can hand off to or (``as_tools``) call as a tool, each once."""
    seen: set[int] = set()
    todo = [root]
    while todo:
        agent = todo.pop()
        if id(agent) in seen:
            continue
        seen.add(id(agent))
        yield agent
        for handoff in agent.handoffs:
            target = _handoff_target(handoff)
            if isinstance(target, Agent):
                todo.append(target)
        for tool in agent.tools if as_tools else ():
            if isinstance(tool, FunctionTool) and isinstance(tool._agent_instance, Agent):
                todo.append(tool._agent_instance)


def _handoff_target(handoff: Any) -> Any:
    return handoff._agent_ref() if isinstance(handoff, Handoff) and handoff._agent_ref else handoff


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


def _install(root: Agent[Any], idempotent: frozenset[str], ours: FunctionTool | None) -> None:
    """Put our gate and fence on every function tool, in place (once: wrapping again changes nothing but
    which tools are safe to repeat). ``ours``, the question tool, always pauses and runs nothing."""
    for agent in _agents(root):
        for tool in agent.tools:
            if not isinstance(tool, FunctionTool) or tool is ours:
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
    """A function tool as it is; any other tool left (those beyond the fence are refused) runs at the provider.
    A fenced tool takes edited arguments (the fence runs it with them); an agent used as a tool does not."""
    if isinstance(tool, FunctionTool):
        gate, invoke = tool.needs_approval, tool.on_invoke_tool
        asks = (gate.original if isinstance(gate, _Gate) else gate) is True
        fenced = isinstance(invoke, _FencedInvoke)
        return ToolInfo(name=tool.name, description=tool.description, parameters=tool.params_json_schema,
                        asks=asks, idempotent=fenced and invoke.idempotent, editable=fenced,
                        args_model=_args_model(invoke.function) if fenced else None)
    hosted_asks = isinstance(tool, HostedMCPTool) and tool.tool_config.get("require_approval") not in (
        None, "never")
    return ToolInfo(name=tool.name, description=getattr(tool, "description", None) or "", hosted=True,
                    asks=hosted_asks)


def _args_model(function: Callable[..., Any] | None) -> type[BaseModel] | None:
    """A tool's arguments as the SDK's own pydantic model (the "Edit & approve" form and its checks), for a
    tool made by ``@function_tool`` from plain named parameters; None otherwise (no form is offered)."""
    if function is None:  # a FunctionTool made by hand
        return None
    try:
        schema = function_schema(function)
    except Exception:  # noqa: BLE001 - a function the SDK cannot read again: no form, rather than a wrong one
        return None
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    if any(p.kind in variadic for p in schema.signature.parameters.values()):
        return None
    return schema.params_pydantic_model


# --- questions: a tool of ours, on copies of the agents -------------------------------------------


async def _ask_user(ctx: ToolContext[Any], question: str, options: list[str] | None = None) -> str:
    """Ask the person you are helping a question and wait for their answer. Use it when you need a decision
    or a detail only they can give, rather than guessing.

    Args:
        question: The question, in a sentence or two.
        options: A few short answers they can pick from; leave it empty to let them write their own.
    """
    # runs only once people answered (the call pauses first): the answer is what the model reads
    run = _current_run.get()
    reply = run.replies.get(ctx.tool_call_id) if run is not None else None
    return "No answer was given." if reply is None else str(reply)


def question_tool() -> FunctionTool:
    """The tool this backend adds to an agent for asking people (``ask_user``): offered to an agent run alone, the
    model is asked exactly what it is asked in the bot (the bench's like-for-like contender)."""
    return function_tool(_ask_user, name_override=QUESTION_TOOL, needs_approval=True)


def _with_question_tool(root: Agent[Any], tool: FunctionTool) -> tuple[Agent[Any], list[Agent[Any]]]:
    """Copies of the agent and of every agent it hands off to, each with the question tool added and its
    handoffs leading to the copies, and all the copies (handoffs hold their agent weakly: these keep them).
    The agents given are left as they were."""
    graph = list(_agents(root, as_tools=False))
    copies = {id(agent): agent.clone(tools=[*agent.tools, tool]) for agent in graph}
    for agent in graph:
        copies[id(agent)].handoffs = [_handoff_to_copy(handoff, copies) for handoff in agent.handoffs]
    return copies[id(root)], list(copies.values())


def _handoff_to_copy(handoff: Any, copies: dict[int, Agent[Any]]) -> Any:
    target = _handoff_target(handoff)
    copy = copies.get(id(target))
    if copy is None:
        return handoff
    if isinstance(handoff, Agent):
        return copy
    moved = replace(handoff, on_invoke_handoff=_ToCopy(handoff.on_invoke_handoff, copies))
    moved._agent_ref = weakref.ref(copy)
    return moved


class _ToCopy:
    """A handoff's own ``on_invoke_handoff`` (its input, its ``on_handoff``), leading to the agent's copy."""

    def __init__(self, invoke: Callable[[Any, str], Awaitable[Any]], copies: dict[int, Agent[Any]]):
        self.invoke, self.copies = invoke, copies

    async def __call__(self, context: Any, arguments: str) -> Any:
        agent = await self.invoke(context, arguments)
        return self.copies.get(id(agent), agent)


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
    other is reported to the model as interrupted. ``questions``: give the agent (and the agents it hands off
    to) our ``ask_user`` tool, a question card in Slack; False leaves its tools as they are. It is not added
    when one of them has a tool of that name already.
    ``wrap(OpenAIAgentsBackend(agent, idempotent={...}, questions=False))``."""

    framework = FRAMEWORK

    def __init__(self, agent: Agent[Any], *, idempotent: frozenset[str] | set[str] = frozenset(),
                 questions: bool = True):
        _refuse_ungated(agent)
        self.given = agent  # kept alive: the copies' handoffs find a copy by the id of the agent it copies
        self.question_tool: FunctionTool | None = None
        self._copies: list[Agent[Any]] = []
        taken = any(tool.name == QUESTION_TOOL for a in _agents(agent) for tool in a.tools)
        if questions and not taken:
            self.question_tool = question_tool()
            agent, self._copies = _with_question_tool(agent, self.question_tool)
        _install(agent, frozenset(idempotent), self.question_tool)
        for each in _agents(agent):
            with_distinct_call_ids(each)
        self.agent = agent
        self.version = installed_version("openai-agents")
        fenced = {tool.name for a in _agents(agent) for tool in a.tools
                  if isinstance(tool, FunctionTool) and isinstance(tool.on_invoke_tool, _FencedInvoke)}
        self._calls = _Calls(editable=frozenset(fenced), question=self.question_tool is not None)

    def tools(self) -> list[ToolInfo]:
        found: dict[str, ToolInfo] = {}
        for agent in _agents(self.agent):
            for tool in agent.tools:
                found.setdefault(tool.name, _tool_info(tool))
        return list(found.values())

    async def start(self, turn: BackendTurn, text: str, saved: str | None) -> Outcome:
        earlier = _load_conversation(saved)
        # the first turn's input as the text itself, as the SDK takes it most simply: a list is checked and
        # normalized again at every pause and resume (~0.5 M instructions an approve cycle)
        return await self._drive(turn, [*earlier, {"role": "user", "content": text}] if earlier else text)

    async def resume(self, turn: BackendTurn, saved: str, answers: Mapping[str, Answer]) -> Outcome:
        try:
            paused = _Paused.loads(saved)
            state = await RunState.from_json(self.agent, paused.state)
        except Exception:  # noqa: BLE001 - the SDK's own reading of its state: whatever fails, fails closed
            return Failed(reason="this paused run cannot be read back by the agent as it is now")
        run = _Run(turn)
        waiting = self._calls.decide(state, _paused_calls(state), paused.verdicts, answers, run)
        if isinstance(waiting, Failed):
            return waiting
        if waiting:
            return Parked(pending=waiting, saved=saved)
        return await self._drive(turn, state, run)

    async def _drive(self, turn: BackendTurn, first: str | list[Any] | RunState[Any], run: _Run | None = None) -> Outcome:
        """Run step by step: each step pauses, is stored, and goes on unless people must answer."""
        run = run or _Run(turn)
        token = _current_run.set(run)
        try:
            given: str | list[Any] | RunState[Any] = first
            while True:
                step = await self._step(run, given)
                if not isinstance(step, _Step):
                    return step
                await turn.checkpoint(step.saved)
                waiting = self._calls.decide(step.state, step.interruptions, step.verdicts, {}, run)
                if isinstance(waiting, Failed):
                    return waiting
                if waiting:
                    return Parked(pending=waiting, saved=step.saved)
                if turn.stopped:
                    return Stopped()
                given = step.state
        finally:
            _current_run.reset(token)

    async def _step(self, run: _Run, given: str | list[Any] | RunState[Any]) -> _Step | Outcome:
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
        return _Step(state=state, interruptions=list(result.interruptions), verdicts=verdicts, saved=saved)


@dataclass
class _Step:
    """A step paused before its tools run: the state to go on from, its calls paused (as the run gave them: the
    state's own copies cost as much as the pause's serialization), our verdicts, and it as saved."""

    state: RunState[Any]
    interruptions: list[ToolApprovalItem]
    verdicts: dict[str, GateVerdict]
    saved: str


def _paused_calls(state: RunState[Any]) -> list[ToolApprovalItem]:
    """The calls a read-back state's step paused on, as the state holds them (an SDK internal). Answered with
    these very items, the SDK knows them at once; ``get_interruptions()`` gives detached copies, each of which
    ``approve`` and ``reject`` then copy and match against every pending call again (~6 M instructions an approve
    cycle, a quarter of what the bot adds to the SDK's own)."""
    items = getattr(getattr(state, "_current_step", None), "interruptions", None)
    return list(items) if isinstance(items, list) else state.get_interruptions()


def _run_config() -> RunConfig:
    """A run's settings: the SDK's tracing would export the conversation to OpenAI's servers, so it is off; a
    model named by a string comes with distinct call ids. One per run, as the SDK makes one per run itself (its
    model provider reads the environment then)."""
    return RunConfig(tracing_disabled=True, model_provider=run_model_provider())


async def _stream(turn: BackendTurn, result: Any) -> bool:
    """Pass the model's text on as it streams; True when someone pressed stop."""
    async for event in result.stream_events():
        if turn.stopped:
            result.cancel()
            return True
        if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent):
            turn.text(event.data.delta)
    return turn.stopped


@dataclass(frozen=True)
class _Calls:
    """What this agent's pending calls take: edited arguments (its fenced tools), and whether ``ask_user``
    is our question tool."""

    editable: frozenset[str]
    question: bool

    def is_question(self, item: ToolApprovalItem) -> bool:
        return self.question and item.tool_name == QUESTION_TOOL

    def decide(self, state: RunState[Any], paused: list[ToolApprovalItem], verdicts: Mapping[str, GateVerdict],
               answers: Mapping[str, Answer], run: _Run) -> list[PendingCall] | Failed:
        """Apply people's answers and our verdicts to the calls ``paused`` in the state's step; what still waits
        on people. An edit or a reply is noted on ``run``: the tool gets it when the SDK runs the approved call."""
        waiting: list[PendingCall] = []
        for item in paused:
            call_id = item.call_id or ""
            answer = answers.get(call_id)
            verdict = verdicts.get(call_id, GateVerdict(action="ask"))
            if isinstance(answer, Reject):
                state.reject(item, rejection_message=answer.message)
            elif answer is not None:
                if (refused := self._take(item, answer, run)) is not None:
                    return refused
                state.approve(item)
            elif self.is_question(item):
                waiting.append(_question(item))
            elif verdict.action == "run":
                state.approve(item)
            elif verdict.action == "refuse":
                state.reject(item, rejection_message=verdict.reason or "This call is not allowed.")
            else:
                waiting.append(self._approval(item))
        return waiting

    def _take(self, item: ToolApprovalItem, answer: Approve | Reply, run: _Run) -> Failed | None:
        """Note an approval's edit or a question's reply for the run; why it cannot be taken, if so."""
        call_id = item.call_id or ""
        if self.is_question(item) != isinstance(answer, Reply):
            wanted, given = ("a reply", "an approval") if self.is_question(item) else ("an approval", "a reply")
            return Failed(reason=f"{item.tool_name} waits on {wanted}, not on {given}")
        if isinstance(answer, Reply):
            run.replies[call_id] = answer.value
        elif answer.arguments is not None:
            if item.tool_name not in self.editable:
                return Failed(reason=f"{item.tool_name} cannot run with changed arguments")
            run.edited[call_id] = json.dumps(answer.arguments)
        return None

    def _approval(self, item: ToolApprovalItem) -> PendingCall:
        edit: frozenset[Decision] = frozenset({"edit"}) if item.tool_name in self.editable else frozenset()
        return PendingCall(call_id=item.call_id or "", tool_name=item.tool_name or "",
                           arguments=_parsed(item.arguments), decisions=frozenset({"approve", "reject"}) | edit)


def _question(item: ToolApprovalItem) -> PendingCall:
    """``ask_user``'s call as a question: its words, and its options as a menu (typing is always allowed)."""
    arguments = _parsed(item.arguments)
    given = arguments.get("options")
    options = [str(o).strip() for o in given if str(o).strip()] if isinstance(given, list) else []
    return PendingCall(call_id=item.call_id or "", tool_name=item.tool_name or "", arguments=arguments,
                       kind="question", prompt=str(arguments.get("question") or "The agent asks you something."),
                       options=list(dict.fromkeys(options)), decisions=frozenset({"respond", "reject"}))


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
    """The engine's hold on an OpenAI Agents SDK ``Agent`` (its function tools get our gate and fence, and it
    gets our question tool)."""
    return OpenAIAgentsBackend(agent)
