"""Who is acting: principals and the Slack principal-id scheme (DESIGN §5).

Identity always comes from a verified Slack payload (or the app itself), never from model output
or tool input.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

PrincipalType = Literal["user", "service", "runtime"]
WORKSPACE_AUTHENTICATORS = ("slack", "console")  # principal ids "<authenticator>:<team>:<member>"
CONSOLE_TEAM = "TCONSOLE"  # the workspace of ``python -m bot chat``: its people are named, e.g. "bob"


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
        """The workspace of a Slack principal (its installation's) or of a console user, else None."""
        parts = self.principal_id.split(":")
        if self.authenticator in WORKSPACE_AUTHENTICATORS and len(parts) >= 3 and parts[0] == self.authenticator:
            return parts[1]
        return None

    @property
    def member_id(self) -> str | None:
        """How approver lists name this person in their workspace: the Slack user id, or the console
        user's name; None for anyone else."""
        parts = self.principal_id.split(":")
        if self.team_id is not None and self.principal_type == "user" and len(parts) == 3:
            return parts[2]
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
    """A person at the local console (`python -m bot chat`), a member of its workspace ``CONSOLE_TEAM``."""
    return Principal(authenticator="console", issuer=f"console:{CONSOLE_TEAM}", principal_type="user",
                     principal_id=f"console:{CONSOLE_TEAM}:{name}")


def workspace_member(team_id: str, member_id: str) -> Principal:
    """The person an approver list names (``member_id`` as ``Principal.member_id`` gives it)."""
    return console_user(member_id) if team_id == CONSOLE_TEAM else slack_user(team_id, member_id)
