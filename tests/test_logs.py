"""Structured logs: ``LOG_FORMAT=json`` is one JSON object per line with the ids of what
is being worked on; tokens and secrets never show; what people and the model write shows only with
``LOG_CONTENT=1``; a person watching ``make run`` reads a line per turn event."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.app import start_bot
from bot.config import Settings
from bot.ops import logs
from bot.ops.observed import ObservedChannel
from bot.ports import NullChannel
from bot.protocol import MessageCompleted
from bot.session import SessionRef
from localslack.seed import ALICE, BOB, BOT_TOKEN, BOT_USER_ID, GENERAL, TEAM_ID
from tests.e2e.test_approval_flow import button
from tests.fakes.openai_server import FakeOpenAI
from tests.test_cli_beside_bot import URL_LINE, cli, machine_env

USER_WORDS = "my cat Zanzibar"  # what alice writes besides the request: never in the logs


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """Everything logged in this process meanwhile, as LOG_FORMAT=json writes it."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        logs.show_content(False)


def _entries(text: str) -> list[dict]:
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines
    return [json.loads(line) for line in lines]  # every line is one JSON object


def _card(slack, ts: str):  # noqa: ANN001, ANN202
    cards = [
        m
        for m in slack.messages(GENERAL, thread_ts=ts)
        if any(b.get("type") == "actions" for b in m.blocks or [])
    ]
    return cards[-1] if cards else None


async def test_an_approve_cycle_logs_json_lines_with_ids_and_no_text(redis_url, redis, tmp_path, json_log):
    settings = Settings(
        _env_file=None,
        REDIS_URL=redis_url,
        LOCALSLACK_PORT=0,  # type: ignore[call-arg]
        BOT_TOOLS="bot.demo_tools",
        BOT_DATA_DIR=str(tmp_path / "data"),
    )
    bot = await start_bot(settings, host="127.0.0.1", port=0, recovery_interval=0)
    try:
        slack = bot.localslack
        ts, _ = await slack.post_message(
            ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1001 $40 for {USER_WORDS}"
        )
        card = await slack.wait_for(lambda: _card(slack, ts))
        await slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))
        await slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Refunded $40.00" in m.text)
        await bot.wait_idle()
    finally:
        await bot.close()

    text = json_log.getvalue()
    entries = _entries(text)
    assert all({"time", "level", "logger", "message"} <= e.keys() for e in entries)
    turn_lines = [e for e in entries if e["logger"] == "bot.events"]
    said = [e["message"] for e in turn_lines]
    for expected in (
        "started in #general by @alice",
        "waiting for approval of refund_charge",
        "approved by @bob",
        "tool refund_charge completed",
        "completed",
    ):
        assert any(expected in line for line in said), (expected, said)
    assert all(
        e.get("session_id", "").startswith(f"slack:{TEAM_ID}:")
        and e.get("team_id") == TEAM_ID
        and e.get("turn_id", "").startswith("turn_")
        for e in turn_lines
    )
    approved = next(e for e in turn_lines if "approved by" in e["message"])
    assert approved["request_id"] and approved["event"] == "approval.settled"
    # nobody's words: not alice's message, not the tool's input, not the agent's answer; and no token
    for secret in (USER_WORDS, "ch_1001", "Refunded $40.00", BOT_TOKEN):
        assert secret not in text
    assert any("agent replied: [" in line and "chars hidden" in line for line in said)


async def test_with_log_content_the_agents_words_are_shown(json_log):
    logs.show_content(True)
    event = MessageCompleted(session_id="s1", turn_id="turn_abc", text="Refunded $40.00 to ch_1001")
    await ObservedChannel(NullChannel()).deliver(event, SessionRef(session_id="s1", team_id="T1"))
    [entry] = [e for e in _entries(json_log.getvalue()) if e["logger"] == "bot.events"]
    assert entry["message"] == "agent replied: Refunded $40.00 to ch_1001"
    assert (entry["session_id"], entry["turn_id"], entry["team_id"]) == ("s1", "turn_abc", "T1")


def test_tokens_and_secrets_are_redacted_in_both_formats(json_log):
    logs.add_secrets("a-signing-secret-without-a-shape")
    log = logging.getLogger("tests.redaction")
    log.warning("posting with %s and %s", BOT_TOKEN, "xapp-1-A0-123-abcdef")
    log.warning("Authorization: Bearer sk-abcdefghijklmnopqrstuvwx, secret a-signing-secret-without-a-shape")
    try:
        raise RuntimeError(f"failed with token {BOT_TOKEN}")
    except RuntimeError:
        log.exception("a call failed")
    text = json_log.getvalue()
    assert "xoxb-" not in text and "xapp-1" not in text and "sk-abc" not in text
    assert "a-signing-secret-without-a-shape" not in text
    assert text.count("***") >= 5
    human = logs.TextFormatter().format(
        logging.LogRecord("x", logging.INFO, __file__, 1, "token %s", (BOT_TOKEN,), None)
    )
    assert human.endswith("INFO x: token ***")


