"""The bot's own loop shape as an agent backend (DESIGN §14): ``native(model, tools) -> WrappedAgent``.

The same parts the built-in loop runs on, a :class:`~bot.models.base.ChatModel` (the OpenAI-compatible
client, streamed) and ``@tool`` :class:`~bot.tools.Tool` s, driven through :class:`~bot.backends.BackendTurn`
like any framework: a model step, then each call it asked for through our request policy (``turn.gate``)
and, when it may run, the execution fence (``turn.fence``); the response is checkpointed before any of its
tools run; a call people must decide parks the run. It exists to weigh the backend interface against the
built-in loop on the same cycle (``benchmarks/http``: contenders ``p`` and ``pN``).

A tool's ``ctx.ask`` is durable by replay, as in the built-in loop: the question is a :class:`PendingCall` of
kind "question" with the id ``<call id>#ask<n>`` (its n-th question, from 0), the answer comes back as a
:class:`~bot.backends.Reply` under that id (an expired or steered-past question as a ``Reject`` saying so),
and the tool runs again from the top with its answers so far. Each run after an answer is fenced apart
(``turn.fence(..., answered=n)``), so what the tool does after its last question runs at most once; a run
that asked records its question, not a death mid-run. A tool's ``ctx.form`` is asked the same way: the
question carries the form's JSON schema (``PendingCall.form``) and its answer is a ``Reply`` of the submitted
values. The session limit: each model call is reported (``turn.model_used``) and, once ``turn.over_budget``,
the run pauses before its next one with ``Parked(pending=[])``; the engine asks whether to go on and resumes
it with no answers.

Its tools are read when used (``by_name``, ``specs``): here a fixed list, whose tools the engine knows as
proxies (``bot.backends.proxies``); ``bot.engine.native_loop`` puts it on the runtime's registry instead
(``BOT_LOOP=native``: the real tools, with their own cards, and the settings' system prompt).

``saved`` is JSON: the conversation as Chat Completions messages (no system message: the instructions are
put first at each model call). A paused run's last assistant message holds calls without a tool message:
those are what :meth:`NativeBackend.resume` answers. While a call waits on its question, ``saved`` is
``{"messages": …, "asking": {call id: its question, its answers so far, its approval}}``.

As in the built-in loop, from the engine's state through the turn (never from the model): a tool's context has
the session (``ctx.tenant`` is the signed request's workspace), its caller (``ctx.principal``: the approver of an
approved call, else the turn's owner), ``ctx.workspace`` and an idempotency key of the same shape (session, turn,
step, call); a failed model call, or an answer with nothing to show, says ``bot.models.words``' words; the
model sees the turn's history window (``BOT_HISTORY_WINDOW``, the operator's setting, so the turn carries it);
the conversation a run that ends saves for the next turn is bounded like the built-in loop's stored history
(``BOT_HISTORY_LIMIT``, carried alike: ``bot.models.history.compact``); and what the turn's owner writes
meanwhile is read before each model call (``BackendTurn.take_messages``).

Calls the engine settles itself, never run here: an external-result tool's (``@tool(external=True, result=…)``)
and ``delegate``'s (``native(..., agents=[SubAgent(...)])``). Each parks as an approval :class:`PendingCall`
(offering only "reject"); the engine makes it the tool's external-result card or the delegation card, and the
posted result, or the sub-agent's answer, comes back as a :class:`~bot.backends.Reply` whose value is the
request's values. The engine holds these tools (and the sub-agents) as they are (:meth:`NativeBackend.engine_tools`);
each sub-agent's session is driven by a native backend of its own, with its instructions and tools
(:meth:`NativeBackend.sub_agent`).

Left out (the built-in loop has them): a question's option descriptions and button styles (a menu of labels).
Built with ``native(model,
tools)``, a tool's card options beyond its approval policy (prompt, deadlines, preview) are not carried by the
proxy (an external-result tool is not one: its card is its own; on the registry every tool is its own).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from functools import partial
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from typing import Any

from pydantic import Field
from pydantic_core import to_jsonable_python

from bot.agents import DELEGATE, SubAgent, delegation_result
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
    WrappedAgent,
    wrap,
)
from bot.builtin.delegate import delegate_tool, describe
from bot.deferred import DeferredModel
from bot.models.base import ChatModel, Message, ModelError, ModelResponse, ToolCall, ToolSpec
from bot.models.history import compact, model_view
from bot.models.wire import distinct_ids
from bot.models.words import answer_words, logged_failure_words
from bot.ops.metrics import MeteredModel
from bot.protocol import Answer as ToolAnswer
from bot.protocol import CancelRequested, LeaseLost, MessageTaken
from bot.state import CallResult
from bot.tools import AskParked, AskRequest, Tool, ToolContext, as_dict

FRAMEWORK = "native"
log = logging.getLogger(__name__)
try:
    VERSION = dist_version("slack-hitl-bot")
except PackageNotFoundError:  # run from a checkout that was never installed
    VERSION = "0"


def native(model: ChatModel, tools: Sequence[Tool], *, instructions: str | None = None,
           agents: Sequence[SubAgent] = ()) -> WrappedAgent:
    """The bot's own loop on ``model`` and ``tools``, each tool under its own approval policy; ``agents``: the
    sub-agents it may hand a task to (``delegate``), each run by native on the same model with its own
    instructions and tools."""
    backend = NativeBackend(model, tools, instructions=instructions, agents=agents)
    # the tools the engine holds as they are (external-result tools, delegate) keep their own policies there
    return wrap(backend, policies={t.name: t.approval for t in tools if not _engine_handled(t)})


class NativeBackend:
    framework = FRAMEWORK
    version = VERSION
    # its tools are fixed: a paused run resumes only into the same ones (the whole toolset's fingerprint);
    # the loop on the runtime's registry (``bot.engine.native_loop``) says True
    live_tools = False
    # a turn stopped while it waited on people carries on into the next: its unanswered calls read as cancelled
    follows_stopped_runs = True

    def __init__(self, model: ChatModel, tools: Sequence[Tool], *, instructions: str | None = None,
                 agents: Sequence[SubAgent] = ()):
        # timed and its tokens counted as the built-in loop's model is (hitl_model_*)
        self.model = model if isinstance(model, MeteredModel) else MeteredModel(model)
        self._instructions = instructions
        self.agents = list(agents)
        if self.agents:
            if DELEGATE in {t.name for t in tools}:
                raise ValueError(f"a tool is named {DELEGATE!r}, the name of the built-in that hands tasks to sub-agents")
            delegate = delegate_tool()
            delegate.description = describe(self.agents)
            tools = [*tools, delegate]
        self._tools = {t.name: t for t in tools}
        # a sub-agent's session is driven by a native backend of its own: its instructions, its tools
        self._sub_agents = {a.name: NativeBackend(self.model, a.tools, instructions=a.instructions)
                            for a in self.agents}

    @property
    def by_name(self) -> Mapping[str, Tool]:
        """Its tools by name, as they are now (read at each model call and each call's run)."""
        return self._tools

    @property
    def specs(self) -> list[ToolSpec]:
        return [t.spec() for t in self.by_name.values()]

    @property
    def instructions(self) -> str | None:
        return self._instructions

    def tools(self) -> list[ToolInfo]:
        return [ToolInfo(name=t.name, description=t.description, parameters=t.spec().parameters,
                         asks=t.approval.request.kind != "never" or _engine_handled(t), editable=t.editable,
                         idempotent=t.idempotent, args_model=t.input_model) for t in self.by_name.values()]

    def engine_tools(self) -> list[Tool | SubAgent]:
        """What the engine must hold as it is, not as a proxy: the external-result tools (their result form and
        model, who may post a result) and the sub-agents (with their tools and ``delegate``)."""
        own: list[Tool | SubAgent] = [t for t in self.by_name.values() if t.external]
        return [*own, *self.agents]

    def sub_agent(self, name: str) -> NativeBackend | None:
        """The backend that drives the sessions of the sub-agent ``name`` (None: not one of this agent's)."""
        return self._sub_agents.get(name)

    async def start(self, turn: BackendTurn, text: str, saved: str | None) -> Outcome:
        messages, _ = _loaded(saved) if saved else ([], {})
        _close_unanswered(messages)  # a stopped turn's calls: what the model reads of them, as the built-in loop's
        messages.append({"role": "user", "content": text})
        return await _Run(self, turn, messages).go()

    async def resume(self, turn: BackendTurn, saved: str, answers: dict[str, Answer]) -> Outcome:
        """From :class:`Parked` with people's answers, or (``answers`` empty) from the checkpoint taken after a
        model response (its calls not answered yet are gated and fenced again: a recorded one is not run again),
        or from a pause on the budget."""
        run = _Run(self, turn, *_loaded(saved))
        last = run.messages[-1] if run.messages else None
        if last is not None and last.get("role") == "assistant" and not last.get("tool_calls"):
            return Finished(text=last.get("content") or "", saved=saved)  # its answer was given already
        return await run.go(answers)


def _engine_handled(tool: Tool) -> bool:
    """A call the engine settles itself, never run here: a person or system posts an external tool's result;
    ``delegate``'s is the sub-agent's answer."""
    return tool.external or tool.delegates


def _close_unanswered(messages: list[Message]) -> None:
    """Give each call of the last model response that has no result the built-in loop's result for a stopped
    turn's call (a conversation carried on from a turn stopped while it waited on people)."""
    last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "assistant"), None)
    if last is None:
        return
    answered = {m.get("tool_call_id") for m in messages[last + 1:] if m.get("role") == "tool"}
    cancelled = CallResult(status="rejected", output={"code": "TURN_CANCELLED", "message": "The turn was cancelled."})
    for call in messages[last].get("tool_calls") or []:
        if call["id"] not in answered:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": cancelled.content()})


