"""The browser UI's HTTP side: static files, ``/ui/state`` JSON, ``/ui/events`` (SSE) and action endpoints.

Action endpoints call the same Python API the tests use (``post_message``, ``click``…); failures come back
as ``{"ok": false, "error": "<one friendly sentence>"}`` — never a stack trace.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from localslack.actions import LocalSlackError, Surface
from localslack.ai_apps import stream_blocks
from localslack.errors import ApiError
from localslack.models import AssistantThread, DeliveryResult, User, View
from localslack.workspace import Workspace

STATIC_DIR = Path(__file__).parent / "static"
_log = logging.getLogger("localslack.ui")


class DrivenSlack(Protocol):
    """What the page drives: the part of ``LocalSlack``'s Python API a person's clicks map to (the same calls
    tests make), and what the page shows of the workspace. ``LocalSlack`` is one; the UI does not import it,
    so ``localslack.server`` can register these routes without a circle."""

    ws: Workspace

    @property
    def bot_url(self) -> str | None: ...

    @property
    def socket_connected(self) -> bool: ...

    @property
    def deliveries(self) -> list[DeliveryResult]: ...

    def dm_channel(self, user_id: str, team_id: str | None = None) -> str: ...

    def view(self, view_id: str) -> View | None: ...

    def assistant_state(self, dm_id: str, thread_ts: str) -> AssistantThread: ...

    async def post_message(
        self, user_id: str, channel_id: str, text: str, thread_ts: str | None = None
    ) -> tuple[str, list[DeliveryResult]]: ...

    async def slash_command(
        self, user_id: str, command: str, text: str = "", channel_id: str = "C0GENERAL"
    ) -> DeliveryResult: ...

    async def click(
        self, user_id: str, channel_id: str, message_ts: str, action_id: str, *, value: str | None = None,
        block_id: str | None = None,
    ) -> DeliveryResult: ...

    async def click_in_view(
        self, user_id: str, view_id: str, action_id: str, value: str | None = None, *, block_id: str | None = None
    ) -> DeliveryResult: ...

    async def select(
        self, user_id: str, channel_id: str, message_ts: str, action_id: str, option_value: str | list[str], *,
        block_id: str | None = None,
    ) -> DeliveryResult: ...

    async def select_in_view(
        self, user_id: str, view_id: str, action_id: str, option_value: str | list[str], *,
        block_id: str | None = None,
    ) -> DeliveryResult | None: ...

    async def select_users(
        self, user_id: str, surface: Surface, action_id: str, user_ids: list[str], *, block_id: str | None = None
    ) -> DeliveryResult | None: ...

    async def set_input(
        self, user_id: str, view_id: str, block_id: str, action_id: str, value: Any
    ) -> DeliveryResult | None: ...

    async def submit_view(
        self, user_id: str, view_id: str, values: dict[str, dict[str, Any]] | None = None
    ) -> DeliveryResult: ...

    async def close_view(self, user_id: str, view_id: str) -> DeliveryResult | None: ...

    async def open_home(self, user_id: str) -> DeliveryResult: ...

    async def open_assistant(
        self, user_id: str, *, context_channel: str | None = None
    ) -> tuple[str, str, DeliveryResult | None]: ...

    async def change_assistant_context(
        self, user_id: str, dm_id: str, thread_ts: str, context_channel: str | None
    ) -> DeliveryResult | None: ...

    async def click_feedback(
        self, user_id: str, channel_id: str, message_ts: str, *, positive: bool = True
    ) -> DeliveryResult: ...

    async def stop_agent_session(
        self, user_id: str, channel_id: str, thread_ts: str, *, late: bool = False
    ) -> DeliveryResult | None: ...

UiHandler = Callable[[DrivenSlack, dict[str, Any]], Awaitable[dict[str, Any]]]


def register(app: web.Application, slack: DrivenSlack) -> None:
    streams: set[asyncio.Task[Any]] = set()
    slack._ui_streams = streams  # type: ignore[attr-defined]  # so stop() can end open event streams

    async def index(request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-store"})

    async def state(request: web.Request) -> web.Response:
        user_id = request.query.get("user") or ""
        if user_id not in slack.ws.users:  # e.g. the Grid seed has no U0ALICE: show its first person
            people = [u for u in slack.ws.users.values() if not u.is_bot and not u.deleted]
            user_id = people[0].id if people else user_id
        try:
            return web.json_response(ui_state(slack, user_id))
        except (LocalSlackError, ApiError) as exc:
            return web.json_response({"ok": False, "error": f"Unknown user {user_id}: {exc}"}, status=404)

    async def events(request: web.Request) -> web.StreamResponse:
        return await _event_stream(request, slack, streams)

    async def avatar(request: web.Request) -> web.Response:
        user_id = request.match_info["user_id"]
        user = slack.ws.users.get(user_id)
        label = _initials(user.real_name) if user else ("SB" if user_id == "USLACKBOT" else "?")
        color = user.color if user else "1d9bd1"
        return web.Response(text=_avatar_svg(label, color), content_type="image/svg+xml")

    async def team_icon(request: web.Request) -> web.Response:
        team = slack.ws.teams.get(request.match_info["team_id"])
        label = (team.name if team else "?")[:1].upper()
        return web.Response(text=_avatar_svg(label, "4a154b"), content_type="image/svg+xml")

    async def favicon(request: web.Request) -> web.Response:
        return web.Response(text=_avatar_svg("A", "4a154b"), content_type="image/svg+xml")

    app.router.add_get("/", index)
    app.router.add_get("/favicon.ico", favicon)
    app.router.add_static("/static/", STATIC_DIR, show_index=False)
    app.router.add_get("/ui/state", state)
    app.router.add_get("/ui/events", events)
    app.router.add_get("/ui/avatar/{user_id}.svg", avatar)
    app.router.add_get("/ui/team/{team_id}.svg", team_icon)
    for name, handler in _ACTIONS.items():
        app.router.add_post(f"/ui/{name}", _action_endpoint(slack, handler))


async def close_streams(slack: DrivenSlack) -> None:
    streams: set[asyncio.Task[Any]] = getattr(slack, "_ui_streams", set())
    for task in list(streams):
        task.cancel()
    if streams:
        await asyncio.gather(*streams, return_exceptions=True)


async def _event_stream(
    request: web.Request, slack: DrivenSlack, streams: set[asyncio.Task[Any]]
) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    task = asyncio.current_task()
    if task is not None:
        streams.add(task)
    version = -1
    try:
        while True:
            current = await slack.ws.wait_changed(version, 15.0)
            if current != version:
                version = current
                await response.write(f"event: change\ndata: {json.dumps({'version': version})}\n\n".encode())
            else:
                await response.write(b": keep-alive\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        if task is not None:
            streams.discard(task)
    return response


def _action_endpoint(
    slack: DrivenSlack, handler: UiHandler
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def endpoint(request: web.Request) -> web.Response:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
            return web.json_response({"ok": True, **await handler(slack, body)})
        except (LocalSlackError, ValueError, KeyError) as exc:
            return web.json_response({"ok": False, "error": _sentence(exc)})
        except ApiError as exc:
            return web.json_response({"ok": False, "error": f"Slack would refuse that: {exc.error}"})
        except Exception:  # the UI must never show a stack trace; the log keeps it for developers
            _log.exception("UI action failed")
            return web.json_response(
                {"ok": False, "error": "Something went wrong in the local workspace (see its log)."}
            )

    return endpoint


def _sentence(exc: Exception) -> str:
    text = str(exc).strip("'\"") or type(exc).__name__
    return text[0].upper() + text[1:] if text else text


def _deliveries(results: list[DeliveryResult | None]) -> dict[str, Any]:
    shown = [r for r in results if r is not None]
    problems = [r.friendly_error() for r in shown if not r.ok]
    return {
        "deliveries": [{"kind": r.kind, "status": r.status, "error": r.error} for r in shown],
        "problem": next((p for p in problems if p), None),
    }


# ---- action handlers ---------------------------------------------------------------------------------


def _surface(body: dict[str, Any]) -> str | tuple[str, str]:
    if body.get("view_id"):
        return str(body["view_id"])
    return str(body["channel"]), str(body["ts"])


async def _post(slack: DrivenSlack, body: dict[str, Any]) -> dict[str, Any]:
    user, channel, text = str(body["user"]), str(body["channel"]), str(body.get("text") or "")
    if not text.strip():
        raise LocalSlackError("Type a message first.")
    if text.startswith("/") and not body.get("thread_ts"):
        command, _, rest = text.partition(" ")
        result = await slack.slash_command(user, command, rest, channel)
        return _deliveries([result])
    ts, results = await slack.post_message(
        user, channel, _encode_mentions(slack, text), body.get("thread_ts") or None
    )
    return {"ts": ts, **_deliveries(list(results))}


def _encode_mentions(slack: DrivenSlack, text: str) -> str:
    """``@agent`` / ``@bob`` typed in the composer become ``<@U…>`` like Slack's client does."""
    by_name = {u.name: u.id for u in slack.ws.users.values() if not u.deleted}
    out = []
    for word in text.split(" "):
        stripped = word.lstrip("@")
        core = stripped.rstrip(".,:;!?")
        if word.startswith("@") and core in by_name:
            out.append(f"<@{by_name[core]}>" + stripped[len(core) :])
        else:
            out.append(word)
    return " ".join(out)


