"""What real model servers sent, replayed byte for byte to OpenAIChatModel over HTTP.

Each response in tests/data/model_responses/ names its public source. A case either parses to what the
server meant, or ends in a ModelError whose ``kind`` says what people are to be told (bot.models.words).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

import pytest

from bot.models import ModelError, OpenAIChatModel, ToolSpec
from bot.models.providers import provider_kind
from tests.fakes import FakeOpenAI
from tests.fakes.recorded import all_recorded, recorded
from tests.test_models_openai import HELLO, KEY, make_model

TOOLS = [ToolSpec(name="file_write"), ToolSpec(name="refund_charge")]


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=KEY) as server:
        yield server
WEATHER = "I'm unable to provide real-time weather updates. To get the current weather in San Francisco, I recommend"


async def replay(fake: FakeOpenAI, name: str, **options):  # noqa: ANN201
    fake.reply_recorded(name)
    async with make_model(fake, **options) as model:
        return await model.complete(HELLO, TOOLS)


def test_every_recorded_response_names_its_public_source() -> None:
    names = all_recorded()
    assert len(names) >= 15
    for name in names:
        assert re.match(r"https://\S+", recorded(name).source), name


# --- what parses right ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("openai_stream_text.sse", WEATHER),
        ("openrouter_stream_processing_comments.sse", WEATHER),  # ": OPENROUTER PROCESSING" comments first
        (
            "azure_stream_filter_annotations.sse",
            "Most people have their own",
        ),  # a first chunk with no choices
    ],
)
async def test_a_recorded_text_answer_parses_whole(fake: FakeOpenAI, name: str, text: str) -> None:
    response = await replay(fake, name)

    assert response.text is not None and response.text.startswith(text)
    assert response.finish_reason == "stop" and response.tool_calls == []


async def test_openai_parallel_tool_calls_parse_as_two_calls(fake: FakeOpenAI) -> None:
    response = await replay(fake, "openai_stream_parallel_tool_calls.sse")

    assert [(c.name, json.loads(c.arguments)) for c in response.tool_calls] == [
        ("GetWeatherArgs", {"city": "Edinburgh", "country": "GB", "units": "c"}),
        ("get_stock_price", {"ticker": "AAPL", "exchange": "NASDAQ"}),
    ]
    assert response.usage.prompt_tokens == 149


@pytest.mark.parametrize("name", ["ollama_stream_parallel_index0.sse", "ollama_stream_parallel_no_index.sse"])
async def test_parallel_calls_are_told_apart_by_id_whatever_the_index_says(
    fake: FakeOpenAI, name: str
) -> None:
    response = await replay(fake, name)

    assert [(c.id, c.name, json.loads(c.arguments)["filePath"]) for c in response.tool_calls] == [
        ("call_lbcjwr0u", "file_write", "hello.py"),
        ("call_k2m4x8qa", "file_write", "world.py"),
    ]


# --- DeepSeek's thinking mode -----------------------------------------------------------------------


def drops_reasoning(body: dict) -> bool:
    """DeepSeek's rule: an assistant tool-call message must carry its reasoning_content."""
    return any(m.get("tool_calls") and "reasoning_content" not in m for m in body["messages"])


async def test_deepseek_gets_the_reasoning_of_a_tool_call_step_back(fake: FakeOpenAI) -> None:
    fake.reply_recorded("deepseek_stream_thinking_tool_call.sse")
    fake.reply_text("Refunded.")
    async with make_model(fake) as model:
        first = await model.complete(HELLO, TOOLS)
        history = [
            *HELLO,
            first.to_message(),
            {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "{}"},
        ]
        fake.refuse_when(drops_reasoning, "deepseek_400_reasoning_content_not_passed_back.json")
        second = await model.complete(history, TOOLS)
        third = await model.complete(history, TOOLS)  # remembered: sent at once

    assert first.reasoning == "The user wants to refund charge ch_1. I will call refund_charge."
    assert second.text == "Refunded." and third.text == "ok"
    assert [drops_reasoning(r.body) for r in fake.requests[1:]] == [True, False, False]
    assert fake.requests[-1].body["messages"][1]["reasoning_content"] == first.reasoning
    assert model.fallbacks == [
        "sends each tool-call step's reasoning_content back (the endpoint asked for it)"
    ]


async def test_reasoning_is_not_sent_to_a_server_that_did_not_ask_for_it(fake: FakeOpenAI) -> None:
    fake.reply_recorded("deepseek_stream_thinking_tool_call.sse")
    async with make_model(fake) as model:
        first = await model.complete(HELLO, TOOLS)
        await model.complete([*HELLO, first.to_message()], TOOLS)

    assert "reasoning_content" not in fake.requests[1].body["messages"][1]


