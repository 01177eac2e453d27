"""The CLI beside a running bot: ``python -m bot pending | check | audit`` use the embedded
Redis of the ``python -m bot run`` serving the same BOT_DATA_DIR, ``reset-local`` refuses to delete it,
and a port the bot cannot listen on is one line naming its variable (exit 2).

Everything runs as a user runs it: real ``python -m bot`` processes, no REDIS_URL (the embedded server),
the local Slack workspace on ports the OS picks.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from localslack.seed import ALICE, GENERAL, TEAM_ID

STARTUP_TIMEOUT_S = 20.0
URL_LINE = re.compile(r"Local Slack workspace: (http://\S+)")
# anything that could point the processes at a real Slack, a model, another Redis or fixed ports
_FOREIGN_ENV = re.compile(r"^(SLACK_|OPENAI_|BOT_|REDIS_|LOCALSLACK_)|^(MODEL|PORT|HOST)$")


def machine_env(data_dir: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not _FOREIGN_ENV.search(k)}
    return {**env, "BOT_DATA_DIR": str(data_dir), "PORT": "0", "LOCALSLACK_PORT": "0",
            "PYTHONUNBUFFERED": "1", **settings}


def cli(args: list[str], data_dir: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    # cwd is the data dir's parent, not the repository: a developer's .env must not leak into the run
    return subprocess.run([sys.executable, "-m", "bot", *args], cwd=data_dir.parent,
                          env=machine_env(data_dir, **settings), capture_output=True, text=True, timeout=60)


@dataclass
class RunningBot:
    process: subprocess.Popen[bytes]
    ui_url: str
    data_dir: Path
    log_path: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def post(self, user: str, channel: str, text: str) -> None:
        """Type a message in the local workspace, as the browser page does."""
        body = json.dumps({"user": user, "channel": channel, "text": text}).encode()
        request = urllib.request.Request(f"{self.ui_url}ui/post", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert json.load(answer)["ok"] is True


def start_bot(data_dir: Path) -> RunningBot:
    """``python -m bot run`` as ``make run`` starts it, once it printed its workspace's URL."""
    log_path = data_dir.parent / "bot.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "bot", "run"], cwd=data_dir.parent,
                                   env=machine_env(data_dir), stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        if match := URL_LINE.search(log_path.read_text(errors="replace")):
            return RunningBot(process, match.group(1), data_dir, log_path)
        time.sleep(0.05)
    process.kill()
    process.wait()
    raise AssertionError(f"`python -m bot run` did not start:\n{log_path.read_text(errors='replace')[-3000:]}")


def wait_for_pending(data_dir: Path, text: str, within_s: float = 15.0) -> str:
    """``python -m bot pending``'s output once it lists ``text`` (the agent parks the turn after the post)."""
    deadline = time.monotonic() + within_s
    while True:
        listed = cli(["pending"], data_dir)
        assert listed.returncode == 0, listed.stderr
        if text in listed.stdout or time.monotonic() > deadline:
            return listed.stdout
        time.sleep(0.2)


@pytest.fixture
def bot(tmp_path: Path) -> Iterator[RunningBot]:
    running = start_bot(tmp_path / "data")
    try:
        yield running
    finally:
        running.stop()


def test_pending_check_and_audit_use_the_running_bots_redis_and_reset_refuses(bot: RunningBot) -> None:
    bot.post(ALICE, GENERAL, "@agent refund ch_1001 $40")
    listed = wait_for_pending(bot.data_dir, "refund_charge")
    assert "refund_charge" in listed and ALICE in listed and TEAM_ID in listed

    checked = cli(["check"], bot.data_dir)
    assert checked.returncode == 0, checked.stderr
    assert f"redis: ok (embedded, the running bot's (pid {bot.process.pid}))" in checked.stdout
    assert "oldest open request:" in checked.stdout

    verified = cli(["audit", "verify", "--team", TEAM_ID], bot.data_dir)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    entries = re.search(rf"ok: (\d+) entries in the audit log of {TEAM_ID} verify", verified.stdout)
    assert entries is not None and int(entries.group(1)) > 0, verified.stdout

    # reset-local deletes the data: never under a running bot
    refused = cli(["reset-local"], bot.data_dir)
    assert refused.returncode != 0
    assert refused.stderr.strip() == (f"the bot is running (pid {bot.process.pid}) on {bot.data_dir}: "
                                      "stop it first; nothing was reset")
    assert (bot.data_dir / "localslack.json").exists()
    assert "refund_charge" in cli(["pending"], bot.data_dir).stdout

    assert bot.process.poll() is None, bot.log_path.read_text()  # the bot never noticed


def test_without_a_running_bot_the_cli_starts_its_own_server_on_the_same_data(tmp_path: Path) -> None:
    running = start_bot(tmp_path / "data")
    try:
        running.post(ALICE, GENERAL, "@agent refund ch_1001 $40")
        wait_for_pending(running.data_dir, "refund_charge")
    finally:
        running.stop()
    listed = cli(["pending"], running.data_dir)
    assert listed.returncode == 0, listed.stderr
    assert "refund_charge" in listed.stdout
    # its own server, which `pending` stopped again (else this would find the directory in use)
    assert "redis: ok (embedded)" in cli(["check"], running.data_dir).stdout


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("variable", ["PORT", "LOCALSLACK_PORT"])
def test_a_port_in_use_is_one_line_naming_the_variable(tmp_path: Path, variable: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli(["run"], tmp_path / "data", **{variable: str(port)})
    assert result.returncode == 2
    assert _one_line(result) == f"configuration error: {variable} {port} is already in use: set {variable} to a free port"


@pytest.mark.parametrize("variable", ["PORT", "LOCALSLACK_PORT"])
def test_a_port_out_of_range_is_one_line_naming_the_variable(tmp_path: Path, variable: str) -> None:
    result = cli(["run"], tmp_path / "data", **{variable: "70000"})
    assert result.returncode == 2
    line = _one_line(result)
    assert line.startswith(f"configuration error: {variable}: 70000 is out of range"), line
