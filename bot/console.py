"""A terminal frontend: drive the engine by typing (``python -m bot chat``).

Cards print as text; answer them by typing an option (``approve``, ``cancel``, ``1``, a label)
or your own words — the same typed-reply rules as in a Slack thread. ``/as <name>`` switches
who you are (to try response policies), ``/cancel`` stops the turn, ``/quit`` leaves.

The console is a small workspace of its own (``CONSOLE_TEAM``): its people are named ("you", "bob"),
approver lists name them the same way, and tools that post (``ctx.workspace``) print what they posted.
Each run is a new conversation; a turn an earlier run left waiting is cancelled when the next starts.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import uuid
from typing import TextIO

from bot.engine.inputs import NOTHING_WAITING
from bot.engine.turns import Runtime
from bot.ports import PostedMessage
from bot.principals import CONSOLE_TEAM, Principal, console_user
from bot.protocol import Event, InputRequest, InputResponse, Responders, UnknownRequest
from bot.session import SessionRef

_MENTION = re.compile(r"<@([^>|]+)(?:\|[^>]*)?>")


def render_event(event: Event) -> str | None:
    """One event as the console shows it; None for events it keeps quiet about."""
    match event.type:
        case "message.completed":
            return f"agent> {event.text}"  # type: ignore[union-attr]
        case "action.started":
            return f"  … running {event.tool_name}"  # type: ignore[union-attr]
        case "action.result":
            return f"  ✓ {event.tool_name}: {event.status}"  # type: ignore[union-attr]
        case "input.requested":
            return "\n".join(render_request(r) for r in event.requests)  # type: ignore[union-attr]
        case "approval.candidate" if event.outcome in ("rejected", "failed"):  # type: ignore[union-attr]
            return f"  ✗ not accepted: {_plain(event.reason or '')}"  # type: ignore[union-attr]
        case "approval.settled":
            return f"  ● {event.outcome} by {_name(event.responder)}"  # type: ignore[union-attr]
        case "turn.failed":
            return f"  ! {event.reason}"  # type: ignore[union-attr]
        case "turn.cancelled":
            return "  ■ turn cancelled"
        case _:
            return None


def render_request(req: InputRequest) -> str:
    lines = []
    if req.kind == "tool-approval" and req.action:
        lines.append(f"┌ approval needed: {req.action.tool_name}  [{req.request_id}]")
        for key, value in (req.action.input or {}).items():
            lines.append(f"│  {key}: {json.dumps(value) if not isinstance(value, str) else value}")
    else:
        lines.append(f"┌ {req.prompt}  [{req.request_id}]")
    if req.responders is not None and (who := _who(req.responders)):
        lines.append(f"│  ({who})")
    if req.kind == "user-input":
        for name, spec in ((req.form or {}).get("properties") or {}).items():
            lines.append(f"│  {name}: {spec.get('title') or name}")
        lines.append('└ fill it in: /fill {"field": value, …}')
        return "\n".join(lines)
    for n, option in enumerate(req.displayed_options(), 1):
        lines.append(f"│  {n}. {option.label}")
    hint = "type a number, an option" + (" or your own answer" if req.allow_free_text else "")
    lines.append(f"└ {hint}")
    return "\n".join(lines)


def _plain(text: str) -> str:
    """Slack mentions as a terminal shows them: ``<@bob>`` → ``@bob``."""
    return _MENTION.sub(lambda m: "@" + m.group(1), text)


def _name(principal: Principal | None) -> str:
    if principal is None:
        return "someone"
    return "@" + principal.member_id if principal.member_id else principal.principal_id


def _who(r: Responders) -> str:
    names = " or ".join(_name(p) for p in r.people)
    if r.rule == "people":
        return f"needs {r.required} of {names}" if r.required > 1 else f"waiting on {names}"
    if r.rule == "anyone_but":
        return f"anyone but {names}"
    return _plain(r.description or "")


class ConsoleWorkspace:
    """``ctx.workspace`` at the console: a post is printed where you can see it."""

    def __init__(self, out: TextIO = sys.stdout):
        self.out = out

    async def post_message(self, team_id: str | None, channel: str, text: str, *,
                           asked_by: Principal | None = None, approved_by: Principal | None = None) -> PostedMessage:
        print(f"  [{channel}] {text}", file=self.out, flush=True)
        return PostedMessage(channel=channel)


def new_console_session() -> SessionRef:
    """A fresh conversation in the console's workspace."""
    return SessionRef(session_id=f"console:{uuid.uuid4().hex[:12]}", team_id=CONSOLE_TEAM)