def test_deepseek_is_known_by_its_host_and_sent_its_reasoning_from_the_start() -> None:
    model = OpenAIChatModel("deepseek-chat", base_url="https://api.deepseek.com/v1", api_key=KEY)
    message = {"role": "assistant", "content": None, "tool_calls": [], "reasoning_content": "thought"}
    body = model._request_body([*HELLO, message], [])  # what would be sent: no request needed to see it

    assert model.kind == "DeepSeek" and body["messages"][1]["reasoning_content"] == "thought"


# --- nothing ends in silence ------------------------------------------------------------------------


async def test_an_openai_refusal_is_kept_as_the_models_words(fake: FakeOpenAI) -> None:
    response = await replay(fake, "openai_stream_refusal.sse")

    assert response.text is None
    assert response.refusal == "I'm sorry, I can't assist with that request."
    assert response.to_message()["content"] == response.refusal


async def test_a_llama_cpp_error_line_is_an_error_not_an_empty_answer(fake: FakeOpenAI) -> None:
    with pytest.raises(ModelError) as caught:
        await replay(fake, "llamacpp_stream_error_line.sse")

    assert caught.value.kind == "stream_error"
    assert "the request exceeds the available context size" in caught.value.reason
    assert len(fake.requests) == 1


# --- cut and filtered answers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "stream"), [("openai_stream_length.sse", True), ("openai_length.json", False)]
)
async def test_an_answer_cut_by_the_length_limit_says_so(fake: FakeOpenAI, name: str, stream: bool) -> None:
    response = await replay(fake, name, stream=stream)

    assert (response.text, response.finish_reason) == ('{"', "length")


async def test_a_tool_call_cut_by_the_length_limit_is_never_returned(fake: FakeOpenAI) -> None:
    with pytest.raises(ModelError) as caught:
        await replay(fake, "openai_stream_tool_call_cut_by_length.sse")

    assert caught.value.kind == "cut" and caught.value.retryable is False


async def test_an_answer_stopped_by_azures_content_filter_says_so(fake: FakeOpenAI) -> None:
    response = await replay(fake, "azure_stream_content_filter.sse")

    assert (response.text, response.finish_reason) == ("Most people have their own", "content_filter")


# --- errors by their true names ---------------------------------------------------------------------


async def test_insufficient_quota_is_not_retried_and_named(fake: FakeOpenAI) -> None:
    with pytest.raises(ModelError) as caught:
        await replay(fake, "openai_429_insufficient_quota.json")

    assert (caught.value.kind, caught.value.status, caught.value.retryable) == ("quota", 429, False)
    assert "insufficient_quota" in caught.value.reason
    assert len(fake.requests) == 1


async def test_a_retry_after_of_a_day_is_not_waited_for_nor_retried(fake: FakeOpenAI) -> None:
    with pytest.raises(ModelError) as caught:
        await replay(fake, "azure_429_retry_after_a_day.json", max_backoff=20.0)

    assert (caught.value.kind, caught.value.retry_after) == ("rate_limited", 86400)
    assert "Please retry after 86400 seconds" in caught.value.reason
    assert len(fake.requests) == 1


# --- a server that refuses stream_options -----------------------------------------------------------


async def test_an_endpoint_that_refuses_stream_options_is_asked_again_without_and_remembered(
    fake: FakeOpenAI,
) -> None:
    fake.refuse_when(lambda body: "stream_options" in body, "proxy_400_unknown_stream_options.json")
    fake.reply_text("first")
    fake.reply_text("second")
    async with make_model(fake) as model:
        first = await model.complete(HELLO, [])
        second = await model.complete(HELLO, [])

    assert (first.text, second.text) == ("first", "second")
    assert ["stream_options" in r.body for r in fake.requests] == [True, False, False]
    assert model.fallbacks == ["streams without stream_options (the endpoint refused it): no token counts"]


