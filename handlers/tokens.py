"""Fresh bot tokens wherever one is used (Slack token rotation).

With token rotation on, a workspace's access token expires 12 hours after it was issued. Bolt refreshes it
only when a request from Slack comes in; the app also posts on its own (deliveries, App Home, user lookups,
timers and schedules) and after a quiet night would meet ``token_expired``. So every lookup of an
installation or bot — Bolt's authorize and our ``client_for`` alike — goes through this store, which
refreshes a token due within ``margin_s`` before handing it out (slack_sdk's ``AsyncTokenRotator`` does the
``oauth.v2.access`` ``grant_type=refresh_token`` exchange) and saves the new one for every replica.

A lookup of a token that is not due costs what it cost before (no extra Redis command). One refresh runs at
a time per installation in a process; when another replica refreshed first (Slack uses a refresh token up),
the token it stored is used.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from slack_sdk.errors import SlackTokenRotationError
from slack_sdk.oauth.installation_store.models.bot import Bot
from slack_sdk.oauth.installation_store.models.installation import Installation
from slack_sdk.oauth.token_rotation.async_rotator import AsyncTokenRotator

from store.installations import RedisInstallationStore

log = logging.getLogger(__name__)

REFRESH_MARGIN_S = 120 * 60  # as Bolt's token_rotation_expiration_minutes: refresh within 2 h of expiry


class RotatingInstallationStore(RedisInstallationStore):
    """The Redis installation store, handing out only bot tokens that are not about to expire.

    ``clock`` is the app's (epoch seconds; tests move it forward). slack_sdk's rotator reads the wall clock,
    so expiry times are translated between the two around the exchange."""

    def __init__(
        self,
        redis: Any,
        *,
        client_id: str,
        rotator: AsyncTokenRotator,
        clock: Callable[[], float] = time.time,
        margin_s: float = REFRESH_MARGIN_S,
    ) -> None:
        super().__init__(redis, client_id=client_id)
        self._rotator = rotator
        self._clock = clock
        self._margin_s = margin_s
        self._refreshing: dict[tuple[str | None, str | None], asyncio.Lock] = {}

    def _due(self, expires_at: int | None) -> bool:
        return expires_at is not None and expires_at <= self._clock() + self._margin_s

    async def async_find_bot(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        is_enterprise_install: bool | None = False,
    ) -> Bot | None:
        bot = await super().async_find_bot(
            enterprise_id=enterprise_id, team_id=team_id, is_enterprise_install=is_enterprise_install
        )
        return await self._fresh(bot) if bot is not None and self._due(bot.bot_token_expires_at) else bot

    async def async_find_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Installation | None:
        found = await super().async_find_installation(
            enterprise_id=enterprise_id,
            team_id=team_id,
            user_id=user_id,
            is_enterprise_install=is_enterprise_install,
        )
        if found is None or found.bot_token is None or not self._due(found.bot_token_expires_at):
            return found
        bot = await self._fresh(found.to_bot())
        if bot is not None:
            found.bot_token, found.bot_refresh_token = bot.bot_token, bot.bot_refresh_token
            found.bot_token_expires_at = bot.bot_token_expires_at
        return found

    async def _fresh(self, due: Bot) -> Bot | None:
        """``due`` refreshed and saved, or what another coroutine or replica refreshed it to meanwhile."""
        team = None if due.is_enterprise_install else due.team_id
        lock = self._refreshing.setdefault((due.enterprise_id, team), asyncio.Lock())
        async with lock:
            current = await self._stored(due)
            if current is None or not self._due(current.bot_token_expires_at):
                return current  # uninstalled, or refreshed while we waited
            try:
                refreshed = await self._exchange(current)
            except Exception as exc:  # noqa: BLE001 - Slack refused or was unreachable: see what is stored
                stored = await self._stored(due)
                if stored is not None and stored.bot_token != current.bot_token:
                    return stored  # another replica used the refresh token first and saved its token
                log.warning("could not refresh the bot token of %s: %s", _where(due), _why(exc))
                return current  # Slack will say token_expired; the caller's failure path handles it
            if refreshed is None:
                return current
            await self.async_save_bot(refreshed)
            log.info("refreshed the bot token of %s", _where(due))
            return refreshed

    async def _stored(self, bot: Bot) -> Bot | None:
        return await super().async_find_bot(
            enterprise_id=bot.enterprise_id,
            team_id=bot.team_id,
            is_enterprise_install=bot.is_enterprise_install,
        )

    async def _exchange(self, bot: Bot) -> Bot | None:
        """The rotator's refresh, in the app clock's terms: it is handed the bot as due by the wall clock, and
        the expiry it computes from the wall clock is moved by the app clock's lead."""
        lead = self._clock() - time.time()
        handed = Bot(**{**bot.to_dict_for_copying(), "bot_token_expires_at": 0})
        refreshed = await self._rotator.perform_bot_token_rotation(bot=handed, minutes_before_expiration=0)
        if refreshed is not None and refreshed.bot_token_expires_at is not None:
            refreshed.bot_token_expires_at = int(refreshed.bot_token_expires_at + lead)
        return refreshed


def _why(exc: Exception) -> str:
    """Slack's error code, never the request (it carries the client secret and the refresh token)."""
    if isinstance(exc, SlackTokenRotationError) and exc.api_error.response is not None:
        return str(exc.api_error.response.get("error"))
    return type(exc).__name__


def _where(bot: Bot) -> str:
    return f"org {bot.enterprise_id}" if bot.is_enterprise_install else f"workspace {bot.team_id}"
