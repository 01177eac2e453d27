"""Slack OAuth storage on Redis: installations/bots and one-time OAuth ``state`` values.

:class:`RedisInstallationStore` keeps slack_sdk's ``FileInstallationStore`` semantics: a save stores the
workspace's latest installation, the installing user's latest installation and (when it has a bot
token) the bot; the last save wins; an org-wide (Enterprise Grid) install is found with
``is_enterprise_install=True`` and no team; a per-user lookup gets the latest bot token of the
workspace overlaid. Unlike the file store, deleting one user's installation also stops the workspace
lookup from returning that user's token (it falls back to the newest installation left, as
slack_sdk's SQL stores do), and no history of old tokens is kept.

Keys: one Redis hash per installation target, ``hitl:{inst:<enterprise or ->:<team or ->}:oauth``
(fields ``bot``, ``installer``, ``installer:<user_id>``, each the object's JSON), so a save or a delete
is one atomic operation in one hash slot. OAuth states live in the browser (signed); only used ones are kept, capped: ``hitl:oauth-state:used``.
A new installation lifts its workspace's uninstall mark (``store.install_marks``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import secrets
import time
from collections.abc import Callable
from logging import Logger
from typing import Any

from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.oauth.installation_store.models.bot import Bot
from slack_sdk.oauth.installation_store.models.installation import Installation
from slack_sdk.oauth.state_store.async_state_store import AsyncOAuthStateStore

from store.client import RedisClient
from store.install_marks import InstallMarks

KEY_PREFIX = "hitl"
_BOT = "bot"
_LATEST = "installer"
_USER_PREFIX = "installer:"
_ID = re.compile(r"^[A-Za-z0-9_.-]+$")
_MAX_STATE_LENGTH = 128
_STATE_LABEL = b"hitl-oauth-state-v1"
MAX_USED_STATES = 10_000  # consumed states remembered (each ~40 bytes) until they would have expired
USED_STATES_KEY = f"{KEY_PREFIX}:oauth-state:used"

# KEYS[1] the used nonces (score: expiry); ARGV: nonce, its expiry, now, cap, seconds a state lives
# → 1 the first time a nonce is consumed, 0 after
_CONSUME_STATE_LUA = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then redis.call('ZPOPMIN', KEYS[1]) end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""

_log = logging.getLogger(__name__)

# KEYS[1] the installation hash → number of installer fields removed (the bot stays).
_DELETE_INSTALLERS_LUA = """
local removed = 0
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  if field == 'installer' or string.sub(field, 1, 10) == 'installer:' then
    removed = removed + redis.call('HDEL', KEYS[1], field)
  end
end
return removed
"""

# Forget one user's installation; when it was the workspace's latest, the newest one left (by
# ``installed_at``, the first of equals) becomes the latest. A script rather than WATCH/MULTI: one
# atomic step in the hash's slot, and redis-py 5.2's Redis Cluster client refuses transactions.
# KEYS[1] the installation hash; ARGV: the user's field, the user id → 1 if the user had one, else 0
_DELETE_USER_LUA = """
local removed = redis.call('HDEL', KEYS[1], ARGV[1])
local latest = redis.call('HGET', KEYS[1], 'installer')
if not latest or cjson.decode(latest)['user_id'] ~= ARGV[2] then return removed end
local fields, newest, newest_at = redis.call('HGETALL', KEYS[1]), nil, 0
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, 10) == 'installer:' then
    local at = cjson.decode(fields[i + 1])['installed_at']
    if type(at) ~= 'number' then at = 0 end
    if newest == nil or at > newest_at then newest, newest_at = fields[i + 1], at end
  end
