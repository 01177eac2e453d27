"""A Web API call as it arrives: its arguments however they came (query, JSON or form body, HTTP Basic),
the token pulled out of them, the ``Params`` every method reads them through, and Slack's ``missing_scope``
refusal."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from localslack.credentials import Auth
from localslack.errors import ApiError, error_messages
from localslack.models import Message

_JSON_FIELDS = ("blocks", "attachments", "view", "metadata")

Handler = Callable[["Params"], dict[str, Any]]
MessageHook = Callable[[str, Message, dict[str, Any] | None], None]


class Params:
    """A method's arguments, however they arrived, with Slack-like coercions."""

    def __init__(self, values: dict[str, Any], auth: Auth | None) -> None:
        self.values = values
        self._auth = auth

    @property
    def auth(self) -> Auth:
        assert self._auth is not None  # methods that need a token are only called with one
        return self._auth

    def get(self, name: str, default: Any = None) -> Any:
        value = self.values.get(name, default)
        return default if value is None else value

    def text(self, name: str, *, required: bool = False) -> str | None:
        value = self.values.get(name)
        if value is None or value == "":
            if required:
                raise ApiError("invalid_arguments", extra=error_messages(f"missing required field: {name}"))
            return None
        return str(value)

    def flag(self, name: str) -> bool:
        value = self.values.get(name)
        return value is True or str(value).lower() in ("true", "1")

    def number(self, name: str, default: int) -> int:
        try:
            return int(self.values.get(name) or default)
        except (TypeError, ValueError):
            return default


def require_scope(auth: Auth, scope: str) -> None:
    """Slack's refusal for a token without the scope a call needs (``needed`` / ``provided`` as Slack
    sends them, e.g. ``{"error": "missing_scope", "needed": "groups:history", "provided": "..."}``)."""
    if auth.scopes is None or scope in auth.scopes:
        return
    raise ApiError("missing_scope", extra={"needed": scope, "provided": ",".join(auth.scopes)})


async def read_params(request: web.Request) -> tuple[dict[str, Any], str | None, list[str]]:
    """Query + body (JSON or form) merged; JSON-string fields decoded; the token pulled out."""
    values: dict[str, Any] = dict(request.query)
    warnings: list[str] = []
    if request.method == "POST" and request.can_read_body:
        content_type = request.content_type
        if content_type == "application/json":
            if "charset" not in request.headers.get("Content-Type", "").lower():
                warnings.append("missing_charset")
            try:
                body = json.loads(await request.read() or b"{}")
            except ValueError as exc:
                raise ApiError("invalid_json") from exc
            if not isinstance(body, dict):
                raise ApiError("json_not_object")
            values.update(body)
        elif content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            form = await request.post()
            values.update({k: v for k, v in form.items() if isinstance(v, str)})
    for key in _JSON_FIELDS:
        if isinstance(values.get(key), str):
            try:
                values[key] = json.loads(values[key])
            except ValueError as exc:
                raise ApiError("invalid_blocks_format" if key == "blocks" else "invalid_arguments") from exc
    token = values.pop("token", None)
    authorization = request.headers.get("Authorization", "")
    if authorization.startswith("Bearer "):
        token = authorization.removeprefix("Bearer ").strip()
    elif authorization.startswith("Basic "):
        values.update(_basic_credentials(authorization))
    return values, token, warnings


def _basic_credentials(authorization: str) -> dict[str, str]:
    try:
        decoded = base64.b64decode(authorization.removeprefix("Basic ").strip()).decode()
    except (ValueError, binascii.Error):
        return {}
    client_id, _, client_secret = decoded.partition(":")
    return {"client_id": client_id, "client_secret": client_secret}
