"""What Slack issues and later checks: a token's ``Auth`` (whose it is, where it reaches, its scopes), trigger
ids (3 s, once), response_urls (5 uses in 30 min) and OAuth codes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

TRIGGER_TTL_S = 3.0
RESPONSE_URL_MAX_USES = 5
RESPONSE_URL_TTL_S = 30 * 60
TOKEN_LIFETIME_S = 12 * 3600  # a rotating access token's expires_in: "it expires every 12 hours"


@dataclass
class Auth:
    """Who a token belongs to, where it reaches and what it may do.

    An org-wide token (``is_enterprise_install``) has ``team_id`` = the org's ``E…`` id and reaches every
    workspace in ``teams``; a workspace token reaches its own workspace. ``scopes`` None = not checked.
    """

    token: str
    team_id: str
    user_id: str
    bot_id: str | None
    scopes: list[str] | None = None
    enterprise_id: str | None = None
    is_enterprise_install: bool = False
    teams: list[str] = field(default_factory=list)
    expires_at: float | None = None  # token rotation: ``token_expired`` from then on (the workspace's clock)

    @property
    def is_bot(self) -> bool:
        return self.bot_id is not None

    def reaches(self, team_id: str | None) -> bool:
        return team_id is not None and (team_id == self.team_id or team_id in self.teams)

    def to_state(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "team_id": self.team_id,
            "user_id": self.user_id,
            "bot_id": self.bot_id,
            "scopes": self.scopes,
            "enterprise_id": self.enterprise_id,
            "is_enterprise_install": self.is_enterprise_install,
            "teams": list(self.teams),
            "expires_at": self.expires_at,
        }


@dataclass
class Trigger:
    user_id: str
    team_id: str
    expires_at: float
    used: bool = False


@dataclass
class ResponseUrl:
    """Where a response_url posts: the interaction's channel, user and (for actions) original message."""

    team_id: str
    user_id: str
    channel_id: str | None
    message_ts: str | None = None
    is_ephemeral: bool = False
    thread_ts: str | None = None
    created_at: float = field(default_factory=time.time)  # wall clock: it survives a restart
    uses: int = 0


@dataclass
class RefreshToken:
    """A rotating install's refresh token: good for one ``oauth.v2.access`` refresh, for the workspace or
    org (``E…``) it was issued to."""

    installation_id: str


@dataclass
class TokenRotation:
    """The app's "token_rotation_enabled" (``enabled``), how long its access tokens live, the refresh tokens
    issued, and Slack's clock for token lifetimes: real time, moved on by :meth:`advance` in tests."""

    enabled: bool = False
    lifetime_s: float = TOKEN_LIFETIME_S
    offset_s: float = 0.0
    refresh_tokens: dict[str, RefreshToken] = field(default_factory=dict)

    def now(self) -> float:
        return time.time() + self.offset_s

    def advance(self, seconds: float) -> None:
        self.offset_s += seconds


@dataclass
class OAuthCode:
    team_id: str
    user_id: str | None
    scopes: list[str]
    redirect_uri: str | None = None
