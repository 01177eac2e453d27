"""ScriptedModel: the offline model that plays a script and finds its place from the history."""

from __future__ import annotations

import json

import pytest

from bot.models import ModelError, ModelResponse, ScriptedModel, ToolSpec, Usage, call, calls, say

REFUND = ToolSpec(name="refund", description="Refund a charge.")
ASK = [{"role": "user", "content": "please refund ch_1"}]


def continue_history(messages: list[dict], response: ModelResponse, result: str = "done") -> list[dict]:
    """What the turn loop does: append the assistant message and a result per tool call."""
    history = [*messages, response.to_message()]
    history += [{"role": "tool", "tool_call_id": c.id, "content": result} for c in response.tool_calls]
    return history


async def test_steps_are_played_in_order_along_a_conversation() -> None:
    model = ScriptedModel([call("refund", charge_id="ch_1", amount=5), say("Refunded ch_1.")])

    first = await model.complete(ASK, [REFUND])
    [tool_call] = first.tool_calls
    assert tool_call.name == "refund"
    assert json.loads(tool_call.arguments) == {"charge_id": "ch_1", "amount": 5}
    assert tool_call.id.startswith("call_")
    assert first.finish_reason == "tool_calls"

    second = await model.complete(continue_history(ASK, first), [REFUND])
    assert second.text == "Refunded ch_1."
    assert second.tool_calls == []
    assert second.finish_reason == "stop"


async def test_calls_makes_several_tool_calls_with_unique_ids() -> None:
    step = calls(
        ("refund", {"charge_id": "ch_1"}), ("refund", {"charge_id": "ch_2"}), ("lookup", {}, "call_x")
    )
    model = ScriptedModel([step])

    response = await model.complete(ASK, [REFUND])

    assert [(c.name, json.loads(c.arguments)) for c in response.tool_calls] == [
        ("refund", {"charge_id": "ch_1"}),
        ("refund", {"charge_id": "ch_2"}),
        ("lookup", {}),
    ]
    ids = [c.id for c in response.tool_calls]
    assert ids[2] == "call_x"
    assert len(set(ids)) == 3
    assert call("refund").tool_calls[0].id != call("refund").tool_calls[0].id


async def test_callable_steps_see_the_conversation_sync_or_async() -> None:
    def echo_last(messages: list[dict], tools: list[ToolSpec]) -> ModelResponse:
        return say(f"you said {messages[-1]['content']!r}; tools: {[t.name for t in tools]}")

    async def summarise_results(messages: list[dict], tools: list[ToolSpec]) -> ModelResponse:
        results = [m["content"] for m in messages if m["role"] == "tool"]
        return say("results: " + ", ".join(results))

    model = ScriptedModel([echo_last, call("refund", charge_id="ch_1"), summarise_results])

    first = await model.complete(ASK, [REFUND])
    assert first.text == "you said 'please refund ch_1'; tools: ['refund']"
    history = continue_history(ASK, first) + [{"role": "user", "content": "go on"}]
    second = await model.complete(history, [REFUND])
    third = await model.complete(continue_history(history, second, result="refunded 5"), [REFUND])
    assert third.text == "results: refunded 5"


async def test_running_out_of_steps_is_a_model_error() -> None:
    model = ScriptedModel([say("only answer")])
    first = await model.complete(ASK, [])

    with pytest.raises(ModelError) as caught:
        await model.complete(continue_history(ASK, first), [])

    assert caught.value.reason == "scripted model has no more steps"
    assert caught.value.retryable is False


async def test_a_new_instance_finds_its_place_from_the_persisted_history() -> None:
    script = [call("refund", call_id="call_1", charge_id="ch_1"), say("Refunded."), say("Anything else?")]
    history = continue_history(ASK, await ScriptedModel(script).complete(ASK, [REFUND]))

    resumed = ScriptedModel(script)  # as if in a new process after a restart
    response = await resumed.complete(history, [REFUND])

    assert response.text == "Refunded."
    assert await ScriptedModel(script).complete(history, [REFUND]) == response


async def test_counting_mode_ignores_the_history() -> None:
    model = ScriptedModel([say("one"), say("two")], by_turn_position=False)

    assert (await model.complete(ASK, [])).text == "one"
    assert (await model.complete(ASK, [])).text == "two"
    with pytest.raises(ModelError):
        await model.complete(ASK, [])


async def test_requests_are_recorded_as_copies() -> None:
    model = ScriptedModel([say("a"), say("b")])
    messages = [{"role": "user", "content": "hi"}]

    await model.complete(messages, [REFUND])
    messages.append({"role": "assistant", "content": "a"})
    await model.complete(messages, [])

    assert model.requests == [
        ([{"role": "user", "content": "hi"}], [REFUND]),
        ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}], []),
    ]


async def test_recorded_and_handed_copies_are_deep() -> None:
    """Nested parts of a request (tool schemas, message content lists) are copied, not shared."""
    tool = ToolSpec(name="refund", parameters={"type": "object", "properties": {"id": {"enum": ("a", "b")}}})
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    seen = []
    model = ScriptedModel([lambda msgs, tools: seen.append((msgs, tools)) or say("ok")])

    await model.complete(messages, [tool])
    tool.parameters["properties"]["id"]["enum"] = ("c",)
    messages[0]["content"][0]["text"] = "changed"

    for recorded_messages, recorded_tools in (model.requests[0], seen[0]):
        assert recorded_messages == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
        assert recorded_tools[0].parameters["properties"]["id"]["enum"] == ("a", "b")  # a tuple stays a tuple


async def test_returned_responses_do_not_share_state_with_the_script() -> None:
    step = say("original")
    model = ScriptedModel([step], by_turn_position=False)

    response = await model.complete(ASK, [])
    response.text = "changed by a caller"

    assert step.text == "original"


async def test_on_text_receives_the_text_in_a_few_chunks() -> None:
    received: list[str] = []

    async def on_text(delta: str) -> None:
        received.append(delta)

    model = ScriptedModel([say("The refund is on its way."), call("refund")], by_turn_position=False)
    await model.complete(ASK, [], on_text=on_text)
    assert 2 <= len(received) <= 3
    assert "".join(received) == "The refund is on its way."

    received.clear()
    await model.complete(ASK, [], on_text=on_text)
    assert received == []  # a step without text streams nothing


async def test_usage_is_estimated_unless_the_step_sets_it() -> None:
    messages = [{"role": "user", "content": "x" * 400}]
    model = ScriptedModel(
        [
            say("y" * 40),
            calls(("a", {}), ("b", {})),
            ModelResponse(text="z", usage=Usage(prompt_tokens=7, completion_tokens=3)),
        ],
        by_turn_position=False,
    )

    spoken = await model.complete(messages, [])
    called = await model.complete(messages, [])
    explicit = await model.complete(messages, [])

    assert (spoken.usage.prompt_tokens, spoken.usage.completion_tokens) == (100, 10)
    assert (called.usage.prompt_tokens, called.usage.completion_tokens) == (100, 20)
    assert (explicit.usage.prompt_tokens, explicit.usage.completion_tokens) == (7, 3)
