"""`python -m bot setup` against the local workspace acting as Slack: the tokens are checked
with Slack's own answers (auth.test and its ``x-oauth-scopes`` header, apps.connections.open), `.env` is
written only when they pass, and every failure names what to fix on which Slack page."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import stat
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
import yaml

from bot.__main__ import main
from bot.app import start_bot
from bot.config import Settings
from handlers.setup import served_create_link
from localslack.seed import ALICE, GENERAL
from localslack.server import LocalSlack
from tests.e2e.test_approval_flow import RUNS, button, mention_and_wait_for_card, refund_charge, refund_script
from tests.test_cli import run

ROOT = Path(__file__).resolve().parents[2]
SECRET = "0123456789abcdef0123456789abcdef"


async def setup(slack: LocalSlack, cwd: Path, *args: str, stdin: str = "",
                file_size_limit: int | None = None) -> tuple[int, str]:
    """The CLI in a subprocess (the workspace keeps answering in this loop meanwhile); stdout+stderr.
    ``file_size_limit``: the process may write files of that many bytes and no more (``RLIMIT_FSIZE``), as
    on a disk that fills up while it writes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "OPENAI_", "BOT_"))}
    env["SLACK_API_URL"] = slack.api_url  # honoured like the bot's own setting
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the only file it writes is the one under test

    def limit_file_size() -> None:
        if file_size_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "setup", *args, cwd=cwd, env={**env, "PYTHONPATH": str(ROOT)},
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        preexec_fn=limit_file_size)
    out, _ = await asyncio.wait_for(proc.communicate(stdin.encode()), 20)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


@pytest.fixture
def in_process(monkeypatch, capsys):
    """``await in_process(slack, cwd, *args)`` → (exit code, output): `main(["setup", …])` in a thread (the
    workspace keeps answering in this loop), with only what the test gives in the environment."""
    for name in [n for n in os.environ if n.startswith("SLACK_")]:
        monkeypatch.delenv(name)

    async def call(slack: LocalSlack, cwd: Path, *args: str) -> tuple[int, str]:
        monkeypatch.setenv("SLACK_API_URL", slack.api_url)
        code = await asyncio.to_thread(main, ["setup", "--env-file", str(cwd / ".env"), *args])
        captured = capsys.readouterr()
        return code, captured.out + captured.err

    return call


