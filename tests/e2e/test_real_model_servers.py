"""Turns through the real app against what real model servers sent (tests/data/model_responses/, replayed
byte for byte): the thread shows the answer, or a plain, true sentence — never nothing — and a tool call
that did not arrive whole never runs."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from pydantic import BaseModel

from bot.models.openai import OpenAIChatModel
from bot.models.words import (
    CUT_NOTE,
    CUT_TOOL_CALL,
    FILTERED_NOTE,
    OUT_OF_CREDIT,
    STREAM_ERROR,
)
from bot.tools import ToolContext, tool
from localslack.seed import ALICE, BOT_USER_ID, GENERAL
from tests.fakes.openai_server import FakeOpenAI

KEY = "sk-test"
WRITTEN: list[str] = []
REFUNDED: list[str] = []


class FileWrite(BaseModel):
    filePath: str  # noqa: N815 - the name the recorded model wrote
    content: str


class Refund(BaseModel):
    charge_id: str


@tool
async def file_write(args: FileWrite, ctx: ToolContext) -> dict:
    """Write content to a file."""
    WRITTEN.append(args.filePath)
    return {"written": args.filePath}


@tool
async def refund_charge(args: Refund, ctx: ToolContext) -> dict:
    """Refund a charge."""
    REFUNDED.append(args.charge_id)
    return {"refunded": args.charge_id}


@tool
async def GetWeatherArgs(args: FileWrite, ctx: ToolContext) -> dict:  # noqa: N802 - the recorded call's name
    """Weather."""
    WRITTEN.append("weather")
    return {}


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    WRITTEN.clear()
    REFUNDED.clear()
    async with FakeOpenAI(api_key=KEY) as server:
        yield server


async def ask(local_slack, start_app, fake: FakeOpenAI, tools=(), text: str = "hello"):  # noqa: ANN001, ANN201
    model = OpenAIChatModel(
        "gpt-4o-mini", base_url=fake.base_url, api_key=KEY, max_retries=2, backoff_base=0.01
    )
    await start_app(model, list(tools))
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> {text}")
    return ts


async def said(local_slack, ts: str, words: str) -> str:  # noqa: ANN001
    """The text of the bot's reply in the thread that contains ``words`` (waiting for it)."""

    def reply() -> str | None:
        for message in local_slack.messages(GENERAL, ts):
            if message.user == BOT_USER_ID and not message.streaming and words in (message.text or ""):
                return message.text
        return None

    return await local_slack.wait_for(reply, timeout_s=10)


async def test_ollamas_parallel_calls_all_at_index_0_both_run(local_slack, start_app, fake):
    fake.reply_recorded("ollama_stream_parallel_index0.sse")
    fake.reply_text("Both files are written.")
    ts = await ask(local_slack, start_app, fake, [file_write])

    await said(local_slack, ts, "Both files are written.")
    assert WRITTEN == ["hello.py", "world.py"]


async def test_a_deepseek_thinking_turn_with_a_tool_call_finishes(local_slack, start_app, fake):
    fake.reply_recorded("deepseek_stream_thinking_tool_call.sse")
    fake.refuse_when(
        lambda body: any(m.get("tool_calls") and "reasoning_content" not in m for m in body["messages"]),
        "deepseek_400_reasoning_content_not_passed_back.json",
    )
    fake.reply_text("Refunded ch_1.")
    ts = await ask(local_slack, start_app, fake, [refund_charge], "refund ch_1")

    await said(local_slack, ts, "Refunded ch_1.")
    assert REFUNDED == ["ch_1"]


async def test_an_openai_refusal_is_posted_as_the_models_answer(local_slack, start_app, fake):
    fake.reply_recorded("openai_stream_refusal.sse")
    ts = await ask(local_slack, start_app, fake)

    await said(local_slack, ts, "I'm sorry, I can't assist with that request.")


