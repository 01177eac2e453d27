"""What a session is to a policy or a tool: its id, who is acting, which turn (DESIGN §6)."""

from __future__ import annotations

import hashlib
import secrets
from functools import lru_cache

from pydantic import Field

from bot.deferred import DeferredModel
from bot.principals import Principal


class SessionAuth(DeferredModel):
    current: Principal | None = None  # whose message the turn is serving right now
    initiator: Principal | None = None  # who started the session


class SessionInfo(DeferredModel):
    id: str
    auth: SessionAuth = Field(default_factory=SessionAuth)
    turn: int = 0
    team_id: str | None = None  # the tenant: the installation workspace, from the verified payload
    enterprise_id: str | None = None  # its Enterprise Grid org, if any (same source)
    automated: bool = False  # this turn was started by the app itself (a schedule), on behalf of auth.current

    @property
    def tenant(self) -> str | None:
        return self.team_id


class SessionRef(DeferredModel):
    """How a frontend names a session: a stable id plus the frontend's own routing data."""

    session_id: str
    team_id: str | None = None
    enterprise_id: str | None = None  # the installation's Enterprise Grid org, if any
    channel: dict[str, str] = Field(default_factory=dict)  # e.g. {"channel_id": "C1", "thread_ts": "1.2"}
    # a sub-agent's session (``bot.agents``): its parent {session_id, request_id, call_id, agent}
    parent: dict[str, str] | None = None


@lru_cache(maxsize=4096)  # ~80 key names per approve cycle, of a handful of sessions
def session_slot(session_id: str) -> str:
    """A short, stable hash of a session id; keys and request ids of a session carry it."""
    return hashlib.sha1(session_id.encode()).hexdigest()[:16]


def new_request_id(session_id: str) -> str:
    """Opaque to clients; it embeds the session's slot so the store finds the session's keys."""
    return f"{session_slot(session_id)}.{secrets.token_hex(6)}"


def slack_session_id(team_id: str, channel_id: str, thread_ts: str) -> str:
    return f"slack:{team_id}:{channel_id}:{thread_ts}"
