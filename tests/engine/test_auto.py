"""auto(): a reviewing model decides clear (run) or caution (ask), against a local OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.approval import DEFAULT_AUTO_INSTRUCTIONS, auto
from bot.models.openai import OpenAIChatModel
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from tests.engine.harness import make_runtime, recording_tool, say
from tests.fakes.openai_server import FakeOpenAI


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key="sk-review") as server:
        yield server


@pytest.fixture
async def reviewer(fake: FakeOpenAI) -> AsyncIterator[OpenAIChatModel]:
    model = OpenAIChatModel("gpt-4o-mini", base_url=fake.base_url, api_key="sk-review", max_retries=0, timeout=5)
    yield model
    await model.aclose()


async def _run(redis, policy, **args):
    gated, runs = recording_tool("export_report", approval=policy)
    model = ScriptedModel([call("export_report", **args), model_say("done")])
    runtime, channel, _ = make_runtime(redis, model, [gated])
    await say(runtime, "export it")
    return runs, channel


async def test_clear_runs_without_asking(redis, fake, reviewer):
    fake.reply_text('{"decision": "clear", "reason": "read-only export for the requester"}')
    runs, channel = await _run(redis, auto(model=reviewer), month="2024-05")
    assert len(runs) == 1
    assert channel.of("input.requested") == []
    [review] = fake.requests
    messages = review.body["messages"]
    assert messages[0]["role"] == "system" and DEFAULT_AUTO_INSTRUCTIONS in messages[0]["content"]
    assert "export_report" in messages[1]["content"] and "2024-05" in messages[1]["content"]


async def test_caution_asks_a_person(redis, fake, reviewer):
    fake.reply_text('{"decision": "caution", "reason": "sends data outside"}')
    runs, channel = await _run(redis, auto(model=reviewer), to="someone@example.com")
    assert runs == []
    [req] = channel.requests()
    assert req.kind == "tool-approval" and req.action.tool_name == "export_report"
    assert len(fake.requests) == 1


async def test_oversize_input_goes_to_a_person_unreviewed(redis, fake, reviewer):
    runs, channel = await _run(redis, auto(model=reviewer), blob="x" * (64 * 1024 + 10))
    assert runs == []
    assert len(channel.requests()) == 1
    assert fake.requests == []  # the input was never sent to the reviewer


async def test_review_timeout_asks_a_person(redis, fake, reviewer):
    fake.reply_delay(3.0)
    fake.reply_text('{"decision": "clear"}')
    runs, channel = await _run(redis, auto(model=reviewer, timeout=0.3), month="2024-05")
    assert runs == []
    assert len(channel.requests()) == 1


async def test_review_endpoint_error_asks_a_person(redis, fake, reviewer):
    fake.reply_error(500, "The server had an error while processing your request.")
    runs, channel = await _run(redis, auto(model=reviewer), month="2024-05")
    assert runs == []
    assert len(channel.requests()) == 1
    assert len(fake.requests) == 1


async def test_unparseable_verdict_asks_a_person(redis, fake, reviewer):
    fake.reply_text("I think it is probably fine, but I'm not sure.")
    runs, channel = await _run(redis, auto(model=reviewer), month="2024-05")
    assert runs == [] and len(channel.requests()) == 1


async def test_instructions_and_criteria_override_the_prompt(redis, fake, reviewer):
    fake.reply_text('{"decision": "clear"}')
    policy = auto(
        instructions="You guard the finance team's tools. Be strict.",
        criteria={"clear": "Amounts under 10 EUR.", "caution": "Anything else."},
        model=reviewer,
    )
    runs, _ = await _run(redis, policy, amount=5)
    assert len(runs) == 1
    system = fake.requests[0].body["messages"][0]["content"]
    assert system.startswith("You guard the finance team's tools. Be strict.")
    assert "clear: Amounts under 10 EUR." in system and "caution: Anything else." in system
    assert DEFAULT_AUTO_INSTRUCTIONS not in system
