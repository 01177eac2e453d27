"""What the Slack listeners share: the runtime, the stores and the settings (built by ``bot/app.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.approval import PolicySource
from bot.config import Settings
from bot.result_tokens import TokenHolders
from bot.turns import Runtime
from store.assistant_threads import AssistantThreads
from store.audit import AuditLog
from store.post_ledger import PostLedger
from store.token_revocations import TokenRevocations
from store.turns import RedisTurns

ClientFor = Callable[[str | None], Awaitable[AsyncWebClient]]  # the Web API client of a workspace


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
    governance: Any = None  # handlers.governance.Governance, when wired (App Home, /approvers)
    result_key: bytes | None = None  # signs result tokens for external calls (None: that API is off)
    token_holders: TokenHolders | None = None  # is a token's holder still a member (None: tokens settle nothing)
    token_revocations: TokenRevocations | None = None  # when each person's result tokens were last revoked
    public_url: str = ""  # where this bot is reached over HTTP, for the result API's address on cards
    extras: dict[str, Any] = field(default_factory=dict)
