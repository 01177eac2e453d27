"""The offline demo model behind an OpenAI-compatible Chat Completions endpoint, so an agent written for a
framework (pydantic-ai, the OpenAI Agents SDK, LangChain) runs with no key on a laptop: ``make run`` with
``BOT_AGENT`` set serves it and points the frameworks' OpenAI clients at it (``OPENAI_BASE_URL``).

It speaks the wire format the frameworks' clients read: a ``chat.completion`` object, or with
``"stream": true`` server-sent ``chat.completion.chunk`` events ending in ``data: [DONE]`` (the usage
chunk too when ``stream_options.include_usage`` is set). The words are :class:`bot.models.demo.DemoModel`'s.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import TYPE_CHECKING, Any

from bot.models.base import ModelResponse, ToolSpec

if TYPE_CHECKING:
    from bot.models.demo import DemoModel

BASE_PATH = "/demo-model/v1"  # where bot/app.py points OPENAI_BASE_URL in local mode with no key
PATH = f"{BASE_PATH}/chat/completions"


async def demo_completion(body: dict[str, Any], model: DemoModel | None = None) -> ModelResponse:
    """The demo model's answer to a Chat Completions request body."""
    messages = [_plain(m) for m in body.get("messages") or [] if isinstance(m, dict)]
    tools = [ToolSpec(name=f["name"], description=f.get("description") or "", parameters=f.get("parameters") or {})
             for t in body.get("tools") or [] if isinstance(t, dict) and isinstance(f := t.get("function"), dict)
             and isinstance(f.get("name"), str)]
    if model is None:
        from bot.models.demo import DemoModel  # here: bot/app.py reads this module's path at every start

        model = DemoModel()
    return await model.complete(messages, tools)


def _plain(message: dict[str, Any]) -> dict[str, Any]:
    """A message with its content as text (frameworks may send a list of content parts)."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return {**message, "content": content}


def completion_json(response: ModelResponse, model: str = "demo") -> dict[str, Any]:
    """A ``chat.completion`` object for ``response``."""
    message: dict[str, Any] = {"role": "assistant", "content": response.text}
    if response.tool_calls:
        message["tool_calls"] = [_call(c) for c in response.tool_calls]
    return {
        "id": f"chatcmpl-{secrets.token_hex(8)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if response.tool_calls else "stop"}],
        "usage": _usage(response),
    }


def completion_chunks(response: ModelResponse, model: str = "demo", *, include_usage: bool = False) -> list[str]:
    """The server-sent events of a streamed answer, ``data: [DONE]`` last."""
    base = {"id": f"chatcmpl-{secrets.token_hex(8)}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        return "data: " + json.dumps({**base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                                           "finish_reason": finish}]}) + "\n\n"

    events = [chunk({"role": "assistant", "content": ""})]
    if response.text:
        events.append(chunk({"content": response.text}))
    for index, call in enumerate(response.tool_calls):
        events.append(chunk({"tool_calls": [{"index": index, **_call(call)}]}))
    events.append(chunk({}, "tool_calls" if response.tool_calls else "stop"))
    if include_usage:
        events.append("data: " + json.dumps({**base, "choices": [], "usage": _usage(response)}) + "\n\n")
    events.append("data: [DONE]\n\n")
    return events


def _call(call: Any) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def _usage(response: ModelResponse) -> dict[str, int]:
    return {"prompt_tokens": response.usage.prompt_tokens, "completion_tokens": response.usage.completion_tokens,
            "total_tokens": response.usage.total_tokens}