async def _click(slack: DrivenSlack, body: dict[str, Any]) -> dict[str, Any]:
    surface = _surface(body)
    user, action_id, block_id = str(body["user"]), str(body["action_id"]), body.get("block_id")
    value = body.get("value")
    if isinstance(surface, str):
        result = await slack.click_in_view(user, surface, action_id, value, block_id=block_id)
    else:
        result = await slack.click(user, surface[0], surface[1], action_id, value=value, block_id=block_id)
    return _deliveries([result])


async def _select(slack: DrivenSlack, body: dict[str, Any]) -> dict[str, Any]:
    surface = _surface(body)
    user, action_id, block_id = str(body["user"]), str(body["action_id"]), body.get("block_id")
    if "users" in body:
        result = await slack.select_users(
            user, surface, action_id, list(body["users"] or []), block_id=block_id
        )
    elif isinstance(surface, str):
        result = await slack.select_in_view(user, surface, action_id, body.get("value"), block_id=block_id)
    else:
        result = await slack.select(
            user, surface[0], surface[1], action_id, body.get("value"), block_id=block_id
        )
    return _deliveries([result])


async def _input(slack: DrivenSlack, body: dict[str, Any]) -> dict[str, Any]:
    result = await slack.set_input(
        str(body["user"]),
        str(body["view_id"]),
        str(body["block_id"]),
        str(body["action_id"]),
        body.get("value"),
    )
    return _deliveries([result])


