"""The bot's own loop shape as an agent backend (DESIGN §14): ``native(model, tools) -> WrappedAgent``.

The same parts the built-in loop runs on, a :class:`~bot.models.base.ChatModel` (the OpenAI-compatible
client, streamed) and ``@tool`` :class:`~bot.tools.Tool` s, driven through :class:`~bot.backends.BackendTurn`
like any framework: a model step, then each call it asked for through our request policy (``turn.gate``)
and, when it may run, the execution fence (``turn.fence``); the response is checkpointed before any of its
tools run; a call people must decide parks the run. It exists to weigh the backend interface against the
built-in loop on the same cycle (``benchmarks/http``: contenders ``p`` and ``pN``).

``saved`` is JSON: the conversation as Chat Completions messages (no system message: the instructions are
put first at each model call). A paused run's last assistant message holds calls without a tool message:
those are what :meth:`NativeBackend.resume` answers.

As in the built-in loop, from the engine's state through the turn (never from the model): a tool's context has
the session (``ctx.tenant`` is the signed request's workspace), its caller (``ctx.principal``: the approver of an
approved call, else the turn's owner), ``ctx.workspace`` and an idempotency key of the same shape (session, turn,
step, call); a failed model call, or an answer with nothing to show, says ``bot.models.words``' words; the
model sees the turn's history window (``BOT_HISTORY_WINDOW``, the operator's setting, so the turn carries it);
and what the turn's owner writes meanwhile is read before each model call (``BackendTurn.take_messages``).

Left out (the built-in loop has them): sub-agents and delegation, the session limit (step and token budgets), MCP
and OpenAPI tools, ``ctx.ask`` / ``ctx.form`` from inside a tool, external-result tools, and the compaction of the
stored conversation (``BOT_HISTORY_LIMIT``). A tool's card options beyond its approval policy (prompt, deadlines,
preview) are not carried by the proxy.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from functools import partial
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from typing import Any

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
    Stopped,
    ToolInfo,
    WrappedAgent,
    wrap,
)
from bot.models.base import ChatModel, Message, ModelError, ToolCall
from bot.models.history import model_view
from bot.models.words import answer_words, logged_failure_words
from bot.ops.metrics import MeteredModel
from bot.protocol import CancelRequested, LeaseLost, MessageTaken
from bot.state import CallResult
from bot.tools import Tool, ToolContext, as_dict

FRAMEWORK = "native"
log = logging.getLogger(__name__)
try:
    VERSION = dist_version("slack-hitl-bot")
except PackageNotFoundError:  # run from a checkout that was never installed
    VERSION = "0"


def native(model: ChatModel, tools: Sequence[Tool], *, instructions: str | None = None) -> WrappedAgent:
    """The bot's own loop on ``model`` and ``tools``, each tool under its own approval policy."""
    return wrap(NativeBackend(model, tools, instructions=instructions),
                policies={t.name: t.approval for t in tools})


class NativeBackend:
    framework = FRAMEWORK
    version = VERSION

    def __init__(self, model: ChatModel, tools: Sequence[Tool], *, instructions: str | None = None):
        # timed and its tokens counted as the built-in loop's model is (hitl_model_*)
        self.model = model if isinstance(model, MeteredModel) else MeteredModel(model)
        self.instructions = instructions
        self.by_name = {t.name: t for t in tools}
        self.specs = [t.spec() for t in tools]

    def tools(self) -> list[ToolInfo]:
        return [ToolInfo(name=t.name, description=t.description, parameters=t.spec().parameters,
                         asks=t.approval.request.kind != "never", editable=t.editable, idempotent=t.idempotent,
                         args_model=t.input_model) for t in self.by_name.values()]

    async def start(self, turn: BackendTurn, text: str, saved: str | None) -> Outcome:
        messages: list[Message] = json.loads(saved) if saved else []
        messages.append({"role": "user", "content": text})
        return await _Run(self, turn, messages).go()

    async def resume(self, turn: BackendTurn, saved: str, answers: dict[str, Answer]) -> Outcome:
        """From :class:`Parked` with people's answers, or (``answers`` empty) from the checkpoint taken after a
        model response: its calls not answered yet are gated and fenced again (a recorded one is not run again)."""
        run = _Run(self, turn, json.loads(saved))
        last = run.messages[-1] if run.messages else None
        if last is not None and last.get("role") == "assistant" and not last.get("tool_calls"):
            return Finished(text=last.get("content") or "", saved=saved)  # its answer was given already
        return await run.go(answers)


