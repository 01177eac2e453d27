"""kill -9 between the card and the click: a new process, sharing only Redis, completes the turn."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from localslack.seed import ALICE, BOT_TOKEN, BOT_USER_ID, GENERAL
from tests.chaos.harness import stop_process
from tests.e2e.conftest import SIGNING_SECRET
from tests.e2e.test_approval_flow import button, card_in


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def start_process(local_slack, redis_url: str, tmp_path: Path, **extra_env: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "OPENAI_"))},
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": local_slack.api_url,
        "REDIS_URL": redis_url,
        "PORT": str(port),
        "HOST": "127.0.0.1",
        "BOT_DATA_DIR": str(tmp_path / "data"),
        "BOT_LEASE_SECONDS": "2",  # a killed worker's lease lapses quickly
        **extra_env,
    }
    log = open(tmp_path / f"bot-{port}.log", "w")  # noqa: SIM115 - closed with the process
    # run outside the repository so a developer's .env cannot leak into it
    proc = subprocess.Popen([sys.executable, "-m", "bot", "run"], cwd=tmp_path, env=env, stdout=log, stderr=log)
    async with httpx.AsyncClient() as client:
        for _ in range(100):
            try:
                if (await client.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                raise AssertionError((tmp_path / f"bot-{port}.log").read_text())
            await asyncio.sleep(0.1)
    local_slack.set_bot_url(f"http://127.0.0.1:{port}/slack/events")
    return proc, port


async def test_kill_9_between_card_and_click(local_slack, redis, redis_url, tmp_path):
    first, _ = await start_process(local_slack, redis_url, tmp_path)
    try:
        ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> announce lunch is here")
        card = await local_slack.wait_for(lambda: card_in(local_slack, ts), timeout_s=15)
    finally:
        first.send_signal(signal.SIGKILL)
        await asyncio.to_thread(first.wait)
    second, _ = await start_process(local_slack, redis_url, tmp_path)
    try:
        result = await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
        assert result.status == 200
        reply = await local_slack.wait_for_message(
            GENERAL, thread_ts=ts, predicate=lambda m: "Posted to" in m.text, timeout_s=15)
        assert "lunch is here" in reply.text

        def settled() -> bool:
            updated = local_slack.message(GENERAL, card.ts)
            return all(b["type"] != "actions" for b in updated.blocks)

        # the card update may be rendered just after the reply (delivery is asynchronous to the turn)
        try:
            await local_slack.wait_for(settled, timeout_s=5)
        except TimeoutError:
            pass
        assert settled(), [(c.method, c.params.get("text"), c.params.get("ts")) for c in local_slack.calls]
        # the thread's agent session, suspended when the first process died, ends active
        await local_slack.wait_for(lambda: local_slack.assistant_state(GENERAL, ts).session_status == "active")
        # processing shows only for a slow step and suspended only once the card waited the status delay
        # (the call budget: at most four Slack calls per approve cycle), so the kill may come before either; a kill before the card's pass saved
        # its cursor makes the next process deliver those events again, so a status may come twice (setStatus
        # is idempotent). The order and the end hold
        statuses = [e["status"] for e in local_slack.assistant_state(GENERAL, ts).session_log]
        ranks = [["processing", "suspended", "active"].index(s) for s in statuses]
        assert ranks == sorted(ranks) and statuses[-1] == "active", statuses
    finally:
        # terminate, wait (without blocking the loop LocalSlack runs in), then kill if still there
        await stop_process(second, timeout_s=10)


async def test_kill_9_between_the_reply_and_its_card_update_posts_the_reply_once(
        local_slack, redis, redis_url, tmp_path):
    """The settled card's edit and the answer go out side by side: a process killed after the answer landed
    and before the card's edit did leaves both to the next one, which edits the card and finds the answer
    in the thread instead of posting it again."""
    first, _ = await start_process(local_slack, redis_url, tmp_path)
    held = None
    try:
        ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> announce lunch is here")
        card = await local_slack.wait_for(lambda: card_in(local_slack, ts), timeout_s=15)
        held = local_slack.hold_next("chat.update")  # Slack is slow to edit the card just then
        assert (await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))).status == 200
        await asyncio.wait_for(held.reached.wait(), 15)
        reply = await local_slack.wait_for_message(
            GENERAL, thread_ts=ts, predicate=lambda m: "Posted to" in m.text and not m.streaming, timeout_s=5)
    finally:
        first.send_signal(signal.SIGKILL)
        await asyncio.to_thread(first.wait)
    assert card_in(local_slack, ts) is not None  # its edit never landed
    second, _ = await start_process(local_slack, redis_url, tmp_path)
    try:
        await local_slack.wait_for(lambda: card_in(local_slack, ts) is None, timeout_s=15)
        assert "Approved" in str(local_slack.message(GENERAL, card.ts).blocks)
        replies = [m for m in local_slack.messages(GENERAL, thread_ts=ts) if m.bot_id and "Posted to" in m.text]
        assert [m.ts for m in replies] == [reply.ts], "the answer is in the thread once"
    finally:
        await stop_process(second, timeout_s=10)
        if held is not None:
            held.release()