def env_file(cwd: Path) -> dict[str, str]:
    lines = (cwd / ".env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


async def test_good_http_tokens_write_a_private_env_and_say_the_next_command(in_process, local_slack, tmp_path):
    code, out = await setup(local_slack, tmp_path, "--bot-token", local_slack.bot_token,
                            "--signing-secret", SECRET, "--yes")
    assert code == 0, out
    assert "https://api.slack.com/apps?new_app=1," in out and "paste manifest.yml" in out
    assert max(len(line) for line in out.splitlines()) < 400  # what a person is given, they can read
    assert "ok: the bot token works: @agent in " in out and "every scope the manifest asks for" in out
    assert "Request URL" in out and "/slack/events" in out  # HTTP mode: where Slack must send events
    assert "make run" in out
    assert local_slack.bot_token not in out and SECRET not in out  # secrets never echoed
    written = env_file(tmp_path)
    assert written["SLACK_BOT_TOKEN"] == local_slack.bot_token and written["SLACK_SIGNING_SECRET"] == SECRET
    assert written["SLACK_API_URL"] == local_slack.api_url
    assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600
    # the same tokens again, without --yes and nothing to type: the existing .env is not overwritten
    # (an app token left from a Socket Mode setup would keep the bot off HTTP: it goes)
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-keep\nSLACK_BOT_TOKEN=xoxb-older\nSLACK_APP_TOKEN=xapp-older\n")
    code, out = await in_process(local_slack, tmp_path, "--bot-token", local_slack.bot_token, "--signing-secret", SECRET)
    assert code == 1 and "--yes" in out, out
    assert env_file(tmp_path)["SLACK_BOT_TOKEN"] == "xoxb-older"
    code, out = await in_process(local_slack, tmp_path, "--bot-token", local_slack.bot_token, "--signing-secret", SECRET,
                            "--yes")
    assert code == 0, out
    assert env_file(tmp_path) == {"OPENAI_API_KEY": "sk-keep", "SLACK_BOT_TOKEN": local_slack.bot_token,
                                  "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": local_slack.api_url}


async def test_a_write_that_fails_midway_leaves_the_old_env_whole_and_the_token_nowhere_readable(
        local_slack, tmp_path):
    """The disk takes 80 bytes and no more while `.env` is rewritten: the file it had is kept as it was (not
    emptied, not cut), the new token is in no file another user can read, and setup says what happened."""
    old = "LOG_FORMAT=json\nSLACK_BOT_TOKEN=xoxb-older\nOPENAI_API_KEY=sk-keep-0123456789\nMODEL=gpt-4o\n"
    (tmp_path / ".env").write_text(old)
    (tmp_path / ".env").chmod(0o644)  # as an editor or `cp` leaves it
    code, out = await setup(local_slack, tmp_path, "--bot-token", local_slack.bot_token,
                            "--signing-secret", SECRET, "--yes", file_size_limit=80)
    assert code == 1, out
    assert (tmp_path / ".env").read_text() == old
    assert [p.name for p in tmp_path.iterdir()] == [".env"]  # no half-written file left beside it
    assert "could not write .env (File too large); it was left as it was" in out, out
    assert local_slack.bot_token not in out and SECRET not in out

    code, out = await setup(local_slack, tmp_path, "--bot-token", local_slack.bot_token,
                            "--signing-secret", SECRET, "--yes")
    assert code == 0, out
    assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600
    assert env_file(tmp_path) == {"LOG_FORMAT": "json", "OPENAI_API_KEY": "sk-keep-0123456789", "MODEL": "gpt-4o",
                                  "SLACK_BOT_TOKEN": local_slack.bot_token, "SLACK_SIGNING_SECRET": SECRET,
                                  "SLACK_API_URL": local_slack.api_url}


async def test_a_value_in_any_form_the_loader_reads_is_seen_and_replaced_not_doubled(
        in_process, local_slack, tmp_path, monkeypatch):
    """`.env` is read as the bot reads it (python-dotenv, through pydantic-settings): ``export NAME=…``,
    quotes, spaces around ``=``, lower case. A different value there is asked about; once changed, one line
    holds it; the same value written differently is not a change at all."""
    env = tmp_path / ".env"
    older = ("# the bot's settings\nexport SLACK_BOT_TOKEN=xoxb-older-0000\nslack_signing_secret = 'old secret'\n"
             "LOG_FORMAT=json\n")
    env.write_text(older)
    code, out = await in_process(local_slack, tmp_path, "--bot-token", local_slack.bot_token,
                                 "--signing-secret", SECRET)
    assert code == 1, out
    assert "already sets SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET" in out and "--yes" in out, out
    assert env.read_text() == older  # nothing changed unasked

    code, out = await in_process(local_slack, tmp_path, "--bot-token", local_slack.bot_token,
                                 "--signing-secret", SECRET, "--yes")
    assert code == 0, out
    text = env.read_text()
    assert text.lower().count("slack_bot_token") == 1 and text.lower().count("slack_signing_secret") == 1, text
    assert "# the bot's settings" in text and "LOG_FORMAT=json" in text
    loaded = Settings(_env_file=str(env))  # type: ignore[call-arg]
    assert loaded.slack_bot_token == local_slack.bot_token and loaded.slack_signing_secret == SECRET

    # the same values, quoted and exported: nothing to ask, nothing to change
    env.write_text(f'export SLACK_BOT_TOKEN="{local_slack.bot_token}"\nSLACK_SIGNING_SECRET = {SECRET}\n'
                   f"SLACK_API_URL='{local_slack.api_url}'\n")
    code, out = await in_process(local_slack, tmp_path, "--bot-token", local_slack.bot_token,
                                 "--signing-secret", SECRET)
    assert code == 0, out
    loaded = Settings(_env_file=str(env))  # type: ignore[call-arg]
    assert loaded.slack_bot_token == local_slack.bot_token and loaded.slack_signing_secret == SECRET


async def test_a_missing_scope_is_named_with_where_to_add_it_and_nothing_is_written(in_process, tmp_path):
    async with LocalSlack(bot_url=None, signing_secret=SECRET,
                          scopes=["app_mentions:read", "channels:history", "groups:history", "im:history",
                                  "mpim:history", "commands", "users:read", "assistant:write"]) as slack:
        code, out = await in_process(slack, tmp_path, "--bot-token", slack.bot_token, "--signing-secret", SECRET,
                                     "--yes")
    assert code == 1, out
    assert "missing scopes: chat:write, im:write" in out
    assert "OAuth & Permissions → Scopes" in out and "reinstall" in out
    assert not (tmp_path / ".env").exists()


async def test_a_revoked_or_wrong_token_says_which_page_to_copy_it_from(in_process, local_slack, tmp_path):
    code, out = await in_process(local_slack, tmp_path, "--bot-token", "xoxb-not-a-real-token", "--signing-secret", SECRET)
    assert code == 1, out
    assert "invalid_auth: the bot token is wrong or revoked" in out
    assert "OAuth & Permissions → Bot User OAuth Token" in out
    token = local_slack.bot_token
    local_slack.revoke_token(token)
    code, out = await in_process(local_slack, tmp_path, "--bot-token", token, "--signing-secret", SECRET)
    assert code == 1 and "token_revoked:" in out and "Install to Workspace" in out, out
    code, out = await in_process(local_slack, tmp_path, "--bot-token", "xapp-1-wrong-kind", "--signing-secret", SECRET)
    assert code == 1 and "starts with xoxb-" in out, out
    assert not (tmp_path / ".env").exists()
    assert "xoxb-not-a-real-token" not in out


async def test_socket_mode_app_token_is_checked_with_apps_connections_open(in_process, local_slack, tmp_path):
    code, out = await in_process(local_slack, tmp_path, "--bot-token", local_slack.bot_token,
                            "--app-token", "xapp-1-A0LOCAL-wrong", "--yes")
    assert code == 1 and "invalid_auth: the app-level token is wrong or revoked" in out, out
    assert "Basic Information → App-Level Tokens" in out and "connections:write" in out
    # the right one, typed at the prompts instead of given as flags
    code, out = await setup(local_slack, tmp_path, "--yes", stdin=f"{local_slack.bot_token}\n{local_slack.app_token}\n")
    assert code == 0, out
    assert "ok: Socket Mode connects" in out and "no public URL needed" in out
    assert local_slack.app_token not in out and local_slack.bot_token not in out
    written = env_file(tmp_path)
    assert written["SLACK_APP_TOKEN"] == local_slack.app_token and "SLACK_SIGNING_SECRET" not in written
    assert local_slack.calls_to("apps.connections.open")


async def test_from_setup_to_a_first_approval_with_nothing_but_the_env_it_wrote(local_slack, tmp_path, redis_url):
    """A new person reaches a first approval with the README and setup alone: the local
    workspace plays the person's Slack. `setup` gets the two tokens Slack's pages show, writes `.env`; the
    bot started from that file alone (plus where Redis is) takes a mention to a card, and Alice's click to
    the tool's run and the reply."""
    code, out = await setup(local_slack, tmp_path, "--bot-token", local_slack.bot_token,
                            "--signing-secret", local_slack.signing_secret, "--yes")
    assert code == 0, out
    settings = Settings(_env_file=str(tmp_path / ".env"), REDIS_URL=redis_url, BOT_TOOLS="",  # type: ignore[call-arg]
                        BOT_DATA_DIR=str(tmp_path / "data"))
    bot = await start_bot(settings, model=refund_script(), tools=[refund_charge], host="127.0.0.1", port=0,
                          recovery_interval=0)
    try:
        local_slack.set_bot_url(f"{bot.url}/slack/events")
        RUNS.clear()
        ts, card = await mention_and_wait_for_card(local_slack)
        assert (await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))).status == 200
        await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
        assert len(RUNS) == 1
    finally:
        await bot.close()


