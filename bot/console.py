"""A terminal frontend: drive the engine by typing (``python -m bot chat``).

Cards print as text; answer them by typing an option (``approve``, ``cancel``, ``1``, a label)
or your own words — the same typed-reply rules as in a Slack thread. ``/as <name>`` switches
who you are (to try response policies), ``/cancel`` stops the turn, ``/quit`` leaves.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import TextIO

from bot.principals import Principal, console_user
from bot.protocol import Event, InputRequest
from bot.session import SessionRef
from bot.turns import Runtime


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
            return f"  ✗ not accepted: {event.reason}"  # type: ignore[union-attr]
        case "approval.settled":
            who = event.responder.principal_id if event.responder else "someone"  # type: ignore[union-attr]
            return f"  ● {event.outcome} by {who}"  # type: ignore[union-attr]
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
    for n, option in enumerate(req.displayed_options(), 1):
        lines.append(f"│  {n}. {option.label}")
    hint = "type a number, an option" + (" or your own answer" if req.allow_free_text else "")
    lines.append(f"└ {hint}")
    return "\n".join(lines)


class ConsoleChannel:
    def __init__(self, out: TextIO = sys.stdout):
        self.out = out

    async def deliver(self, event: Event, session: SessionRef) -> None:
        text = render_event(event)
        if text:
            print(text, file=self.out, flush=True)


async def chat_loop(runtime: Runtime, ref: SessionRef, *, stdin: TextIO = sys.stdin, out: TextIO = sys.stdout) -> None:
    who: Principal = console_user("you")
    print("Type a message. /as <name> switches user, /cancel stops the turn, /quit leaves.", file=out, flush=True)
    loop = asyncio.get_running_loop()
    while True:
        print(f"{who.principal_id.split(':', 1)[1]}> ", end="", file=out, flush=True)
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
        if text == "/cancel":
            ok = await runtime.cancel_turn(ref.session_id, who)
            print("  (cancelled)" if ok else "  (nothing to cancel)", file=out, flush=True)
            continue
        await runtime.post_message(ref, who, text)
        await runtime.wait_idle()