class _Run:
    """One run of the loop, from start or resume to its outcome."""

    def __init__(self, backend: NativeBackend, turn: BackendTurn, messages: list[Message]):
        self.backend, self.turn, self.messages = backend, turn, messages

    async def go(self, answers: dict[str, Answer] | None = None) -> Outcome:
        """``answers``: None for a new turn, else what people said of the last response's calls (if anything)."""
        pending = await self._calls(answers) if answers is not None else []
        while not pending:
            # steering: what the turn's owner wrote meanwhile is read before the model is asked again
            self.messages.extend({"role": "user", "content": text} for text in await self.turn.take_messages())
            if self.turn.stopped:
                return Stopped(saved=self._saved(whole=True))
            try:
                response = await self.backend.model.complete(self._view(), self.backend.specs, on_text=self._text)
            except ModelError as exc:  # the built-in loop's words for it (any other error: the engine's, the same)
                return Failed(reason=logged_failure_words(exc, self.turn.session_id), saved=self._saved(whole=True))
            if self.turn.stopped:  # stopped while the model thought: nothing it asked for runs
                return Stopped(saved=self._saved(whole=True))
            self.messages.append(response.to_message())
            if not response.tool_calls:
                shown, unanswered = answer_words(response)
                if unanswered is not None:  # nothing to show (empty, filtered, cut): said plainly, never silence
                    log.warning("model answered nothing to show in session %s (finish_reason %s)",
                                self.turn.session_id, response.finish_reason)
                    return Failed(reason=unanswered, saved=self._saved(whole=True))
                return Finished(text=shown or "", saved=self._saved())
            # the response is stored before any of its tools run (serialized only if the engine writes it: a
            # pause or an end stores the outcome's state instead)
            await self.turn.checkpoint(partial(json.dumps, list(self.messages)))
            pending = await self._calls({})
        return Parked(pending=pending, saved=self._saved())

    async def _calls(self, answers: dict[str, Answer]) -> list[PendingCall]:
        """The last response's calls that have no result yet, in order: answered, refused, run or asked."""
        pending: list[PendingCall] = []
        for call in self._unanswered():
            answer = answers.get(call.id)
            if answer is None:
                asked = await self._gate(call)
                if asked is not None:
                    pending.append(asked)
                continue
            if isinstance(answer, Approve):
                content = await self._run(call, answer)
            elif isinstance(answer, Reject):
                content = CallResult(status="rejected", output={"message": answer.message}).content()
            else:  # a reply typed on an approval card: the model reads the words
                content = str(answer.value)
            self._result(call, content)
        return pending

    async def _gate(self, call: ToolCall) -> PendingCall | None:
        tool = self.backend.by_name.get(call.name)
        if tool is None:
            self._result(call, CallResult(status="failed", error=f"there is no tool named {call.name}").content())
            return None
        try:
            arguments = as_dict(tool.parse(call.arguments))
        except ValueError as exc:
            self._result(call, CallResult(status="failed", error=str(exc)).content())
            return None
        verdict = await self.turn.gate(call.id, call.name, arguments)
        if verdict.action == "ask":
            decisions = {"approve", "reject", "edit"} if tool.editable else {"approve", "reject"}
            return PendingCall(call_id=call.id, tool_name=call.name, arguments=arguments,
                               decisions=frozenset(decisions))  # type: ignore[arg-type]
        if verdict.action == "refuse":
            message = verdict.reason or f"{call.name} is not allowed here."
            self._result(call, CallResult(status="rejected", output={"message": message}).content())
            return None
        self._result(call, await self._run(call, None))
        return None

    async def _run(self, call: ToolCall, approved: Approve | None) -> str:
        """The tool inside the fence; what the model reads of it."""
        tool = self.backend.by_name[call.name]
        edited = approved.arguments if approved is not None else None
        try:
            args = tool.parse(edited if edited is not None else call.arguments)
        except ValueError as exc:
            return CallResult(status="failed", error=str(exc)).content()
        turn = self.turn
        # the session and the caller from the engine's state (the tenant is the signed request's workspace, never
        # one the model names); the key as the built-in loop's: session, turn, step (its response's place in the
        # conversation: the same in a replay), call
        ctx = ToolContext(session=turn.session, principal=turn.principal(call.id), call_id=call.id,
                          idempotency_key=f"{turn.session_id}:{turn.turn_id}:{self._step()}:{call.id}",
                          can_ask=False, workspace=turn.workspace)
        seen: dict[str, Any] = {}  # "ran" once the tool runs (a replay runs nothing), "raised": what it raised

        async def execute() -> Any:
            seen["ran"] = True
            try:
                # JSON both times: the model reads the same thing from a first run and from a replay
                return to_jsonable_python(await tool.invoke(args, ctx), serialize_unknown=True)
            except Exception as exc:
                seen["raised"] = exc
                raise

        try:
            output = await turn.fence(call.id, call.name, execute, idempotent=tool.idempotent, arguments=as_dict(args))
        except (LeaseLost, CancelRequested, MessageTaken):
            raise
        except Exception as exc:
            # the tool's own failure, now or replayed (the fence raises a recorded one as a RuntimeError); any
            # other is the engine's and ends the run as it is
            replayed = "ran" not in seen and type(exc) is RuntimeError
            if seen.get("raised") is not exc and not replayed:
                raise
            result = CallResult(status="failed", error=str(exc) if replayed else f"{type(exc).__name__}: {exc}")
        else:
            result = CallResult(status="completed", output=output)
        content = result.content()
        if edited is None:
            return content
        who = approved.by if approved is not None and approved.by else "the approver"
        return json.dumps({"note": f"{who} changed the arguments before approving; it ran with these.",
                           "arguments": as_dict(args), "result": content})

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
        """The conversation as JSON; ``whole``: without a last response whose calls did not all run (the
        next turn can follow it)."""
        messages = self.messages
        if whole and self._unanswered():
            cut = max(i for i, m in enumerate(messages) if m.get("role") == "assistant")
            messages = messages[:cut]
        return json.dumps(messages)

    async def _text(self, delta: str) -> None:
        self.turn.text(delta)
