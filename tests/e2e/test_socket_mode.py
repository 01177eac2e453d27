"""Socket Mode as production runs it: ``python -m bot run`` with SLACK_APP_TOKEN, no signing secret, no
request URL — every event, click and slash command reaches the bot over its WebSocket."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from localslack.seed import ALICE, BOT_TOKEN, BOT_USER_ID, DAVE, GENERAL
from localslack.server import LocalSlack
from tests.e2e.test_approval_flow import button, card_in

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class SocketBot:
    slack: LocalSlack
    process: subprocess.Popen


@pytest.fixture
async def socket_bot(local_slack: LocalSlack, redis, redis_url: str, tmp_path: Path) -> AsyncIterator[SocketBot]:
    """The bot in a subprocess, connected to ``local_slack`` over Socket Mode (its bot_url stays unset)."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "OPENAI_", "BOT_"))},
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_APP_TOKEN": local_slack.app_token,
        "SLACK_API_URL": local_slack.api_url,
        "REDIS_URL": redis_url,
        "PORT": str(free_port()),
        "HOST": "127.0.0.1",
        "BOT_DATA_DIR": str(tmp_path / "data"),
        "PYTHONPATH": str(ROOT),
    }
    log_path = tmp_path / "bot.log"
    log = open(log_path, "w")  # noqa: SIM115 - closed with the process
    # run outside the repository so a developer's .env cannot leak into it
    proc = subprocess.Popen([sys.executable, "-m", "bot", "run"], cwd=tmp_path, env=env, stdout=log, stderr=log)
    try:
        for _ in range(200):
            if local_slack.socket_connected:
                break
            if proc.poll() is not None:
                raise AssertionError(f"the bot exited ({proc.returncode}):\n{log_path.read_text()}")
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"the bot never connected over Socket Mode:\n{log_path.read_text()}")
        assert local_slack.bot_url is None  # nothing can have gone over HTTP
        yield SocketBot(local_slack, proc)
    finally:
        await stop(proc)
        log.close()


async def stop(proc: subprocess.Popen) -> int:
    """SIGTERM, then wait without blocking the loop: the bot's socket close needs localslack to answer."""
    proc.terminate()
    for _ in range(100):
        if proc.poll() is not None:
            return proc.returncode
        await asyncio.sleep(0.05)
    proc.kill()
    return proc.wait()


async def test_mention_card_click_and_reply_over_socket_mode(socket_bot: SocketBot) -> None:
    slack = socket_bot.slack
    ts, deliveries = await slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> announce lunch is here")
    assert deliveries and all(d.ok for d in deliveries), [(d.kind, d.error, d.detail) for d in deliveries]
    card = await slack.wait_for(lambda: card_in(slack, ts), timeout_s=15)

    result = await slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    assert result.ok, (result.error, result.detail)
    reply = await slack.wait_for_message(
        GENERAL, thread_ts=ts, predicate=lambda m: "Posted to <" in m.text and "|#general>" in m.text, timeout_s=15
    )
    assert "lunch is here" in reply.text
    assert [m.text for m in slack.messages(GENERAL) if m.user == BOT_USER_ID and not m.thread_ts] == [
        "lunch is here\n_Posted for @alice, approved by @alice_"]  # signed with who asked and approved
    updated = await slack.wait_for(
        lambda: (m := slack.message(GENERAL, card.ts)) and all(b["type"] != "actions" for b in m.blocks or []) and m,
        timeout_s=10,
    )
    assert updated.edited is not None

    kinds = [(e.type, e.payload.get("type")) for e in slack.socket_mode.sent]
    assert ("events_api", "event_callback") in kinds and ("interactive", "block_actions") in kinds
    acked = {a.envelope_id for a in slack.socket_mode.acks}
    assert all(e.envelope_id in acked for e in slack.socket_mode.sent)


async def test_slash_command_answers_over_socket_mode(socket_bot: SocketBot) -> None:
    slack = socket_bot.slack
    result = await slack.slash_command(DAVE, "/approvers", "list")
    assert result.ok, (result.error, result.detail)
    envelope = slack.socket_mode.sent[-1]
    assert envelope.type == "slash_commands" and envelope.payload["command"] == "/approvers"
    shown = await slack.wait_for(lambda: slack.ephemerals(DAVE))  # sent through response_url after the ack
    answer = shown[-1]
    assert answer.sender == BOT_USER_ID, answer  # the bot's answer, not Slackbot's "failed" notice
    assert "Approver lists" in answer.text and "post_announcement" in answer.text, answer.text
    assert not any(m.user == BOT_USER_ID for m in slack.messages(GENERAL))  # ephemeral, not posted


async def test_sigterm_closes_the_socket_and_exits_cleanly(socket_bot: SocketBot) -> None:
    assert await stop(socket_bot.process) == 0
    assert not socket_bot.slack.socket_connected
