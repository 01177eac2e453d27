"""The persisted shape of a session and its turn: what Redis holds while a turn parks (DESIGN §7)."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any, Literal, TypeAlias

from pydantic import Field

from bot.deferred import DeferredModel
from bot.models.base import Message
from bot.principals import Principal
from bot.protocol import Answer, Grant, SessionSnapshot, utcnow
from bot.session import SessionRef

CallStatus = Literal["ready", "awaiting", "asking", "done"]
# A session's state as the engine hands it to a turn store: its JSON text (``SessionState.model_dump_json()``,
# serialized once, in pydantic's core) or the same as plain data; None: none (a write of events alone).
SavedState: TypeAlias = str | dict[str, Any] | None


class CallResult(DeferredModel):
    status: Literal["completed", "failed", "rejected"]
    output: Any = None
    error: str | None = None

    def content(self) -> str:
        """The tool message the model reads."""
        import json

        if self.status == "completed":
            return self.output if isinstance(self.output, str) else json.dumps(self.output, default=str)
        return json.dumps({"status": self.status, **({"error": self.error} if self.error else {}),
                           **(self.output if isinstance(self.output, dict) else {})}, default=str)


class CallState(DeferredModel):
    call_id: str
    tool_name: str
    arguments: str = "{}"
    status: CallStatus = "ready"
    request_id: str | None = None  # the approval request, while awaiting
    ask_request_id: str | None = None  # the ctx.ask() question, while asking
    principal: Principal | None = None  # whose authority it runs under
    asks: list[Answer] = Field(default_factory=list)  # recorded ctx.ask() answers, by index
    result: CallResult | None = None
    reported: bool = False  # an action.result was emitted for it
    edited_from: str | None = None  # the arguments the model proposed, when an approver changed them
    edited_by: Principal | None = None
    standing: Grant | None = None  # the standing approval it runs under instead of asking (its thread is told)

    def tool_message(self) -> str:
        """What the model reads for this call: its result, and that a person changed its arguments."""
        content = (self.result or CallResult(status="failed", error="the call did not run")).content()
        if self.edited_from is None:
            return content
        who = self.edited_by.principal_id if self.edited_by else "the approver"
        return json.dumps({"note": f"{who} changed the arguments before approving; it ran with these.",
                           "arguments": json.loads(self.arguments), "result": content})


class StepState(DeferredModel):
    index: int
    step_id: str = ""  # unique for the session's whole life: execution markers are keyed by it
    assistant: Message
    calls: list[CallState]
    request_ids: list[str] = Field(default_factory=list)  # open requests this step waits on


def turn_id_for(session_id: str, number: int, message: dict[str, Any]) -> str:
    """The id of the session's turn ``number`` that queued ``message`` starts: known before anything of the
    turn is written (its start goes with its first checkpoint, bot.engine.drive), so that a stop asked meanwhile
    names it (``Runtime.cancel_turn``), and a worker that starts it again after a crash gives it the same."""
    seed = f"{session_id}|{number}|{message.get('id') or json.dumps(message, sort_keys=True)}"
    return f"turn_{hashlib.sha256(seed.encode()).hexdigest()[:12]}"


class FrameworkRun(DeferredModel):
    """A framework agent's run within a turn (DESIGN §14, ``bot.backends``): what it resumes from, and what
    it must resume into (a changed agent fails closed)."""

    framework: str
    version: str
    fingerprint: str  # of the agent's tools (``bot.backends.fingerprint``); "live-registry": see ``called``
    # a backend on the runtime's live registry: the tools its pause waits on, each with its own fingerprint
    # (``bot.engine.tool_registry.tool_fingerprint``): only these must be unchanged for it to resume
    called: dict[str, str] = Field(default_factory=dict)
    saved: str | None = None  # the framework's own state, last checkpointed
    request_ids: list[str] = Field(default_factory=list)  # the requests its pause waits on
    counts_steps: bool = False  # the backend reports its model calls: the turn's steps are those, not its runs
    # calls of the pause our request policy refused (call id → its reason): the framework hears them with the
    # answers people give to the rest (``bot.engine.framework_answers``)
    refused: dict[str, str] = Field(default_factory=dict)

    def checkpointed(self, saved: str) -> None:
        """A checkpoint replaces the pause: the answers its requests gave are in it. Until one does, the pause's
        requests stay the state's, so a worker that takes the turn over reads the answers again."""
        self.saved = saved
        self.request_ids = []
        self.refused = {}


class TurnState(DeferredModel):
    turn_id: str
    number: int
    owner: Principal | None = None
    status: Literal["running", "parked"] = "running"
    steps: int = 0
    tokens: int = 0
    step_budget: int
    token_budget: int
    step: StepState | None = None
    limit_request_id: str | None = None
    started_at: datetime = Field(default_factory=utcnow)
    automated: bool = False  # started by the app (a schedule), on behalf of ``owner``
    run: FrameworkRun | None = None  # a framework agent's run (``bot.engine.framework_turns``); None: the built-in loop

    @property
    def builtin_began(self) -> bool:
        """The built-in loop began it (a step, a model call or a limit card of its own, no framework run): it ends
        in that loop, whatever loop a deploy switched to since (BOT_LOOP, BOT_AGENT)."""
        return self.run is None and (self.steps > 0 or self.step is not None or bool(self.limit_request_id))

    def open_request_ids(self) -> list[str]:
        """The requests the turn waits on: its parked step's, then a session-limit prompt's. Some may have
        settled since they were asked (read their records for the status)."""
        ids = list(self.step.request_ids if self.step else [])
        if self.run is not None:
            ids.extend(self.run.request_ids)
        if self.limit_request_id:
            ids.append(self.limit_request_id)
        return ids


class SessionState(DeferredModel):
    ref: SessionRef
    initiator: Principal | None = None
    history: list[Message] = Field(default_factory=list)
    turn: TurnState | None = None
    turns: int = 0
    agent_memory: str | None = None  # a framework agent's conversation, in its own serialization, turn to turn

    @property
    def agent(self) -> str | None:
        """The sub-agent this session runs (``bot.agents``); None for the main agent."""
        return self.ref.parent.get("agent") if self.ref.parent else None


def state_of(snapshot: SessionSnapshot) -> SessionState | None:
    """The session state a snapshot holds (None: a session nobody wrote in yet), validated from its saved
    text in one pass."""
    saved = snapshot.saved_state
    return SessionState.model_validate_json(saved) if saved else None
