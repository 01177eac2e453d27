"""A real runtime on a real Redis, with a scripted model and a channel that records what it saw."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from bot.approval import PolicySource
from bot.builtin import BUILTIN_TOOLS
from bot.engine.tool_registry import ToolRegistry
from bot.engine.turn_commands import LeaseCommand
from bot.engine.turns import AnswerResult, Runtime, RuntimeSettings
from bot.models.base import ChatModel, Message
from bot.models.scripted import ScriptedModel
from bot.ports import LiveText
from bot.principals import Principal, slack_user
from bot.protocol import Event, InputResponse
from bot.session import SessionRef
from bot.tools import Tool, ToolContext
from store.audit import AuditLog
from store.audit_events import PassAudit
from store.outbox import RedisOutbox
from store.policies import PolicyStore
from store.turns import RedisTurns

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
    policies: PolicySource | None = None,
    live: LiveText | None = None,
    audit: AuditLog | None = None,
) -> tuple[Runtime, RecordingChannel, RedisTurns]:
    """The runtime, its frontend and its turns' store (the outbox's: ``runtime.outbox.store``).
    ``policies``: approver lists, rules and admins for the policies (the app gives Slack's, see
    :func:`stored_policies`); ``live``: where answers are shown while the model writes them (the app gives
    Slack's streams); ``audit``: the audit log the delivery passes write (the app gives its one)."""
    store = RedisTurns(redis, lease_ms=lease_ms)
    channel = channel or RecordingChannel()
    registry = ToolRegistry([*BUILTIN_TOOLS, *tools])
    outbox = RedisOutbox(redis, lease_ms=lease_ms, audit=PassAudit(audit) if audit is not None else None)
    runtime = Runtime(store=store, outbox_store=outbox, model=model, tools=registry, channel=channel,
                      settings=settings or RuntimeSettings(system_prompt=""), policies=policies, live=live)
    MADE.append(runtime)
    return runtime, channel, store


# the runtimes made during the current test (the ``redis`` fixture abandons them: tests/conftest.py)
MADE: list[Runtime] = []


async def abandon_runtimes() -> None:
    """Cancel what the test's runtimes still run in the background (a delivery an answer kicked, say) while the
    Redis client it uses is open: left to the loop's close, after the client's, such a task was caught
    reconnecting and held the teardown 5 s."""
    made, MADE[:] = list(MADE), []
    for runtime in made:
        await runtime.abandon()


def stored_policies(redis: Redis) -> Any:
    """The approver lists and rules in Redis, as a process without Slack reads them (``python -m bot chat``)."""
    from bot.engine.policy_source import StorePolicySource

    return StorePolicySource(PolicyStore(redis, AuditLog(redis)))


def session(name: str = "s1", team: str = "T1") -> SessionRef:
    return SessionRef(session_id=f"test:{team}:{name}", team_id=team, channel={"channel_id": "C1", "thread_ts": "1.0"})


async def say(runtime: Runtime, text: str, who: Principal | None = ALICE, ref: SessionRef | None = None,
              message_id: str | None = None):
    result = await runtime.post_message(ref or session(), who, text, message_id=message_id)
    await runtime.wait_idle()  # the outbox delivers in the background: let the channel see everything
    return result


# --- helpers for behaviour tests -------------------------------------------------------------------


@dataclass
class Run:
    """One execution of a recording tool: what it was given and under whose authority."""

    args: dict[str, Any]
    principal: Principal | None
    call_id: str
    idempotency_key: str


def recording_tool(
    name: str,
    *,
    approval: Any = None,
    approval_key: Any = None,
    idempotent: bool = False,
    output: Any = None,
) -> tuple[Tool, list[Run]]:
    """A tool taking free-form arguments that records every execution; returns (tool, runs)."""
    runs: list[Run] = []

    async def run(args: dict, ctx: ToolContext) -> Any:
        runs.append(Run(dict(args), ctx.principal, ctx.call_id, ctx.idempotency_key))
        return output if output is not None else {"ok": True, "tool": name}

    made = Tool(run, name=name, description=f"{name} (a test tool)", approval=approval,
                approval_key=approval_key, idempotent=idempotent)
    return made, runs


def shown(model: ScriptedModel, index: int = -1) -> list[Message]:
    """The messages the model was shown in one of its requests (default: the last)."""
    return model.requests[index][0]


def tool_results(messages: list[Message]) -> dict[str, str]:
    """Tool messages by call id, as the model read them."""
    return {m["tool_call_id"]: m["content"] for m in messages if m.get("role") == "tool"}


def user_texts(messages: list[Message]) -> list[str]:
    return [m["content"] for m in messages if m.get("role") == "user"]


def assert_valid_history(messages: list[Message]) -> None:
    """What an OpenAI endpoint insists on: every tool call answered by a tool message right after it."""
    i = 0
    while i < len(messages):
        message = messages[i]
        i += 1
        wanted = {c["id"] for c in message.get("tool_calls") or []}
        while wanted:
            assert i < len(messages) and messages[i].get("role") == "tool", f"tool calls {wanted} unanswered"
            wanted.discard(messages[i]["tool_call_id"])
            i += 1


def decision(request_id: str, option_id: str, who: Principal | None = ALICE, text: str | None = None) -> InputResponse:
    return InputResponse(request_id=request_id, option_id=option_id, text=text, principal=who)


async def approve(runtime: Runtime, request_id: str, who: Principal | None = ALICE) -> AnswerResult:
    result = await runtime.answer(decision(request_id, "approve", who))
    await runtime.wait_idle()
    return result


async def cancel(runtime: Runtime, request_id: str, who: Principal | None = ALICE,
                 note: str | None = None) -> AnswerResult:
    result = await runtime.answer(decision(request_id, "cancel", who), note=note)
    await runtime.wait_idle()
    return result


async def request_status(store: RedisTurns, request_id: str) -> str:
    return (await store.get_request(request_id)).status



async def take_lease(store: RedisTurns, session_id: str) -> str | None:
    """Take a session's turn lease as a drive does (its token; None: another holds it)."""
    return (await store.lease(LeaseCommand(session_id, "take"))).token
