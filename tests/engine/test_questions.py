"""Questions (DESIGN §6–§8): ask_question's validation and results, and ctx.ask() durable by replay."""

from __future__ import annotations

import json
from datetime import date
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from bot.approval import always
from bot.builtin.ask_question import Question, ask_question
from bot.models.scripted import ScriptedModel, call, calls
from bot.models.scripted import say as model_say
from bot.protocol import InputResponse
from bot.session import SessionInfo
from bot.tools import Tool, ToolContext
from tests.engine.harness import (
    ALICE,
    BOB,
    assert_valid_history,
    make_runtime,
    recording_tool,
    request_status,
    say,
    shown,
    tool_results,
    user_texts,
)

DAYS = [{"label": "Saturday"}, {"label": "Sunday"}]


def _opts(*labels: str) -> list[dict]:
    return [{"label": label} for label in labels]


INVALID = {
    "one-option": {"question": "Which?", "options": _opts("Only")},
    "four-options": {"question": "Which?", "options": _opts("A", "B", "C", "D")},
    "duplicate-labels": {"question": "Which?", "options": _opts("Yes", "yes")},
    "six-word-label": {"question": "Which?", "options": _opts("one two three four five six", "No")},
    "81-char-label": {"question": "Which?", "options": _opts("x" * 81, "No")},
    "2001-char-question": {"question": "q" * 2001},
    "unknown-field": {"question": "Which?", "urgency": "high"},
}


@pytest.mark.parametrize("case", list(INVALID))
async def test_ask_question_validation_errors_go_back_to_the_model(redis, case):
    model = ScriptedModel([call("ask_question", call_id="q1", **INVALID[case]), model_say("Let me rephrase.")])
    runtime, channel, _ = make_runtime(redis, model, [])
    await say(runtime, "plan it")
    assert channel.of("input.requested") == []
    seen = tool_results(shown(model))["q1"]
    assert "invalid arguments" in seen
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]


async def test_ask_question_renders_options_as_a_select(redis):
    model = ScriptedModel([call("ask_question", call_id="q1", question="Which day?",
                                options=[{"label": "Saturday", "description": "the 4th"}, {"label": "Sunday"}]),
                           model_say("ok")])
    runtime, channel, _ = make_runtime(redis, model, [])
    await say(runtime, "plan it")
    [req] = channel.requests()
    assert req.kind == "question" and req.prompt == "Which day?" and req.display == "select"
    assert [(o.id, o.label, o.description) for o in req.options] == [
        ("Saturday", "Saturday", "the 4th"), ("Sunday", "Sunday", None)]
    assert req.allow_free_text is True and req.principal == ALICE
    assert channel.types()[-2:] == ["input.requested", "turn.waiting"]


async def test_open_question_without_options(redis):
    model = ScriptedModel([call("ask_question", call_id="q1", question="What is blocking you?"), model_say("ok")])
    runtime, channel, _ = make_runtime(redis, model, [])
    await say(runtime, "help")
    [req] = channel.requests()
    assert req.display == "text" and req.options == []
    await runtime.answer(InputResponse(request_id=req.request_id, text="The billing migration", principal=ALICE))
    assert json.loads(tool_results(shown(model))["q1"]) == {"status": "answered", "answer": "The billing migration"}


async def test_ask_question_answered_by_option(redis):
    model = ScriptedModel([call("ask_question", call_id="q1", question="Which day?", options=DAYS), model_say("ok")])
    runtime, channel, _ = make_runtime(redis, model, [])
    await say(runtime, "plan it")
    [req] = channel.requests()
    result = await runtime.answer(InputResponse(request_id=req.request_id, option_id="Sunday", principal=ALICE))
    assert result.state == "settled"
    assert json.loads(tool_results(shown(model))["q1"]) == {"status": "answered", "answer": "Sunday"}
    await runtime.wait_idle()  # the outbox delivers in the background: let the channel see everything
    [resolved] = channel.of("input.resolved")
    assert resolved.resolutions[0].outcome == "answered"
    assert resolved.resolutions[0].response.option_id == "Sunday"
    assert channel.of("approval.settled") == []  # questions are not approvals
    assert [r.status for r in channel.of("action.result")] == ["completed"]


