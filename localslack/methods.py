"""What Slack documents per Web API method: its rate-limit tier and the bot scopes it needs.

Sources (read, not run): each method's reference page on docs.slack.dev, as scraped into
``smstoslack/slack_kit`` ``priv/docs/methods/<method>.json`` (fields ``rate_limit.label`` and
``scopes.bot``), cross-checked with Slack's Web API OpenAPI description (``slackapi/slack-api-specs``,
``web-api/slack_web_openapi_v2.json``: "Requires scope: …" on the token parameter). Channel-typed
methods (``conversations.*``) need the scope of the conversation's type: ``channels:`` for public
channels, ``groups:`` for private ones, ``im:`` for DMs, ``mpim:`` for group DMs (the same pages list all
four; a refusal names the one that was needed, e.g. ``"needed": "groups:history"``).

``tests/test_localslack_limits.py`` holds this table equal to the reference when it is present.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ChannelKind = Literal["channel", "group", "im", "mpim"]

# Slack's tiers, "per method per workspace per app": Tier 1 1+/min, Tier 2 20+/min, Tier 3 50+/min,
# Tier 4 100+/min (https://docs.slack.dev/apis/web-api/rate-limits). "Special" methods have their own
# rules; only chat.postMessage's is published with a number (about one message per second per channel).
TIER_PER_MINUTE: dict[int, int] = {1: 1, 2: 20, 3: 50, 4: 100}


@dataclass(frozen=True)
class MethodSpec:
    tier: int | None  # None: "Special rate limits apply"
    scopes: tuple[str, ...] = ()  # any one of these (non-channel methods); () = no scope needed
    channel_scope: str | None = None  # "history" | "read" | "write": needs <kind>:<this> for the channel

    def scope_for(self, kind: ChannelKind | None) -> str | None:
        """The scope a call needs (for channel-typed methods, for a conversation of ``kind``)."""
        if self.channel_scope is not None and kind is not None:
            prefix = {"channel": "channels", "group": "groups", "im": "im", "mpim": "mpim"}[kind]
            if self.channel_scope == "write" and kind == "channel":
                return "channels:manage"  # conversations.open's bot scope for public channels
            return f"{prefix}:{self.channel_scope}"
        return self.scopes[0] if self.scopes else None


METHODS: dict[str, MethodSpec] = {
    "api.test": MethodSpec(tier=4),
    "auth.test": MethodSpec(tier=None),
    "chat.postMessage": MethodSpec(tier=None, scopes=("chat:write",)),
    "chat.update": MethodSpec(tier=3, scopes=("chat:write",)),
    "chat.postEphemeral": MethodSpec(tier=4, scopes=("chat:write",)),
    "chat.delete": MethodSpec(tier=3, scopes=("chat:write",)),
    "chat.getPermalink": MethodSpec(tier=None),
    "views.open": MethodSpec(tier=4),
    "views.push": MethodSpec(tier=4),
    "views.update": MethodSpec(tier=4),
    "views.publish": MethodSpec(tier=4),
    "users.info": MethodSpec(tier=4, scopes=("users:read",)),
    "users.list": MethodSpec(tier=2, scopes=("users:read",)),
    "bots.info": MethodSpec(tier=3, scopes=("users:read",)),
    "team.info": MethodSpec(tier=3, scopes=("team:read",)),
    "conversations.open": MethodSpec(tier=3, channel_scope="write"),
    "conversations.info": MethodSpec(tier=3, channel_scope="read"),
    "conversations.members": MethodSpec(tier=4, channel_scope="read"),
    "conversations.list": MethodSpec(tier=2, channel_scope="read"),
    "conversations.history": MethodSpec(tier=3, channel_scope="history"),
    "conversations.replies": MethodSpec(tier=3, channel_scope="history"),
    "reactions.add": MethodSpec(tier=3, scopes=("reactions:write",)),
    "reactions.remove": MethodSpec(tier=2, scopes=("reactions:write",)),
    "apps.connections.open": MethodSpec(tier=3),  # app-level token with connections:write
    # Agents & AI apps (docs.slack.dev reference/methods/<method>; changelog 2026-03-05: setStatus takes
    # chat:write or, for now, assistant:write, and works in channel threads too)
    "assistant.threads.setStatus": MethodSpec(tier=None, scopes=("chat:write", "assistant:write")),
    "assistant.threads.setSuggestedPrompts": MethodSpec(tier=4, scopes=("assistant:write",)),
    "assistant.threads.setTitle": MethodSpec(tier=4, scopes=("assistant:write",)),
    "chat.startStream": MethodSpec(tier=2, scopes=("chat:write",)),
    "chat.appendStream": MethodSpec(tier=4, scopes=("chat:write",)),
    "chat.stopStream": MethodSpec(tier=2, scopes=("chat:write",)),
    # agent sessions (docs.slack.dev ai/agent-sessions: "The chat:write scope is required to manage
    # thread-based sessions"; only apps declared as agents may create them)
    "agents.sessions.setStatus": MethodSpec(tier=3, scopes=("chat:write",)),
    "agents.sessions.rename": MethodSpec(tier=3, scopes=("chat:write",)),
    "oauth.v2.access": MethodSpec(tier=None),
}

# chat.postMessage: "generally allows posting one message per second per channel, while also maintaining a
# workspace-wide limit" with short bursts tolerated (same page). The workspace-wide number is not published.
POSTS_PER_SECOND_PER_CHANNEL = 1.0


def spec(method: str) -> MethodSpec:
    return METHODS.get(method, MethodSpec(tier=None))


def conversation_types_scope(types: str | None) -> list[ChannelKind]:
    """conversations.list ``types`` (default ``public_channel``) as channel kinds."""
    names = [t.strip() for t in (types or "public_channel").split(",") if t.strip()]
    mapping: dict[str, ChannelKind] = {
        "public_channel": "channel",
        "private_channel": "group",
        "im": "im",
        "mpim": "mpim",
    }
    return [mapping[n] for n in names if n in mapping]
