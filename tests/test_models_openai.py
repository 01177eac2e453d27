"""OpenAIChatModel against a local server that speaks OpenAI's Chat Completions wire format."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import AsyncIterator
from email.utils import formatdate

import aiohttp
import httpx
import pytest

from bot.models import ModelError, OpenAIChatModel, ToolSpec
from bot.models.base import RestartableText
from tests.fakes import FakeOpenAI

KEY = "sk-test-0123456789abcdef"
HELLO = [{"role": "user", "content": "hello"}]
REFUND = ToolSpec(
    name="refund",
    description="Refund a charge.",
    parameters={
        "type": "object",
        "properties": {"charge_id": {"type": "string"}, "amount": {"type": "integer"}},
        "required": ["charge_id"],
    },
)


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=KEY) as server:
        yield server


def make_model(fake: FakeOpenAI, **options) -> OpenAIChatModel:
    settings = {"api_key": KEY, "timeout": 2.0, "backoff_base": 0.01, "max_backoff": 2.0} | options
    return OpenAIChatModel("gpt-4o-mini", base_url=fake.base_url, **settings)


class Collector:
    def __init__(self) -> None:
        self.deltas: list[str] = []

    async def __call__(self, delta: str) -> None:
        self.deltas.append(delta)


async def test_non_streaming_text_answer(fake: FakeOpenAI) -> None:
    fake.reply_text("Hello from the model.")
    async with make_model(fake, stream=False) as model:
        response = await model.complete(HELLO, [])

    assert response.text == "Hello from the model."
    assert response.tool_calls == []
    assert response.finish_reason == "stop"
    assert response.usage.prompt_tokens > 0 and response.usage.completion_tokens > 0
    sent = fake.requests[0]
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.body == {"model": "gpt-4o-mini", "messages": HELLO, "stream": False}


async def test_streamed_text_reaches_on_text_delta_by_delta(fake: FakeOpenAI) -> None:
    fake.reply_text("Refunds take three to five days.")
    collector = Collector()
    async with make_model(fake) as model:
        response = await model.complete(HELLO, [REFUND], on_text=collector)

    assert collector.deltas == ["Refunds ", "take ", "three ", "to ", "five ", "days."]
    assert response.text == "Refunds take three to five days."
    assert response.finish_reason == "stop"
    assert response.usage.prompt_tokens > 0  # from the trailing usage chunk
    body = fake.requests[0].body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["tools"] == [REFUND.to_openai()]


async def test_streamed_tool_call_arguments_are_joined_across_chunks(fake: FakeOpenAI) -> None:
    fake.reply_tool_call("refund", {"charge_id": "ch_123456", "amount": 4200}, call_id="call_abc")
    async with make_model(fake) as model:
        response = await model.complete(HELLO, [REFUND])

    assert response.text is None
    assert response.finish_reason == "tool_calls"
    [tool_call] = response.tool_calls
    assert (tool_call.id, tool_call.name) == ("call_abc", "refund")
    assert json.loads(tool_call.arguments) == {"charge_id": "ch_123456", "amount": 4200}
    assert response.to_message()["tool_calls"][0]["function"]["arguments"] == tool_call.arguments


async def test_two_tool_calls_in_one_step_keep_their_order(fake: FakeOpenAI) -> None:
    fake.reply_tool_calls(
        ("refund", {"charge_id": "ch_1"}, "call_1"), ("refund", {"charge_id": "ch_2"}, "call_2")
    )
    fake.reply_tool_calls(("lookup", {"q": "a"}, "call_3"), ("refund", {"charge_id": "ch_3"}, "call_4"))
    async with make_model(fake) as streaming, make_model(fake, stream=False) as plain:
        streamed = await streaming.complete(HELLO, [REFUND])
        unstreamed = await plain.complete(HELLO, [REFUND])

    assert [(c.id, c.name, json.loads(c.arguments)) for c in streamed.tool_calls] == [
        ("call_1", "refund", {"charge_id": "ch_1"}),
        ("call_2", "refund", {"charge_id": "ch_2"}),
    ]
    assert [(c.id, c.name, json.loads(c.arguments)) for c in unstreamed.tool_calls] == [
        ("call_3", "lookup", {"q": "a"}),
        ("call_4", "refund", {"charge_id": "ch_3"}),
    ]


async def test_rate_limit_waits_for_retry_after_then_succeeds(fake: FakeOpenAI) -> None:
    fake.reply_error(429, "Rate limit reached for gpt-4o-mini", retry_after=0.3)
    fake.reply_text("done")
    started = time.monotonic()
    async with make_model(fake) as model:
        response = await model.complete(HELLO, [])

    assert response.text == "done"
    assert len(fake.requests) == 2
    gap = fake.requests[1].received_at - fake.requests[0].received_at
    assert 0.28 <= gap < 1.5
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize(
    "retry_after", [formatdate(time.time() + 3600, usegmt=True), 120], ids=["http-date", "seconds"]
)
async def test_a_retry_after_longer_than_the_client_waits_is_not_retried(
    fake: FakeOpenAI, retry_after
) -> None:
    """Waiting a capped while and asking again before the server said it would answer only makes useless
    requests: the error says how long it asked to wait instead."""
    fake.reply_error(503, "overloaded", retry_after=retry_after)
    fake.reply_text("never asked for")
    async with make_model(fake, max_backoff=0.25) as model:
        with pytest.raises(ModelError) as caught:
            await model.complete(HELLO, [])

    assert caught.value.kind == "rate_limited" and caught.value.retry_after is not None
    assert caught.value.retry_after > 100
    assert len(fake.requests) == 1


async def test_server_errors_exhaust_retries_into_a_retryable_error(fake: FakeOpenAI) -> None:
    for _ in range(3):
        fake.reply_error(503, "The server is overloaded")
    async with make_model(fake, max_retries=2) as model:
        with pytest.raises(ModelError) as caught:
            await model.complete(HELLO, [])

    error = caught.value
    assert error.retryable is True
    assert error.status == 503
    assert error.reason == "model endpoint returned 503 after 3 attempts: The server is overloaded"
    assert len(fake.requests) == 3


async def test_bad_request_is_not_retried_and_carries_the_endpoint_message(fake: FakeOpenAI) -> None:
    fake.reply_error(400, "Invalid 'messages[0].role': 'robot' is not one of ['system', 'user'].")
    async with make_model(fake) as model:
        with pytest.raises(ModelError) as caught:
            await model.complete(HELLO, [])

    assert caught.value.status == 400
    assert caught.value.retryable is False
    assert caught.value.reason == (
        "model endpoint rejected the request (400): "
        "Invalid 'messages[0].role': 'robot' is not one of ['system', 'user']."
    )
    assert len(fake.requests) == 1


async def test_wrong_key_is_rejected_without_revealing_the_key(fake: FakeOpenAI) -> None:
    wrong = "sk-wrong-secret-key-987654321"
    async with make_model(fake, api_key=wrong) as model:
        with pytest.raises(ModelError) as caught:
            await model.complete(HELLO, [])
        assert wrong not in repr(model)

    error = caught.value
    assert error.status == 401 and error.retryable is False
    assert error.reason.startswith("model endpoint rejected the request (401): Incorrect API key provided")
    assert wrong not in error.reason and wrong not in str(error)
    assert len(fake.requests) == 1


async def test_an_endpoint_that_echoes_the_key_has_it_redacted(fake: FakeOpenAI) -> None:
    fake.reply_error(403, f"key {KEY} is not allowed to use this model")
    fake.reply_error(502, f"upstream refused key {KEY}")
    async with make_model(fake, max_retries=0) as model:
        for _ in range(2):
            with pytest.raises(ModelError) as caught:
                await model.complete(HELLO, [])
            assert KEY not in caught.value.reason
            assert "***" in caught.value.reason


async def test_a_server_slower_than_the_timeout_becomes_a_timeout_error(fake: FakeOpenAI) -> None:
    for _ in range(2):  # two slow answers: one per attempt
        fake.reply_delay(2.0)
        fake.reply_text("too late")
    started = time.monotonic()
    async with make_model(fake, timeout=0.3, max_retries=1) as model:
        with pytest.raises(ModelError) as caught:
            await model.complete(HELLO, [])

    assert caught.value.reason.startswith("model endpoint timed out after 2 attempts")
    assert caught.value.retryable is True
    assert len(fake.requests) == 2
    assert time.monotonic() - started < 1.5


async def test_one_slow_answer_is_retried_successfully(fake: FakeOpenAI) -> None:
    fake.reply_delay(2.0)
    fake.reply_text("first, slow")
    fake.reply_text("second, fast")
    async with make_model(fake, timeout=0.3, max_retries=1) as model:
        response = await model.complete(HELLO, [])

    assert response.text == "second, fast"


async def test_connection_refused_becomes_a_retryable_error() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"
    async with OpenAIChatModel(
        "gpt-4o-mini", base_url=base_url, api_key=KEY, timeout=1.0, max_retries=1, backoff_base=0.01
    ) as model:
        with pytest.raises(ModelError) as caught:
            await model.complete(HELLO, [])

    assert caught.value.retryable is True
    assert caught.value.reason.startswith(
        f"could not connect to the model endpoint at {base_url} after 2 attempts"
    )
    assert KEY not in caught.value.reason


@pytest.mark.parametrize(
    "cut", ["reply_truncated_stream", "reply_cut_stream"]
)  # [DONE] missing; connection dropped
async def test_a_stream_cut_short_is_retried_when_nothing_was_shown(fake: FakeOpenAI, cut: str) -> None:
    getattr(fake, cut)("half an ans")
    fake.reply_text("a whole answer")
    async with make_model(fake) as model:
        response = await model.complete(HELLO, [])

    assert response.text == "a whole answer"
    assert len(fake.requests) == 2


async def test_a_stream_cut_short_after_text_was_shown_is_not_repeated(fake: FakeOpenAI) -> None:
    fake.reply_truncated_stream("half an ans")
    collector = Collector()
    async with make_model(fake) as model:
        with pytest.raises(ModelError) as caught:
            await model.complete(HELLO, [], on_text=collector)

    assert "".join(collector.deltas) == "half an ans"
    assert caught.value.retryable is True
    assert len(fake.requests) == 1


async def test_a_stream_cut_short_is_retried_when_the_callback_can_start_over(fake: FakeOpenAI) -> None:
    """A frontend that can be told the text starts over (a ``RestartableText``, as bot.engine.drive's live text):
    the broken stream is retried like any other failure."""
    fake.reply_truncated_stream("half an ans")
    fake.reply_text("a whole answer")
    restarts: list[int] = []

    class StartsOver(Collector, RestartableText):
        def restart(self) -> None:
            restarts.append(len(self.deltas))

    collector = StartsOver()
    async with make_model(fake, backoff_base=0.01) as model:
        response = await model.complete(HELLO, [], on_text=collector)

    assert response.text == "a whole answer" and restarts == [
        3
    ]  # told once, after the broken attempt's words
    assert len(fake.requests) == 2


async def test_a_connection_dropped_mid_stream_after_text_was_shown_is_not_repeated(fake: FakeOpenAI) -> None:
    fake.reply_cut_stream("half an ans")
    fake.reply_text("never asked for")
    collector = Collector()
    async with make_model(fake) as model:
        with pytest.raises(ModelError) as caught:
            await model.complete(HELLO, [], on_text=collector)

    assert "".join(collector.deltas) == "half an ans"
    assert caught.value.retryable is True
    assert caught.value.reason.startswith("model endpoint stream was interrupted after partial output")
    assert len(fake.requests) == 1


async def test_a_connection_dropped_every_time_exhausts_into_a_connection_error(fake: FakeOpenAI) -> None:
    for _ in range(2):
        fake.reply_cut_stream("half an ans")
    async with make_model(fake, max_retries=1) as model:
        with pytest.raises(ModelError) as caught:
            await model.complete(HELLO, [])

    assert caught.value.retryable is True
    assert caught.value.reason.startswith(
        f"could not connect to the model endpoint at {fake.base_url} after 2 attempts"
    )
    assert KEY not in caught.value.reason


async def test_a_stream_slower_than_the_timeout_between_chunks_becomes_a_timeout_error(
    fake: FakeOpenAI,
) -> None:
    """The timeout bounds each wait for bytes: a stream that stalls longer than it between chunks fails."""
    fake.reply_text("slow words here", chunk_delay_s=0.6)
    async with make_model(fake, timeout=0.3, max_retries=0) as model:
        with pytest.raises(ModelError) as caught:
            await model.complete(HELLO, [])

    assert caught.value.reason.startswith("model endpoint timed out after 1 attempts (0.3s each)")


async def test_a_stream_that_keeps_flowing_may_last_longer_than_the_timeout(fake: FakeOpenAI) -> None:
    fake.reply_text("one two three four five six", chunk_delay_s=0.1)  # ~0.9 s in all, 0.1 s between chunks
    collector = Collector()
    async with make_model(fake, timeout=0.5, max_retries=0) as model:
        response = await model.complete(HELLO, [], on_text=collector)

    assert response.text == "one two three four five six" and len(collector.deltas) == 6


async def test_credentials_in_the_url_are_sent_as_basic_auth_and_never_shown() -> None:
    async with FakeOpenAI() as fake:
        base_url = fake.base_url.replace("http://", "http://proxy-user:proxy%20secret@")
        async with OpenAIChatModel("local-llama", base_url=base_url, timeout=2.0) as model:
            assert "proxy%20secret" not in repr(model)
            assert (await model.complete(HELLO, [])).text == "ok"
            fake.reply_error(400, "no such model")
            with pytest.raises(ModelError) as caught:
                await model.complete(HELLO, [])

    assert (
        fake.requests[0].headers["authorization"]
        == "Basic " + base64.b64encode(b"proxy-user:proxy secret").decode()
    )
    assert "secret" not in caught.value.reason


async def test_a_proxy_named_in_the_environment_is_used(fake: FakeOpenAI, monkeypatch) -> None:
    """HTTP_PROXY reaches the model endpoint through the proxy (here the fake itself, which answers the
    proxied request: the endpoint's own host does not resolve)."""
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, fake.base_url.removesuffix("/v1"))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    async with OpenAIChatModel(
        "gpt-4o-mini", base_url="http://models.invalid/v1", api_key=KEY, timeout=2.0, max_retries=0
    ) as model:
        assert (await model.complete(HELLO, [])).text == "ok"

    assert fake.requests[0].path == "/v1/chat/completions"


async def test_no_key_sends_no_authorization_header() -> None:
    async with FakeOpenAI() as fake:
        async with OpenAIChatModel("local-llama", base_url=fake.base_url + "/", timeout=2.0) as model:
            response = await model.complete(HELLO, [])

    assert response.text == "ok"
    assert "authorization" not in fake.requests[0].headers
    assert fake.requests[0].path == "/v1/chat/completions"


async def test_a_shared_client_is_left_open_for_its_owner(fake: FakeOpenAI) -> None:
    async with httpx.AsyncClient() as shared:
        model = make_model(fake, client=shared)
        assert (await model.complete(HELLO, [])).text == "ok"
        await model.aclose()

        assert not shared.is_closed
        assert (
            await shared.get(f"{fake.base_url}/models", headers={"Authorization": f"Bearer {KEY}"})
        ).is_success


async def test_a_shared_aiohttp_session_is_used_and_left_open_for_its_owner(fake: FakeOpenAI) -> None:
    async with aiohttp.ClientSession() as shared:
        model = make_model(fake, client=shared)
        assert (await model.complete(HELLO, [])).text == "ok"
        await model.aclose()

        assert not shared.closed
        async with shared.get(
            f"{fake.base_url}/models", headers={"Authorization": f"Bearer {KEY}"}
        ) as listed:
            assert listed.status == 200


async def test_calls_of_one_answer_under_one_id_get_ids_of_their_own(fake: FakeOpenAI) -> None:
    """Xinference gives every call of an answer the completion's id (``call_<completion uuid>``,
    github.com/xorbitsai/inference/issues/4237): results are paired with calls by id, and each call is run once
    by it, so the later calls get new ids, streamed or not. The first keeps the server's."""
    same = "call_f0de99f4-6fe1-4235-b4d9-1fcb010fa197"
    for _ in range(2):
        fake.reply_tool_calls(("refund", {"charge_id": "ch_1"}, same), ("refund", {"charge_id": "ch_2"}, same))
    async with make_model(fake) as streaming, make_model(fake, stream=False) as plain:
        for response in (await streaming.complete(HELLO, [REFUND]), await plain.complete(HELLO, [REFUND])):
            ids = [c.id for c in response.tool_calls]
            assert ids[0] == same and len(set(ids)) == 2, ids
            assert [json.loads(c.arguments) for c in response.tool_calls] == [{"charge_id": "ch_1"},
                                                                             {"charge_id": "ch_2"}]
