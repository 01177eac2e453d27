"""A model outage as the channel sees it: a plain sentence, no URL and no exception name (the
channel may be shared with another company); the details go to the bot's logs."""

from __future__ import annotations

import logging
import socket

from bot.models.openai import OpenAIChatModel
from localslack.seed import ALICE, BOT_USER_ID, GENERAL


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the block ends


async def test_a_model_outage_is_said_plainly_in_the_thread_and_detailed_in_the_logs(local_slack, start_app, caplog):
    base_url = f"http://127.0.0.1:{closed_port()}/v1"
    model = OpenAIChatModel("gpt-4o-mini", base_url=base_url, api_key="sk-outage", max_retries=0, timeout=2)
    try:
        await start_app(model, [])
        with caplog.at_level(logging.WARNING):
            ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> hello")
            said = await local_slack.wait_for(
                lambda: next((m for m in local_slack.messages(GENERAL, ts) if m.user == BOT_USER_ID), None))
    finally:
        await model.aclose()
    assert "I couldn't reach the AI model just now — try again in a minute; details are in the bot's logs" in said.text
    for internal in ("127.0.0.1", "http", "ConnectError", "endpoint"):
        assert internal not in said.text
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert f"could not connect to the model endpoint at {base_url}" in logged
    assert "sk-outage" not in logged
