"""Redis restarts under a parked turn: the turn survives, and the click is answered 200.

The bot runs in-process on its own Valkey (append-only file on, as store/embedded.py always sets it),
which the tests stop and start again on the same data dir and unix socket while a card waits: the
click comes after the restart, during it, or after it through a proxy that, like a load balancer,
does not tell the bot its pooled connections are gone.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.app import BotApp
from localslack.seed import ALICE, GENERAL
from localslack.server import LocalSlack
from store.embedded import EmbeddedValkey
from tests.e2e.conftest import app_starter
from tests.e2e.test_approval_flow import RUNS, button, mention_and_wait_for_card, refund_charge, refund_script
from tests.test_store_client import SilentProxy


@pytest.fixture
async def valkey() -> AsyncIterator[EmbeddedValkey]:
    # A short path keeps the socket in the data dir: the restarted server listens where the bot looks.
    data_dir = Path(tempfile.mkdtemp(prefix="hitl-rr-"))
    server = EmbeddedValkey(data_dir)
    await server.start()
    yield server
    await server.stop()
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
async def start_on(
    local_slack: LocalSlack, valkey: EmbeddedValkey, tmp_path: Path
) -> AsyncIterator[Callable[..., Any]]:
    """``await start_on(model, tools)`` → a running BotApp whose REDIS_URL is the ``valkey`` server
    (or ``redis_url``, e.g. a proxy in front of it)."""
    async with app_starter(local_slack, valkey.url, tmp_path) as start:
        yield start


async def _restart_after(server: EmbeddedValkey, delay_s: float) -> str:
    await asyncio.sleep(delay_s)
    return await server.start()


async def _approve_and_expect_one_run(local_slack: LocalSlack, bot: BotApp, ts: str, card: Any) -> None:
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    assert "refunded" in reply.text
    await bot.wait_idle()
    assert RUNS == [{"charge": "ch_1", "principal": "slack:T0LOCAL:U0ALICE"}]
    updated = local_slack.message(GENERAL, card.ts)
    assert updated is not None and all(b["type"] != "actions" for b in updated.blocks), "buttons must be gone"
    assert local_slack.ephemerals(ALICE) == [], "the person is told of no error"


async def test_a_parked_turn_survives_a_redis_restart_and_is_approved_after(
    local_slack: LocalSlack, start_on: Callable[..., Any], valkey: EmbeddedValkey
) -> None:
    RUNS.clear()
    url = valkey.url
    bot = await start_on(refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    await bot.wait_idle()  # the turn is parked: nothing of it is in flight

    await valkey.stop()
    assert await valkey.start() == url  # same data dir: the append-only file is read back

    result = await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    assert result.status == 200, result
    await _approve_and_expect_one_run(local_slack, bot, ts, card)


async def test_a_click_that_arrives_while_redis_restarts_is_answered_200(
    local_slack: LocalSlack, start_on: Callable[..., Any], valkey: EmbeddedValkey
) -> None:
    RUNS.clear()
    url = valkey.url
    bot = await start_on(refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    await bot.wait_idle()

    await valkey.stop()
    restart = asyncio.create_task(_restart_after(valkey, 0.3))  # back while the click is being handled
    result = await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    assert await restart == url
    assert result.status == 200, result  # within Slack's 3 s: localslack gives up after that
    await _approve_and_expect_one_run(local_slack, bot, ts, card)


async def test_after_a_restart_behind_a_proxy_the_click_is_answered_200_once_readyz_says_ready(
    local_slack: LocalSlack, start_on: Callable[..., Any], valkey: EmbeddedValkey
) -> None:
    RUNS.clear()
    proxy = SilentProxy(valkey.url.removeprefix("unix://"))
    await proxy.start()
    try:
        bot = await start_on(refund_script(), [refund_charge], redis_url=f"redis://127.0.0.1:{proxy.port}/0")
        ts, card = await mention_and_wait_for_card(local_slack)
        await bot.wait_idle()  # the bot's pool now holds the connections the turn used

        await valkey.stop()
        proxy.drop_connections()  # the server behind the proxy is gone; the bot is not told
        await valkey.start()
        async with httpx.AsyncClient() as http:  # as an orchestrator would, wait until the bot says ready
            for _ in range(50):
                if (await http.get(f"{bot.url}/readyz")).status_code == 200:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("/readyz never said ready")

        result = await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
        assert result.status == 200, result
        await _approve_and_expect_one_run(local_slack, bot, ts, card)
    finally:
        await proxy.stop()
