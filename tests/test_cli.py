"""The command line: help, clear configuration errors (exit 2), and the console chat."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import redis as redis_sync

from bot.principals import CONSOLE_TEAM
from store.client import open_redis
from store.turns import RedisTurns

# not the repository: a developer's .env there must not leak tokens into these runs
WORKDIR = Path(tempfile.mkdtemp(prefix="bot-cli-"))


def run(args: list[str], env: dict[str, str], stdin: str = "", timeout: float = 60) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "OPENAI_", "BOT_", "PORT"))}
    return subprocess.run([sys.executable, "-m", "bot", *args], cwd=WORKDIR, env={**clean, **env}, input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def test_help_lists_subcommands():
    out = run(["--help"], {}).stdout
    for command in ("run", "check", "pending", "chat", "audit", "reset-local"):
        assert command in out


def test_bad_setting_is_one_clear_line_and_exit_2():
    result = run(["check"], {"PORT": "not-a-port"})
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [lines[-1]] and "PORT" in lines[-1]


def test_an_unknown_slack_pacing_is_one_line_naming_it_and_exit_2():
    result = run(["check"], {"SLACK_PACING": "fast"})
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [lines[-1]] and "SLACK_PACING" in lines[-1] and "off" in lines[-1]


def test_http_mode_without_signing_secret_names_the_variable():
    result = run(["check"], {"SLACK_BOT_TOKEN": "xoxb-1"})
    assert result.returncode == 2
    assert "SLACK_SIGNING_SECRET" in result.stderr


def test_unimportable_tool_module_names_bot_tools(redis_url):
    result = run(["check"], {"BOT_TOOLS": "no.such.module", "REDIS_URL": redis_url})
    assert result.returncode == 2
    assert "BOT_TOOLS" in result.stderr


def test_console_chat_runs_a_tool_and_parks_on_an_approval(redis, redis_url):
    result = run(["chat"], {"REDIS_URL": redis_url}, stdin="look up acme\nannounce standup moved\napprove\n/quit\n")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Acme Corp" in out
    assert "approval needed: post_announcement" in out
    assert "Posted to #general" in out


def test_pending_lists_waiting_requests_of_every_workspace(redis, redis_url):
    chat = run(["chat"], {"REDIS_URL": redis_url}, stdin="announce release at 5pm\n/quit\n")
    assert "approval needed: post_announcement" in chat.stdout
    listed = run(["pending"], {"REDIS_URL": redis_url})
    assert listed.returncode == 0, listed.stderr
    assert "tool-approval" in listed.stdout and "post_announcement" in listed.stdout
    assert "console:TCONSOLE:you" in listed.stdout


def test_console_approves_from_an_approver_list_and_the_announcement_is_posted(redis, redis_url):
    """The console is a workspace: "bob" is on the refund approver list (seeded like the local demo),
    the requester is refused, bob's approval runs the refund; an approved announcement is printed."""
    result = run(["chat"], {"REDIS_URL": redis_url},
                 stdin="approve\nrefund ch_1001 40 dollars\napprove\n/as bob\napprove\nannounce standup moved\n"
                       "approve\n/quit\n")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "(Nothing is waiting for an answer here.)" in out and "running **offline**" not in out
    assert "(waiting on @bob)" in out
    assert "not accepted: Only @bob can approve `refund_charge`." in out  # who may, not "someone else"
    assert "approved by @bob" in out and "Refunded $40.00 on `ch_1001`" in out
    assert "  [#general] standup moved" in out and "Posted to #general" in out


def test_the_console_chat_runs_the_loop_bot_loop_names(redis, redis_url):
    """``chat`` moves its turns as ``run`` does: BOT_LOOP's loop (the native one by default, through the agent
    backend interface; ``builtin``: the engine's own step)."""
    async def loop_of_the_parked_turn() -> str:
        handle = await open_redis(redis_url)
        try:
            store = RedisTurns(handle.client)
            [waiting] = await store.pending_for_team(CONSOLE_TEAM)
            turn = (await store.state(waiting.session_id) or {})["turn"]
            return turn["run"]["framework"] if turn.get("run") else "builtin"
        finally:
            await handle.close()

    for setting, loop in ((None, "native"), ("builtin", "builtin"), ("native", "native")):
        env = {"REDIS_URL": redis_url, **({"BOT_LOOP": setting} if setting else {})}
        chat = run(["chat"], env, stdin="refund ch_1001 40 dollars\n/quit\n")
        assert "approval needed: refund_charge" in chat.stdout, chat.stderr
        assert asyncio.run(loop_of_the_parked_turn()) == loop, setting
        with redis_sync.Redis.from_url(redis_url) as client:  # the next chat starts with nothing left waiting
            client.flushdb()


