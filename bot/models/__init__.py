"""Model clients: an OpenAI-compatible one over httpx, a scripted one for tests and offline use."""

from bot.models.base import ChatModel, Message, ModelError, ModelResponse, ToolCall, ToolSpec, Usage

__all__ = ["ChatModel", "Message", "ModelError", "ModelResponse", "ToolCall", "ToolSpec", "Usage"]