def _refused(answer: Reject) -> str:
    """What the model reads of a refused call: the engine's words for it, as the built-in loop gives them."""
    return CallResult(status="rejected", output=answer.details or {"message": answer.message}).content()


def _posted(tool: Tool, answer: Answer) -> str:
    """What the model reads of a call the engine settled: the posted result, the sub-agent's answer, or why
    there is none (Cancel, a deadline, the sub-agent stopped or failed)."""
    if isinstance(answer, Reject):
        return _refused(answer)
    if isinstance(answer, Reply):
        if tool.delegates:
            values = answer.value if isinstance(answer.value, dict) else {"result": answer.value}
            return delegation_result(values).content()
        return CallResult(status="completed", output=answer.value).content()
    # an approval is never asked of such a call: nothing runs it here
    return CallResult(status="failed", error=f"{tool.name} was not given a result").content()


def question_id(call_id: str, index: int) -> str:
    """The id of a call's ``index``-th ``ctx.ask`` question, under which its answer comes back."""
    return f"{call_id}#ask{index}"


class Asking(DeferredModel):
    """A call that asked (``ctx.ask``) and waits on its answer: what its next run needs, kept in ``saved``."""

    question: AskRequest
    answers: list[ToolAnswer] = Field(default_factory=list)  # to its earlier questions, replayed in order
    approved: Approve | None = None  # people approved the call before it asked (with their edit, if any)