def test_json_logs_from_python_m_bot_run(tmp_path: Path) -> None:
    """``LOG_FORMAT=json python -m bot run``: every line on stderr is JSON, turn lines carry their ids."""
    data_dir = tmp_path / "data"
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "bot", "run"],
            cwd=tmp_path,
            env=machine_env(data_dir, LOG_FORMAT="json"),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
    try:
        ui_url = _wait_for(lambda: (m := URL_LINE.search(err_path.read_text())) and m.group(1), process)
        _ui_post(ui_url, ALICE, GENERAL, f"@agent refund ch_1001 $40 for {USER_WORDS}")
        _wait_for(lambda: "waiting for approval of refund_charge" in err_path.read_text(), process)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)
    text = err_path.read_text()
    assert out_path.read_text() == ""  # the banner is a JSON line too
    entries = _entries(text)
    waiting = next(e for e in entries if "waiting for approval" in e["message"])
    assert waiting["session_id"] and waiting["turn_id"] and waiting["team_id"] == TEAM_ID
    assert USER_WORDS not in text and BOT_TOKEN not in text


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_a_model_endpoint_that_quotes_the_key_leaves_it_out_of_the_bots_logs(tmp_path: Path, log_format) -> None:
    """``python -m bot run`` with a model endpoint that refuses, quoting the key it was sent (a key of no
    recognisable shape): the failure is logged, the key is not."""
    key = "shapeless-model-key-0042"
    out_path = tmp_path / "output"
    async with FakeOpenAI() as fake:
        fake.reply_error(403, f"key {key} may not use this model")
        with out_path.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "bot", "run"], cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, env=machine_env(tmp_path / "data", LOG_FORMAT=log_format,
                                                          OPENAI_API_KEY=key, OPENAI_BASE_URL=fake.base_url))
        try:
            url = await _until(lambda: (m := URL_LINE.search(out_path.read_text())) and m.group(1), process)
            await asyncio.to_thread(_ui_post, url, ALICE, GENERAL, "@agent hello")
            await _until(lambda: "may not use this model" in out_path.read_text(), process)
        finally:
            process.send_signal(signal.SIGTERM)
            await asyncio.to_thread(process.wait, 15)
        assert fake.requests[-1].headers["authorization"] == f"Bearer {key}"  # it was sent
    assert key not in out_path.read_text()


async def _until(condition, process: subprocess.Popen[bytes], within_s: float = 20.0):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + within_s
    while not (found := condition()):
        assert process.poll() is None, "the bot exited"
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
    return found


def test_an_unknown_log_format_is_one_line_naming_the_variable(tmp_path: Path) -> None:
    result = cli(["run"], tmp_path / "data", LOG_FORMAT="xml")
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "configuration error: LOG_FORMAT: 'xml' is not a log format: use text (the default) or json"
    )


def _ui_post(ui_url: str, user: str, channel: str, text: str) -> None:
    import urllib.request

    body = json.dumps({"user": user, "channel": channel, "text": text}).encode()
    request = urllib.request.Request(
        f"{ui_url}ui/post", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert json.load(answer)["ok"] is True


def _wait_for(condition, process: subprocess.Popen[bytes], within_s: float = 20.0):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        assert process.poll() is None, "the bot exited"
        if found := condition():
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


async def test_a_suspended_task_shows_its_whole_await_chain(caplog: pytest.LogCaptureFixture) -> None:
    gate = asyncio.Event()

    async def innermost() -> None:
        await gate.wait()

    async def outer() -> None:
        await innermost()

    task = asyncio.create_task(outer(), name="the-stuck-one")
    await asyncio.sleep(0)
    try:
        chain = logs.awaiting(task)
        assert [place.rsplit(" in ", 1)[-1] for place in chain[:3]] == [
            "test_a_suspended_task_shows_its_whole_await_chain.<locals>.outer",
            "test_a_suspended_task_shows_its_whole_await_chain.<locals>.innermost",
            "Event.wait",
        ]
        assert chain[-1] == "waiting on a future"
        with caplog.at_level(logging.WARNING, logger="bot.waits"):
            logs.log_waits()
        told = "\n".join(r.getMessage() for r in caplog.records if r.name == "bot.waits")
        assert "- the-stuck-one:" in told and "in test_a_suspended_task_shows_its_whole_await_chain.<locals>.innermost" in told
    finally:
        gate.set()
        await task


class _Watched(str):
    """A value that records each time it is written into a string with ``repr``."""

    reprs = 0

    def __repr__(self) -> str:
        type(self).reprs += 1
        return super().__repr__()


async def test_slack_calls_are_written_into_debug_lines_only_when_debug_is_on(redis_url, redis, tmp_path, caplog):
    # slack_sdk writes each request (the whole Block Kit of a card) into a debug line whenever its logger's own
    # level is unset, emitted or not: the bot's Slack clients write it only when it would be emitted
    settings = Settings(_env_file=None, REDIS_URL=redis_url, BOT_TOOLS="", BOT_DATA_DIR=str(tmp_path / "data"))
    bot = await start_bot(settings, host="127.0.0.1", port=0, recovery_interval=0)
    try:
        client = bot.slack.client
        caplog.set_level(logging.INFO)
        await client.chat_postMessage(channel=GENERAL, text=_Watched("quiet"))
        assert _Watched.reprs == 0
        assert not [r for r in caplog.records if r.name.startswith("slack_sdk")]

        caplog.set_level(logging.DEBUG, logger="slack_sdk")
        await client.chat_postMessage(channel=GENERAL, text=_Watched("loud"))
        assert [r for r in caplog.records if r.name.startswith("slack_sdk") and "loud" in r.getMessage()]
        assert [m.text for m in bot.localslack.messages(GENERAL)][-2:] == ["quiet", "loud"]
    finally:
        await bot.close()
