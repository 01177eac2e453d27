"""``make run`` twice: the local Slack workspace is kept under BOT_DATA_DIR, so a turn parked before a
restart is answered in the same thread after it: history survives a restart."""

from __future__ import annotations

import pytest

from bot.__main__ import main as bot_cli
from bot.app import start_bot
from bot.config import Settings
from localslack.seed import ALICE, BOB, BOT_USER_ID, GENERAL
from tests.e2e.test_approval_flow import button


def _offline(redis_url: str, data_dir: str) -> Settings:
    return Settings(_env_file=None, REDIS_URL=redis_url, LOCALSLACK_PORT=0,  # type: ignore[call-arg]
                    BOT_TOOLS="bot.demo_tools", BOT_DATA_DIR=data_dir)


def _card(slack, ts: str):  # noqa: ANN001, ANN202
    """The thread's card while it still has its buttons."""
    cards = [m for m in slack.messages(GENERAL, thread_ts=ts) if any(b.get("type") == "actions" for b in m.blocks or [])]
    return cards[-1] if cards else None


@pytest.mark.usefixtures("redis")  # a fresh database: a list another test saved keeps the demo from listing Bob
async def test_a_turn_parked_before_a_restart_is_answered_in_its_thread_after_it(redis_url, tmp_path):
    data_dir = str(tmp_path / "data")
    first = await start_bot(_offline(redis_url, data_dir), host="127.0.0.1", port=0, recovery_interval=0)
    try:
        ts, _ = await first.localslack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1001 $40")
        await first.localslack.wait_for(lambda: _card(first.localslack, ts))
    finally:
        await first.close()

    again = await start_bot(_offline(redis_url, data_dir), host="127.0.0.1", port=0, recovery_interval=0)
    try:
        slack = again.localslack
        card = _card(slack, ts)
        assert card is not None, "the thread and its card are still there after the restart"
        assert any("refund ch_1001" in m.text for m in slack.messages(GENERAL)), "and so is the mention"
        await slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))
        reply = await slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Refunded $40.00" in m.text)
        assert reply.thread_ts == ts
        # the card's edit lands beside the reply (bot.ports.LandingChannel), a moment before or after it
        assert await slack.wait_for(lambda: _card(slack, ts) is None), "the card lost its buttons"
        assert any(m.text == f"Approved by <@{BOB}>" for m in slack.messages(GENERAL, thread_ts=ts))
    finally:
        await again.close()


def test_reset_local_forgets_the_local_workspace(tmp_path, monkeypatch, capsys):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "localslack.json").write_text("{}")
    monkeypatch.setenv("BOT_DATA_DIR", str(data_dir))
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")  # set: an outside Redis is never touched
    assert bot_cli(["reset-local"]) == 0
    out = capsys.readouterr().out
    assert not (data_dir / "localslack.json").exists()
    assert "forgot the local Slack workspace" in out and "REDIS_URL is set: its data is kept" in out
