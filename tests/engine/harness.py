"""A real runtime on a real Redis, with a scripted model and a channel that records what it saw."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from bot.builtin import BUILTIN_TOOLS
from bot.models.base import ChatModel
from bot.principals import Principal, slack_user
from bot.protocol import Event
from bot.session import SessionRef
from bot.tools import Tool, ToolRegistry
from bot.turns import Runtime, RuntimeSettings
from store.sessions import SessionStore

ALICE = slack_user("T1", "UALICE")
BOB = slack_user("T1", "UBOB")
CAROL = slack_user("T1", "UCAROL")


@dataclass
class RecordingChannel:
    """A frontend that remembers every event it was shown, in order."""

    events: list[Event] = field(default_factory=list)
    fail_input_requested: int = 0

    async def deliver(self, event: Event, session: SessionRef) -> None:
        if event.type == "input.requested" and self.fail_input_requested > 0:
            self.fail_input_requested -= 1
            raise RuntimeError("frontend is down")
        self.events.append(event)

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]

    def requests(self) -> list[Any]:
        return [r for e in self.of("input.requested") for r in e.requests]


def make_runtime(
    redis: Redis,
    model: ChatModel,
    tools: list[Tool],
    *,
    channel: RecordingChannel | None = None,
    settings: RuntimeSettings | None = None,
    lease_ms: int = 30_000,
) -> tuple[Runtime, RecordingChannel, SessionStore]:
    store = SessionStore(redis, lease_ms=lease_ms)
    channel = channel or RecordingChannel()
    registry = ToolRegistry([*BUILTIN_TOOLS, *tools])
    runtime = Runtime(store=store, model=model, tools=registry, channel=channel,
                      settings=settings or RuntimeSettings(system_prompt=""))
    return runtime, channel, store


def session(name: str = "s1", team: str = "T1") -> SessionRef:
    return SessionRef(session_id=f"test:{team}:{name}", team_id=team, channel={"channel_id": "C1", "thread_ts": "1.0"})


async def say(runtime: Runtime, text: str, who: Principal | None = ALICE, ref: SessionRef | None = None,
              message_id: str | None = None):
    return await runtime.post_message(ref or session(), who, text, message_id=message_id)
