"""What the Slack listeners share: the runtime, the stores and the settings (built by ``bot/app.py``)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.approval import PolicySource
from bot.config import Settings
from bot.engine.result_tokens import TokenHolders
from bot.engine.turns import Runtime
from bot.ops.background import Background
from store.assistant_threads import AssistantThreads
from store.audit import AuditLog
from store.post_ledger import PostLedger
from store.slack_events import SlackEvents
from store.token_revocations import TokenRevocations
from store.turns import RedisTurns

ClientFor = Callable[[str | None], Awaitable[AsyncWebClient]]  # the Web API client of a workspace
# where an external call's result is posted (``handlers.routes.results``); the card's token note names it
RESULT_PATH = "/hitl/requests/{request_id}/result"


@dataclass
class SlackDeps:
    runtime: Runtime
    store: RedisTurns  # the turns: requests, sessions, grants (their delivery is the runtime's outbox)
    posts: PostLedger  # where each session's Slack posts are (App Home finds a request's card there)
    settings: Settings
    audit: AuditLog  # the workspaces' audit logs (feedback, approver-list edits)
    assistant_threads: AssistantThreads  # what the bot remembers of Slack's assistant threads
    # approver lists, workspace rules and admins (bot.approval.PolicySource): the runtime's ctx.policies and
    # the admission rule's (None: guests refused, those rules fail closed)
    policies: PolicySource | None = None
    governance: Any = None  # handlers.shared.governance.Governance, when wired (App Home, /approvers)
    result_key: bytes | None = None  # signs result tokens for external calls (None: that API is off)
    token_holders: TokenHolders | None = None  # is a token's holder still a member (None: tokens settle nothing)
    token_revocations: TokenRevocations | None = None  # when each person's result tokens were last revoked
    public_url: str = ""  # where this bot is reached over HTTP, for the result API's address on cards
    extras: dict[str, Any] = field(default_factory=dict)
    events: SlackEvents | None = None  # which events were acted on (Slack redelivers them): None, none noted
    # the listeners' own work after an ack (private notes, modals, App Home): their task group, apart from the
    # engine's (``runtime.spawn``); the composition root drains it and then cancels what is left at shutdown
    tasks: Background = field(default_factory=Background)

    def result_url(self, request_id: str) -> str:
        """The address a system posts ``request_id``'s result to (DESIGN §12)."""
        return f"{self.public_url.rstrip('/')}{RESULT_PATH.format(request_id=request_id)}"

    @asynccontextmanager
    async def once(self, body: dict[str, Any]) -> AsyncIterator[bool]:
        """Act on an event once, whichever replica Slack delivers it to and however often::

            async with deps.once(body) as first:
                if not first:
                    return  # acted on before: Slack sent it again (same ``event_id``, ``X-Slack-Retry-Num``)
                ...  # the act; marked acted when the block ends, released if it raises (Slack retries)

        A redelivery while another delivery's act is under way, or after one died between its claim and its
        act, raises :class:`EventInProgress`: Slack is answered 503 and retries later, when that claim has
        lapsed and the retry acts. An event id that is not Slack's shape cannot be noted, and is acted on."""
        event_id = body.get("event_id")
        if self.events is None or not isinstance(event_id, str) or not _EVENT_ID.fullmatch(event_id):
            yield True
            return
        claim = await self.events.claim(event_id)
        if claim == "acting":
            raise EventInProgress(event_id)
        if claim == "acted":
            yield False
            return
        try:
            yield True
        except BaseException:
            with suppress(Exception):  # Redis down too: the claim lapses by itself
                await self.events.release(event_id)
            raise
        await self.events.acted(event_id)


class EventInProgress(Exception):
    """Another delivery of this event is acting on it, or died doing so: Slack is asked to retry later."""


_EVENT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # Slack's "Ev…" ids: nothing else goes into a Redis key
