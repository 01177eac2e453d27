"""The model sees a bounded window of a long session, never a tool result without its call."""

from bot.engine.turns import RuntimeSettings, model_view
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from tests.engine.harness import assert_valid_history, make_runtime, recording_tool, say, shown


def conversation(turns: int) -> list[dict]:
    history = [{"role": "system", "content": "be brief"}]
    for n in range(turns):
        history += [
            {"role": "user", "content": f"question {n}"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": f"c{n}", "type": "function", "function": {"name": "t", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": "{}"},
            {"role": "assistant", "content": f"answer {n}"},
        ]
    return history


def test_window_keeps_the_system_prompt_and_starts_at_a_user_message():
    history = conversation(10)
    view = model_view(history, 6)
    assert view[0] == {"role": "system", "content": "be brief"}
    assert view[1]["role"] == "user" and view[1]["content"] == "question 9"
    assert len(view) == 5
    assert_valid_history(view)


def test_short_histories_and_a_zero_window_are_shown_whole():
    history = conversation(2)
    assert model_view(history, 200) == history
    assert model_view(conversation(50), 0) == conversation(50)


def test_one_long_turn_is_kept_whole_rather_than_cut():
    history = [{"role": "user", "content": "do many things"}]
    for n in range(10):
        history += [
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": f"c{n}", "type": "function", "function": {"name": "t", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": "{}"},
        ]
    assert model_view(history, 4) == history


async def test_runtime_shows_the_model_only_the_window(redis):
    tool_, _ = recording_tool("lookup")
    steps = []
    for n in range(4):
        steps += [call("lookup", call_id=f"q{n}"), model_say(f"done {n}")]
    model = ScriptedModel(steps, by_turn_position=False)
    runtime, _, _ = make_runtime(redis, model, [tool_], settings=RuntimeSettings(system_prompt="sys", history_window=5))
    for n in range(4):
        await say(runtime, f"turn {n}")
    last = shown(model)
    assert last[0]["content"] == "sys"
    assert [m["content"] for m in last if m["role"] == "user"] == ["turn 3"]
    assert_valid_history(last)
