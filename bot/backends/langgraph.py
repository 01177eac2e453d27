"""LangGraph as an agent backend (DESIGN §14): a compiled graph, a LangChain ``create_agent`` agent included.

Every ``interrupt()`` value of a run becomes :class:`PendingCall` s (LangChain's human-in-the-loop middleware
requests, Agent Inbox's, a plain value as a question: ``bot.backends.langgraph_interrupts``). People's answers
go back in one ``Command(resume={interrupt_id: value})``, in the shape each interrupt asked for.

State: each run gets its own in-memory checkpointer; after every super-step (LangGraph waits for the save,
``durability="sync"``) the thread's newest checkpoint of each namespace, with its pending writes, goes to
``turn.checkpoint`` as the checkpointer serialized it with LangGraph's ``JsonPlusSerializer`` (msgpack, never
pickle), its channel values apart, none read back. The engine stores it under its lease; a resume rebuilds the
thread from it (a thread saved whole, by the bot before, too). ``saved`` also says whether the interrupts' answers
were already delivered ("parked" or "running"), so a replayed resume continues the thread and never gives
LangGraph a second resume of one interrupt.

Tools: every ``ToolNode`` of the graph (``create_agent``'s among them) gets our wrapper outside its own
middleware chain: our request policy (``turn.gate``; "ask" is an ``interrupt()`` of the same shape as the
middleware's per-call request) and, innermost, the execution fence keyed by the model's tool call id (plus
how many questions the tool itself asked and got answered, so a tool that asks runs again after the answer).
"""

from __future__ import annotations

import base64
import contextvars
import json
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import version as package_version
from typing import Any, Literal

from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.errors import GraphInterrupt
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, Interrupt, interrupt
from pydantic import BaseModel, Field

from bot.backends import (
    Answer,
    Approve,
    BackendTurn,
    Decision,
    Failed,
    Finished,
    Outcome,
    Parked,
    PendingCall,
    Stopped,
    ToolInfo,
)
from bot.backends.langgraph_interrupts import (
    OUR_GATE,
    REJECTED,
    Asked,
    call_key,
    pending_of,
    resume_value,
    untakeable,
)
from bot.protocol import LeaseLost

FRAMEWORK = "langgraph"
# /2: each checkpoint as the in-memory saver serialized it, its channel values apart; /1 (read, not written):
# each checkpoint whole, read back from the saver and serialized again after every super-step
FORMAT = "langgraph-thread/2"

# a call not approved (a message steered past it, it expired) whose middleware takes no reject nor respond:
# nothing LangGraph accepts says so, so the run ends here, plainly
NO_CANCEL = ("`{name}` was not approved, and this agent takes no cancel for it (its middleware allows neither "
             "reject nor respond), so its run ended here.")

_serde = JsonPlusSerializer()


# --- the saved thread ----------------------------------------------------------------------------


class _Typed(BaseModel):
    """A value as LangGraph's serde typed it: its type tag and base64 bytes (a pickle tag is refused)."""

    type: str
    data: str

    @classmethod
    def of(cls, value: Any) -> _Typed:
        type_, raw = _serde.dumps_typed(value)
        return cls(type=type_, data=base64.b64encode(raw).decode())

    @classmethod
    def raw(cls, typed: tuple[str, bytes]) -> _Typed:
        """A value the saver serialized already, as it is."""
        return cls(type=typed[0], data=base64.b64encode(typed[1]).decode())

    def typed(self) -> tuple[str, bytes]:
        if self.type == "pickle":
            raise ValueError("a saved LangGraph thread holds a pickled value: refused")
        return self.type, base64.b64decode(self.data)

    def load(self) -> Any:
        return _serde.loads_typed(self.typed())


class _Checkpoint(BaseModel):
    """The newest checkpoint of one namespace of the thread, with its pending writes."""

    ns: str
    checkpoint: _Typed  # without its channel values (/2), or with them (/1)
    metadata: _Typed
    writes: list[tuple[str, str, _Typed]] = Field(default_factory=list)  # task id, channel, value
    values: dict[str, _Typed] | None = None  # /2: each channel's value at the checkpoint's version


