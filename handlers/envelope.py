"""The shapes of the Slack requests we accept, checked before Bolt dispatches them.

Bolt and our listeners read fields such as ``body["user"]["id"]`` or ``actions[0]["action_id"]``
directly; a signed body of the wrong shape would crash them into a 500, which Slack retries. These
models describe only what we rely on (extra fields are allowed, as Slack adds fields over time), but
all of it: every field a listener reads, nested ones included (a chosen option's ``value``, the people
picked in a select), has the kind Slack sends. So a request that passes can be handled and one that
does not is answered 400 with no side effect.
Request types we do not name here (``url_verification``, ``app_rate_limited``, ``ssl_check``…) pass
through: ``handlers.fallback`` acknowledges what no listener handles.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, StrictInt, StringConstraints, ValidationError

from bot.deferred import DeferredModel

# Slack's ids (T…, E…, U…, W…, C…, D…, G…) are short runs of letters and digits; anything else in an id
# field is not from Slack, and would otherwise travel into Redis keys and principal ids
SlackId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
SlackTs = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,12}(\.[0-9]{1,8})?$")]  # "1712345678.000100"


class _Shape(DeferredModel):
    model_config = ConfigDict(extra="ignore")  # checked, then dropped: nothing extra kept


class Actor(_Shape):
    id: SlackId
    team_id: SlackId | None = None
    username: str | None = None


class Team(_Shape):
    id: SlackId | None = None
    enterprise_id: SlackId | None = None


class Org(_Shape):
    id: SlackId | None = None


class Option(_Shape):
    """A chosen option as Slack echoes it: its ``value`` is always a string."""

    value: str


class Choice(_Shape):
    """What an interactive element holds, in a click's action or a view's state: the fields our listeners
    and forms read, of the kinds Slack sends (null for an input left empty)."""

    type: str | None = None
    value: str | None = None
    selected_option: Option | None = None
    selected_options: list[Option] | None = None
    selected_users: list[SlackId] | None = None
    selected_date: str | None = None
    selected_date_time: StrictInt | None = None


class Action(Choice):
    action_id: str
    block_id: str | None = None


class Authorization(_Shape):
    team_id: SlackId | None = None
    enterprise_id: SlackId | None = None
    user_id: SlackId | None = None


class Interaction(_Shape):
    """What every interaction payload carries that ``handlers.identity`` reads."""

    user: Actor
    team: Team | None = None
    team_id: SlackId | None = None
    enterprise: Org | None = None
    enterprise_id: SlackId | None = None
    app_installed_team_id: SlackId | None = None
    authorizations: list[Authorization] | None = None
    trigger_id: str | None = None


class Container(_Shape):
    type: str | None = None
    channel_id: SlackId | None = None
    message_ts: SlackTs | None = None
    thread_ts: SlackTs | None = None


class Channel(_Shape):
    id: SlackId | None = None


class CardMessage(_Shape):
    ts: SlackTs | None = None
    thread_ts: SlackTs | None = None


class ViewState(_Shape):
    values: dict[str, dict[str, Choice]] = {}  # block id → action id → the input's value


class View(_Shape):
    type: str
    id: SlackId | None = None
    app_installed_team_id: SlackId | None = None
    callback_id: str | None = None
    private_metadata: str | None = None
    state: ViewState | None = None
    blocks: list[dict[str, Any]] | None = None


class BlockActions(Interaction):
    actions: list[Action] = Field(min_length=1)
    container: Container | None = None
    channel: Channel | None = None
    message: CardMessage | None = None
    view: View | None = None  # a click in App Home or a modal


class ViewPayload(Interaction):
    """``view_submission`` and ``view_closed``."""

    view: View


class Event(_Shape):
    type: str


class MessageEvent(Event):
    """``message`` and ``app_mention``: the events whose fields our listeners read."""

    user: SlackId | None = None
    text: str | None = None
    channel: SlackId | None = None
    ts: SlackTs | None = None
    thread_ts: SlackTs | None = None
    subtype: str | None = None
    channel_type: str | None = None
    bot_id: str | None = None
    user_team: SlackId | None = None
    team: SlackId | None = None


MESSAGE_EVENTS = {"message", "app_mention"}


class EventCallback(_Shape):
    team_id: SlackId | None = None
    enterprise_id: SlackId | None = None
    event: Event
    authorizations: list[Authorization] | None = None


class SlashCommand(_Shape):
    command: str
    user_id: SlackId
    team_id: SlackId
    user_team_id: SlackId | None = None
    enterprise_id: SlackId | None = None
    channel_id: SlackId | None = None
    trigger_id: str | None = None
    response_url: str | None = None
    text: str = ""


class AssistantContext(_Shape):
    """Where the person is looking: kept per thread, its channel told to the agent."""

    channel_id: SlackId | None = None
    team_id: SlackId | None = None
    enterprise_id: SlackId | None = None


class AssistantThread(_Shape):
    channel_id: SlackId
    thread_ts: SlackTs
    user_id: SlackId | None = None
    context: AssistantContext | None = None


class AssistantThreadEvent(Event):
    """``assistant_thread_started`` / ``_context_changed``: Bolt's assistant middleware and our listeners
    read the thread's ids and its context's as strings."""

    assistant_thread: AssistantThread


ASSISTANT_EVENTS = {"assistant_thread_started", "assistant_thread_context_changed"}


class HomeOpened(Event):
    """``app_home_opened``: App Home is published for ``user``."""

    user: SlackId
    channel: SlackId | None = None
    tab: str | None = None


class SessionStopped(Event):
    """``agent_session_stopped``: the stop button's clicker and the session's thread."""

    user: SlackId | None = None
    user_team: SlackId | None = None
    team: SlackId | None = None
    channel: SlackId | None = None
    thread_ts: SlackTs | None = None


class Tokens(_Shape):
    oauth: list[SlackId] | None = None
    bot: list[SlackId] | None = None


class TokensRevoked(Event):
    """``tokens_revoked``: whose tokens to forget."""

    tokens: Tokens | None = None


# events whose fields our listeners (or Bolt's middleware) read, by event type
EVENT_SHAPES: dict[str, type[Event]] = {
    **dict.fromkeys(ASSISTANT_EVENTS, AssistantThreadEvent),
    "app_home_opened": HomeOpened,
    "agent_session_stopped": SessionStopped,
    "tokens_revoked": TokensRevoked,
}


class Callback(Interaction):
    """Shortcuts, dialogs, legacy attachment actions and steps from apps: Bolt matches listeners on
    their ``callback_id`` (a regular expression search, which a non-string would crash)."""

    callback_id: str


class AttachmentActions(Callback):
    """``interactive_message``: Bolt hands listeners ``actions[0]``."""

    actions: list[dict[str, Any]] = Field(min_length=1)


class StepEdit(Callback):
    workflow_step: dict[str, Any]


class OptionsRequest(Interaction):
    """``block_suggestion``: matched on ``action_id`` (and ``block_id``); ``value`` is what was typed."""

    action_id: str
    block_id: str | None = None
    value: str | None = None


class Readable(_Shape):
    """The fields Bolt itself reads from any request (to build its context, match listeners and log
    what it does not handle) must have the kind Slack sends, whatever the request's type."""

    # Slack sends null for these (an org-wide install has no team; outside Grid there is no enterprise)
    enterprise: dict[str, Any] | str | None = None
    team: dict[str, Any] | str | None = None
    user: dict[str, Any] | str | None = None
    channel: dict[str, Any] | str | None = None
    is_enterprise_install: bool | str | None = None
    # ... but never for these: Bolt reads them as ``body.get("event", {}).get(…)``. (An absent field takes
    # the default, which pydantic does not validate; an explicit null is refused.)
    view: dict[str, Any] = None  # type: ignore[assignment]
    container: dict[str, Any] = None  # type: ignore[assignment]
    message: dict[str, Any] = None  # type: ignore[assignment]
    event: dict[str, Any] = None  # type: ignore[assignment]
    authorizations: list[dict[str, Any]] = None  # type: ignore[assignment]
    actions: list[dict[str, Any]] = None  # type: ignore[assignment]
    function_data: dict[str, Any] = None  # type: ignore[assignment]


SHAPES: dict[str, type[_Shape]] = {
    "block_actions": BlockActions,
    "view_submission": ViewPayload,
    "view_closed": ViewPayload,
    "event_callback": EventCallback,
    "interactive_message": AttachmentActions,
    "workflow_step_edit": StepEdit,
    "shortcut": Callback,
    "message_action": Callback,
    "dialog_submission": Callback,
    "dialog_cancellation": Callback,
    "dialog_suggestion": Callback,
    "block_suggestion": OptionsRequest,
}


def problem(body: Any) -> str | None:
    """Why a (signed) parsed body cannot be handled, or None when it can."""
    if not isinstance(body, dict):
        return f"the body is a JSON {type(body).__name__}, not an object"
    if (unreadable := _check(Readable, body)) is not None:
        return unreadable
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
    if isinstance(event, dict) and (event_shape := EVENT_SHAPES.get(event.get("type"))) is not None:  # type: ignore[arg-type]
        return _check(event_shape, event)
    return None


def _check(shape: type[_Shape], body: dict[str, Any]) -> str | None:
    try:
        shape.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        return f"{where}: {first['msg']}"
    return None
