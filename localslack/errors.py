"""Slack's Web API errors, as any part of the local workspace raises them: ``ApiError`` becomes
``{"ok": false, "error": ..., **extra}`` with its HTTP status; ``error_messages`` is the explanation Slack
adds to an ``invalid_arguments``."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A Slack Web API error: ``{"ok": false, "error": error, **extra}`` with HTTP ``status``."""

    def __init__(
        self,
        error: str,
        *,
        status: int = 200,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(error)
        self.error = error
        self.status = status
        self.extra = extra or {}
        self.headers = headers or {}


def error_messages(*lines: str) -> dict[str, Any]:
    """Slack's ``response_metadata.messages`` explaining an ``invalid_arguments`` error."""
    return {"response_metadata": {"messages": [f"[ERROR] {line}" for line in lines]}}
