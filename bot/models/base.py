"""The model interface the turn loop talks to.

Messages are OpenAI Chat Completions dicts (``role``/``content``/``tool_calls``/``tool_call_id``):
the history is stored in that shape, so any OpenAI-compatible endpoint can continue it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from pydantic import Field

from bot.deferred import DeferredModel

Message = dict[str, Any]
TextCallback = Callable[[str], Awaitable[None]]


class RestartableText(ABC):
    """A text callback that can be told the text starts over (``restart()``): a model client may retry a
    stream broken after it showed words, since the retry's text replaces them. A plain ``TextCallback``
    cannot unsay what it showed, so a stream broken mid-text is not retried for it."""

    @abstractmethod
    async def __call__(self, delta: str) -> None: ...

    @abstractmethod
    def restart(self) -> None:
        """What was streamed so far is void: the next delta starts the text anew."""


class ToolSpec(DeferredModel):
    """A tool as the model sees it."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


class ToolCall(DeferredModel):
    id: str
    name: str
    arguments: str = "{}"  # raw JSON text, exactly as the model produced it
    extra: dict[str, Any] | None = None  # the call's ``extra_content`` (Gemini: its thought_signature)


class Usage(DeferredModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ModelResponse(DeferredModel):
    text: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    finish_reason: str | None = None
    refusal: str | None = None  # OpenAI: the model declined, in its own words (then ``text`` is empty)
    reasoning: str | None = None  # ``reasoning_content`` (DeepSeek, llama.cpp, vLLM): its thinking, if sent

    def to_message(self) -> Message:
        """The assistant message to append to the history. A tool-call step keeps what servers want back:
        its ``reasoning_content`` (DeepSeek's thinking mode) and each call's ``extra_content`` (Gemini's thought
        signatures); a client that must not send them leaves them out (``OpenAIChatModel`` does)."""
        message: Message = {"role": "assistant", "content": self.text or self.refusal}
        if self.tool_calls:
            message["tool_calls"] = [_call_message(c) for c in self.tool_calls]
            if self.reasoning:
                message["reasoning_content"] = self.reasoning
        return message


def _call_message(call: ToolCall) -> dict[str, Any]:
    made: dict[str, Any] = {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
    if call.extra:
        made["extra_content"] = (
            call.extra
        )  # Gemini refuses the next step without the call's thought_signature
    return made


class ModelError(Exception):
    """The model endpoint failed; ``reason`` is safe to log (no secrets).

    ``kind`` names a failure people are told about in words of its own (``bot.models.words``): ``"quota"``
    (the account is out of credit), ``"rate_limited"`` (asked to wait ``retry_after`` seconds, longer than
    the client retries), ``"stream_error"`` (the server reported an error mid-answer), ``"cut"`` /
    ``"filtered"`` (a tool call cut by the length limit or stopped by a content filter: it never runs).
    """

    def __init__(
        self,
        reason: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        kind: str | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.retryable = retryable
        self.kind = kind
        self.retry_after = retry_after


class ChatModel(Protocol):
    """Anything that can take one step of a conversation."""

    name: str

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec], *, on_text: TextCallback | None = None
    ) -> ModelResponse: ...
