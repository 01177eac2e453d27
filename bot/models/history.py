"""A session's conversation history: what the model is shown of it, and how much of it is kept."""

from __future__ import annotations

from typing import Any


def model_view(history: list[dict[str, Any]], window: int) -> list[dict[str, Any]]:
    """What the model is shown: system messages, then the newest ``window`` messages, starting at a
    user message so no tool result is cut from the call that asked for it. The stored history keeps
    everything."""
    if window <= 0 or len(history) <= window:
        return history
    system = [m for m in history if m.get("role") == "system"]
    rest = [m for m in history if m.get("role") != "system"]
    tail = rest[-window:]
    start = next((i for i, m in enumerate(tail) if m.get("role") == "user"), None)
    if start is None:  # one very long turn: keep it whole rather than break a call from its results
        start = max((i for i, m in enumerate(rest) if m.get("role") == "user"), default=0)
        return system + rest[start:]
    return system + tail[start:]


def compact(history: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """Bound a long session's stored history (a DM is one endless session): keep the system messages
    and the newest ``limit`` messages, cut at a user message so calls keep their results."""
    if limit <= 0 or len(history) <= limit:
        return history
    return model_view(history, limit)


def user_message(message: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": message["text"]}