class _Saved(BaseModel):
    format: Literal["langgraph-thread/1", "langgraph-thread/2"] = FORMAT
    thread_id: str
    turn_id: str | None = None
    phase: Literal["running", "parked", "done"]
    checkpoints: list[_Checkpoint] = Field(default_factory=list)
    asked: list[Asked] = Field(default_factory=list)  # when parked
    approved: list[str] = Field(default_factory=list)  # call ids people approved in this turn's resumes
    ours: list[str] = Field(default_factory=list)  # call ids our gate asked about, answered in this turn
    answered_in_tool: dict[str, int] = Field(default_factory=dict)  # tool call id → its answered questions


def _newest(saver: InMemorySaver, thread_id: str) -> list[tuple[str, str]]:
    """The id of the thread's newest checkpoint in each namespace (the main graph's, its subgraphs'), as the
    saver finds it (its greatest id): what a snapshot of the thread reads, taken now, read later or never."""
    return [(ns, max(by_id)) for ns, by_id in list(saver.storage[thread_id].items()) if by_id]


def _snapshot(saver: InMemorySaver, thread_id: str, newest: list[tuple[str, str]] | None = None) -> list[_Checkpoint]:
    """The thread's newest checkpoint of each namespace (or those of ``newest``), with its pending writes: the
    bytes the saver serialized them to, none read back (a super-step's snapshot costs no more as the thread
    grows than copying them)."""
    found = []
    for ns, checkpoint_id in _newest(saver, thread_id) if newest is None else newest:
        stored = saver.storage[thread_id][ns].get(checkpoint_id)
        if stored is None:
            continue
        checkpoint, metadata, _parent = stored
        versions = _serde.loads_typed(checkpoint)["channel_versions"]  # the checkpoint alone: no values in it
        blobs = ((channel, saver.blobs.get((thread_id, ns, channel, version))) for channel, version in versions.items())
        found.append(_Checkpoint(
            ns=ns, checkpoint=_Typed.raw(checkpoint), metadata=_Typed.raw(metadata),
            values={channel: _Typed.raw(blob) for channel, blob in blobs if blob is not None and blob[0] != "empty"},
            writes=[(task, channel, _Typed.raw(value))
                    for task, channel, value, _path in saver._ordered_writes(thread_id, ns, checkpoint_id)]))
    return found


def _restore(saver: InMemorySaver, thread_id: str, checkpoints: list[_Checkpoint]) -> None:
    for saved in checkpoints:
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": saved.ns}}
        if saved.values is None:  # /1: the checkpoint whole, put as LangGraph puts one
            checkpoint = saved.checkpoint.load()
            stored = saver.put(config, checkpoint, saved.metadata.load(), dict(checkpoint["channel_versions"]))
        else:  # /2: the saver's own bytes, where the saver keeps them
            typed = saved.checkpoint.typed()
            checkpoint = _serde.loads_typed(typed)
            saver.storage[thread_id][saved.ns][checkpoint["id"]] = (typed, saved.metadata.typed(), None)
            for channel, value in saved.values.items():
                saver.blobs[(thread_id, saved.ns, channel, checkpoint["channel_versions"][channel])] = value.typed()
            stored = {"configurable": {**config["configurable"], "checkpoint_id": checkpoint["id"]}}
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task, channel, value in saved.writes:
            by_task.setdefault(task, []).append((channel, value.load()))
        for task, writes in by_task.items():
            saver.put_writes(stored, writes, task)


class _StepSaver(InMemorySaver):
    """An in-memory checkpointer that hands the thread to the engine after every super-step."""

    def __init__(self, on_step: Callable[[], Awaitable[None]]):
        super().__init__(serde=_serde)
        self.on_step = on_step

    async def aput(self, config, checkpoint, metadata, new_versions):  # noqa: ANN001, ANN201 - LangGraph's signature
        stored = self.put(config, checkpoint, metadata, new_versions)
        await self.on_step()
        return stored


# --- one run's context, read by the tool wrapper -------------------------------------------------


