"""kill -9 in the middle of a streamed answer: a second process, sharing only Redis, re-runs the
model step and finishes the first process's stream with the whole answer — one message, completed."""

from __future__ import annotations

import asyncio
import signal

from localslack.seed import ALICE, BOT_USER_ID, GENERAL
from tests.chaos.harness import stop_process
from tests.e2e.test_restart import start_process
from tests.fakes.openai_server import FakeOpenAI

ANSWER = (
    "Here is what I found about the charge: it was made on the first of the month, it was refunded once "
    "already by support, and a second refund would overdraw the account, so I have not made one. "
    "Ask finance if you still want it refunded twice."
)


def answers(slack, ts):  # noqa: ANN001, ANN201
    return [m for m in slack.messages(GENERAL, thread_ts=ts) if m.bot_id and m.ts != ts]


async def test_kill_9_mid_stream_the_next_process_completes_the_same_message(
    local_slack, redis, redis_url, tmp_path
):
    async with FakeOpenAI(api_key="sk-test") as fake:
        fake.reply_text(ANSWER, chunk_delay_s=0.1)  # the first process: killed while this streams
        fake.reply_text(ANSWER, chunk_delay_s=0.02)  # the step again, in the second process
        env = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": fake.base_url, "BOT_TOOLS": ""}
        first, _ = await start_process(local_slack, redis_url, tmp_path, **env)
        try:
            ts, _ = await local_slack.post_message(
                ALICE, GENERAL, f"<@{BOT_USER_ID}> what about that charge?"
            )
            # streaming, and grown past its first batch: an append has landed
            await local_slack.wait_for(lambda: local_slack.calls_to("chat.appendStream"), timeout_s=15)
        finally:
            first.send_signal(signal.SIGKILL)
            await asyncio.to_thread(first.wait)
        [partial] = answers(local_slack, ts)
        assert partial.streaming and 0 < len(partial.text) < len(ANSWER)

        second, _ = await start_process(local_slack, redis_url, tmp_path, **env)
        try:
            done = await local_slack.wait_for(
                lambda: (
                    not local_slack.message(GENERAL, partial.ts).streaming
                    and local_slack.message(GENERAL, partial.ts).text == ANSWER
                ),
                timeout_s=20,
            )
            assert done
            assert [m.ts for m in answers(local_slack, ts)] == [partial.ts], "no second answer message"
            blocks = local_slack.message(GENERAL, partial.ts).blocks
            assert [b["type"] for b in blocks] == ["markdown", "context_actions"] and blocks[0][
                "text"
            ] == ANSWER
            assert len(local_slack.calls_to("chat.startStream")) == 1
        finally:
            await stop_process(second, timeout_s=10)
