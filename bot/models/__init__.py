"""Model clients: an OpenAI-compatible one over httpx, a scripted one for tests and offline use."""

from bot.models.base import ChatModel, Message, ModelError, ModelResponse, ToolCall, ToolSpec, Usage
from bot.models.openai import OpenAIChatModel
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