@dataclass
class _Run:
    turn: BackendTurn
    approved: set[str]
    ours: set[str]
    answered_in_tool: dict[str, int]
    asked_in_tool: dict[str, str] = field(default_factory=dict)  # interrupt id → the tool call that asked
    engine_error: Exception | None = None  # the engine refused a checkpoint or a fence (a lost lease, a stop)


_RUN: contextvars.ContextVar[_Run | None] = contextvars.ContextVar("langgraph_backend_run", default=None)


def _tool_message(call: Mapping[str, Any], content: str, status: Literal["success", "error"] = "error") -> ToolMessage:
    return ToolMessage(content=content, name=call["name"], tool_call_id=call["id"], status=status)


def _recorded(result: Any) -> Any:
    """A tool's result as the fence records it (JSON, shown as the call's output): a plain success is its text."""
    if isinstance(result, ToolMessage):
        if result.status == "success" and result.artifact is None and isinstance(result.content, str):
            return result.content
        return {"content": result.content, "status": result.status,
                **({"artifact": _Typed.of(result.artifact).model_dump()} if result.artifact is not None else {})}
    return {"command": _Typed.of(result).model_dump()}  # a Command (or a list of them): LangGraph's own serde


def _replayed(recorded: Any, call: Mapping[str, Any]) -> Any:
    """The framework's result again from what the fence recorded (or the engine's note for a call cut short)."""
    if isinstance(recorded, dict) and "asked" in recorded:  # the tool asked a question when it ran
        raise GraphInterrupt(tuple(Interrupt(value=a["value"], id=a["id"]) for a in recorded["asked"]))
    if isinstance(recorded, dict) and "command" in recorded:
        return _Typed.model_validate(recorded["command"]).load()
    if isinstance(recorded, dict) and "content" in recorded:
        artifact = _Typed.model_validate(recorded["artifact"]).load() if "artifact" in recorded else None
        return ToolMessage(content=recorded["content"], name=call["name"], tool_call_id=call["id"],
                           status=recorded.get("status", "success"), artifact=artifact)
    if isinstance(recorded, dict) and "error" in recorded:  # cut short by a kill: read like any failed call
        return _tool_message(call, json.dumps(recorded, default=str))
    return _tool_message(call, recorded if isinstance(recorded, str) else json.dumps(recorded, default=str),
                         status="success")


# --- the backend ---------------------------------------------------------------------------------


