"""The local workspace survives a restart: ``LocalSlack(data_dir=...)`` keeps it in
``<data_dir>/localslack.json`` (durable before the answer, group-committed, atomic); ``reset`` forgets it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from localslack import ALICE, BOB, BOT_TOKEN, BOT_USER_ID, CAROL, GENERAL, LocalSlack, grid_seed
from localslack.persistence import STATE_FILE, reset

SECRET = "persistence-test-secret"
ROOT = Path(__file__).resolve().parents[1]
CARD = [
    {"type": "section", "block_id": "req-1", "text": {"type": "mrkdwn", "text": "*refund* wants to run"}},
    {
        "type": "actions",
        "block_id": "req-1-actions",
        "elements": [
            {"type": "button", "action_id": "approve", "value": "r1", "text": {"type": "plain_text", "text": "Approve"}}
        ],
    },
]
HOME = {"type": "home", "blocks": [{"type": "header", "text": {"type": "plain_text", "text": "Waiting on you"}}]}


def local(data_dir: Path, **extra: object) -> LocalSlack:
    return LocalSlack(bot_url=None, signing_secret=SECRET, data_dir=data_dir, **extra)  # type: ignore[arg-type]


async def test_messages_threads_and_views_are_there_after_a_restart(tmp_path: Path) -> None:
    async with local(tmp_path) as slack:
        client = AsyncWebClient(base_url=slack.api_url, token=BOT_TOKEN)
        root, _ = await slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1")
        card = await client.chat_postMessage(channel=GENERAL, thread_ts=root, text="Approval needed", blocks=CARD)
        await slack.post_message(BOB, GENERAL, "I'll look", thread_ts=root)
        await client.views_publish(user_id=CAROL, view=HOME)
        slack.archive_channel("C0FINANCE")
        dm = (await client.conversations_open(users=ALICE))["channel"]["id"]
        await client.chat_postMessage(channel=dm, text="a private note")

    async with local(tmp_path) as again:  # a new process would see the same
        assert [m.text for m in again.messages(GENERAL)] == [f"<@{BOT_USER_ID}> refund ch_1"]
        thread = again.messages(GENERAL, thread_ts=root)
        assert [m.text for m in thread] == [f"<@{BOT_USER_ID}> refund ch_1", "Approval needed", "I'll look"]
        assert thread[0].reply_count == 2 and thread[1].blocks == CARD
        assert again.home_view(CAROL) is not None and again.home_view(CAROL).blocks == HOME["blocks"]
        assert again.ws.channel("C0FINANCE").is_archived is True
        assert [m.text for m in again.messages(dm)] == ["a private note"]
        client = AsyncWebClient(base_url=again.api_url, token=BOT_TOKEN)
        # a parked turn resuming after the restart finds its card (no message_not_found)
        settled = await client.chat_update(channel=GENERAL, ts=card["ts"], text="Approved by bob", blocks=[])
        assert settled["ok"]
        replies = await client.conversations_replies(channel=GENERAL, ts=root)
        assert len(replies["messages"]) == 3
        newer = await client.chat_postMessage(channel=GENERAL, text="after the restart")
        assert float(newer["ts"]) > float(thread[-1].ts)  # the clock never goes back


async def test_installs_and_revocations_survive_too(tmp_path: Path) -> None:
    async with local(tmp_path) as slack:
        slack.add_team("T0BETA", "Beta Inc", "xoxb-beta")
        slack.add_user("U0BETA", "bea", team_id="T0BETA")
        await slack.uninstall("T0LOCAL")
    async with local(tmp_path) as again:
        beta = AsyncWebClient(base_url=again.api_url, token="xoxb-beta")
        assert (await beta.auth_test())["team_id"] == "T0BETA"
        assert again.ws.user("U0BETA").name == "bea"
        revoked = AsyncWebClient(base_url=again.api_url, token=BOT_TOKEN)
        with pytest.raises(SlackApiError) as caught:
            await revoked.auth_test()
        assert caught.value.response["error"] == "token_revoked"


async def test_writes_are_debounced_and_atomic(tmp_path: Path) -> None:
    async with local(tmp_path, save_delay_s=0.2, rate_limits=False) as slack:
        client = AsyncWebClient(base_url=slack.api_url, token=BOT_TOKEN)
        await asyncio.gather(*(client.chat_postMessage(channel=GENERAL, text=f"m{i}") for i in range(30)))
        await asyncio.sleep(0.4)
        assert slack.persister is not None and 1 <= slack.persister.saves <= 3  # not one write per message
        saved = json.loads((tmp_path / STATE_FILE).read_text())
        assert len(saved["history"][GENERAL]) == 30
        assert [p.name for p in tmp_path.iterdir()] == [STATE_FILE]  # no temp file left behind


async def test_the_kept_workspace_is_private_to_its_user(tmp_path: Path) -> None:
    """People's messages are in the file: it is 0600 in a 0700 folder (made so), and a file an older version
    left open to other users is closed when the workspace loads it."""
    data = tmp_path / ".data"
    async with local(data) as slack:
        await slack.post_message(ALICE, GENERAL, "the launch code is 0000")
    state = data / STATE_FILE
    assert "launch code" in state.read_text()
    assert (oct(data.stat().st_mode & 0o777), oct(state.stat().st_mode & 0o777)) == ("0o700", "0o600")
    state.chmod(0o644)
    async with local(data):
        assert oct(state.stat().st_mode & 0o777) == "0o600"


async def test_reset_forgets_the_workspace(tmp_path: Path) -> None:
    async with local(tmp_path) as slack:
        await slack.post_message(ALICE, GENERAL, "remember me")
    assert (tmp_path / STATE_FILE).exists()
    assert reset(tmp_path) is True and reset(tmp_path) is False
    async with local(tmp_path) as again:
        assert again.messages(GENERAL) == []

    async with local(tmp_path) as slack:
        await slack.post_message(ALICE, GENERAL, "again")
    done = subprocess.run(
        [sys.executable, "-m", "localslack", "reset", "--data-dir", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, check=True,
    )
    assert "forgot the local Slack workspace" in done.stdout and not (tmp_path / STATE_FILE).exists()


async def test_an_unreadable_file_is_moved_aside_not_lost(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text("{ not json")
    async with local(tmp_path) as slack:
        assert slack.messages(GENERAL) == []
        await slack.post_message(ALICE, GENERAL, "a fresh start")
    kept = [p.name for p in tmp_path.iterdir() if p.name.startswith(f"{STATE_FILE}.unreadable-")]
    assert len(kept) == 1 and (tmp_path / kept[0]).read_text() == "{ not json"


async def test_without_a_data_dir_nothing_is_written(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.chdir(tmp_path)
    async with LocalSlack(bot_url=None, signing_secret=SECRET, seed=grid_seed()) as slack:
        assert slack.persister is None
    assert list(tmp_path.iterdir()) == []


def _serve(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    """A real ``python -m localslack`` process on a free port; returns it and its Web API URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "localslack", "--port", "0", "--data-dir", str(data_dir), "--no-retry",
         "--no-rate-limits", "--bot-url", "http://127.0.0.1:9/slack/events", "--signing-secret", SECRET],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()  # "Local Slack workspace: http://127.0.0.1:PORT/"
    assert first.startswith("Local Slack workspace: "), first
    return proc, first.split(": ", 1)[1].strip() + "api/"


