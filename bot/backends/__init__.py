"""Agent backends (DESIGN §14): the one way the engine drives an agent someone already has.

A backend adapts a framework's agent (pydantic-ai, the OpenAI Agents SDK, LangGraph) to the engine. It
runs the framework and translates: a framework's pause becomes :class:`PendingCall` s, people's answers
come back as :data:`Answer` s keyed by the framework's call id. Everything else stays the engine's:
leases, checkpoints, the outbox, settle, cards, policies and the audit. A backend never touches Redis or
Slack; it talks to the engine only through the :class:`BackendTurn` it is handed.

    from bot import Approval, always, approvers
    from bot.backends import wrap
    from myapp.agent import agent            # the team's existing agent, unchanged

    slack_agent = wrap(agent, policies={"issue_refund": Approval(request=always(), response=approvers("finance"))})

and ``BOT_AGENT=myapp.slack:slack_agent`` (or ``BOT_AGENT=myapp.agent:agent`` with no policies of ours).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from typing import Annotated, Any, Literal, Protocol, TypeAlias, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from bot.deferred import DeferredModel
from bot.ports import Workspace
from bot.principals import Principal
from bot.protocol import ChoiceStyle, InputOption
from bot.session import SessionInfo

# --- what a framework asks people ---------------------------------------------------------------

Decision: TypeAlias = Literal["approve", "edit", "reject", "respond"]


class PendingCall(DeferredModel):
    """One thing a paused run waits on: a tool call to approve, or a question (a LangGraph ``interrupt()``
    with a plain value, a pydantic-ai ``CallDeferred``). ``call_id`` is the framework's own id for it:
    the answer comes back under it, and the execution fence is keyed by it."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    tool_name: str  # for a question: the tool (or graph node) that asked
    arguments: dict[str, Any] = Field(default_factory=dict)
    kind: Literal["approval", "question"] = "approval"
    prompt: str | None = None  # a question's words; for an approval, the framework's own description of it
    # a question's choices (people may always type their own): labels, or options with their words and style
    options: list[str | InputOption] = Field(default_factory=list)
    style: ChoiceStyle = "select"  # a question's options shown as a select menu, buttons or radio buttons
    # what the framework accepts as an answer: the card offers no more than this
    decisions: frozenset[Decision] = frozenset({"approve", "reject"})
    allow_free_text: bool = True  # a question: people may type their own answer besides its options
    expires_after_s: float | None = None  # a question: unanswered this long, it ends "expired" (a Reject)
    # a question that is a form to fill in (a tool's ``ctx.form``): its JSON schema (``bot.forms``); the
    # answer is a :class:`Reply` whose value is the submitted values by field name
    form: dict[str, Any] | None = None


class Approve(DeferredModel):
    """Run the call; ``arguments``: what an approver changed them to ("Edit & approve"), else None."""

    kind: Literal["approve"] = "approve"
    arguments: dict[str, Any] | None = None
    by: str | None = None  # who approved (a principal id), for the framework's own records
    principal: Principal | None = None  # who approved, whole: the authority the call runs under (ctx.principal)


class Reject(DeferredModel):
    """Do not run it; ``message`` is what the model reads (the canceller's reason, when they gave one)."""

    kind: Literal["reject"] = "reject"
    message: str
    by: str | None = None
    # the request's outcome when it was not a refusal by a person: "expired", "ignored" (steered past), "cancelled"
    outcome: str | None = None
    # what the built-in loop tells its model of the refusal (its code, message, the canceller's note), for a
    # backend that speaks the same tool results (native); ``message`` says the same in words
    details: dict[str, Any] | None = None


class Reply(DeferredModel):
    """A question's answer: the option chosen or the words typed."""

    kind: Literal["reply"] = "reply"
    value: Any
    by: str | None = None
    principal: Principal | None = None  # who answered, whole (a tool's ``ctx.ask`` / ``ctx.form`` answer names them)


Answer: TypeAlias = Annotated[Approve | Reject | Reply, Field(discriminator="kind")]


# --- how a run ends ------------------------------------------------------------------------------


class Finished(DeferredModel):
    """The run ended with an answer for people. ``saved``: the conversation to carry into the next turn."""

    kind: Literal["finished"] = "finished"
    text: str
    saved: str


class Parked(DeferredModel):
    """The run paused on people: one pending call each. ``saved``: what :meth:`AgentBackend.resume` needs.
    No pending call: it paused before a model call because the turn is :attr:`BackendTurn.over_budget`."""

    kind: Literal["parked"] = "parked"
    pending: list[PendingCall]
    saved: str