# --- provider kinds ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "owned_by", "kind"),
    [
        ("https://api.openai.com/v1", None, "OpenAI"),
        ("https://my-res.openai.azure.com/openai/deployments/gpt-4o", None, "Azure OpenAI"),
        ("https://api.deepseek.com", None, "DeepSeek"),
        ("https://openrouter.ai/api/v1", None, "OpenRouter"),
        ("https://generativelanguage.googleapis.com/v1beta/openai/", None, "Gemini (OpenAI-compatible)"),
        ("https://api.groq.com/openai/v1", None, "Groq"),
        ("http://gpu-box:8000/v1", "vllm", "vLLM"),
        ("http://gpu-box:8080/v1", "llamacpp", "llama.cpp"),
        ("http://localhost:11434/v1", None, "Ollama (by its default port)"),
        ("http://10.0.0.5:9000/v1", None, "OpenAI-compatible"),
    ],
)
def test_the_provider_kind_is_read_from_the_url_then_the_model_list(
    url: str, owned_by: str | None, kind: str
) -> None:
    assert provider_kind(url, owned_by) == kind


# --- Gemini's thought signatures ----------------------------------------------------------------------


def drops_signature(body: dict) -> bool:
    """Gemini's rule: a tool call sent back must carry the thought_signature it came with."""
    return any("extra_content" not in c for m in body["messages"] for c in m.get("tool_calls") or [])


async def test_gemini_gets_each_tool_calls_thought_signature_back(fake: FakeOpenAI) -> None:
    fake.reply_recorded("gemini_stream_tool_call_thought_signature.sse")
    fake.reply_text("Read it.")
    async with make_model(fake) as model:
        first = await model.complete(HELLO, TOOLS)
        history = [
            *HELLO,
            first.to_message(),
            {"role": "tool", "tool_call_id": "call_297140", "content": "{}"},
        ]
        fake.refuse_when(drops_signature, "gemini_400_missing_thought_signature.json")
        second = await model.complete(history, TOOLS)

    [call] = first.tool_calls  # no index, and finish_reason "stop": still one whole call
    assert (call.id, call.name, json.loads(call.arguments)["offset"]) == ("call_297140", "read", 1)
    assert call.extra == {"google": {"thought_signature": "…"}}
    assert second.text == "Read it."
    assert [drops_signature(r.body) for r in fake.requests[1:]] == [True, False]
    assert model.fallbacks == ["sends each tool call's extra_content back (the endpoint asked for it)"]


def test_gemini_is_known_by_its_host_and_sent_its_signatures_from_the_start() -> None:
    base = "https://generativelanguage.googleapis.com/v1beta/openai"
    model = OpenAIChatModel("gemini-2.5-flash", base_url=base, api_key=KEY)
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "read", "arguments": "{}"},
        "extra_content": {"g": 1},
    }
    body = model._request_body([*HELLO, {"role": "assistant", "content": None, "tool_calls": [call]}], [])

    assert body["messages"][1]["tool_calls"][0]["extra_content"] == {"g": 1}


# --- vLLM's mid-stream errors -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["vllm_stream_error_nested.sse", "vllm_stream_error_flat.sse"])
async def test_a_vllm_error_mid_stream_is_an_error_not_an_empty_answer(fake: FakeOpenAI, name: str) -> None:
    with pytest.raises(ModelError) as caught:
        await replay(fake, name)

    assert caught.value.kind == "stream_error"
    assert "longer than the maximum model length" in caught.value.reason


# --- more servers -----------------------------------------------------------------------------------


async def test_groqs_token_counts_in_x_groq_are_counted(fake: FakeOpenAI) -> None:
    response = await replay(fake, "groq_stream_tool_call_x_groq_usage.sse")

    [call] = response.tool_calls
    assert (call.name, json.loads(call.arguments)) == ("test-tool", {"value": "Sparkle Day"})
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (18, 439)


async def test_xais_usage_on_every_chunk_and_a_length_finish_parse(fake: FakeOpenAI) -> None:
    response = await replay(fake, "xai_stream_usage_every_chunk_length.sse")

    assert response.text is not None and response.text.startswith("Coca-Cola is a carbonated soft drink")
    assert response.text.endswith(" tailored") and response.finish_reason == "length"
    assert response.usage.completion_tokens == 200


async def test_tool_call_arguments_sent_as_an_object_become_json_text(fake: FakeOpenAI) -> None:
    response = await replay(fake, "llamacpp_arguments_as_object.json", stream=False)

    [call] = response.tool_calls
    assert json.loads(call.arguments) == {"filePath": "hello.py", "content": 'print("hello")'}


async def test_lm_studios_empty_tool_call_list_is_a_plain_answer(fake: FakeOpenAI) -> None:
    response = await replay(fake, "lmstudio_empty_tool_calls.json", stream=False)

    assert (response.text, response.tool_calls, response.finish_reason) == (
        "Hello! It looks like...",
        [],
        "stop",
    )
