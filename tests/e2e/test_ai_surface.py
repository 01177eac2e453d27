"""Slack's Agents & AI Apps surface end to end: the real app over signed HTTP, LocalSlack as
Slack, a local OpenAI-wire model that writes slowly, real Redis.

- answers stream into Slack while the model writes them, batched, and end completed with feedback buttons;
- a quick answer is posted whole (no stream calls);
- thumbs up/down land in the audit log;
- the live status falls back to a status line where Slack refuses setStatus;
- the assistant split view: greeting and prompts from the tools, a title, the channel the person looks at,
  and approval cards inside the thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from blocks.answers import FEEDBACK_ACTION
from bot.models.openai import OpenAIChatModel
from bot.models.scripted import ScriptedModel, call, say
from handlers.delivery.status import STATUS_DELAY_S
from localslack.seed import ALICE, BOB, BOT_USER_ID, FINANCE, GENERAL, TEAM_ID
from store.audit import AuditLog
from tests.e2e.test_approval_flow import RUNS, button, card_in, refund_charge, refund_script
from tests.e2e.test_status_line import slow_report
from tests.fakes.openai_server import FakeOpenAI

ANSWER = (
    "The charge ch_1 was refunded in full. The customer will see it on their statement in three to "
    "five working days, and I noted the refund on their account so support knows."
)
WORD_DELAY_S = 0.1  # ~30 words: the model writes for about three seconds
STREAM_CALLS = ("chat.startStream", "chat.appendStream", "chat.stopStream")


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key="sk-test") as fake:
        yield fake


def slow_model(fake: FakeOpenAI) -> OpenAIChatModel:
    fake.reply_text(ANSWER, chunk_delay_s=WORD_DELAY_S)
    return OpenAIChatModel("gpt-4o-mini", base_url=fake.base_url, api_key="sk-test", max_retries=0)


def streamed(slack, thread_ts):  # noqa: ANN001, ANN201
    return [m for m in slack.messages(GENERAL, thread_ts=thread_ts) if m.bot_id and m.ts != thread_ts]


async def test_an_answer_streams_in_batches_and_ends_completed_with_feedback(
    local_slack, start_app, fake_openai
):
    await start_app(slow_model(fake_openai), [])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1 please")
    seen: list[str] = []

    def growing() -> bool:
        live = [m for m in streamed(local_slack, ts) if m.streaming]
        if live and (not seen or seen[-1] != live[0].text):
            seen.append(live[0].text)
        return len(seen) >= 2  # two different partial texts: it grew while the model wrote

    await local_slack.wait_for(growing, timeout_s=10)
    answer = await local_slack.wait_for(
        lambda: next((m for m in streamed(local_slack, ts) if not m.streaming and m.text == ANSWER), None),
        timeout_s=10,
    )
    assert all(ANSWER.startswith(text) for text in seen) and len(seen[0]) < len(ANSWER), seen
    assert [b["type"] for b in answer.blocks] == ["markdown", "context_actions"]
    assert len(streamed(local_slack, ts)) == 1, "one message: the stream, not a second post"
    calls = [
        c.method for c in local_slack.calls if c.method in (*STREAM_CALLS, "chat.postMessage", "chat.update")
    ]
    assert calls[0] == "chat.startStream" and calls[-1] == "chat.stopStream"
    appends = calls.count("chat.appendStream")
    assert 1 <= appends <= 4 and "chat.postMessage" not in calls, (
        calls
    )  # ~3 s of writing, ≤ 1 append a second
    print(f"\nstreamed answer ({len(ANSWER)} chars, ~3 s of writing): {len(calls)} Slack calls: {calls}")


async def test_without_a_thread_to_stream_into_the_answer_is_posted_and_edited(
    local_slack, start_app, fake_openai
):
    """A DM's main conversation has no thread, so chat.startStream cannot be used: post-and-update instead."""
    await start_app(slow_model(fake_openai), [])
    dm = local_slack.dm_channel(ALICE)
    ts, _ = await local_slack.post_message(ALICE, dm, "refund ch_1 please")
    posted = await local_slack.wait_for_message(
        dm, predicate=lambda m: bool(m.bot_id) and m.text.endswith(" …")
    )
    assert ANSWER.startswith(posted.text.removesuffix(" …"))
    final = await local_slack.wait_for(
        lambda: local_slack.message(dm, posted.ts).blocks and local_slack.message(dm, posted.ts), timeout_s=10
    )
    assert final.blocks[0]["text"] == ANSWER and final.blocks[-1]["type"] == "context_actions"
    calls = [
        c.method for c in local_slack.calls if c.method in (*STREAM_CALLS, "chat.postMessage", "chat.update")
    ]
    assert (
        calls[0] == "chat.postMessage" and calls.count("chat.postMessage") == 1 and calls[-1] == "chat.update"
    )
    assert not set(calls) & set(STREAM_CALLS) and 2 <= len(calls) <= 3, (
        calls
    )  # one edit in ~2 s, then the whole
    assert [m.ts for m in local_slack.messages(dm) if m.bot_id] == [posted.ts]