async def test_ask_question_rejects_an_option_it_did_not_offer(redis):
    model = ScriptedModel([call("ask_question", call_id="q1", question="Which day?", options=DAYS), model_say("ok")])
    runtime, channel, store = make_runtime(redis, model, [])
    await say(runtime, "plan it")
    [req] = channel.requests()
    result = await runtime.answer(InputResponse(request_id=req.request_id, option_id="Monday", principal=ALICE))
    assert result.state == "invalid"
    assert await request_status(store, req.request_id) == "open"


async def test_ask_question_interrupted_when_the_person_steers_past_it(redis):
    # an approval asked before the question: unrelated text does not answer it, so it steers the turn
    gated, runs = recording_tool("deploy", approval=always())
    model = ScriptedModel([
        calls(("deploy", {}, "d1"), ("ask_question", {"question": "Which day?", "options": DAYS}, "q1")),
        model_say("OK, looking at the logs."),
    ])
    runtime, channel, _ = make_runtime(redis, model, [gated])
    await say(runtime, "deploy and plan")
    [parked] = channel.of("input.requested")
    assert [r.kind for r in parked.requests] == ["tool-approval", "question"]
    posted = await say(runtime, "forget it, check the logs first")
    assert posted.state == "queued"
    outcomes = {r.request_id: r.outcome for e in channel.of("input.resolved") for r in e.resolutions}
    assert sorted(outcomes.values()) == ["ignored", "ignored"]
    history = shown(model)
    assert_valid_history(history)
    results = tool_results(history)
    assert json.loads(results["q1"]) == {"interrupted": True}
    assert runs == []
    assert user_texts(history)[-1] == "forget it, check the logs first"


async def test_ask_question_unavailable_when_the_session_cannot_ask():
    ctx = ToolContext(session=SessionInfo(id="scheduled"), principal=None, call_id="c1", idempotency_key="k",
                      can_ask=False)
    assert await ask_question.invoke(Question(question="Which day?", options=DAYS), ctx) == {"status": "unavailable"}


async def test_someone_elses_message_does_not_answer_the_question(redis):
    # DESIGN §8: a message from someone other than the person the turn serves waits until the turn ends
    model = ScriptedModel([call("ask_question", call_id="q1", question="Which day?", options=DAYS),
                           model_say("Saturday it is."), model_say("Hi Bob.")])
    runtime, channel, store = make_runtime(redis, model, [])
    await say(runtime, "plan it", who=ALICE)
    [req] = channel.requests()
    posted = await say(runtime, "can someone review my PR?", who=BOB)
    assert posted.state == "queued"
    assert await request_status(store, req.request_id) == "open"
    await say(runtime, "saturday", who=ALICE)
    assert json.loads(tool_results(shown(model, 1))["q1"]) == {"status": "answered", "answer": "Saturday"}
    assert [s.principal for s in channel.of("turn.started")] == [ALICE, BOB]
    assert user_texts(shown(model))[-1] == "can someone review my PR?"


# --- ctx.ask() -------------------------------------------------------------------------------------


def _two_asks(effects: list[tuple], entries: list[int]) -> Tool:
    async def change_plan(args: dict, ctx: ToolContext) -> dict:
        entries.append(1)
        env = await ctx.ask("Which environment?", ["prod", "staging"])
        why = await ctx.ask("Why now?")
        effects.append((env.value, why.value, ctx.idempotency_key))
        return {"env": env.value, "why": why.value}

    return Tool(change_plan, name="change_plan")


async def test_ctx_ask_replays_and_runs_side_effects_once(redis):
    effects: list[tuple] = []
    entries: list[int] = []
    model = ScriptedModel([call("change_plan", call_id="cp1"), model_say("Planned.")])
    runtime, channel, _ = make_runtime(redis, model, [_two_asks(effects, entries)])
    await say(runtime, "change the plan")
    [first] = channel.requests()
    assert first.kind == "question" and first.prompt == "Which environment?"
    assert [o.id for o in first.options] == ["prod", "staging"] and first.display == "select"
    assert effects == []

    await runtime.answer(InputResponse(request_id=first.request_id, option_id="staging", principal=ALICE))
    await runtime.wait_idle()
    requests = channel.requests()
    assert len(requests) == 2 and requests[1].prompt == "Why now?" and requests[1].display == "text"
    assert effects == []
    assert channel.types()[-2:] == ["input.requested", "turn.waiting"]

    await say(runtime, "the release train leaves at 5")  # typed free text answers the open question
    assert len(effects) == 1
    env, why, key = effects[0]
    assert (env, why) == ("staging", "the release train leaves at 5")
    assert json.loads(tool_results(shown(model))["cp1"]) == {"env": "staging", "why": "the release train leaves at 5"}
    assert len(channel.of("action.started")) == 1 and len(channel.of("action.result")) == 1
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]
    assert len(model.requests) == 2