def test_a_new_console_session_starts_clean_and_cancels_what_an_earlier_one_left_waiting(redis, redis_url):
    first = run(["chat"], {"REDIS_URL": redis_url}, stdin="refund ch_1001 40 dollars\n/quit\n")
    assert "approval needed: refund_charge" in first.stdout
    second = run(["chat"], {"REDIS_URL": redis_url}, stdin="approve\n/quit\n")
    assert "left 1 turn(s) waiting; cancelling them" in second.stdout
    assert "approved by" not in second.stdout and "running refund_charge" not in second.stdout
    assert "nothing is waiting" in run(["pending"], {"REDIS_URL": redis_url}).stdout


def test_check_reports_what_is_kept_and_the_oldest_open_request(redis, redis_url):
    run(["chat"], {"REDIS_URL": redis_url}, stdin="announce release at 5pm\n/quit\n")
    checked = run(["check"], {"REDIS_URL": redis_url})
    assert checked.returncode == 0, checked.stderr
    assert "data: " in checked.stdout and " state" in checked.stdout and " req" in checked.stdout
    assert "retention: 30 days" in checked.stdout
    assert "oldest open request:" in checked.stdout


def test_console_fills_in_a_form_the_agent_asks_for(redis, redis_url):
    form = '/fill {"what_happened": "Checkout is down", "severity": "SEV1", "customer_facing": true}'
    result = run(["chat"], {"REDIS_URL": redis_url},
                 stdin=f'report an incident\n/fill {{"severity": "SEV9"}}\n{form}\n/quit\n')
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Tell me about the incident" in out and "severity: Severity" in out
    assert "✗ the form's values are not valid" in out  # a bad fill is refused and the form stays open
    assert "Thanks, that's what I needed" in out and "what happened: Checkout is down" in out


def open_to_others(root: Path) -> list[str]:
    """What under ``root`` (itself included) another local user could read or enter."""
    return [f"{p.relative_to(root.parent)} {p.stat().st_mode & 0o777:o}" for p in [root, *root.rglob("*")]
            if p.stat().st_mode & 0o077]


def test_what_the_bot_keeps_under_its_data_dir_is_private_to_its_user(tmp_path, monkeypatch):
    """With the embedded Valkey, parked turns, what people typed and the audit log are in its append-only
    files: every file and folder under BOT_DATA_DIR is the bot's user's alone, from the first run; and a
    data dir an earlier version left open is closed at start."""
    monkeypatch.delenv("REDIS_URL", raising=False)  # the embedded server is what this is about, whatever the run
    data = tmp_path / ".data"
    env = {"BOT_DATA_DIR": str(data), "PATH": os.environ["PATH"]}
    chatted = run(["chat"], env, stdin="announce release at 5pm\n/quit\n")
    assert chatted.returncode == 0, chatted.stderr
    aof = [p for p in data.rglob("*.aof") if "release at 5pm" in p.read_text(errors="replace")]
    assert aof, sorted(str(p) for p in data.rglob("*"))  # the message is on disk, in the append-only file
    assert open_to_others(data) == []

    for path in [data, *data.rglob("*")]:  # as an earlier version (or a umask of 022) left it
        path.chmod(0o755 if path.is_dir() else 0o644)
    checked = run(["check"], env)
    assert checked.returncode == 0, checked.stderr
    assert open_to_others(data) == []


def test_check_names_an_mcp_servers_error_without_the_secrets_it_quotes(redis_url, tmp_path):
    """A server that refuses quotes the token it was given; `check` says why it is not connected, with
    every configured secret redacted as the logs redact it."""
    server = Path(__file__).parent / "fixtures_tools" / "mcp_server.py"
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"crm": {
        "command": sys.executable, "args": [str(server), "stdio"],
        "env": {"MCP_RUNS_FILE": str(tmp_path / "runs"), "CRM_TOKEN": "${CRM_TOKEN}",
                "MCP_LIST_ERROR": "token ${CRM_TOKEN} may not list tools"}}}}))
    checked = run(["check"], {"REDIS_URL": redis_url, "BOT_MCP_CONFIG": str(config), "CRM_TOKEN": "crm-7f3a9c2e1b55"})
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "mcp: crm: NOT connected (token *** may not list tools)" in checked.stdout, checked.stdout
    assert "crm-7f3a9c2e1b55" not in checked.stdout + checked.stderr


def test_the_console_chat_loads_no_slack_code(redis, redis_url):
    """The terminal chat needs no Slack: it runs without loading the Slack libraries or our Slack side."""
    probe = ("import atexit, runpy, sys; sys.argv = ['bot', 'chat']; "
             "atexit.register(lambda: print('LOADED', sorted({m.split('.')[0] for m in sys.modules} "
             "& {'slack_sdk', 'slack_bolt', 'handlers'}), file=sys.stderr)); "
             "runpy.run_module('bot', run_name='__main__', alter_sys=True)")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "OPENAI_", "BOT_", "PORT"))}
    result = subprocess.run([sys.executable, "-c", probe], cwd=WORKDIR,
                            env={**clean, "REDIS_URL": redis_url, "PYTHONPATH": str(Path(__file__).parents[1])},
                            input="refund ch_1001 40 dollars\n/quit\n", capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "approval needed" in result.stdout  # the chat did run, up to a card that waits for bob
    assert "LOADED []" in result.stderr, result.stderr[-2000:]