async def test_a_quick_answer_is_posted_whole_with_markdown_and_feedback(local_slack, start_app):
    await start_app(ScriptedModel([say("**Done.** Nothing else to do.")]), [])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> anything?")
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: bool(m.bot_id))
    assert reply.blocks[0] == {
        "type": "markdown",
        "block_id": "answer",
        "text": "**Done.** Nothing else to do.",
    }
    await asyncio.sleep(0.3)
    assert not [c for c in local_slack.calls if c.method in STREAM_CALLS]


async def test_thumbs_down_on_an_answer_is_in_the_audit_log(local_slack, start_app, redis):
    await start_app(ScriptedModel([say("Here you go.")]), [])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> a quick one")
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: bool(m.bot_id))
    result = await local_slack.click_feedback(BOB, GENERAL, reply.ts, positive=False)
    assert result.status == 200
    entries = [e for e in await AuditLog(redis).entries(TEAM_ID) if e.kind == "feedback"]
    assert len(entries) == 1 and entries[0].actor == f"slack:{TEAM_ID}:{BOB}"
    assert entries[0].data["feedback"] == "negative" and entries[0].data["answer_ts"] == reply.ts
    assert entries[0].data["channel"] == GENERAL
    assert FEEDBACK_ACTION in str(reply.blocks)


async def test_where_setstatus_is_refused_the_status_line_is_a_message(local_slack, start_app):
    group = "G0ALICEBOB"
    local_slack.add_channel(group, "mpdm-alice--bob--agent-1", members=[ALICE, BOB], is_mpim=True)
    await start_app(
        ScriptedModel([call("slow_report", name="q3"), say("Here is the q3 report.")]), [slow_report]
    )
    ts, _ = await local_slack.post_message(ALICE, group, f"<@{BOT_USER_ID}> the q3 report please")
    line = await local_slack.wait_for(
        lambda: [m for m in local_slack.messages(group, thread_ts=ts) if "Running `slow_report`" in m.text],
        timeout_s=STATUS_DELAY_S + 2,
    )
    assert line
    refused = [c for c in local_slack.calls if c.method == "assistant.threads.setStatus"]
    assert refused and refused[0].response["error"] == "method_not_supported_for_channel_type"
    await local_slack.wait_for_message(group, thread_ts=ts, predicate=lambda m: "q3 report." in m.text)
    await local_slack.wait_for(
        lambda: not [m for m in local_slack.messages(group, thread_ts=ts) if "Running" in m.text]
    )


