"""A ChatModel that plays a script: for tests, and for running offline without any model account.

A turn may resume in a new process after a restart, so by default the next step is chosen from the
conversation itself (the number of assistant messages in it), not from an in-memory counter: a fresh
``ScriptedModel`` with the same script, given the same persisted history, answers the same way.
"""

from __future__ import annotations

import copy
import inspect
import json
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from bot.models.base import Message, ModelError, ModelResponse, TextCallback, ToolCall, ToolSpec, Usage

StepFunction = Callable[[list[Message], list[ToolSpec]], ModelResponse | Awaitable[ModelResponse]]
Step = ModelResponse | StepFunction

NO_MORE_STEPS = "scripted model has no more steps"


def say(text: str) -> ModelResponse:
    """A step that answers with text and ends the turn."""
    return ModelResponse(text=text, finish_reason="stop")


def call(tool_name: str, call_id: str | None = None, **args: Any) -> ModelResponse:
    """A step that calls one tool with keyword ``args``."""
    return ModelResponse(tool_calls=[_tool_call(tool_name, args, call_id)], finish_reason="tool_calls")


def calls(*tool_calls: tuple[str, Mapping[str, Any]] | tuple[str, Mapping[str, Any], str]) -> ModelResponse:
    """A step that calls several tools at once: ``calls(("a", {...}), ("b", {...}, "call_id_b"))``."""
    made = [_tool_call(entry[0], entry[1], entry[2] if len(entry) > 2 else None) for entry in tool_calls]
    return ModelResponse(tool_calls=made, finish_reason="tool_calls")


def _tool_call(name: str, args: Mapping[str, Any], call_id: str | None) -> ToolCall:
    return ToolCall(
        id=call_id or f"call_{uuid.uuid4().hex[:24]}", name=name, arguments=json.dumps(dict(args))
    )


class ScriptedModel:
    """Returns its steps in order; see the module docstring for how it finds its place.

    With ``by_turn_position=False`` it simply counts its own calls instead.
    """

    def __init__(self, steps: Iterable[Step], *, name: str = "scripted", by_turn_position: bool = True):
        self.name = name
        self.steps: list[Step] = list(steps)
        self.by_turn_position = by_turn_position
        self.requests: list[tuple[list[Message], list[ToolSpec]]] = []
        self._calls = 0

    def __repr__(self) -> str:
        return f"ScriptedModel(name={self.name!r}, steps={len(self.steps)})"

    def next_step_index(self, messages: list[Message]) -> int:
        """Which step answers ``messages``."""
        if self.by_turn_position:
            return sum(1 for message in messages if message.get("role") == "assistant")
        return self._calls

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec], *, on_text: TextCallback | None = None
    ) -> ModelResponse:
        self.requests.append((_plain_copy(messages), _copied_tools(tools)))
        index = self.next_step_index(messages)
        self._calls += 1
        if index >= len(self.steps):
            raise ModelError(NO_MORE_STEPS, retryable=False)
        response = await self._play(self.steps[index], messages, tools)
        if on_text is not None and response.text:
            for chunk in _chunks(response.text):
                await on_text(chunk)
        return response

    async def _play(self, step: Step, messages: list[Message], tools: list[ToolSpec]) -> ModelResponse:
        if isinstance(step, ModelResponse):
            produced: Any = step
        else:
            # Hand the callable a copy so it cannot edit the caller's history by accident.
            produced = step(_plain_copy(messages), _copied_tools(tools))
            if inspect.isawaitable(produced):
                produced = await produced
        if not isinstance(produced, ModelResponse):
            raise TypeError(f"a scripted step must produce a ModelResponse, got {type(produced).__name__}")
        # A copy, so callers mutating the answer never change the script.
        response = produced.model_copy(deep=True)
        if "usage" not in produced.model_fields_set:
            response.usage = _estimated_usage(messages, response)
        return response


def _plain_copy(value: Any) -> Any:
    """A deep copy of JSON-like data (what messages and tool schemas are).

    ``copy.deepcopy`` and pydantic's deep ``model_copy`` keep a memo and dispatch per type; on the tool
    schemas sent with every model call that was the largest single cost of a scripted cycle.
    Anything not a dict, list or scalar (a tuple, an object) still goes through ``copy.deepcopy``.
    """
    if isinstance(value, dict):
        return {key: _plain_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain_copy(item) for item in value]
    if value is None or isinstance(value, str | int | float):  # bool is an int
        return value
    return copy.deepcopy(value)


def _copied_tools(tools: list[ToolSpec]) -> list[ToolSpec]:
    """Copies of ``tools``: name and description are strings, so only the schema needs copying deeply."""
    return [tool.model_copy(update={"parameters": _plain_copy(tool.parameters)}) for tool in tools]


def _estimated_usage(messages: list[Message], response: ModelResponse) -> Usage:
    """Rough token counts (4 characters a token) so budgets and limits behave offline too."""
    return Usage(
        prompt_tokens=sum(_message_chars(message) for message in messages) // 4,
        completion_tokens=len(response.text or "") // 4 + 10 * len(response.tool_calls),
    )


def _message_chars(message: Message) -> int:
    content = message.get("content")
    if isinstance(content, str):
        chars = len(content)
    elif isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        chars = sum(len(part.get("text") or "") for part in content if isinstance(part, dict))
    else:
        chars = 0
    for tool_call in message.get("tool_calls") or []:
        function = tool_call.get("function") or {}
        chars += len(function.get("name") or "") + len(function.get("arguments") or "")
    return chars


def _chunks(text: str) -> list[str]:
    """Split text into 2–3 pieces (1 if it is a single character), like a stream would."""
    if len(text) < 2:
        return [text]
    pieces = 3 if len(text) >= 3 else 2
    size = -(-len(text) // pieces)  # ceiling division
    return [text[start : start + size] for start in range(0, len(text), size)]