end
if newest then redis.call('HSET', KEYS[1], 'installer', newest) else redis.call('HDEL', KEYS[1], 'installer') end
return removed
"""


def _checked_id(value: str | None) -> str:
    if value is None or value == "":
        return "-"
    if not _ID.match(value):
        raise ValueError(f"not a Slack id: {value!r}")
    return value


def _to_json(obj: Installation | Bot) -> str:
    # Same as FileInstallationStore: the attribute dict round-trips through the constructor.
    return json.dumps(vars(obj))


def _overlay_bot(installation: Installation, bot: Bot) -> None:
    """Give an installation the workspace's latest bot token (a user's installation may be older)."""
    if installation.bot_token == bot.bot_token:
        return
    installation.bot_id = bot.bot_id
    installation.bot_user_id = bot.bot_user_id
    installation.bot_token = bot.bot_token
    installation.bot_scopes = bot.bot_scopes
    installation.bot_refresh_token = bot.bot_refresh_token
    installation.bot_token_expires_at = bot.bot_token_expires_at


class RedisInstallationStore(AsyncInstallationStore):
    """Bolt's ``installation_store`` on Redis (``AsyncApp(installation_store=…)`` / OAuth settings).

    ``client_id`` separates the data of several Slack apps sharing one Redis.
    """

    def __init__(
        self, redis: RedisClient, *, client_id: str | None = None, logger: Logger | None = None
    ) -> None:
        self._redis = redis
        self.client_id = client_id
        self._logger = logger or _log
        self._delete_installers = redis.register_script(_DELETE_INSTALLERS_LUA)
        self._delete_user = redis.register_script(_DELETE_USER_LUA)

    @property
    def logger(self) -> Logger:
        return self._logger

    def key(self, enterprise_id: str | None, team_id: str | None) -> str:
        tag = f"{{inst:{_checked_id(enterprise_id)}:{_checked_id(team_id)}}}"
        parts = [KEY_PREFIX, tag, "oauth"]
        if self.client_id:
            parts.append(self.client_id)
        return ":".join(parts)

    def _lookup_key(
        self, enterprise_id: str | None, team_id: str | None, is_enterprise_install: bool | None
    ) -> str:
        # An org-wide install is stored without a team, whichever workspace the event came from.
        return self.key(enterprise_id, None if is_enterprise_install else team_id)

    async def async_save(self, installation: Installation) -> None:
        if installation.team_id and not installation.is_enterprise_install:
            await self.async_remember_workspace(installation.team_id, installation.enterprise_id, False)
        # a new installation lifts the uninstall mark of its workspace, or (org-wide) of its org's workspaces
        org_wide = installation.is_enterprise_install or not installation.team_id
        teams = ([installation.team_id] if not org_wide else
                 await self.async_workspaces_of(installation.enterprise_id) if installation.enterprise_id else [])
        await InstallMarks(self._redis, client_id=self.client_id).mark_installed(*teams)
        key = self.key(installation.enterprise_id, installation.team_id)
        entity = _to_json(installation)
        fields = {_LATEST: entity, f"{_USER_PREFIX}{_checked_id(installation.user_id)}": entity}
        bot = installation.to_bot()
        if bot.bot_token is not None:
            fields[_BOT] = _to_json(bot)
        await self._redis.hset(key, mapping=fields)

    async def async_save_bot(self, bot: Bot) -> None:
        if bot.bot_token is None:
            self.logger.debug("Skipped saving a bot without a bot token")
            return
        await self._redis.hset(self.key(bot.enterprise_id, bot.team_id), _BOT, _to_json(bot))

    async def async_find_bot(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        is_enterprise_install: bool | None = False,
    ) -> Bot | None:
        raw = await self._redis.hget(self._lookup_key(enterprise_id, team_id, is_enterprise_install), _BOT)
        return None if raw is None else Bot(**json.loads(raw))

    async def async_find_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Installation | None:
        """The latest installation of the workspace/org, or of ``user_id`` there when given."""
        key = self._lookup_key(enterprise_id, team_id, is_enterprise_install)
        field = _LATEST if user_id is None else f"{_USER_PREFIX}{_checked_id(user_id)}"
        raw_installation, raw_bot = await self._redis.hmget(key, field, _BOT)
        if raw_installation is None:
            return None
        installation = Installation(**json.loads(raw_installation))
        if raw_bot is not None:
            _overlay_bot(installation, Bot(**json.loads(raw_bot)))
        return installation

    # which org a workspace belongs to, and whether the app is installed org-wide there ------------

    def _directory_key(self) -> str:
        return ":".join([KEY_PREFIX, "{inst:directory}", "workspaces", *([self.client_id] if self.client_id else [])])

    async def async_remember_workspace(
        self, team_id: str, enterprise_id: str | None, is_enterprise_install: bool
    ) -> None:
        """Note what a verified request said about a workspace, so that calls made later with only its
        team id (cards, replies, App Home) find the installation as Bolt's authorize does."""
        value = json.dumps({"enterprise_id": enterprise_id, "is_enterprise_install": is_enterprise_install})
        await self._redis.hset(self._directory_key(), _checked_id(team_id), value)

    async def async_workspace(self, team_id: str) -> tuple[str | None, bool] | None:
        """(enterprise id, installed org-wide) as last seen for ``team_id``; None if never seen."""
        raw = await self._redis.hget(self._directory_key(), _checked_id(team_id))
        if raw is None:
            return None
        seen = json.loads(raw)
        return seen.get("enterprise_id"), bool(seen.get("is_enterprise_install"))

    async def async_workspaces_of(self, enterprise_id: str, *, org_wide: bool = False) -> list[str]:
        """The workspaces seen in ``enterprise_id``'s org; ``org_wide``: only those served by its org-wide
        install (the ones an org-wide uninstall reaches)."""
        seen = {(t.decode() if isinstance(t, bytes) else t): json.loads(raw)
                for t, raw in (await self._redis.hgetall(self._directory_key())).items()}
        return [team for team, where in seen.items() if where.get("enterprise_id") == enterprise_id
                and (where.get("is_enterprise_install") or not org_wide)]

    async def async_find_bot_for_workspace(self, team_id: str | None) -> Bot | None:
        """The bot serving ``team_id``: its own install, or its org's org-wide install (Enterprise Grid)."""
        if team_id is None:
            return None
        seen = await self.async_workspace(team_id)
        enterprise_id, org_wide = seen if seen is not None else (None, False)
        return await self.async_find_bot(enterprise_id=enterprise_id, team_id=team_id,
                                         is_enterprise_install=org_wide)

    async def async_delete_bot(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        await self._redis.hdel(self.key(enterprise_id, team_id), _BOT)

    async def async_delete_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
    ) -> None:
        """Delete one user's installation, or (no ``user_id``) every installation of the workspace.

        When the user's was the workspace's latest, the newest remaining one becomes the latest, so a
        revoked user token is never handed out again.
        """
        key = self.key(enterprise_id, team_id)
        if user_id is None:
            await self._delete_installers(keys=[key])
            return
        await self._delete_user(keys=[key], args=[f"{_USER_PREFIX}{_checked_id(user_id)}", user_id])

    async def async_delete_all(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        """Forget the workspace/org entirely (app uninstalled)."""
        await self._redis.delete(self.key(enterprise_id, team_id))


class RedisOAuthStateStore(AsyncOAuthStateStore):
    """One-time OAuth ``state`` values that expire after ``expiration_seconds``, kept by the browser.

    ``GET /slack/install`` is anyone's to send, so issuing a state writes nothing: a state is
    ``<nonce>.<expiry>.<hmac>``, signed with a key from the app's client secret, and Bolt binds it to the
    browser that started the install (its ``slack-app-oauth-state`` cookie must hold the same state). Only a
    callback that passed that check consumes one: its nonce is kept until the state would have expired, in one
    sorted set capped at ``max_used`` nonces (the soonest to expire make room), so a state is good once and
    what callers can store stays bounded.
    """

    def __init__(self, redis: RedisClient, *, expiration_seconds: int, secret: str, logger: Logger | None = None,
                 max_used: int = MAX_USED_STATES, clock: Callable[[], float] = time.time) -> None:
        if expiration_seconds < 1:
            raise ValueError("expiration_seconds must be at least 1")
        if not secret:
            raise ValueError("OAuth states are signed with the app's client secret: give it")
        self._redis = redis
        self.expiration_seconds = expiration_seconds
        self._key = hmac.new(secret.encode(), _STATE_LABEL, hashlib.sha256).digest()
        self._max_used = max_used
        self._clock = clock
        self._logger = logger or _log
        self._consume = redis.register_script(_CONSUME_STATE_LUA)

    @property
    def logger(self) -> Logger:
        return self._logger

    def _mac(self, signed: str) -> str:
        return hmac.new(self._key, signed.encode(), hashlib.sha256).hexdigest()[:32]

    async def async_issue(self, *args: Any, **kwargs: Any) -> str:
        signed = f"{secrets.token_urlsafe(16)}.{int(self._clock()) + self.expiration_seconds}"
        return f"{signed}.{self._mac(signed)}"

    async def async_consume(self, state: str) -> bool:
        """True exactly once for a state we issued that has not expired."""
        signed, _, mac = (state or "").rpartition(".")
        nonce, _, expiry = signed.partition(".")
        now = int(self._clock())
        if (len(state or "") > _MAX_STATE_LENGTH or not nonce or not expiry.isdigit() or not mac.isascii()
                or not hmac.compare_digest(mac, self._mac(signed)) or int(expiry) <= now):
            self.logger.warning("OAuth state not ours or expired")
            return False
        fresh = await self._consume(keys=[USED_STATES_KEY], args=[nonce, expiry, now, self._max_used,
                                                                  self.expiration_seconds])
        if not fresh:
            self.logger.warning("OAuth state already used")
        return bool(fresh)