async def test_a_kill_9_right_after_an_acknowledged_post_loses_nothing(tmp_path: Path) -> None:
    proc, api = _serve(tmp_path)
    try:
        client = AsyncWebClient(base_url=api, token=BOT_TOKEN)
        root = await client.chat_postMessage(channel=GENERAL, text="Approval needed: refund ch_1001")
    finally:
        proc.kill()  # SIGKILL the moment the post is acknowledged: no clean stop, no timer
        proc.wait()
    proc, api = _serve(tmp_path)
    try:
        client = AsyncWebClient(base_url=api, token=BOT_TOKEN)
        history = await client.conversations_history(channel=GENERAL)
        assert [m["ts"] for m in history["messages"]] == [root["ts"]]
        await client.chat_postMessage(channel=GENERAL, thread_ts=root["ts"], text="Refunded $40")
        replies = await client.conversations_replies(channel=GENERAL, ts=root["ts"])
        assert [m["text"] for m in replies["messages"]] == ["Approval needed: refund ch_1001", "Refunded $40"]
    finally:
        proc.kill()
        proc.wait()


def test_a_change_made_as_a_write_finishes_does_not_freeze_the_process(tmp_path: Path) -> None:
    # The moment a save finishes, its "written" callback is queued, not run. A request that changed the
    # workspace and asks for durability in that moment found the finished write still in place: awaiting it
    # returned at once without yielding, and it looped on it forever, the event loop (and with it the whole
    # bot of `make run`) frozen. Run in a child process: a regression hangs, and only the child.
    script = f"""
import asyncio
from localslack.persistence import Persister
from localslack.workspace import Workspace

async def main():
    persister = Persister(Workspace(), {str(tmp_path)!r})
    finished = asyncio.get_running_loop().create_future()
    persister._writing = finished  # a save that has just finished: its done callback is queued, not run
    finished.add_done_callback(persister._written)
    finished.set_result(None)
    persister.schedule()  # and a change made since: it must reach the disk too
    await persister.durable()  # in this task, at once: before the queued callback can run
    print("durable", persister.saves)

asyncio.run(main())
"""
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=15,
                              cwd=Path(__file__).resolve().parents[1])
    except subprocess.TimeoutExpired:
        pytest.fail("Persister.durable() spun on a finished write: the event loop froze")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["durable", "1"]  # the change made since was written