async def cancel_leftovers(runtime: Runtime, session_ids: set[str], *, out: TextIO = sys.stdout) -> int:
    """Cancel the turns earlier console runs left waiting on someone (``session_ids``: the sessions of
    the console workspace's open requests); their requests end "no longer needed". Returns how many."""
    if session_ids:
        print(f"(an earlier console session left {len(session_ids)} turn(s) waiting; cancelling them)",
              file=out, flush=True)
    cancelled = 0
    for session_id in sorted(session_ids):
        cancelled += await runtime.cancel_turn(session_id, None)
    await runtime.wait_idle()
    return cancelled


class ConsoleChannel:
    def __init__(self, out: TextIO = sys.stdout):
        self.out = out
        self.last_form: str | None = None  # the latest form shown: what ``/fill {json}`` fills in

    async def deliver(self, event: Event, session: SessionRef) -> None:
        if event.type == "input.requested":
            forms = [r.request_id for r in event.requests if r.kind == "user-input"]  # type: ignore[union-attr]
            self.last_form = forms[-1] if forms else self.last_form
        text = render_event(event)
        if text and session.parent:  # a sub-agent's session (bot.agents): say which one
            text = "\n".join(f"[{session.parent.get('agent')}] {line}" for line in text.splitlines())
        if text:
            print(text, file=self.out, flush=True)


async def chat_loop(runtime: Runtime, ref: SessionRef, *, stdin: TextIO = sys.stdin, out: TextIO = sys.stdout) -> None:
    who: Principal = console_user("you")
    print("Type a message. /as <name> switches user (try /as bob to approve refunds), /fill {json} fills in a "
          "form, /cancel stops the turn, /quit leaves.", file=out, flush=True)
    loop = asyncio.get_running_loop()
    while True:
        print(f"{who.member_id}> ", end="", file=out, flush=True)
        line = await loop.run_in_executor(None, stdin.readline)
        if not line:
            break
        text = line.strip()
        if not text:
            continue
        if text == "/quit":
            break
        if text.startswith("/as "):
            who = console_user(text[4:].strip() or "you")
            continue
        if text.startswith("/fill "):
            await _fill(runtime, who, text[6:], out)
            continue
        if text == "/cancel":
            ok = await runtime.cancel_turn(ref.session_id, who)
            print("  (cancelled)" if ok else "  (nothing to cancel)", file=out, flush=True)
            continue
        if (await runtime.post_message(ref, who, text)).state == "nothing waiting":
            print(f"  ({NOTHING_WAITING})", file=out, flush=True)
        await runtime.wait_idle()


async def _fill(runtime: Runtime, who: Principal, rest: str, out: TextIO) -> None:
    """``/fill [<request id>] {json}``: submit a form (by default the latest shown), as Slack's modal would."""
    rest = rest.strip()
    if rest.startswith("{"):
        last = getattr(runtime.channel, "last_form", None)
        request_id, raw = last or "", rest
    else:
        request_id, _, raw = rest.partition(" ")
    try:
        values = json.loads(raw or "{}")
    except ValueError as exc:
        print(f"  (not JSON: {exc})", file=out, flush=True)
        return
    try:
        result = await runtime.answer(InputResponse(request_id=request_id, values=values, principal=who))
    except UnknownRequest as exc:
        print(f"  ({exc})", file=out, flush=True)
        return
    if result.state not in ("settled", "partial"):
        print(f"  ✗ {result.reason or result.state}", file=out, flush=True)
    await runtime.wait_idle()