async def test_ctx_ask_interrupted_by_steering(redis):
    seen: list[str] = []

    async def pick(args: dict, ctx: ToolContext) -> dict:
        answer = await ctx.ask("Pick a region", ["eu", "us"], allow_free_text=False)
        seen.append(answer.status)
        return {"status": answer.status}

    model = ScriptedModel([call("pick", call_id="p1"), model_say("ok")])
    runtime, channel, _ = make_runtime(redis, model, [Tool(pick, name="pick")])
    await say(runtime, "pick one")
    assert channel.requests()[0].allow_free_text is False
    await say(runtime, "never mind, what's new?")
    assert seen == ["interrupted"]
    assert json.loads(tool_results(shown(model))["p1"]) == {"status": "interrupted"}
    assert user_texts(shown(model))[-1] == "never mind, what's new?"


# --- ctx.form() ------------------------------------------------------------------------------------


class Leave(BaseModel):
    first_day: date
    days: int = Field(ge=1, le=30)
    kind: Literal["vacation", "sick"] = "vacation"


class Unshowable(BaseModel):
    where: dict[str, str]


def _leave_tool(effects: list[dict]) -> Tool:
    async def book_leave(args: dict, ctx: ToolContext) -> dict:
        who = await ctx.ask("For whom?", ["me", "my team"], allow_free_text=False)
        form = await ctx.form(Leave, "When are you away?")
        assert form.values is not None
        effects.append({"who": who.value, **form.values.model_dump(mode="json")})
        return {"booked": form.values.days, "from": form.values.first_day.isoformat()}

    return Tool(book_leave, name="book_leave")


async def test_ctx_form_parks_durably_and_resumes_in_another_runtime_once(redis):
    effects: list[dict] = []
    model = ScriptedModel([call("book_leave", call_id="bl1"), model_say("Booked.")])
    runtime, channel, _ = make_runtime(redis, model, [_leave_tool(effects)])
    await say(runtime, "book my leave")
    [question] = channel.requests()
    await runtime.answer(InputResponse(request_id=question.request_id, option_id="me", principal=ALICE))
    await runtime.wait_idle()
    form = channel.requests()[-1]
    assert form.kind == "user-input" and form.display == "form" and not form.allow_free_text
    assert set(form.form["properties"]) == {"first_day", "days", "kind"}

    bad = await runtime.answer(InputResponse(request_id=form.request_id, values={"first_day": "soon", "days": 99},
                                             principal=ALICE))
    assert bad.state == "invalid" and "first_day" in bad.reason and "days" in bad.reason
    typed = await runtime.answer(InputResponse(request_id=form.request_id, text="2026-12-24", principal=ALICE))
    assert typed.state == "invalid" and "Open form" in typed.reason
    other = await runtime.answer(InputResponse(request_id=form.request_id,
                                               values={"first_day": "2026-12-24", "days": 5}, principal=BOB))
    assert other.state == "rejected"  # requester-only, like any question

    # a new process (after a restart, another replica) holds nothing of the first one but Redis
    restarted, _, _ = make_runtime(redis, model, [_leave_tool(effects)], channel=channel)
    done = await restarted.answer(InputResponse(request_id=form.request_id,
                                                values={"first_day": "2026-12-24", "days": 5}, principal=ALICE))
    assert done.state == "settled"
    await restarted.wait_idle()
    assert effects == [{"who": "me", "first_day": "2026-12-24", "days": 5, "kind": "vacation"}]
    assert json.loads(tool_results(shown(model))["bl1"]) == {"booked": 5, "from": "2026-12-24"}


async def test_a_form_no_slack_input_can_show_fails_the_call_and_says_why(redis):
    async def locate(args: dict, ctx: ToolContext) -> dict:
        await ctx.form(Unshowable, "Where?")
        return {}

    model = ScriptedModel([call("locate", call_id="l1"), model_say("ok")])
    runtime, channel, _ = make_runtime(redis, model, [Tool(locate, name="locate")])
    await say(runtime, "where")
    assert channel.requests() == []
    result = tool_results(shown(model))["l1"]
    assert "where" in result and "can't be shown as a form" in result
