"""An answer is never lost because the message it was to update is gone.

The answer streams into Slack while the model writes; before the committed ``message.completed`` finishes
it, the streamed message is deleted (``chat.delete``, as a person or an admin can) or its stream is over
(Slack answers ``message_not_in_streaming_state`` to ``chat.stopStream``). The whole answer still shows in
the thread, exactly once.
"""

from __future__ import annotations

import asyncio
import logging

import httpx

from localslack.seed import ALICE, BOT_TOKEN, BOT_USER_ID, GENERAL
from tests.e2e.test_ai_surface import ANSWER, fake_openai, slow_model, streamed  # noqa: F401 (a fixture)


async def web_api(slack, method: str, **args: str) -> dict:
    """Call LocalSlack's Web API with the bot's token, as anything holding it could."""
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{slack.api_url}{method}", data=args,
                                   headers={"Authorization": f"Bearer {BOT_TOKEN}"})
    return response.json()


def answers_in(slack, thread_ts: str, *, finished: bool = True) -> list:
    return [m for m in streamed(slack, thread_ts) if m.text == ANSWER and not (finished and m.streaming)]


async def test_a_streamed_answer_whose_message_was_deleted_is_posted_anew_once(
    local_slack, start_app, fake_openai, caplog  # noqa: F811
):
    caplog.set_level(logging.INFO)
    bot = await start_app(slow_model(fake_openai), [])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1 please")
    live = await local_slack.wait_for(
        lambda: next((m for m in streamed(local_slack, ts) if m.streaming), None), timeout_s=10)
    assert (await web_api(local_slack, "chat.delete", channel=GENERAL, ts=live.ts))["ok"]

    await local_slack.wait_for(lambda: answers_in(local_slack, ts), timeout_s=15)
    await bot.wait_idle()
    await asyncio.sleep(0.5)  # a second post would have landed by now
    assert len(answers_in(local_slack, ts)) == 1
    assert not [r for r in caplog.records if "Slack rejected message.completed" in r.getMessage()]


async def test_an_answer_whose_stream_slack_already_ended_is_shown_whole_once(
    local_slack, start_app, fake_openai, caplog  # noqa: F811
):
    caplog.set_level(logging.INFO)
    await start_app(slow_model(fake_openai), [])
    # the final chat.stopStream finds the stream over (Slack ends streams on its own, e.g. after a while idle)
    local_slack.fail_next("chat.stopStream", error="message_not_in_streaming_state")
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1 please")
    # (the fault leaves LocalSlack's message flagged as streaming: Slack's own would not be)
    await local_slack.wait_for(lambda: answers_in(local_slack, ts, finished=False), timeout_s=15)
    await asyncio.sleep(0.5)  # a second post would have landed by now
    assert len(answers_in(local_slack, ts, finished=False)) == 1
    assert not [m for m in streamed(local_slack, ts) if m.text != ANSWER], "no half answer left behind"
    assert not [r for r in caplog.records if "Slack rejected message.completed" in r.getMessage()]


async def test_a_posted_and_edited_answer_whose_message_was_deleted_is_posted_anew_once(
    local_slack, start_app, fake_openai, caplog  # noqa: F811
):
    """A DM's main conversation has no thread to stream into: the answer is posted and edited instead."""
    caplog.set_level(logging.INFO)
    bot = await start_app(slow_model(fake_openai), [])
    dm = local_slack.dm_channel(ALICE)
    await local_slack.post_message(ALICE, dm, "refund ch_1 please")
    posted = await local_slack.wait_for_message(dm, predicate=lambda m: bool(m.bot_id) and m.text.endswith(" …"))
    assert (await web_api(local_slack, "chat.delete", channel=dm, ts=posted.ts))["ok"]

    def whole() -> list:
        return [m for m in local_slack.messages(dm) if m.bot_id and m.blocks and m.blocks[0].get("text") == ANSWER]

    await local_slack.wait_for(whole, timeout_s=15)
    await bot.wait_idle()
    await asyncio.sleep(0.5)
    assert len(whole()) == 1
    assert not [r for r in caplog.records if "Slack rejected message.completed" in r.getMessage()]