class Stopped(DeferredModel):
    """The run was stopped (the stop button, :attr:`BackendTurn.stopped`). ``saved``: the conversation so
    far, or None to keep the last one."""

    kind: Literal["stopped"] = "stopped"
    saved: str | None = None


class Failed(DeferredModel):
    """The run failed: ``reason`` is said to people plainly (never a traceback)."""

    kind: Literal["failed"] = "failed"
    reason: str
    saved: str | None = None


Outcome: TypeAlias = Annotated[Finished | Parked | Stopped | Failed, Field(discriminator="kind")]


# --- what the engine hands a run -----------------------------------------------------------------


class GateVerdict(DeferredModel):
    """What our request policy says of one call before the framework runs it."""

    model_config = ConfigDict(frozen=True)

    action: Literal["run", "ask", "refuse"]
    reason: str | None = None  # for "refuse": what the model reads


class ToolInfo(DeferredModel):
    """One of the agent's tools as the engine sees it: for policies, cards and the fingerprint."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)  # its arguments' JSON schema
    asks: bool = False  # the framework gates it itself (``requires_approval``, ``needs_approval``, an interrupt)
    editable: bool = False  # the framework accepts edited arguments for it
    idempotent: bool = False  # safe to run again after its worker died mid-run
    hosted: bool = False  # the provider runs it (beyond any fence): named on cards and in the audit
    args_model: type[BaseModel] | None = None  # its arguments as a pydantic model, when the framework has one


@runtime_checkable
class BackendTurn(Protocol):
    """The engine's side of one run: who asked, our policies, the fence, checkpoints and the stream."""

    session_id: str
    turn_id: str
    owner_id: str | None  # the principal id of the person whose turn it is
    # What a tool must know of its session, from the engine's state, never from the model: for a backend whose
    # tools take the bot's ``ToolContext`` (``bot.backends.native``); a framework's adapter may ignore them.
    owner: Principal | None  # the person whose turn it is (an approved call runs under its ``Approve.principal``)
    workspace: Workspace | None  # what tools may do in the session's workspace (None: the frontend gives nothing)
    history_window: int  # the newest messages a model is shown (system messages always; 0: all), as configured
    history_limit: int  # the newest messages of a conversation kept for the next turn (0: all), as configured

    @property
    def session(self) -> SessionInfo:
        """The session as the built-in loop's tools see it: its ``team_id`` is the signed request's workspace."""
        ...

    async def take_messages(self) -> list[str]:
        """The turn owner's messages that arrived since the run last looked (steering), for the model to read
        before its next call. Each leaves the queue with the turn's next write (a checkpoint, the pause, the
        end), so the state that write stores must hold it: a backend that takes messages puts them in its
        conversation at once."""
        ...

    @property
    def stopped(self) -> bool:
        """Someone pressed stop: the backend ends its run as soon as it can, with :class:`Stopped`."""
        ...

    def on_stop(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` when the turn is stopped, before the run's task is cancelled (e.g. a tool context's
        ``stop``, so that a tool's ``finally`` tells a stop from another error)."""
        ...

    async def gate(self, call_id: str, tool_name: str, arguments: Mapping[str, Any]) -> GateVerdict:
        """Our request policy for a call the framework is about to run (not for a call people approved)."""
        ...

    async def fence(self, call_id: str, tool_name: str, run: Callable[[], Awaitable[Any]], *,
                    idempotent: bool = False, arguments: Mapping[str, Any] | None = None, answered: int = 0) -> Any:
        """Run ``run`` at most once per ``call_id`` across kills and replicas: a replay returns the recorded
        result (JSON); a call whose worker died mid-run returns ``{"status": "failed", "error": …}`` saying
        it was interrupted (the model reads it), unless ``idempotent``: then it runs again. Raises the
        engine's LeaseLost when this worker no longer holds the turn. The fence reports the call's start
        (with ``arguments``, shown on its task) and its end: a backend need not call ``tool_started`` /
        ``tool_finished`` for a fenced call (a repeat per call id is ignored).

        A tool's question (``ctx.ask`` raising :class:`~bot.tools.AskParked`) is not a death mid-run: the fence
        records the question and raises it on, and a replay raises it again. ``answered``: how many of the
        call's questions were answered; each run after an answer is fenced apart (the same call id, its own
        marker), so what a tool does after its last question runs at most once."""
        ...

    def model_used(self, tokens: int) -> None:
        """One model call was made, with its tokens: the turn's budget (steps and tokens) counts it."""
        ...

    @property
    def over_budget(self) -> bool:
        """The turn used its step or token budget: the backend makes no further model call and pauses with
        ``Parked(pending=[])``; the engine asks people whether to go on (a "session-limit" request) and, on
        continue, resumes it with no answers and a fresh budget. A backend that never reports its model
        calls is never over it."""
        ...

    async def checkpoint(self, saved: str | Callable[[], str]) -> None:
        """The run's state after a framework step: stored before any tool of the step runs, with the turn's
        next write (the first call's start through :meth:`fence`, the pause, the end), refused then if a stop
        was asked. ``saved`` may be a function giving it: called only if that write needs it (a pause or an
        end stores the outcome's ``saved`` instead), so give one that reads a copy taken now."""
        ...

    def text(self, delta: str) -> None:
        """A piece of the model's answer as it streams (shown live; the outcome's text is what is kept)."""
        ...

    def tool_started(self, call_id: str, tool_name: str, arguments: Mapping[str, Any]) -> None: ...

    def tool_finished(self, call_id: str, tool_name: str, output: Any) -> None: ...


@runtime_checkable
class AgentBackend(Protocol):
    """A framework's agent, driven by the engine. ``start`` and ``resume`` return an :data:`Outcome` and
    never raise for the agent's own failures (those are :class:`Failed`)."""

    framework: str  # "pydantic-ai", "openai-agents", "langgraph"
    version: str  # the framework's version, stored with a paused run

    def tools(self) -> list[ToolInfo]: ...

    async def start(self, turn: BackendTurn, text: str, saved: str | None) -> Outcome:
        """A new turn from a person's message; ``saved``: the conversation of the session's earlier turns."""
        ...

    async def resume(self, turn: BackendTurn, saved: str, answers: dict[str, Answer]) -> Outcome:
        """Go on from :class:`Parked` once every pending call has its answer (keyed by call id)."""
        ...


def fingerprint(tools: list[ToolInfo]) -> str:
    """A digest of the agent's tools (names, descriptions, schemas): a paused run resumes only into the
    same tools, never into different code."""
    shape = sorted(([t.name, t.description, t.parameters, t.asks] for t in tools), key=lambda t: t[0])
    return hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()[:16]


# --- the frameworks we know, imported only when used --------------------------------------------

# framework → (the module that adapts it, the extra that installs it)
FRAMEWORKS: dict[str, tuple[str, str]] = {
    "pydantic-ai": ("bot.backends.pydantic_ai", "pydantic-ai"),
    "openai-agents": ("bot.backends.openai_agents", "openai-agents"),
    "langgraph": ("bot.backends.langgraph", "langgraph"),
}


class MissingExtra(RuntimeError):
    """The agent's framework is not installed: the message names the command that installs it."""


def framework_of(agent: object) -> str | None:
    """Which framework an agent object comes from, by its class's module (nothing is imported)."""
    for cls in type(agent).__mro__:
        root = cls.__module__.split(".")[0]
        if root == "pydantic_ai":
            return "pydantic-ai"
        if root == "agents":
            return "openai-agents"
        if root in ("langgraph", "langchain"):
            return "langgraph"
    return None


@dataclass(frozen=True)
class WrappedAgent:
    """A team's agent as the bot runs it: its backend, and our policies for its tools by name."""

    backend: AgentBackend
    policies: Mapping[str, Any] = field(default_factory=dict)


def wrap(agent: object, *, policies: Mapping[str, Any] | None = None) -> WrappedAgent:
    """The bot's hold on a team's existing agent, with our request and response policies for its tools by
    name (``{"issue_refund": Approval(request=always(), response=approvers("finance"))}``). A tool without one keeps its
    framework's own gate: it asks when the framework asks, else it runs."""
    if isinstance(agent, WrappedAgent):
        return WrappedAgent(agent.backend, {**agent.policies, **(policies or {})})
    if isinstance(agent, AgentBackend):
        return WrappedAgent(agent, dict(policies or {}))
    name = framework_of(agent)
    if name is None:
        raise TypeError(f"{type(agent).__module__}.{type(agent).__qualname__} is not an agent this bot can "
                        f"drive: give it a pydantic-ai Agent, an OpenAI Agents SDK Agent or a compiled LangGraph graph")
    module, extra = FRAMEWORKS[name]
    try:
        adapter = import_module(module)
    except ImportError as exc:
        raise MissingExtra(f"this agent needs {name}'s extra: pip install '.[{extra}]' ({exc})") from exc
    return WrappedAgent(adapter.backend(agent), dict(policies or {}))
