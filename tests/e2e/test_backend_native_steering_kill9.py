"""kill -9 while the bot's own loop as a backend (``bot.backends.native``) has taken in a message its owner wrote
while the model thought (steering) and the model is thinking again: the message leaves the queue only with the
write that stores the step holding it, so a new process, sharing only Redis, reads it to the model once, neither
lost nor read twice (nor left to start a turn of its own), and the tool that ran before the kill does not run
again.

The agent lives in a module the bot processes load by BOT_AGENT; its model is the local OpenAI-compatible server
of this test, so the test decides when the first process dies (the model's second answer never comes).
"""

from __future__ import annotations

import asyncio
import signal

from localslack.seed import ALICE, BOT_USER_ID, GENERAL
from tests.chaos.harness import stop_process
from tests.e2e.test_restart import start_process
from tests.fakes.openai_server import FakeOpenAI

AGENT_MODULE = '''
import os
from pathlib import Path

from bot.backends.native import native
from bot.models.openai import OpenAIChatModel
from bot.tools import tool


@tool
async def lookup_charge(charge_id: str) -> dict:
    """Look a charge up."""
    with Path(os.environ["LOOKUPS_FILE"]).open("a") as lookups:
        lookups.write(charge_id + "\\n")
    return {"charge_id": charge_id, "amount": 500}


agent = native(OpenAIChatModel("gpt-4o-mini", base_url=os.environ["OPENAI_BASE_URL"],
                               api_key=os.environ["OPENAI_API_KEY"], max_retries=0), [lookup_charge])
'''

STEER = "actually, ch_2"


async def test_kill_9_after_a_steering_message_was_taken_reads_it_once_after_the_restart(
        local_slack, redis, redis_url, tmp_path):
    (tmp_path / "native_support.py").write_text(AGENT_MODULE)
    lookups = tmp_path / "lookups.txt"
    async with FakeOpenAI(api_key="sk-test") as fake:
        fake.reply_delay(1.5)  # the model thinks: the owner writes meanwhile
        fake.reply_tool_call("lookup_charge", {"charge_id": "ch_1"}, "call_look")
        fake.reply_delay(60)  # the answer after the lookup: never comes to the first process
        fake.reply_text("Looked up (first process).")
        fake.reply_text("ch_2 it is.")
        env = {"BOT_AGENT": "native_support:agent", "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test",
               "LOOKUPS_FILE": str(lookups)}
        first, _ = await start_process(local_slack, redis_url, tmp_path, **env)
        try:
            ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> look up ch_1")
            await local_slack.wait_for(lambda: len(fake.requests) == 1, timeout_s=15)
            await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> {STEER}", thread_ts=ts)
            await local_slack.wait_for(lambda: len(fake.requests) == 2, timeout_s=15)
            assert fake.requests[1].body["messages"][-1] == {"role": "user", "content": STEER}
            assert lookups.read_text() == "ch_1\n"
        finally:
            first.send_signal(signal.SIGKILL)
            await asyncio.to_thread(first.wait)

        second, _ = await start_process(local_slack, redis_url, tmp_path, **env)
        try:
            await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "ch_2 it is." in m.text,
                                               timeout_s=20)
            await asyncio.sleep(1)  # time for a turn the message would start, were it left queued
        finally:
            await stop_process(second, timeout_s=10)
        assert lookups.read_text() == "ch_1\n", "the lookup ran once"
        assert len(fake.requests) == 3, [r.body["messages"] for r in fake.requests]
        contents = [m.get("content") for m in fake.requests[-1].body["messages"]]
        assert contents.count(STEER) == 1 and contents[-1] == STEER