async def _submit(slack: DrivenSlack, body: dict[str, Any]) -> dict[str, Any]:
    result = await slack.submit_view(str(body["user"]), str(body["view_id"]), body.get("values") or {})
    view = slack.view(str(body["view_id"]))
    return {**_deliveries([result]), "errors": view.errors if view else {}}


async def _close(slack: DrivenSlack, body: dict[str, Any]) -> dict[str, Any]:
    result = await slack.close_view(str(body["user"]), str(body["view_id"]))
    return _deliveries([result])


async def _home(slack: DrivenSlack, body: dict[str, Any]) -> dict[str, Any]:
    result = await slack.open_home(str(body["user"]))
    return _deliveries([result])


async def _dismiss(slack: DrivenSlack, body: dict[str, Any]) -> dict[str, Any]:
    ephemeral = slack.ws.find_ephemeral(str(body["user"]), str(body["channel"]), str(body["ts"]))
    if ephemeral is not None:
        slack.ws.remove_ephemeral(ephemeral)
    return {}


async def _feedback(slack: DrivenSlack, body: dict[str, Any]) -> dict[str, Any]:
    result = await slack.click_feedback(str(body["user"]), str(body["channel"]), str(body["ts"]),
                                        positive=bool(body.get("positive")))
    return _deliveries([result])