def _loaded(saved: str) -> tuple[list[Message], dict[str, Asking]]:
    """``saved``: the conversation, or (a pause on a tool's question) the conversation and the calls asking."""
    data = json.loads(saved)
    if isinstance(data, list):
        return data, {}
    return data["messages"], {cid: Asking.model_validate(a) for cid, a in data["asking"].items()}


class _Run:
    """One run of the loop, from start or resume to its outcome."""

    def __init__(self, backend: NativeBackend, turn: BackendTurn, messages: list[Message],
                 asking: dict[str, Asking] | None = None):
        self.backend, self.turn, self.messages = backend, turn, messages
        self.asking = dict(asking or {})

    async def go(self, answers: dict[str, Answer] | None = None) -> Outcome:
        """``answers``: None for a new turn, else what people said of the last response's calls (if anything)."""
        pending = await self._calls(answers) if answers is not None else []
        while not pending:
            # steering: what the turn's owner wrote meanwhile is read before the model is asked again
            self.messages.extend({"role": "user", "content": text} for text in await self.turn.take_messages())
            if self.turn.stopped:
                return Stopped(saved=self._saved(whole=True))
            if self.turn.over_budget:  # the engine asks people whether to go on; continue resumes from here
                return Parked(pending=[], saved=self._saved())
            try:
                response = await self.backend.model.complete(self._view(), self.backend.specs, on_text=self._text)
            except ModelError as exc:  # the built-in loop's words for it (any other error: the engine's, the same)
                return Failed(reason=logged_failure_words(exc, self.turn.session_id), saved=self._saved(whole=True))
            self.turn.model_used(response.usage.total_tokens)
            if self.turn.stopped:  # stopped while the model thought: nothing it asked for runs
                return Stopped(saved=self._saved(whole=True))
            response = _unique_call_ids(response, self.messages)
            self.messages.append(response.to_message())
            if not response.tool_calls:
                shown, unanswered = answer_words(response)
                if unanswered is not None:  # nothing to show (empty, filtered, cut): said plainly, never silence
                    log.warning("model answered nothing to show in session %s (finish_reason %s)",
                                self.turn.session_id, response.finish_reason)
                    return Failed(reason=unanswered, saved=self._saved(whole=True))
                return Finished(text=shown or "", saved=self._saved(whole=True))
            # the response is stored before any of its tools run (serialized only if the engine writes it: a
            # pause or an end stores the outcome's state instead)
            await self.turn.checkpoint(partial(json.dumps, list(self.messages)))
            pending = await self._calls({})
        return Parked(pending=pending, saved=self._saved())

    async def _calls(self, answers: dict[str, Answer]) -> list[PendingCall]:
        """The last response's calls that have no result yet, in order: answered, refused, run or asked."""
        pending: list[PendingCall] = []
        for call in self._unanswered():
            asking = self.asking.get(call.id)
            if asking is not None:  # it asked a question: its answer runs it again
                reply = answers.get(question_id(call.id, len(asking.answers)))
                done = await self._answered(call, asking, reply)
            elif (answer := answers.get(call.id)) is None:
                done = await self._gate(call)
            elif (tool := self.backend.by_name.get(call.name)) is not None and _engine_handled(tool):
                done = _posted(tool, answer)
            elif isinstance(answer, Approve):
                done = await self._run(call, answer)
            elif isinstance(answer, Reject):
                done = _refused(answer)
            else:  # a reply typed on an approval card: the model reads the words
                done = str(answer.value)
            if isinstance(done, PendingCall):
                pending.append(done)
            else:
                self._result(call, done)
        return pending

    async def _answered(self, call: ToolCall, asking: Asking, reply: Answer | None) -> str | PendingCall:
        """The call runs again with its question's answer (as the built-in loop's ``ctx.ask`` returns it)."""
        if reply is None:  # no answer came back for it: it is asked again
            return self._question(call, asking)
        del self.asking[call.id]
        if isinstance(reply, Reply) and asking.question.form is not None:  # a form's values, by field name
            values = reply.value if isinstance(reply.value, dict) else {}
            told = ToolAnswer(status="answered", values=values, responder=reply.principal)
        elif isinstance(reply, Reply):
            chosen = next((o for o in asking.question.options if o.label == reply.value), None)
            told = (ToolAnswer(status="answered", option_id=chosen.id, responder=reply.principal) if chosen is not None
                    else ToolAnswer(status="answered", text=str(reply.value), responder=reply.principal))
        elif isinstance(reply, Reject) and reply.outcome in ("expired", "ignored"):  # it goes on without one
            told = ToolAnswer(status="expired" if reply.outcome == "expired" else "interrupted")
        else:  # the question was cancelled: the call ends, as in the built-in loop
            return CallResult(status="rejected", output={"status": "cancelled"}).content()
        return await self._run(call, asking.approved, [*asking.answers, told])

    def _question(self, call: ToolCall, asking: Asking) -> PendingCall:
        """The call's question for people; the call waits on it (kept in ``saved`` with its answers so far)."""
        self.asking[call.id] = asking
        ask = asking.question
        return PendingCall(call_id=question_id(call.id, len(asking.answers)), tool_name=call.name, kind="question",
                           prompt=ask.prompt, options=list(ask.options), style=ask.style,
                           allow_free_text=ask.allow_free_text, expires_after_s=ask.timeout_s, form=ask.form)

    async def _gate(self, call: ToolCall) -> str | PendingCall:
        """What the model reads of the call, or what people must decide of it first."""
        tool = self.backend.by_name.get(call.name)
        if tool is None:
            return CallResult(status="failed", error=f"there is no tool named {call.name}").content()
        try:
            arguments = as_dict(tool.parse(call.arguments))
        except ValueError as exc:
            return CallResult(status="failed", error=str(exc)).content()
        verdict = await self.turn.gate(call.id, call.name, arguments)
        if verdict.action != "refuse" and _engine_handled(tool):  # it waits on its result, never runs here
            return PendingCall(call_id=call.id, tool_name=call.name, arguments=arguments,
                               decisions=frozenset({"reject"}))
        if verdict.action == "ask":
            # it runs any edit it is given: whether the card offers one is the tool's own card options' business
            return PendingCall(call_id=call.id, tool_name=call.name, arguments=arguments,
                               decisions=frozenset({"approve", "reject", "edit"}))
        if verdict.action == "refuse":
            message = verdict.reason or f"{call.name} is not allowed here."
            return CallResult(status="rejected", output={"message": message}).content()
        return await self._run(call, None)

    async def _run(self, call: ToolCall, approved: Approve | None,
                   answers: Sequence[ToolAnswer] = ()) -> str | PendingCall:
        """The tool inside the fence, with the answers to its questions so far; what the model reads of it, or
        the question it asks now (the call waits on it)."""
        tool = self.backend.by_name[call.name]
        edited = approved.arguments if approved is not None else None
        try:
            args = tool.parse(edited if edited is not None else call.arguments)
        except ValueError as exc:
            return CallResult(status="failed", error=str(exc)).content()
        try:
            result = await self._fenced(call, tool, args, list(answers), approved)
        except AskParked as parked:  # a question (ctx.ask) or a form (ctx.form): the call waits on it
            return self._question(call, Asking(question=parked.ask, answers=list(answers), approved=approved))
        content = result.content()
        if edited is None:
            return content
        who = approved.by if approved is not None and approved.by else "the approver"
        return json.dumps({"note": f"{who} changed the arguments before approving; it ran with these.",
                           "arguments": as_dict(args), "result": content})

    async def _fenced(self, call: ToolCall, tool: Tool, args: Any, answers: list[ToolAnswer],
                      approved: Approve | None) -> CallResult:
        """One run of the tool in the fence (after ``answers``): its result; raises AskParked when it asks."""
        turn = self.turn
        # the session and the caller from the engine's state (the tenant is the signed request's workspace, never
        # one the model names): the approver, once approved (kept with a call that asks), else the turn's owner;
        # the key as the built-in loop's: session, turn, step (its response's place in the conversation: the
        # same in a replay), call
        caller = approved.principal if approved is not None and approved.principal is not None else turn.owner
        ctx = ToolContext(session=turn.session, principal=caller, call_id=call.id,
                          idempotency_key=f"{turn.session_id}:{turn.turn_id}:{self._step()}:{call.id}",
                          answers=answers, workspace=turn.workspace)
        turn.on_stop(ctx.stop)  # a stop tells the tool (ctx.stopped) before its task is cancelled
        seen: dict[str, Any] = {}  # "ran" once the tool runs (a replay runs nothing), "raised": what it raised

        async def execute() -> Any:
            seen["ran"] = True
            try:
                output = await tool.invoke(args, ctx)
            except Exception as exc:
                seen["raised"] = exc
                raise
            if ctx.parked is not None:  # it asked, and swallowed the signal: it asked all the same
                raise AskParked(ctx.parked)
            # JSON both times: the model reads the same thing from a first run and from a replay
            return to_jsonable_python(output, serialize_unknown=True)

        try:
            output = await turn.fence(call.id, call.name, execute, idempotent=tool.idempotent, arguments=as_dict(args),
                                      answered=len(answers))
        except (LeaseLost, CancelRequested, MessageTaken):
            raise
        except Exception as exc:
            # the tool's own failure, now or replayed (the fence raises a recorded one as a RuntimeError); any
            # other is the engine's and ends the run as it is
            replayed = "ran" not in seen and type(exc) is RuntimeError
            if seen.get("raised") is not exc and not replayed:
                raise
            return CallResult(status="failed", error=str(exc) if replayed else f"{type(exc).__name__}: {exc}")
        return CallResult(status="completed", output=output)

    # --- the conversation ----------------------------------------------------------------------

    def _unanswered(self) -> list[ToolCall]:
        """The calls of the last assistant message that have no tool message after it."""
        for index in range(len(self.messages) - 1, -1, -1):
            message = self.messages[index]
            if message.get("role") == "assistant":
                answered = {m.get("tool_call_id") for m in self.messages[index + 1:] if m.get("role") == "tool"}
                calls = [ToolCall(id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"])
                         for c in message.get("tool_calls") or []]
                return [c for c in calls if c.id not in answered]
        return []

    def _step(self) -> int:
        """The place of the last model response in the conversation."""
        return max(i for i, m in enumerate(self.messages) if m.get("role") == "assistant")

    def _result(self, call: ToolCall, content: str) -> None:
        self.messages.append({"role": "tool", "tool_call_id": call.id, "content": content})

    def _view(self) -> list[Message]:
        """What the model is shown: the instructions, then the conversation in the turn's history window (the
        built-in loop's ``model_view``)."""
        instructions = self.backend.instructions
        messages = [{"role": "system", "content": instructions}, *self.messages] if instructions else self.messages
        return model_view(messages, self.turn.history_window)  # type: ignore[arg-type]

    def _saved(self, *, whole: bool = False) -> str:
        """The conversation as JSON; ``whole``: the run ends, so without a last response whose calls did not all
        run (the next turn can follow it), and bounded to the turn's ``history_limit`` newest messages (as the
        built-in loop bounds its stored history). Calls waiting on their question are kept beside it, with their
        answers so far."""
        messages = self.messages
        if whole and self._unanswered():
            cut = max(i for i, m in enumerate(messages) if m.get("role") == "assistant")
            messages = messages[:cut]
        elif self.asking:
            asking = {cid: a.model_dump(mode="json") for cid, a in self.asking.items()}
            return json.dumps({"messages": messages, "asking": asking})
        if whole:
            messages = compact(messages, self.turn.history_limit)  # type: ignore[arg-type]
        return json.dumps(messages)

    async def _text(self, delta: str) -> None:
        self.turn.text(delta)


def _unique_call_ids(response: ModelResponse, messages: Sequence[Message]) -> ModelResponse:
    """``response`` with a new id for each call whose id the conversation already holds: some servers number calls
    per answer (``call_0`` every time), and a call is known by its id, to the model (its result) and to the engine
    (its execution marker: the same id would replay the earlier call's result instead of running this one).
    Stored with the response, so a replay reads the same ids."""
    calls = distinct_ids(response.tool_calls, taken=(c.get("id") for m in messages for c in m.get("tool_calls") or []))
    return response if calls == response.tool_calls else response.model_copy(update={"tool_calls": calls})
