"""The turn the bench parks and resumes: a user asks for a refund, the tool needs an approval.

Real parts only: the engine's ``Runtime`` and its Redis stores (turns, outbox) on a real server, the scripted
model (tool call, then a closing sentence), a tool that returns at once, and a channel that notes when
each turn's ``turn.completed`` was delivered.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from pydantic import BaseModel
from redis.asyncio import Redis

from bot.approval import always
from bot.builtin import BUILTIN_TOOLS
from bot.engine.tool_registry import ToolRegistry
from bot.engine.turns import AnswerResult, Runtime, RuntimeSettings
from bot.models.base import Message, ModelResponse, ToolSpec
from bot.models.scripted import ScriptedModel, call, say
from bot.principals import slack_user
from bot.protocol import Event, InputResponse
from bot.session import SessionRef, slack_session_id
from bot.tools import ToolContext, tool
from store.outbox import RedisOutbox
from store.turns import RedisTurns

TEAM = "T0BENCH001"
CHANNEL = "C0BENCH001"
ALICE = slack_user(TEAM, "U0ALICE001")
ASK_TEXT = "Please refund charge ch_3PqR8sLkd9Zx for the duplicate order, 42.50 EUR."


class Refund(BaseModel):
    charge_id: str
    amount: float
    reason: str


@tool(approval=always())
async def refund_charge(args: Refund, ctx: ToolContext) -> dict:
    """Refund a card charge (needs a person's approval)."""
    return {"refund_id": f"re_{args.charge_id[3:]}", "status": "succeeded", "amount": args.amount}


def _call_refund(messages: list[Message], tools: list[ToolSpec]) -> ModelResponse:
    # a step function, so every turn gets its own call id as a real model would
    return call("refund_charge", charge_id="ch_3PqR8sLkd9Zx", amount=42.5, reason="duplicate order")


@dataclass
class BenchChannel:
    """Remembers, per session, the open request and when ``turn.completed`` was delivered."""

    open_request: dict[str, str] = field(default_factory=dict)
    completed_at: dict[str, float] = field(default_factory=dict)

    async def deliver(self, event: Event, session: SessionRef) -> None:
        if event.type == "turn.completed":
            self.completed_at[event.session_id] = time.perf_counter()
        elif event.type == "input.requested":
            self.open_request[event.session_id] = event.requests[0].request_id


@dataclass
class Bench:
    """A runtime on one database, plus what the bench needs to drive it."""

    redis: Redis
    store: RedisTurns
    runtime: Runtime
    channel: BenchChannel
    model: ScriptedModel
    db: int
    _numbers: itertools.count = field(default_factory=lambda: itertools.count(1))

    @property
    def db_label(self) -> str:
        return f"db {self.db}"

    def new_ref(self) -> SessionRef:
        """A fresh Slack thread (one session per parked turn: one turn per session at a time)."""
        thread_ts = f"1718000000.{next(self._numbers):06d}"
        return SessionRef(
            session_id=slack_session_id(TEAM, CHANNEL, thread_ts),
            team_id=TEAM,
            channel={"channel_id": CHANNEL, "thread_ts": thread_ts},
        )

    async def park(self) -> tuple[SessionRef, str]:
        """Start a turn that parks on one approval; returns its session and request id."""
        ref = self.new_ref()
        await self.runtime.post_message(
            ref, ALICE, ASK_TEXT, message_id=f"{CHANNEL}:{ref.channel['thread_ts']}"
        )
        request_id = self.channel.open_request.pop(ref.session_id, None)
        if request_id is None:
            raise RuntimeError(f"the bench turn in {ref.session_id} did not park on an approval")
        return ref, request_id

    @staticmethod
    def approval(request_id: str) -> InputResponse:
        """Alice, who asked, clicks Approve."""
        return InputResponse(request_id=request_id, option_id="approve", principal=ALICE)

    async def approve(self, request_id: str, *, resume: bool = True) -> AnswerResult:
        return await self.runtime.answer(self.approval(request_id), resume=resume)


def make_bench(redis: Redis, db: int) -> Bench:
    store = RedisTurns(redis)
    channel = BenchChannel()
    model = ScriptedModel([_call_refund, say("Refunded 42.50 EUR to the card; refund re_3PqR8sLkd9Zx.")])
    runtime = Runtime(
        store=store,
        outbox_store=RedisOutbox(redis),
        model=model,
        tools=ToolRegistry([*BUILTIN_TOOLS, refund_charge]),
        channel=channel,
        settings=RuntimeSettings(),
    )  # the default system prompt, as deployed
    return Bench(redis, store, runtime, channel, model, db)
