"""Who is a workspace admin, and who still exists, from ``users.info`` (reference: slack-platform-study §8).

An admin of a workspace is a person of it whose ``users.info`` *about that workspace* says ``is_admin``,
``is_owner`` or ``is_primary_owner``, or (Enterprise Grid) whose ``enterprise_user.is_admin`` /
``is_owner`` makes them an admin or owner of the whole org, or whose id is in ``BOT_ADMINS``. Slack's
top-level flags are the person's roles in "the current workspace", the one the token acts in: a
workspace's own token answers about that workspace, but an org-wide token acts in every workspace of the
org and ``users.info`` takes no workspace, so its top-level flags say nothing about any one workspace and
count for none (the Support admin who is also in Sales rules Sales only if Slack says so about Sales).
Which workspace a token acts in comes from its ``auth.test``, asked once per token. A missing flag counts
as false. Anything that goes wrong (Slack error, timeout, a person from another workspace) means *not an
admin*: we fail closed and log why. Answers are cached in the process for a short while (60 s) so App Home
and ``/approvers`` do not call Slack on every click; a demoted admin loses rights within that time.

Listeners must not wait on Slack before their ack: they use :meth:`AdminCheck.cached_admin`
(no Slack call) or :meth:`AdminCheck.admin_status` with a ``within`` budget, and tell "could not
check" (``None``) apart from "not an admin" (``False``). One lookup per person runs at a time; one
cut short by a budget carries on and fills the cache, so asking again soon gets the answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Literal

from pydantic import Field
from slack_sdk.errors import SlackApiError

from bot.deferred import DeferredModel
from handlers.shared.deps import ClientFor

log = logging.getLogger(__name__)

CACHE_SECONDS = 60.0
LOOKUP_TIMEOUT_SECONDS = 2.0  # one users.info, Slack's retries included: a slow Slack fails closed
GONE_ERRORS = {"user_not_found", "users_not_found"}
TOKENS_REMEMBERED = 1024  # tokens whose workspace auth.test told (keyed by token: an org-wide reinstall is new)

UserState = Literal["active", "deleted", "missing", "unknown"]


class SlackUser(DeferredModel):
    """The parts of a ``users.info`` answer that governance needs."""

    id: str
    state: UserState  # missing = Slack says no such user; unknown = we could not ask
    team_id: str | None = None
    workspace_admin: bool = False  # admin/owner of the workspace ``roles_in`` (Slack's top-level flags)
    roles_in: str | None = None  # the workspace those flags are about; None: Slack's answer does not say
    org_admin: bool = False  # admin/owner of their Enterprise Grid org (``enterprise_user``)
    enterprise_teams: list[str] = Field(default_factory=list)
    enterprise_id: str | None = None  # their Enterprise Grid org, if any
    name: str | None = None  # their handle ("erin"), for messages that must say who without a mention
    tz: str | None = None  # their time zone as Slack says (an IANA name, e.g. "Europe/Paris"), if any

    def belongs_to(self, team_id: str) -> bool:
        """A member of the installation's workspace (Slack Connect guests are not)."""
        return self.team_id == team_id or team_id in self.enterprise_teams

    def outsider(self, team_id: str, org: str | None) -> bool:
        """From another organisation (Slack Connect): neither a member of ``team_id`` nor of its Grid
        ``org``, as the response policies judge a clicker (``bot.governance._outsider``)."""
        return not self.belongs_to(team_id) and not (org and self.enterprise_id == org)

    def admin_of(self, team_id: str) -> bool:
        """An admin of ``team_id`` as Slack said: an org admin/owner of its org, or its own admin/owner."""
        if self.state != "active" or not self.belongs_to(team_id):
            return False  # deleted or missing people, and Slack Connect partners' admins, are no admins here
        return self.org_admin or (self.workspace_admin and self.roles_in == team_id)

    def called(self) -> str:
        return f"@{self.name}" if self.name else self.id


def _flag(data: dict[str, Any], name: str) -> bool:
    return data.get(name) is True  # a missing or odd value counts as false


def parse_user(user_id: str, user: dict[str, Any], roles_in: str | None = None) -> SlackUser:
    """``roles_in``: the workspace the call acted in (its token's), which the top-level roles are about."""
    enterprise = user.get("enterprise_user") if isinstance(user.get("enterprise_user"), dict) else {}
    workspace_role = any(_flag(user, f) for f in ("is_admin", "is_owner", "is_primary_owner"))
    org_role = any(_flag(enterprise, f) for f in ("is_admin", "is_owner"))
    teams = enterprise.get("teams") if isinstance(enterprise.get("teams"), list) else []
    return SlackUser(
        id=user_id,
        state="deleted" if _flag(user, "deleted") else "active",
        team_id=user.get("team_id") if isinstance(user.get("team_id"), str) else None,
        workspace_admin=workspace_role,
        roles_in=roles_in,
        org_admin=org_role,
        enterprise_teams=[t for t in teams if isinstance(t, str)],
        enterprise_id=enterprise.get("enterprise_id") if isinstance(enterprise.get("enterprise_id"), str) else None,
        name=user.get("name") if isinstance(user.get("name"), str) else None,
        tz=user.get("tz") if isinstance(user.get("tz"), str) else None,
    )