class LangGraphBackend:
    """A compiled LangGraph graph driven by the engine."""

    framework = FRAMEWORK

    def __init__(self, graph: Any, *, input: Callable[[str], Any] | None = None):  # noqa: A002 - LangGraph's word
        if not hasattr(graph, "astream") or not hasattr(graph, "nodes"):
            raise TypeError("a LangGraph backend needs a compiled graph (StateGraph(...).compile() or create_agent)")
        _refuse_delta_channels(graph)
        self.graph = graph
        self.input = input or (lambda text: {"messages": [HumanMessage(content=text)]})
        self.version = package_version("langgraph")
        self._tool_nodes = [n for n in _tool_nodes(graph)]
        self._hitl = _hitl_configs(graph)
        for node in self._tool_nodes:
            _guard(node, self)

    # -- what the engine sees

    def tools(self) -> list[ToolInfo]:
        infos: dict[str, ToolInfo] = {}
        for node in self._tool_nodes:
            for name, tool in node.tools_by_name.items():
                schema = tool.tool_call_schema
                args_model = schema if isinstance(schema, type) and issubclass(schema, BaseModel) else None
                parameters = args_model.model_json_schema() if args_model else (schema if isinstance(schema, dict) else {})
                hitl = self._hitl.get(name)
                infos[name] = ToolInfo(
                    name=name, description=tool.description or "", parameters=parameters,
                    asks=hitl is not None, editable="edit" in hitl if hitl is not None else True,
                    idempotent=bool((tool.metadata or {}).get("idempotent")), args_model=args_model)
        return list(infos.values())

    def framework_gates(self, tool_name: str) -> bool:
        return tool_name in self._hitl

    # -- runs

    async def start(self, turn: BackendTurn, text: str, saved: str | None) -> Outcome:
        earlier = _Saved.model_validate_json(saved) if saved else None
        if earlier and earlier.phase != "done" and earlier.turn_id == turn.turn_id:
            return await self._continue(turn, earlier, None)  # this turn's own step, replayed after a kill
        thread_id = earlier.thread_id if earlier else turn.session_id
        fresh = _Saved(thread_id=thread_id, turn_id=turn.turn_id, phase="running",
                       checkpoints=earlier.checkpoints if earlier else [])
        return await self._continue(turn, fresh, self.input(text))

    async def resume(self, turn: BackendTurn, saved: str, answers: dict[str, Answer]) -> Outcome:
        state = _Saved.model_validate_json(saved)
        if state.phase != "parked":
            return await self._continue(turn, state, None)  # answers were delivered before: never twice
        resume: dict[str, Any] = {}
        for asked in state.asked:
            got = [answers.get(call_id) for call_id in asked.call_ids]
            if any(a is None for a in got):
                return Failed(reason=f"no answer for {asked.tool_names[got.index(None)]}", saved=saved)
            if refused := untakeable(asked, got):  # type: ignore[arg-type]
                return Failed(reason=NO_CANCEL.format(name=refused), saved=None)
            resume[asked.interrupt_id] = resume_value(asked, got)  # type: ignore[arg-type]
            for call_id, answer in zip(asked.call_ids, got, strict=True):
                if isinstance(answer, Approve):
                    state.approved.append(call_id)
            if asked.in_tool_call:
                state.answered_in_tool[asked.in_tool_call] = state.answered_in_tool.get(asked.in_tool_call, 0) + 1
        state.ours = sorted({*state.ours, *(c for a in state.asked if a.ours for c in a.call_ids)})
        state.phase, state.asked = "running", []
        return await self._continue(turn, state, Command(resume=resume))

    async def _continue(self, turn: BackendTurn, state: _Saved, given: Any) -> Outcome:
        run = _Run(turn=turn, approved=set(state.approved), ours=set(state.ours),
                   answered_in_tool=dict(state.answered_in_tool))

        async def on_step() -> None:
            newest = _newest(saver, state.thread_id)  # the super-step just saved: read if the engine writes it

            def saved() -> str:
                return _dump(state.model_copy(update={"checkpoints": _snapshot(saver, state.thread_id, newest),
                                                      "format": FORMAT}))

            try:
                await turn.checkpoint(saved)
            except Exception as exc:
                run.engine_error = exc  # the engine's, not the agent's: it goes back to the engine as it is
                raise

        saver = _StepSaver(on_step)
        _restore(saver, state.thread_id, state.checkpoints)
        graph = self.graph.copy(update={"checkpointer": saver})
        config = {"configurable": {"thread_id": state.thread_id}}
        token = _RUN.set(run)
        try:
            stopped = await self._drive(graph, given, config, turn)
        except LeaseLost:
            raise
        except Exception as exc:  # the agent's own failure: said plainly, never a traceback
            if run.engine_error is not None:
                raise run.engine_error from (None if run.engine_error is exc else exc)
            return Failed(reason=f"The agent failed: {type(exc).__name__}: {exc}"[:400], saved=None)
        finally:
            _RUN.reset(token)
        if run.engine_error is not None:  # swallowed on the way (a ToolNode that handles every error)
            raise run.engine_error
        state.checkpoints, state.format = _snapshot(saver, state.thread_id), FORMAT  # a thread read in /1 goes on in /2
        state.approved, state.ours, state.answered_in_tool = sorted(run.approved), sorted(run.ours), run.answered_in_tool
        if stopped:  # the thread may hold calls without results: the last finished conversation stays
            return Stopped(saved=None)
        snapshot = await graph.aget_state(config)
        pending = self._pending(snapshot, run)
        if pending:
            state.phase, state.asked = "parked", [a for a, _ in pending]
            return Parked(pending=[p for _, calls in pending for p in calls], saved=_dump(state))
        state.phase, state.approved, state.ours, state.answered_in_tool = "done", [], [], {}
        return Finished(text=_final_text(snapshot.values), saved=_dump(state))

    async def _drive(self, graph: Any, given: Any, config: dict[str, Any], turn: BackendTurn) -> bool:
        """Run the graph to its end or its pause; True when people stopped it."""
        stream = graph.astream(given, config, stream_mode=["messages", "updates"], durability="sync")
        try:
            async for mode, chunk in stream:
                if mode == "messages" and isinstance(chunk[0], AIMessageChunk) and isinstance(chunk[0].content, str):
                    if chunk[0].content:
                        turn.text(chunk[0].content)
                if turn.stopped:
                    return True
        finally:
            await stream.aclose()
        return False

    def _pending(self, snapshot: Any, run: _Run) -> list[tuple[Asked, list[PendingCall]]]:
        found: dict[str, tuple[Asked, list[PendingCall]]] = {}
        for task in snapshot.tasks:
            for item in task.interrupts:
                if item.id not in found:
                    found[item.id] = pending_of(
                        item.id, item.value, node=task.name, messages=_messages(snapshot.values),
                        in_tool_call=run.asked_in_tool.get(item.id), gated=self._hitl,
                        response_schema=item.response_schema)
        return list(found.values())


