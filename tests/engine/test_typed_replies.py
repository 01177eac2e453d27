"""Typed replies (DESIGN §8): which open request a message answers, and the session-limit prompt."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from bot.approval import always
from bot.engine.call_outcomes import DENIED_MESSAGE
from bot.engine.inputs import first_open_input, match_text
from bot.engine.turns import RuntimeSettings
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.protocol import (
    ActionRef,
    InputOption,
    InputRequest,
    approval_options,
    session_limit_options,
)
from tests.engine.harness import (
    ALICE,
    make_runtime,
    recording_tool,
    request_status,
    say,
    shown,
    tool_results,
    user_texts,
)

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def _request(rid: str, kind: str, at: datetime, options: list[InputOption], free: bool = False) -> InputRequest:
    return InputRequest(request_id=rid, kind=kind, prompt=rid, options=options, allow_free_text=free, created_at=at,
                        action=ActionRef(call_id=f"c_{rid}", tool_name="t"))


# --- unit: first_open_input and match_text ---------------------------------------------------------


def test_first_open_input_prefers_the_session_limit_prompt():
    approval = _request("a", "tool-approval", T0, approval_options())
    question = _request("q", "question", T0 + timedelta(seconds=1), [], free=True)
    limit = _request("l", "session-limit", T0 + timedelta(seconds=2), session_limit_options())
    assert first_open_input([approval, question, limit]).request_id == "l"
    assert first_open_input([limit, approval]).request_id == "l"


def test_first_open_input_is_otherwise_the_earliest_asked():
    later = _request("later", "tool-approval", T0 + timedelta(seconds=5), approval_options())
    earlier = _request("earlier", "question", T0, [], free=True)
    assert first_open_input([later, earlier]).request_id == "earlier"
    assert first_open_input([]) is None


@pytest.mark.parametrize(("text", "option"), [
    ("approve", "approve"), ("Approve", "approve"), (" approve ", "approve"), ("APPROVE", "approve"),
    ("1", "approve"), ("2", "cancel"), ("cancel", "cancel"), ("Cancel", "cancel"),
    ("3", None), ("0", None), ("approve it", None), ("", None), ("yes", None),
])
def test_match_text_on_an_approval(text, option):
    req = _request("a", "tool-approval", T0, list(reversed(approval_options())))  # stored order must not matter
    matched = match_text(req, text, ALICE)
    assert (matched.option_id if matched else None) == option
    if matched:
        assert matched.principal == ALICE and matched.request_id == "a"


@pytest.mark.parametrize(("text", "option"), [
    ("approve", "continue"), ("continue", "continue"), ("1", "continue"),
    ("stop", "stop"), ("Stop", "stop"), ("2", "stop"), ("go on", None),
])
def test_match_text_on_a_session_limit(text, option):
    matched = match_text(_request("l", "session-limit", T0, session_limit_options()), text)
    assert (matched.option_id if matched else None) == option


def test_match_text_on_a_question_keeps_free_text_as_typed():
    options = [InputOption(id="Saturday", label="Saturday"), InputOption(id="Sunday", label="Sunday")]
    req = _request("q", "question", T0, options, free=True)
    assert match_text(req, " saturday ").option_id == "Saturday"
    assert match_text(req, "2").option_id == "Sunday"
    free = match_text(req, "  Mostly the Billing migration ")
    assert free.option_id is None and free.text == "Mostly the Billing migration"


# --- engine: typed replies to an approval ----------------------------------------------------------


@pytest.mark.parametrize("text", ["approve", "Approve", " approve ", "1"])
async def test_typed_approve_runs_the_call(redis, text):
    gated, runs = recording_tool("deploy", approval=always())
    model = ScriptedModel([call("deploy", call_id="c1"), model_say("done")])
    runtime, channel, store = make_runtime(redis, model, [gated])
    await say(runtime, "deploy")
    [req] = channel.requests()
    posted = await say(runtime, text)
    assert posted.state == "answered" and posted.answer.state == "settled"
    assert len(runs) == 1
    assert channel.of("approval.settled")[0].outcome == "approved"
    assert text not in user_texts(shown(model))  # a matched reply is consumed, not read by the model
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]


@pytest.mark.parametrize("text", ["cancel", "Cancel", "2"])
async def test_typed_cancel_denies_the_call(redis, text):
    gated, runs = recording_tool("deploy", approval=always())
    model = ScriptedModel([call("deploy", call_id="c1"), model_say("ok, not deploying")])
    runtime, channel, _ = make_runtime(redis, model, [gated])
    await say(runtime, "deploy")
    posted = await say(runtime, text)
    assert posted.state == "answered" and posted.answer.state == "settled"
    assert runs == []
    assert channel.of("input.resolved")[0].resolutions[0].outcome == "denied"
    assert DENIED_MESSAGE in tool_results(shown(model))["c1"]


# --- engine: typed replies to a question -----------------------------------------------------------

DAYS = [{"label": "Saturday"}, {"label": "Sunday"}]


@pytest.mark.parametrize(("text", "answer"), [
    (" saturday ", "Saturday"), ("2", "Sunday"), ("Mostly the billing migration", "Mostly the billing migration"),
])
async def test_typed_reply_answers_a_question(redis, text, answer):
    model = ScriptedModel([call("ask_question", call_id="q1", question="Which day?", options=DAYS),
                           model_say("noted")])
    runtime, channel, _ = make_runtime(redis, model, [])
    await say(runtime, "plan the offsite")
    [req] = channel.requests()
    assert req.kind == "question" and req.allow_free_text is True
    posted = await say(runtime, text)
    assert posted.state == "answered"
    assert json.loads(tool_results(shown(model))["q1"]) == {"status": "answered", "answer": answer}
    assert channel.of("input.resolved")[0].resolutions[0].outcome == "answered"


# --- engine: the session-limit prompt --------------------------------------------------------------


def _limited(redis):
    noop, runs = recording_tool("noop")
    model = ScriptedModel([call("noop", call_id="n1"), model_say("finished")])
    runtime, channel, store = make_runtime(redis, model, [noop],
                                           settings=RuntimeSettings(system_prompt="", step_budget=1))
    return runtime, channel, store, model, runs


@pytest.mark.parametrize("text", ["approve", "continue", "1"])
async def test_session_limit_continue(redis, text):
    runtime, channel, store, model, runs = _limited(redis)
    await say(runtime, "work")
    [limit] = channel.requests()
    assert limit.kind == "session-limit"
    assert [(o.id, o.label) for o in limit.options] == [("continue", "Approve"), ("stop", "Stop")]
    assert channel.types()[-2:] == ["input.requested", "turn.waiting"]
    assert len(model.requests) == 1
    posted = await say(runtime, text)
    assert posted.state == "answered" and posted.answer.state == "settled"
    assert len(model.requests) == 2
    assert channel.of("message.completed")[-1].text == "finished"
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]


@pytest.mark.parametrize("text", ["stop", "2"])
async def test_session_limit_stop(redis, text):
    runtime, channel, store, model, runs = _limited(redis)
    await say(runtime, "work")
    posted = await say(runtime, text)
    assert posted.state == "answered"
    assert len(model.requests) == 1  # the model was not asked again
    [message] = channel.of("message.completed")
    assert "Stopped" in message.text
    assert channel.types()[-3:] == ["message.completed", "turn.completed", "session.waiting"]


async def test_unrelated_text_waits_behind_the_session_limit_prompt(redis):
    runtime, channel, store, model, runs = _limited(redis)
    await say(runtime, "work")
    [limit] = channel.requests()
    posted = await asyncio.wait_for(say(runtime, "also, check the logs"), 2)
    assert posted.state == "queued"
    assert await request_status(store, limit.request_id) == "open"  # the prompt stays open
    assert len(model.requests) == 1
    await say(runtime, "continue")
    # after continuing, the queued message reaches the model in the same turn
    assert "also, check the logs" in user_texts(shown(model))
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]