async def _assistant(slack: DrivenSlack, body: dict[str, Any]) -> dict[str, Any]:
    """The agent's split view: a new assistant thread, with the channel being looked at as its context."""
    context = str(body["channel"]) if body.get("channel") and not slack.ws.channel(str(body["channel"])).is_im else None
    dm, ts, result = await slack.open_assistant(str(body["user"]), context_channel=context)
    return {"channel": dm, "ts": ts, **_deliveries([result])}


async def _stop(slack: DrivenSlack, body: dict[str, Any]) -> dict[str, Any]:
    """Slack's stop button under a processing agent session: ``agent_session_stopped``."""
    try:
        result = await slack.stop_agent_session(str(body["user"]), str(body["channel"]), str(body["ts"]))
    except ValueError as exc:
        raise LocalSlackError("The agent is not working on this thread now.") from exc
    return _deliveries([result])


async def _assistant_context(slack: DrivenSlack, body: dict[str, Any]) -> dict[str, Any]:
    """With the agent's pane open, the person looks at another channel: Slack tells the app."""
    user, dm, ts = str(body["user"]), str(body["dm"]), str(body["ts"])
    thread = slack.ws.assistant_threads.get(f"{dm}:{ts}")
    if thread is None or thread.user != user:
        raise LocalSlackError("That agent chat is not yours.")
    channel = slack.ws.channel(str(body["channel"])) if body.get("channel") else None
    context = channel.id if channel is not None and not channel.is_im else None
    if context == (thread.context or {}).get("channel_id"):
        return {}
    result = await slack.change_assistant_context(user, dm, ts, context)
    return _deliveries([result])


async def _react(slack: DrivenSlack, body: dict[str, Any]) -> dict[str, Any]:
    message = slack.ws.find_message(str(body["channel"]), str(body["ts"]))
    if message is None:
        raise LocalSlackError("That message is gone.")
    user, name = str(body["user"]), str(body["name"])
    reaction = next((r for r in message.reactions if r.name == name), None)
    if reaction is not None and user in reaction.users:
        slack.ws.remove_reaction(message, name, user)
    else:
        slack.ws.add_reaction(message, name, user)
    return {}


_ACTIONS: dict[str, UiHandler] = {
    "post": _post,
    "click": _click,
    "select": _select,
    "input": _input,
    "submit": _submit,
    "close": _close,
    "home": _home,
    "dismiss": _dismiss,
    "react": _react,
    "feedback": _feedback,
    "assistant": _assistant,
    "assistant_context": _assistant_context,
    "stop": _stop,
}


# ---- state -------------------------------------------------------------------------------------------