async def test_a_llama_cpp_error_line_is_posted_as_an_error(local_slack, start_app, fake):
    fake.reply_recorded("llamacpp_stream_error_line.sse")
    ts = await ask(local_slack, start_app, fake)

    text = await said(local_slack, ts, STREAM_ERROR)
    assert "context size" not in text  # the server's words go to the log, not to a shared channel


async def test_an_answer_cut_at_the_length_limit_says_it_was_cut(local_slack, start_app, fake):
    fake.reply_recorded("openai_stream_length.sse")
    ts = await ask(local_slack, start_app, fake)

    text = await said(local_slack, ts, CUT_NOTE.strip("_"))
    assert text.startswith('{"')  # what the model wrote before the cut, then the note


async def test_a_tool_call_cut_at_the_length_limit_never_runs(local_slack, start_app, fake):
    fake.reply_recorded("openai_stream_tool_call_cut_by_length.sse")
    ts = await ask(local_slack, start_app, fake, [GetWeatherArgs])

    await said(local_slack, ts, CUT_TOOL_CALL)
    assert WRITTEN == [] and len(fake.requests) == 1


async def test_an_answer_stopped_by_a_content_filter_says_so(local_slack, start_app, fake):
    fake.reply_recorded("azure_stream_content_filter.sse")
    ts = await ask(local_slack, start_app, fake)

    text = await said(local_slack, ts, "Most people have their own")
    assert FILTERED_NOTE.strip("_") in text


async def test_an_account_out_of_credit_is_named_and_not_retried(local_slack, start_app, fake):
    fake.reply_recorded("openai_429_insufficient_quota.json")
    ts = await ask(local_slack, start_app, fake)

    await said(local_slack, ts, OUT_OF_CREDIT)
    assert len(fake.requests) == 1


async def test_a_day_long_retry_after_says_when_to_try_again(local_slack, start_app, fake):
    fake.reply_recorded("azure_429_retry_after_a_day.json")
    ts = await ask(local_slack, start_app, fake)

    text = await said(local_slack, ts, "asked it to wait about a day")
    assert "try again after" in text and "UTC" in text
    assert len(fake.requests) == 1


async def test_an_endpoint_refusing_stream_options_still_answers(local_slack, start_app, fake):
    fake.refuse_when(lambda body: "stream_options" in body, "proxy_400_unknown_stream_options.json")
    fake.reply_text("Here is your answer.")
    ts = await ask(local_slack, start_app, fake)

    await said(local_slack, ts, "Here is your answer.")


async def test_mcp_tool_names_reach_slack_as_the_model_wrote_them(local_slack, start_app, fake):
    fake.reply_text("Use everything__get-sum or memory__read_graph for that.")
    ts = await ask(local_slack, start_app, fake)

    text = await said(local_slack, ts, "Use every")
    assert "everything__get-sum or memory__read_graph" in text, text


class Read(BaseModel):
    path: str
    offset: int = 1
    limit: int = 100


@tool
async def read(args: Read, ctx: ToolContext) -> dict:
    """Read a file."""
    WRITTEN.append(args.path)
    return {"text": "…"}


async def test_a_gemini_tool_call_turn_finishes(local_slack, start_app, fake):
    fake.reply_recorded("gemini_stream_tool_call_thought_signature.sse")
    fake.refuse_when(
        lambda body: any(
            "extra_content" not in c for m in body["messages"] for c in m.get("tool_calls") or []
        ),
        "gemini_400_missing_thought_signature.json",
    )
    fake.reply_text("I read the skill file.")
    ts = await ask(local_slack, start_app, fake, [read])

    await said(local_slack, ts, "I read the skill file.")
    assert WRITTEN == ["/app/skills/agent-runtime/stage-design/SKILL.md"]


async def test_a_vllm_error_mid_stream_is_posted_as_an_error(local_slack, start_app, fake):
    fake.reply_recorded("vllm_stream_error_flat.sse")
    ts = await ask(local_slack, start_app, fake)

    await said(local_slack, ts, STREAM_ERROR)