async def test_the_assistant_split_view_greets_titles_and_asks_for_approval_in_its_thread(
    local_slack, start_app
):
    RUNS.clear()
    seen: list[str] = []

    def look(messages, tools):  # noqa: ANN001, ANN202 - a scripted step that notes what the model was told
        seen.append(str(messages[-1]["content"]))
        return call("refund_charge", charge_id="ch_1", amount=5.0)

    script = refund_script()
    script = ScriptedModel([look, *script.steps[1:]])
    await start_app(script, [refund_charge])
    dm, thread_ts, started = await local_slack.open_assistant(ALICE, context_channel=GENERAL)
    assert started is not None and started.status == 200
    greeting = await local_slack.wait_for_message(
        dm, thread_ts=thread_ts, predicate=lambda m: "Hi <@" in m.text
    )
    assert f"<@{ALICE}>" in greeting.text
    await local_slack.wait_for(lambda: local_slack.assistant_state(dm, thread_ts).prompts)
    assert local_slack.assistant_state(dm, thread_ts).prompts[0]["title"] == "Refund a charge"

    await local_slack.post_message(ALICE, dm, "Refund ch_1 for me please", thread_ts=thread_ts)
    card = await local_slack.wait_for(lambda: card_in(local_slack, thread_ts, channel=dm))
    assert local_slack.assistant_state(dm, thread_ts).title == "Refund ch_1 for me please"
    assert f"<#{GENERAL}>" in seen[0], "the agent knows which channel the person is looking at"
    await local_slack.click(ALICE, dm, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(dm, thread_ts=thread_ts, predicate=lambda m: "Result:" in m.text)
    assert len(RUNS) == 1


PINGING_ANSWER = (
    "Posted to #general: <!channel> lunch is here! Tell <@U0EVE|eve> and <!subteam^S0ADMINS|@admins>, "
    "and <!here> too."
)


@pytest.mark.parametrize("slowly", [False, True], ids=["posted whole", "streamed"])
async def test_an_answer_that_quotes_a_broadcast_pings_nobody(local_slack, start_app, fake_openai, slowly):
    """What the model writes (here quoting an announcement a person typed) reaches Slack with every mention
    as a plain name: in the markdown block, the fallback text and every streamed piece."""
    from tests.test_blocks_spoofing import live_pings

    fake_openai.reply_text(PINGING_ANSWER, chunk_delay_s=WORD_DELAY_S if slowly else 0.0)
    await start_app(OpenAIChatModel("gpt-4o-mini", base_url=fake_openai.base_url, api_key="sk-test",
                                    max_retries=0), [])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> announce lunch")
    shown = ("Posted to #general: @channel lunch is here! Tell @U0EVE and @S0ADMINS, and @here too.")
    answer = await local_slack.wait_for(
        lambda: next((m for m in streamed(local_slack, ts) if not m.streaming and m.blocks), None), timeout_s=10)
    assert answer.blocks[0]["text"] == shown and live_pings(answer.model_dump()) == set()
    sent = [c.params for c in local_slack.calls
            if c.method in (*STREAM_CALLS, "chat.postMessage", "chat.update") and c.params.get("channel") == GENERAL]
    assert sent and live_pings(sent) == set(), sent
    if slowly:
        assert any(c.method == "chat.startStream" for c in local_slack.calls)


async def test_a_redelivered_assistant_thread_started_greets_once(local_slack, start_app):
    """Slack sends ``assistant_thread_started`` again when it did not see the 200 in time: the thread still
    has one greeting."""
    bot = await start_app(refund_script(), [refund_charge])
    dm, thread_ts, started = await local_slack.open_assistant(ALICE, context_channel=GENERAL)
    await local_slack.wait_for_message(dm, thread_ts=thread_ts, predicate=lambda m: "Hi <@" in m.text)
    await bot.wait_idle()
    again = await local_slack.redeliver(started)
    assert again.status == 200
    await bot.wait_idle()
    greetings = [m for m in local_slack.messages(dm, thread_ts=thread_ts) if "Hi <@" in m.text]
    assert len(greetings) == 1


async def test_a_redelivered_context_change_does_not_undo_a_newer_one(local_slack, start_app):
    """Alice looks at #finance, then at #general; Slack redelivers the first change minutes later. The agent
    is told she looks at #general."""
    seen: list[str] = []

    def look(messages, tools):  # noqa: ANN001, ANN202
        seen.append(str(messages[-1]["content"]))
        return say("Noted.")

    bot = await start_app(ScriptedModel([look]), [])
    dm, thread_ts, _ = await local_slack.open_assistant(ALICE, context_channel=GENERAL)
    to_finance = await local_slack.change_assistant_context(ALICE, dm, thread_ts, FINANCE)
    await local_slack.change_assistant_context(ALICE, dm, thread_ts, GENERAL)
    assert (await local_slack.redeliver(to_finance)).status == 200
    await bot.wait_idle()
    await local_slack.post_message(ALICE, dm, "What is this channel about?", thread_ts=thread_ts)
    await local_slack.wait_for_message(dm, thread_ts=thread_ts, predicate=lambda m: m.text == "Noted.")
    assert f"<#{GENERAL}>" in seen[0]
