"""LocalSlack's Agents & AI Apps surface, seen through slack_sdk's AsyncWebClient (the bot's client) and a
signature-checking request URL: assistant.threads.*, chat.*Stream, the markdown block and feedback buttons,
assistant_thread_* events and feedback clicks."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from blocks.answers import feedback_block
from localslack import ALICE, BOT_TOKEN, BOT_USER_ID, GENERAL, TEAM_ID, LocalSlack
from localslack import methods as slack_methods
from tests.test_localslack_delivery import SECRET, Receiver
from tests.test_localslack_delivery import receiver as receiver  # noqa: F401 - the signature-checking request URL


@pytest.fixture
async def slack(receiver: tuple[Receiver, str]) -> AsyncIterator[LocalSlack]:
    async with LocalSlack(bot_url=receiver[1], signing_secret=SECRET) as workspace:
        yield workspace


@pytest.fixture
def client(slack: LocalSlack) -> AsyncWebClient:
    return AsyncWebClient(base_url=slack.api_url, token=BOT_TOKEN)


async def error_of(call) -> str:  # noqa: ANN001
    with pytest.raises(SlackApiError) as caught:
        await call
    return caught.value.response["error"]


async def thread_in_general(slack: LocalSlack) -> str:
    ts, _ = await slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> hello")
    return ts


def test_tiers_and_scopes_are_slacks():
    spec = slack_methods.spec
    assert spec("chat.startStream").tier == 2 and spec("chat.stopStream").tier == 2
    assert spec("chat.appendStream").tier == 4 and spec("assistant.threads.setTitle").tier == 4
    assert spec("assistant.threads.setStatus").scopes == ("chat:write", "assistant:write")
    assert spec("assistant.threads.setSuggestedPrompts").scopes == ("assistant:write",)


async def test_a_stream_grows_until_it_is_stopped(slack: LocalSlack, client: AsyncWebClient):
    ts = await thread_in_general(slack)
    started = await client.chat_startStream(
        channel=GENERAL,
        thread_ts=ts,
        markdown_text="Checking the ",
        recipient_user_id=ALICE,
        recipient_team_id=TEAM_ID,
    )
    await client.chat_appendStream(channel=GENERAL, ts=started["ts"], markdown_text="**charge**…")
    message = slack.message(GENERAL, started["ts"])
    assert message.streaming and message.text == "Checking the **charge**…" and message.thread_ts == ts
    stopped = await client.chat_stopStream(
        channel=GENERAL, ts=started["ts"], markdown_text=" done.", blocks=[feedback_block()]
    )
    assert stopped["message"]["text"] == "Checking the **charge**… done."
    assert [b["type"] for b in slack.message(GENERAL, started["ts"]).blocks] == [
        "markdown",
        "context_actions",
    ]
    assert (
        await error_of(client.chat_appendStream(channel=GENERAL, ts=started["ts"], markdown_text="x"))
        == "message_not_in_streaming_state"
    )
    assert (
        await error_of(client.chat_stopStream(channel=GENERAL, ts=started["ts"]))
        == "message_not_in_streaming_state"
    )


async def test_streams_refuse_what_slack_refuses(slack: LocalSlack, client: AsyncWebClient):
    ts = await thread_in_general(slack)
    assert (
        await error_of(client.chat_startStream(channel=GENERAL, thread_ts=ts)) == "missing_recipient_user_id"
    )
    assert (
        await error_of(client.api_call("chat.startStream", json={"channel": GENERAL})) == "invalid_arguments"
    )
    started = await client.chat_startStream(
        channel=GENERAL, thread_ts=ts, recipient_user_id=ALICE, recipient_team_id=TEAM_ID
    )
    assert (
        await error_of(client.chat_appendStream(channel=GENERAL, ts=started["ts"]))
        == "markdown_text_or_chunks_required"
    )
    assert (
        await error_of(
            client.chat_appendStream(channel=GENERAL, ts=started["ts"], markdown_text="x" * 12_001)
        )
        == "invalid_arguments"
    )
    assert (
        await error_of(client.chat_appendStream(channel=GENERAL, ts=ts, markdown_text="x"))
        == "message_not_owned_by_app"
    )
    assert (
        await error_of(
            AsyncWebClient(base_url=slack.api_url).chat_appendStream(
                channel=GENERAL, ts=started["ts"], markdown_text="x"
            )
        )
        == "not_authed"
    )
    narrow = AsyncWebClient(base_url=slack.api_url, token=BOT_TOKEN)
    slack.ws.auth_for(BOT_TOKEN).scopes = ["chat:write"]
    assert (
        await error_of(narrow.assistant_threads_setTitle(channel_id=GENERAL, thread_ts=ts, title="t"))
        == "missing_scope"
    )
    await narrow.assistant_threads_setStatus(channel_id=GENERAL, thread_ts=ts, status="is thinking…")


async def test_status_under_a_thread_rotates_and_goes_with_the_apps_reply(
    slack: LocalSlack, client: AsyncWebClient
):
    ts = await thread_in_general(slack)
    await client.assistant_threads_setStatus(
        channel_id=GENERAL,
        thread_ts=ts,
        status="is working…",
        loading_messages=["Checking the charge…", "Waiting for @bob…"],
    )
    state = slack.assistant_state(GENERAL, ts)
    assert state.status == "is working…" and state.loading_messages[0] == "Checking the charge…"
    assert (
        await error_of(
            client.assistant_threads_setStatus(
                channel_id=GENERAL, thread_ts=ts, status="x", loading_messages=[f"m{i}" for i in range(11)]
            )
        )
        == "invalid_arguments"
    )
    assert (
        await error_of(
            client.assistant_threads_setStatus(channel_id=GENERAL, thread_ts="1.000001", status="x")
        )
        == "invalid_thread_ts"
    )
    await client.chat_postMessage(channel=GENERAL, thread_ts=ts, text="Done.")
    assert slack.assistant_state(GENERAL, ts).status == ""


async def test_markdown_and_feedback_blocks_within_slacks_limits(slack: LocalSlack, client: AsyncWebClient):
    await client.chat_postMessage(
        channel=GENERAL,
        text="hi",
        blocks=[{"type": "markdown", "text": "| a | b |\n|---|---|\n| 1 | 2 |"}, feedback_block()],
    )
    assert (
        await error_of(
            client.chat_postMessage(
                channel=GENERAL, text="x", blocks=[{"type": "markdown", "text": "x" * 12_001}]
            )
        )
        == "invalid_blocks"
    )
    assert (
        await error_of(
            client.chat_postMessage(
                channel=GENERAL,
                text="x",
                blocks=[
                    {
                        "type": "context_actions",
                        "elements": [
                            {"type": "button", "action_id": "b", "text": {"type": "plain_text", "text": "b"}}
                        ],
                    }
                ],
            )
        )
        == "invalid_blocks"
    )
    assert (
        await error_of(
            client.chat_postMessage(
                channel=GENERAL,
                text="x",
                blocks=[{"type": "markdown", "text": "x" * 7000}, {"type": "markdown", "text": "y" * 7000}],
            )
        )
        == "msg_blocks_too_long"
    )


async def test_opening_the_split_view_sends_a_signed_assistant_thread_started(
    slack: LocalSlack, receiver, client
):  # noqa: ANN001
    bot, _ = receiver
    dm, thread_ts, result = await slack.open_assistant(ALICE, context_channel=GENERAL)
    assert result is not None and result.ok and bot.requests[-1].signature_valid
    event = bot.requests[-1].json["event"]
    assert event["type"] == "assistant_thread_started"
    assert event["assistant_thread"] == {
        "user_id": ALICE,
        "channel_id": dm,
        "thread_ts": thread_ts,
        "context": {"channel_id": GENERAL, "team_id": TEAM_ID},
    }
    await slack.change_assistant_context(ALICE, dm, thread_ts, None)
    assert bot.requests[-1].json["event"]["type"] == "assistant_thread_context_changed"
    await client.assistant_threads_setSuggestedPrompts(
        channel_id=dm,
        thread_ts=thread_ts,
        title="Try",
        prompts=[{"title": "Refund", "message": "Refund ch_1"}],
    )
    await client.assistant_threads_setTitle(channel_id=dm, thread_ts=thread_ts, title="Refunds")
    state = slack.assistant_state(dm, thread_ts)
    assert state.title == "Refunds" and state.prompts == [{"title": "Refund", "message": "Refund ch_1"}]
    assert (
        await error_of(
            client.assistant_threads_setSuggestedPrompts(
                channel_id=dm,
                thread_ts=thread_ts,
                prompts=[{"title": str(i), "message": "m"} for i in range(5)],
            )
        )
        == "invalid_arguments"
    )


async def test_a_feedback_click_is_a_signed_block_actions(slack: LocalSlack, receiver, client):  # noqa: ANN001
    bot, _ = receiver
    posted = await client.chat_postMessage(
        channel=GENERAL,
        text="an answer",
        blocks=[{"type": "markdown", "text": "an answer"}, feedback_block()],
    )
    result = await slack.click_feedback(ALICE, GENERAL, posted["ts"], positive=False)
    assert result.ok and bot.requests[-1].signature_valid
    action = bot.requests[-1].payload["actions"][0]
    assert action["type"] == "feedback_buttons" and action["value"] == "negative"
    assert bot.requests[-1].payload["container"]["message_ts"] == posted["ts"]


async def test_a_restart_keeps_titles_prompts_and_a_stream_in_progress(tmp_path):
    async with LocalSlack(bot_url=None, signing_secret=SECRET, data_dir=tmp_path) as first:
        client = AsyncWebClient(base_url=first.api_url, token=BOT_TOKEN)
        dm, thread_ts, _ = await first.open_assistant(ALICE, context_channel=GENERAL)
        await client.assistant_threads_setTitle(channel_id=dm, thread_ts=thread_ts, title="Refunds")
        started = await client.chat_startStream(channel=dm, thread_ts=thread_ts, markdown_text="Half an ans")
    async with LocalSlack(bot_url=None, signing_secret=SECRET, data_dir=tmp_path) as second:
        client = AsyncWebClient(base_url=second.api_url, token=BOT_TOKEN)
        assert second.assistant_state(dm, thread_ts).title == "Refunds"
        assert second.assistant_state(dm, thread_ts).context == {"channel_id": GENERAL, "team_id": TEAM_ID}
        await client.chat_appendStream(channel=dm, ts=started["ts"], markdown_text="wer.")
        await client.chat_stopStream(channel=dm, ts=started["ts"])
        assert second.message(dm, started["ts"]).text == "Half an answer."


async def test_a_stream_carries_tasks_and_a_plan_with_slacks_chunks(slack: LocalSlack, client: AsyncWebClient):
    """``task_update`` / ``plan_update`` chunks, ``task_display_mode``; a task is
    replaced by the next update with its id; the stopped message holds them as a plan block of task cards."""
    ts = await thread_in_general(slack)
    started = await client.chat_startStream(
        channel=GENERAL, thread_ts=ts, recipient_user_id=ALICE, recipient_team_id=TEAM_ID, task_display_mode="plan",
        chunks=[{"type": "plan_update", "title": "Tool calls"},
                {"type": "task_update", "id": "c1", "title": "refund_charge", "status": "pending",
                 "details": "waiting for @alice"},
                {"type": "task_update", "id": "c2", "title": "notify", "status": "pending"}],
    )
    message = slack.message(GENERAL, started["ts"])
    assert message.streaming and message.task_display_mode == "plan" and message.plan_title == "Tool calls"
    assert [(t["id"], t["status"]) for t in message.tasks] == [("c1", "pending"), ("c2", "pending")]
    await client.chat_appendStream(channel=GENERAL, ts=started["ts"], chunks=[
        {"type": "task_update", "id": "c1", "title": "refund_charge", "status": "in_progress",
         "details": "approved by @alice"}])
    assert slack.message(GENERAL, started["ts"]).tasks[0]["details"] == "approved by @alice"
    await client.chat_stopStream(channel=GENERAL, ts=started["ts"], blocks=[feedback_block()], chunks=[
        {"type": "task_update", "id": "c1", "title": "refund_charge", "status": "complete", "output": "refunded"},
        {"type": "task_update", "id": "c2", "title": "notify", "status": "error", "details": "cancelled: no"},
        {"type": "markdown_text", "text": "Refunded."}])
    done = slack.message(GENERAL, started["ts"])
    assert done.text == "Refunded." and not done.streaming
    assert [b["type"] for b in done.blocks] == ["plan", "markdown", "context_actions"]
    plan = done.blocks[0]
    assert plan["title"] == "Tool calls"
    assert [(t["type"], t["task_id"], t["status"]) for t in plan["tasks"]] == [
        ("task_card", "c1", "complete"), ("task_card", "c2", "error")]
    assert "refunded" in str(plan["tasks"][0]["output"]) and "cancelled: no" in str(plan["tasks"][1]["details"])


async def test_tasks_in_a_timeline_are_task_cards_before_the_text(slack: LocalSlack, client: AsyncWebClient):
    ts = await thread_in_general(slack)
    started = await client.chat_startStream(
        channel=GENERAL, thread_ts=ts, recipient_user_id=ALICE, recipient_team_id=TEAM_ID,
        chunks=[{"type": "task_update", "id": "c1", "title": "refund_charge", "status": "in_progress"}])
    await client.chat_stopStream(channel=GENERAL, ts=started["ts"], markdown_text="Done.")
    assert [b["type"] for b in slack.message(GENERAL, started["ts"]).blocks] == ["task_card", "markdown"]


async def test_task_chunks_refuse_what_slack_refuses(slack: LocalSlack, client: AsyncWebClient):
    ts = await thread_in_general(slack)
    start = {"channel": GENERAL, "thread_ts": ts, "recipient_user_id": ALICE, "recipient_team_id": TEAM_ID}
    bad = [
        {"type": "task_update", "id": "c1", "title": "t", "status": "done"},  # not one of Slack's four
        {"type": "task_update", "title": "t", "status": "pending"},  # no id
        {"type": "task_update", "id": "c1", "status": "pending"},  # no title
        {"type": "plan_update"},  # no title
        {"type": "sparkles", "text": "x"},
    ]
    for chunk in bad:
        assert await error_of(client.api_call("chat.startStream", json={**start, "chunks": [chunk]})) \
            == "invalid_arguments", chunk
    assert await error_of(client.api_call("chat.startStream", json={**start, "task_display_mode": "list"})) \
        == "invalid_arguments"
    # an older workspace, or an app Slack does not let stream tasks: the chunks are refused, text still streams
    slack.ws.stream_tasks_refusal = "invalid_arguments"
    assert await error_of(client.chat_startStream(**start, task_display_mode="plan", chunks=[
        {"type": "task_update", "id": "c1", "title": "t", "status": "pending"}])) == "invalid_arguments"
    await client.chat_startStream(**start, markdown_text="text still streams")