def _messages(values: Any) -> list[Any]:
    return list(values.get("messages", [])) if isinstance(values, dict) else []


def _final_text(values: Any) -> str:
    last = next((m for m in reversed(_messages(values)) if isinstance(m, AIMessage)), None)
    if last is not None:
        return last.text if isinstance(last.text, str) else str(last.text)
    return json.dumps(values, default=str) if values else ""


def _dump(state: _Saved) -> str:
    return state.model_dump_json()


# --- finding the graph's tools and the HITL middleware --------------------------------------------


def _refuse_delta_channels(graph: Any, seen: set[int] | None = None) -> None:
    """A ``DeltaChannel`` (LangGraph's beta) rebuilds its value from the writes of every earlier checkpoint; a
    paused run keeps only the newest, so such a channel would come back holding only what was written after
    the pause. Refused when the agent is wrapped (its subgraphs too), rather than losing state at a resume."""
    from langgraph.channels.delta import DeltaChannel

    seen = set() if seen is None else seen
    if id(graph) in seen:
        return
    seen.add(id(graph))
    for name, channel in (getattr(graph, "channels", None) or {}).items():
        if isinstance(channel, DeltaChannel):
            raise TypeError(f"the graph's channel {name!r} is a DeltaChannel: the bot keeps a paused run's newest "
                            f"checkpoint only, so its history would be lost at a resume; use a plain reducer "
                            f"(Annotated[list, operator.add], add_messages)")
    for node in (getattr(graph, "nodes", None) or {}).values():
        bound = getattr(node, "bound", None)
        if hasattr(bound, "channels") and hasattr(bound, "nodes"):  # a compiled subgraph as a node
            _refuse_delta_channels(bound, seen)


def _tool_nodes(graph: Any) -> list[ToolNode]:
    found = []
    for node in graph.nodes.values():
        bound = getattr(node, "bound", None)
        if isinstance(bound, ToolNode):
            found.append(bound)
    return found


def _hitl_configs(graph: Any) -> dict[str, frozenset[Decision]]:
    """The tools a ``HumanInTheLoopMiddleware`` of the graph gates, with the decisions it allows."""
    try:
        from langchain.agents.middleware import HumanInTheLoopMiddleware
    except ImportError:  # a plain LangGraph graph, without LangChain's agents
        return {}
    gated: dict[str, frozenset[Decision]] = {}
    for node in graph.nodes.values():
        middleware = _middleware_of(getattr(node, "bound", None))
        if isinstance(middleware, HumanInTheLoopMiddleware):
            for name, config in middleware.interrupt_on.items():
                gated[name] = frozenset(config["allowed_decisions"])
    return gated


def _middleware_of(bound: Any) -> Any:
    for attr in ("func", "afunc"):
        fn = getattr(bound, attr, None)
        owner = getattr(fn, "__self__", None)
        if owner is not None:
            return owner
    return None


# --- the wrapper every ToolNode gets ------------------------------------------------------------


_GUARDED: weakref.WeakSet[ToolNode] = weakref.WeakSet()  # nodes wrapped already (a graph wrapped twice)


