"""Bad input from the model, from tools and from callers: reported where it belongs, the turn goes on."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from bot.approval import always
from bot.models.base import ModelResponse, ToolCall
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.protocol import InputResponse, UnknownRequest
from bot.session import new_request_id
from bot.tools import Tool, ToolContext, tool
from tests.engine.harness import ALICE, make_runtime, recording_tool, say, session, shown, tool_results


class Refund(BaseModel):
    charge_id: str
    amount: float


def _raw_call(name: str, arguments: str, call_id: str = "c1") -> ModelResponse:
    return ModelResponse(tool_calls=[ToolCall(id=call_id, name=name, arguments=arguments)], finish_reason="tool_calls")


@pytest.mark.parametrize(("arguments", "expect"), [
    ('{"charge_id": "ch_1", "amount": ', "not valid JSON"),
    ('["ch_1", 5]', "JSON object"),
    ('{"charge_id": "ch_1"}', "amount"),
    ('{"charge_id": "ch_1", "amount": "lots"}', "amount"),
])
async def test_malformed_arguments_become_a_validation_error(redis, arguments, expect):
    ran: list[str] = []

    @tool
    async def refund(args: Refund, ctx: ToolContext) -> dict:
        """Refund a charge."""
        ran.append(args.charge_id)
        return {}

    model = ScriptedModel([_raw_call("refund", arguments), model_say("Let me fix that.")])
    runtime, channel, _ = make_runtime(redis, model, [refund])
    await say(runtime, "refund ch_1")
    assert ran == []
    seen = tool_results(shown(model))["c1"]
    assert expect in seen and "failed" in seen
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]


async def test_unknown_tool_is_an_error_result(redis):
    known, _ = recording_tool("lookup")
    model = ScriptedModel([call("launch_rockets", call_id="c1"), model_say("I can't do that.")])
    runtime, channel, _ = make_runtime(redis, model, [known])
    await say(runtime, "launch")
    seen = tool_results(shown(model))["c1"]
    assert "unknown tool" in seen and "launch_rockets" in seen and "lookup" in seen
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]


async def test_tool_that_raises_fails_and_the_turn_goes_on(redis):
    async def flaky(args: dict) -> dict:
        raise ConnectionError("ledger service unreachable")

    model = ScriptedModel([call("ledger", call_id="c1"), model_say("The ledger is down.")])
    runtime, channel, _ = make_runtime(redis, model, [Tool(flaky, name="ledger")])
    await say(runtime, "check the ledger")
    [result] = channel.of("action.result")
    assert result.status == "failed" and "ledger service unreachable" in result.error
    seen = json.loads(tool_results(shown(model))["c1"])
    assert seen["status"] == "failed" and "ledger service unreachable" in seen["error"]
    assert channel.of("message.completed")[0].text == "The ledger is down."
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]


@pytest.mark.parametrize("request_id", ["nonsense", "", new_request_id(session().session_id)],
                         ids=["nonsense", "empty", "well-formed"])  # stable ids: the random one differs per run
async def test_answer_to_an_unknown_request_raises(redis, request_id):
    runtime, _, _ = make_runtime(redis, ScriptedModel([]), [])
    with pytest.raises(UnknownRequest):
        await runtime.answer(InputResponse(request_id=request_id, option_id="approve", principal=ALICE))


async def test_an_answer_that_is_not_an_option_is_invalid(redis):
    gated, runs = recording_tool("deploy", approval=always())
    runtime, channel, store = make_runtime(redis, ScriptedModel([call("deploy"), model_say("ok")]), [gated])
    await say(runtime, "deploy")
    [req] = channel.requests()
    result = await runtime.answer(InputResponse(request_id=req.request_id, option_id="yolo", principal=ALICE))
    assert result.state == "invalid"
    assert (await store.get_request(req.request_id)).status == "open" and runs == []
