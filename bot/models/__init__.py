"""Model clients: an OpenAI-compatible one over aiohttp, a scripted one for tests and offline use.

The OpenAI client is imported on first use: a restarted process's start and first click do not need it.
"""

from typing import Any

from bot.models.base import ChatModel, Message, ModelError, ModelResponse, ToolCall, ToolSpec, Usage
from bot.models.scripted import ScriptedModel, call, calls, say

__all__ = [
    "ChatModel",
    "Message",
    "ModelError",
    "ModelResponse",
    "OpenAIChatModel",
    "ScriptedModel",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "call",
    "calls",
    "say",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAIChatModel":
        from bot.models.openai import OpenAIChatModel

        return OpenAIChatModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