def ui_state(slack: DrivenSlack, user_id: str) -> dict[str, Any]:
    """Everything the page needs to draw the workspace as ``user_id`` sees it."""
    ws = slack.ws
    me = ws.user(user_id)
    dm_id = slack.dm_channel(me.id)
    my_channels = [c for c in ws.channels_of(me.id) if not c.is_im or c.id == dm_id]
    installation = ws.teams[ws.channels[dm_id].team_id]
    home = ws.home_view(me.id, installation.id)
    return {
        "ok": True,
        "version": ws.version,
        "me": _person(slack, me, installation.id),
        "team": {
            "id": installation.id,
            "name": installation.name,
            "icon": f"{ws.base_url}/ui/team/{installation.id}.svg",
        },
        "bot": {"id": installation.bot_user_id, "name": "agent", "dm": dm_id},
        "people": [
            _person(slack, u, installation.id) for u in ws.users.values() if not u.is_bot and not u.deleted
        ],
        "users": {u.id: _person(slack, u, installation.id) for u in ws.users.values()},
        "channels": [
            {
                "id": c.id,
                "name": c.name or "agent",
                "is_im": c.is_im,
                "is_ext_shared": c.is_ext_shared,
                "topic": c.topic,
                "members": len(c.members),
            }
            for c in sorted(my_channels, key=lambda c: (c.is_im, c.name or ""))
        ],
        "messages": {c.id: [_message(slack, m) for m in ws.history.get(c.id, [])] for c in my_channels},
        "ephemerals": [
            {**e.to_slack(), "channel": e.channel, "sender_name": e.sender_name}
            for e in ws.ephemerals_for(me.id)
        ],
        "assistant": _assistant_threads(slack, {c.id for c in my_channels}),
        "home": home.to_slack() if home else None,
        "modals": [{**v.to_slack(), "errors": v.errors} for v in ws.modal_stack(me.id)],
        "bot_url": slack.bot_url,
        "socket_connected": slack.socket_connected,
        "last_delivery": _last_delivery(slack),
        "api_url": f"{ws.base_url}/api/",
    }


def _last_delivery(slack: DrivenSlack) -> dict[str, Any] | None:
    if not slack.deliveries:
        return None
    last = slack.deliveries[-1]
    return {"ok": last.ok, "kind": last.kind, "problem": last.friendly_error()}


def _person(slack: DrivenSlack, user: User, installation_id: str) -> dict[str, Any]:
    return {
        "id": user.id,
        "name": user.name,
        "real_name": user.real_name,
        "title": user.title,
        "is_admin": user.is_admin or user.is_owner,
        "is_bot": user.is_bot,
        "external": user.team_id != installation_id,
        "team_name": slack.ws.teams[user.team_id].name if user.team_id in slack.ws.teams else user.team_id,
        "avatar": user.avatar_url(slack.ws.base_url),
        "color": user.color,
        "tz": user.tz,  # date tokens (<!date^…>) read in the viewer's zone, as Slack shows them
    }


def _message(slack: DrivenSlack, message: Any) -> dict[str, Any]:
    out = message.to_slack()
    out["channel"] = message.channel
    out["is_reply"] = message.is_reply
    out["streaming"] = message.streaming  # chat.startStream: the text grows until chat.stopStream
    if message.streaming:  # its tasks so far (live states), then its text
        out["stream_blocks"] = stream_blocks(message)
    return out


def _assistant_threads(slack: DrivenSlack, channel_ids: set[str]) -> dict[str, Any]:
    """Title, suggested prompts and live status of the threads the viewer can see ("<channel>:<ts>")."""
    out: dict[str, Any] = {}
    for key, thread in slack.ws.assistant_threads.items():
        if thread.channel in channel_ids:
            state = slack.assistant_state(thread.channel, thread.thread_ts)
            out[key] = state.model_dump(include={"title", "prompts", "prompts_title", "status", "loading_messages",
                                                 "context", "session_status", "session_title"})
    return out


def _initials(name: str) -> str:
    parts = [p for p in name.replace("(", " ").split() if p[:1].isalnum()]
    return "".join(p[0] for p in parts[:2]).upper() or "?"


def _avatar_svg(label: str, color: str) -> str:
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" width="72" height="72" viewBox="0 0 72 72">'
        f'<rect width="72" height="72" rx="12" fill="#{html.escape(color)}"/>'
        '<text x="36" y="47" font-family="Helvetica,Arial,sans-serif" font-size="30" font-weight="700" '
        f'fill="#fff" text-anchor="middle">{html.escape(label)}</text></svg>'
    )