async def test_the_short_local_link_opens_slacks_create_page_with_the_manifest_filled_in():
    """Slack's own create-from-manifest link is thousands of characters; a person at a terminal is given a
    short local one that redirects to it while setup runs, and nothing is served once setup ends."""
    async with served_create_link() as link:
        assert link is not None and len(link) < 40
        async with httpx.AsyncClient() as client:
            answer = await client.get(link, follow_redirects=False)
    assert answer.status_code == 302
    target = urlparse(answer.headers["location"])
    assert f"{target.scheme}://{target.netloc}{target.path}" == "https://api.slack.com/apps"
    created = json.loads(parse_qs(target.query)["manifest_json"][0])
    assert created == yaml.safe_load((ROOT / "manifest.yml").read_text())  # the app is made from manifest.yml
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as client:
            await client.get(link)


async def test_check_says_in_one_line_why_slack_is_not_reachable_or_refuses_the_token(local_slack, redis_url):
    """A wrong SLACK_API_URL or a revoked token is a line naming the fix and exit 1, never a traceback."""
    env = {"REDIS_URL": redis_url, "SLACK_SIGNING_SECRET": "s"}
    unreachable = await asyncio.to_thread(
        run, ["check"], {**env, "SLACK_BOT_TOKEN": "xoxb-1", "SLACK_API_URL": "http://127.0.0.1:9/api/"})
    assert unreachable.returncode == 1 and "Traceback" not in unreachable.stderr, unreachable.stderr
    assert "slack: NOT ok — could not reach Slack at http://127.0.0.1:9/api/" in unreachable.stdout
    refused = await asyncio.to_thread(
        run, ["check"], {**env, "SLACK_BOT_TOKEN": "xoxb-not-a-token", "SLACK_API_URL": local_slack.api_url})
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert "slack: NOT ok — invalid_auth: the bot token is wrong or revoked" in refused.stdout, refused.stdout
    assert "xoxb-not-a-token" not in refused.stdout + refused.stderr