def _guard(node: ToolNode, backend: LangGraphBackend) -> None:
    """Put our policy and fence around the node's tool calls, outside its own middleware chain."""
    if node in _GUARDED:
        return
    inner = node._awrap_tool_call
    if inner is None and node._wrap_tool_call is not None:
        raise TypeError("this graph's ToolNode has a sync-only tool wrapper: give it an async one (awrap_tool_call)")

    async def guarded(request: Any, execute: Callable[[Any], Awaitable[Any]]) -> Any:
        run = _RUN.get()
        if run is None:  # the graph run outside the bot: exactly as it was
            return await (inner(request, execute) if inner else execute(request))
        return await _guarded_call(run, backend, request, execute, inner)

    node._awrap_tool_call = guarded  # the slot create_agent fills with its middleware chain: ours wraps it
    _GUARDED.add(node)


def _call_key(request: Any) -> str:
    """The call's key in the thread (``call_key``: the id, made unique), from the state the tool runs on."""
    state = request.state
    messages = state.get("messages") if isinstance(state, Mapping) else getattr(state, "messages", None)
    return call_key(list(messages or ()), request.tool_call)


async def _guarded_call(run: _Run, backend: LangGraphBackend, request: Any, execute: Any, inner: Any) -> Any:
    call = request.tool_call
    call_id, name = _call_key(request), call["name"]
    if call_id in run.ours or (not backend.framework_gates(name) and call_id not in run.approved):
        if call_id not in run.ours:
            verdict = await run.turn.gate(call_id, name, call["args"])
            if verdict.action == "refuse":
                return _tool_message(call, verdict.reason or f"{name} is not allowed here.")
            if verdict.action == "run":
                return await _chain(run, backend, request, execute, inner)
        decision = interrupt({"type": "tool_approval", "tool_call_id": call_id, "name": name, "args": call["args"],
                              "description": request.tool.description if request.tool else "", "source": OUR_GATE})
        run.ours.add(call_id)
        if decision.get("type") == "reject":
            return _tool_message(call, REJECTED.format(name=name, reason=decision.get("message") or "none given"))
        if decision.get("type") == "edit":
            request = request.override(tool_call={**call, "args": decision["edited_action"]["args"]})
        run.approved.add(call_id)
    return await _chain(run, backend, request, execute, inner)


async def _chain(run: _Run, backend: LangGraphBackend, request: Any, execute: Any, inner: Any) -> Any:
    async def fenced(req: Any) -> Any:
        return await _fenced(run, backend, req, execute)

    return await (inner(request, fenced) if inner else fenced(request))


async def _fenced(run: _Run, backend: LangGraphBackend, request: Any, execute: Any) -> Any:
    call = request.tool_call
    call_id, name = _call_key(request), call["name"]
    asked = run.answered_in_tool.get(call_id, 0)
    key = f"{call_id}:{asked}" if asked else call_id
    tool = request.tool
    idempotent = bool(tool is not None and (tool.metadata or {}).get("idempotent"))

    async def go() -> Any:
        try:
            return _recorded(await execute(request))
        except GraphInterrupt as exc:  # the tool itself asked: recorded, so a replay asks the same again
            return {"asked": [{"id": item.id, "value": item.value} for item in (exc.args[0] if exc.args else ())]}

    try:  # the fence reports the call's start (with its arguments) and its end
        recorded = await run.turn.fence(key, name, go, idempotent=idempotent, arguments=call["args"])
    except LeaseLost as exc:
        run.engine_error = exc  # a ToolNode that handles every error must not swallow it
        raise
    for asked in recorded.get("asked", []) if isinstance(recorded, dict) else []:
        run.asked_in_tool[asked["id"]] = call_id  # its question is this call's
    return _replayed(recorded, call)


def backend(agent: Any, *, input: Callable[[str], Any] | None = None) -> LangGraphBackend:  # noqa: A002
    """The engine's hold on a compiled LangGraph graph (``create_agent``'s agent is one). ``input``: how a
    person's message becomes the graph's input, for a graph whose state has no ``messages``
    (``wrap(backend(graph, input=lambda text: {"ticket": text}))``)."""
    return LangGraphBackend(agent, input=input)
