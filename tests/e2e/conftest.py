"""End-to-end fixtures: the real app on a real port, Slack played by localslack over signed HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from bot.app import BotApp, start_bot
from bot.config import Settings
from bot.models.base import ChatModel
from bot.tools import Tool
from handlers.routes.http import ClientLimits
from localslack.seed import BOT_TOKEN
from localslack.server import LocalSlack

SIGNING_SECRET = "e2e-signing-secret"


@pytest.fixture
async def local_slack() -> AsyncIterator[LocalSlack]:
    slack = LocalSlack(bot_url=None, signing_secret=SIGNING_SECRET)
    await slack.start()
    yield slack
    await slack.stop()


def e2e_settings(slack: LocalSlack, redis_url: str, tmp_path: Any, **extra: Any) -> Settings:
    values = {
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack.api_url,
        "REDIS_URL": redis_url,
        "BOT_TOOLS": "",
        "BOT_DATA_DIR": str(tmp_path / "data"),
        **extra,
    }
    return Settings(_env_file=None, **values)  # type: ignore[arg-type]


@asynccontextmanager
async def app_starter(local_slack: LocalSlack, redis_url: str, tmp_path: Any,
                      **fixed: Any) -> AsyncIterator[Callable[..., Any]]:
    """``await start(model, tools, redis_url=…, recovery_interval=…, limits=…, agent=…, **settings)`` → a running BotApp that
    localslack delivers to, on ``redis_url`` unless the call names another; every one is closed at the end,
    and then the models it was given."""
    started: list[BotApp] = []
    given: list[ChatModel] = []

    async def start(model: ChatModel, tools: list[Tool], redis_url: str | None = None, *,
                    recovery_interval: float = 0, limits: ClientLimits | None = None, agent: Any = None,
                    **extra: Any) -> BotApp:
        # no recovery sweep by default: tests drive recovery themselves, except those that need it running
        settings = e2e_settings(local_slack, redis_url or default_url, tmp_path, **{**fixed, **extra})
        bot = await start_bot(settings, model=model, tools=tools, host="127.0.0.1", port=0,
                              recovery_interval=recovery_interval, limits=limits, agent=agent)
        local_slack.set_bot_url(f"{bot.url}/slack/events")
        started.append(bot)
        given.append(model)
        return bot

    default_url = redis_url
    try:
        yield start
    finally:
        for bot in started:
            await bot.close()
        for model in {id(m): m for m in given}.values():  # the test's models: their HTTP sessions end with it
            if hasattr(model, "aclose"):
                await model.aclose()


@pytest.fixture
async def start_app(local_slack: LocalSlack, redis, redis_url: str, tmp_path) -> AsyncIterator[Callable[..., Any]]:
    """``await start_app(model, tools)`` → a running BotApp that localslack delivers to."""
    async with app_starter(local_slack, redis_url, tmp_path) as start:
        yield start