class AdminCheck:
    """``is_admin(team, user)`` and ``users(team, ids)`` backed by ``users.info`` with a short cache."""

    def __init__(
        self,
        client_for: ClientFor,
        bot_admins: Iterable[str] = (),
        *,
        ttl: float = CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client_for = client_for
        self.bot_admins = frozenset(bot_admins)
        self._ttl = ttl
        self._clock = clock
        self._cache: dict[tuple[str, str], tuple[float, SlackUser]] = {}
        self._inflight: dict[tuple[str, str], asyncio.Future[SlackUser]] = {}
        self._token_workspace: dict[str, str | None] = {}  # token → the workspace it acts in (None: org-wide)

    async def is_admin(self, team_id: str | None, user_id: str | None) -> bool:
        """Whether Slack (or ``BOT_ADMINS``) says ``user_id`` is an admin here; False if it could not say."""
        return await self.admin_status(team_id, user_id) is True

    async def admin_status(
        self, team_id: str | None, user_id: str | None, *, within: float | None = None
    ) -> bool | None:
        """True or False as :meth:`is_admin`, or None when Slack could not say (an error, a timeout, or no
        answer within ``within`` seconds). A lookup cut short by ``within`` goes on in the background."""
        if not team_id or not user_id:
            return False
        known = self.cached_admin(team_id, user_id)
        if known is not None:
            return known
        try:
            user = await asyncio.wait_for(self.user(team_id, user_id), within)
        except TimeoutError:
            log.warning("could not tell within %ss whether %s in %s is an admin", within, user_id, team_id)
            return None
        if user.state == "unknown":
            log.warning("could not tell whether %s in %s is an admin: users.info failed", user_id, team_id)
            return None
        return self._verdict(team_id, user)

    def cached_admin(self, team_id: str | None, user_id: str | None) -> bool | None:
        """The answer when it needs no Slack call (``BOT_ADMINS`` or a fresh cache entry), else None."""
        if not team_id or not user_id:
            return False
        if user_id in self.bot_admins:
            return True
        cached = self._cache.get((team_id, user_id))
        if cached is None or cached[0] <= self._clock():
            return None
        return self._verdict(team_id, cached[1])

    def all_cached(self, team_id: str, user_ids: Iterable[str]) -> bool:
        """Whether :meth:`users` would answer for all of ``user_ids`` without asking Slack."""
        now = self._clock()
        return all((c := self._cache.get((team_id, u))) is not None and c[0] > now for u in user_ids)

    @staticmethod
    def _verdict(team_id: str, user: SlackUser) -> bool:
        return user.admin_of(team_id)

    async def user(self, team_id: str, user_id: str) -> SlackUser:
        """What Slack says about ``user_id`` (cached; ``state="unknown"`` when Slack could not say).

        Concurrent callers share one ``users.info`` call (a burst of clicks by one person asks once)."""
        key = (team_id, user_id)
        cached = self._cache.get(key)
        if cached is not None and cached[0] > self._clock():
            return cached[1]
        lookup = self._inflight.get(key)
        if lookup is None:
            lookup = asyncio.ensure_future(self._remember(team_id, user_id))
            self._inflight[key] = lookup
            lookup.add_done_callback(lambda _: self._inflight.pop(key, None))
        return await asyncio.shield(lookup)  # a caller that gives up must not cancel the others' lookup

    async def _remember(self, team_id: str, user_id: str) -> SlackUser:
        user = await self._lookup(team_id, user_id)
        if user.state != "unknown":  # failures are retried on the next call, not remembered
            self._cache[(team_id, user_id)] = (self._clock() + self._ttl, user)
        return user

    async def users(self, team_id: str, user_ids: Iterable[str]) -> dict[str, SlackUser]:
        ids = list(dict.fromkeys(user_ids))
        found = await asyncio.gather(*(self.user(team_id, u) for u in ids))
        return dict(zip(ids, found, strict=True))

    def forget(self, team_id: str, user_id: str) -> None:
        self._cache.pop((team_id, user_id), None)

    async def _lookup(self, team_id: str, user_id: str) -> SlackUser:
        try:
            client = await self._client_for(team_id)
            response = await asyncio.wait_for(client.users_info(user=user_id), LOOKUP_TIMEOUT_SECONDS)
        except SlackApiError as exc:
            error = exc.response.get("error") if exc.response is not None else None
            if error in GONE_ERRORS:
                return SlackUser(id=user_id, state="missing")
            log.warning("users.info for %s in %s failed: %s", user_id, team_id, error or exc)
            return SlackUser(id=user_id, state="unknown")
        except Exception as exc:  # noqa: BLE001 - timeouts, network, no installation: fail closed
            log.warning("users.info for %s in %s failed: %r", user_id, team_id, exc)
            return SlackUser(id=user_id, state="unknown")
        user = response.get("user")
        if not isinstance(user, dict):
            log.warning("users.info for %s in %s returned no user", user_id, team_id)
            return SlackUser(id=user_id, state="unknown")
        found = parse_user(user_id, user)
        if not found.workspace_admin:
            return found  # which workspace the flags are about matters only when one is set
        try:
            found.roles_in = await self._acts_in(client)
        except Exception as exc:  # noqa: BLE001 - Slack could not say which workspace: ask again next time
            log.warning("auth.test for the token of %s failed: %r", team_id, exc)
            return SlackUser(id=user_id, state="unknown")
        return found

    async def _acts_in(self, client: Any) -> str | None:
        """The workspace ``client``'s token acts in (its ``auth.test``), None for an org-wide token; once per token."""
        token = client.token or ""
        if token not in self._token_workspace:
            if len(self._token_workspace) >= TOKENS_REMEMBERED:
                self._token_workspace.clear()  # rotated tokens pile up: start over, one auth.test per token again
            identity = await asyncio.wait_for(client.auth_test(), LOOKUP_TIMEOUT_SECONDS)
            org_wide = identity.get("is_enterprise_install") is True
            team = identity.get("team_id")
            self._token_workspace[token] = None if org_wide or not isinstance(team, str) else team
        return self._token_workspace[token]
