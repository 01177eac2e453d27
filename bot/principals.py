"""Who is acting: principals and the Slack principal-id scheme (DESIGN §5).

Identity always comes from a verified Slack payload (or the app itself), never from model output
or tool input.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

PrincipalType = Literal["user", "service", "runtime"]


class Principal(BaseModel):
    model_config = ConfigDict(frozen=True)

    authenticator: str
    issuer: str
    principal_type: PrincipalType
    principal_id: str
    attributes: dict[str, Any] = Field(default_factory=dict)

    def same_as(self, other: Principal | None) -> bool:
        """Two principals are the same person when all four identifying fields match."""
        if other is None:
            return False
        return (
            self.authenticator == other.authenticator
            and self.issuer == other.issuer
            and self.principal_type == other.principal_type
            and self.principal_id == other.principal_id
        )

    @property
    def team_id(self) -> str | None:
        """The installation workspace of a Slack principal, else None."""
        parts = self.principal_id.split(":")
        if self.authenticator == "slack" and len(parts) >= 3 and parts[0] == "slack":
            return parts[1]
        return None

    @property
    def slack_user_id(self) -> str | None:
        """The Slack user id of a Slack user principal, else None."""
        parts = self.principal_id.split(":")
        if self.authenticator == "slack" and self.principal_type == "user" and len(parts) == 3:
            return parts[2]
        return None


def slack_user(team_id: str, user_id: str, *, user_team_id: str | None = None, **attrs: Any) -> Principal:
    """A Slack user, keyed by the *installation* workspace (stable across Slack Connect and Grid)."""
    attributes = {"user_id": user_id, "user_team_id": user_team_id or team_id, **attrs}
    return Principal(
        authenticator="slack",
        issuer=f"slack:{team_id}",
        principal_type="user",
        principal_id=f"slack:{team_id}:{user_id}",
        attributes=attributes,
    )


def slack_bot(team_id: str, bot_id: str) -> Principal:
    return Principal(
        authenticator="slack",
        issuer=f"slack:{team_id}",
        principal_type="service",
        principal_id=f"slack:{team_id}:bot:{bot_id}",
        attributes={"bot_id": bot_id},
    )


APP_PRINCIPAL = Principal(authenticator="app", issuer="app", principal_type="runtime", principal_id="bot:app")


def console_user(name: str = "you") -> Principal:
    """A person at the local console (`python -m bot chat`)."""
    return Principal(
        authenticator="console", issuer="console", principal_type="user", principal_id=f"console:{name}"
    )
