"""The shapes of the Slack requests we accept, checked before Bolt dispatches them.

Bolt and our listeners read fields such as ``body["user"]["id"]`` or ``actions[0]["action_id"]``
directly; a signed body of the wrong shape would crash them into a 500, which Slack retries. These
models describe only what we rely on (extra fields are allowed, as Slack adds fields over time), so
a request that passes can be handled and one that does not is answered 400 with no side effect.
Request types we do not name here (``url_verification``, ``shortcut``, ``ssl_check``…) pass through:
Bolt acknowledges what no listener handles.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow")


class Actor(_Shape):
    id: str


class Team(_Shape):
    id: str | None = None


class Action(_Shape):
    action_id: str
    block_id: str | None = None
    value: str | None = None
    selected_option: dict[str, Any] | None = None


class BlockActions(_Shape):
    user: Actor
    team: Team | None = None
    actions: list[Action] = Field(min_length=1)
    container: dict[str, Any] | None = None
    channel: dict[str, Any] | None = None
    message: dict[str, Any] | None = None
    view: dict[str, Any] | None = None


class View(_Shape):
    id: str | None = None
    callback_id: str | None = None
    private_metadata: str | None = None
    state: dict[str, Any] | None = None


class ViewPayload(_Shape):
    """``view_submission`` and ``view_closed``."""

    user: Actor
    team: Team | None = None
    view: View


class Event(_Shape):
    type: str


class MessageEvent(Event):
    """``message`` and ``app_mention``: the events whose fields our listeners read."""

    user: str | None = None
    text: str | None = None
    channel: str | None = None
    ts: str | None = None
    thread_ts: str | None = None
    subtype: str | None = None


MESSAGE_EVENTS = {"message", "app_mention"}


class EventCallback(_Shape):
    team_id: str | None = None
    event: Event
    authorizations: list[dict[str, Any]] | None = None


class SlashCommand(_Shape):
    command: str
    user_id: str
    team_id: str
    text: str = ""


SHAPES: dict[str, type[_Shape]] = {
    "block_actions": BlockActions,
    "view_submission": ViewPayload,
    "view_closed": ViewPayload,
    "event_callback": EventCallback,
}


def problem(body: Any) -> str | None:
    """Why a (signed) parsed body cannot be handled, or None when it can."""
    if not isinstance(body, dict):
        return f"the body is a JSON {type(body).__name__}, not an object"
    kind = body.get("type")
    if kind is None:
        if "command" in body:
            return _check(SlashCommand, body)
        if "ssl_check" in body:
            return None
        return "the body has no type"
    if not isinstance(kind, str):
        return "the body's type is not a string"
    shape = SHAPES.get(kind)
    if shape is None:
        return None
    if (found := _check(shape, body)) is not None:
        return found
    event = body.get("event") if kind == "event_callback" else None
    if isinstance(event, dict) and event.get("type") in MESSAGE_EVENTS:
        return _check(MessageEvent, event)
    return None


def _check(shape: type[_Shape], body: dict[str, Any]) -> str | None:
    try:
        shape.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        return f"{where}: {first['msg']}"
    return None
