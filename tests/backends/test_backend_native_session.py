"""What the bot's own loop as a backend (``bot.backends.native``) shares with the built-in loop beyond the approve
cycle: a tool's tenant and caller come from the signed request and the approval, never from the model; a failed
or empty model answer says the built-in loop's words; the model sees the configured history window; and what the
turn's owner writes while the agent works is read before the next model call. Driven end to end through signed
Slack requests, the model on the local OpenAI-compatible server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.approval import Approval, allowed, always, rejected
from bot.backends.native import native
from bot.engine.call_outcomes import IGNORED_MESSAGE
from bot.models.openai import OpenAIChatModel
from bot.models.scripted import ScriptedModel
from bot.models.words import FILTERED_NOTE, OUT_OF_CREDIT
from bot.tools import Tool, ToolContext, tool
from localslack.seed import ALICE, BOB, BOT_USER_ID, GENERAL, OTHER_TEAM_ID, TEAM_ID
from tests.e2e.framework_script import told_the_model
from tests.e2e.test_approval_flow import button, card_in, mention_and_wait_for_card
from tests.fakes.openai_server import FakeOpenAI

KEY = "sk-test"


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=KEY) as server:
        yield server


def model_of(fake: FakeOpenAI) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-4o-mini", base_url=fake.base_url, api_key=KEY, max_retries=0)


def who(ctx: ToolContext) -> dict[str, Any]:
    return {"tenant": ctx.tenant, "principal": ctx.principal.principal_id if ctx.principal else None,
            "asked_by": ctx.session.auth.current.principal_id if ctx.session.auth.current else None,
            "session": ctx.session.id, "key": ctx.idempotency_key, "workspace": ctx.workspace is not None}


def who_tools() -> list[Tool]:
    @tool
    async def charges_of(team_id: str, ctx: ToolContext) -> dict[str, Any]:
        """List a team's charges."""
        return who(ctx)

    def bob_approves(ctx) -> object:  # noqa: ANN001 - a response policy
        return allowed() if ctx.response.principal.slack_user_id == BOB else rejected("Only Bob approves.")

    @tool(approval=Approval(request=always(), response=bob_approves))
    async def refund_team(team_id: str, ctx: ToolContext) -> dict[str, Any]:
        """Refund a team's last charge."""
        return who(ctx)

    return [charges_of, refund_team]


async def said(local_slack, ts: str, words: str) -> str:  # noqa: ANN001 - LocalSlack
    """The bot's finished reply in the thread that contains ``words`` (waiting for it)."""

    def reply() -> str | None:
        for message in local_slack.messages(GENERAL, ts):
            if message.user == BOT_USER_ID and not message.streaming and words in (message.text or ""):
                return message.text
        return None

    return await local_slack.wait_for(reply, timeout_s=10)


async def test_a_tool_s_tenant_and_caller_are_the_signed_request_s_and_the_approver_s_never_the_model_s(
        local_slack, start_app, fake):
    fake.reply_tool_call("charges_of", {"team_id": OTHER_TEAM_ID}, "call_list")
    fake.reply_tool_call("refund_team", {"team_id": OTHER_TEAM_ID}, "call_refund")
    fake.reply_text("Done.")
    await start_app(ScriptedModel([]), [], agent=native(model_of(fake), who_tools()))

    ts, card = await mention_and_wait_for_card(local_slack, f"refund {OTHER_TEAM_ID}'s last charge")
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))
    await said(local_slack, ts, "Done.")

    alice, bob = f"slack:{TEAM_ID}:{ALICE}", f"slack:{TEAM_ID}:{BOB}"
    listed, refunded = (json.loads(told_the_model(fake, c)) for c in ("call_list", "call_refund"))
    # the input names another team: the tool's tenant is still the workspace the signed request came from
    assert listed["tenant"] == refunded["tenant"] == TEAM_ID
    # a call that ran without asking runs under the turn's owner; an approved one under its approver
    assert (listed["principal"], refunded["principal"]) == (alice, bob)
    assert listed["asked_by"] == refunded["asked_by"] == alice
    assert listed["workspace"] and refunded["workspace"]
    # the built-in loop's key: session, turn, step, call (each step its own)
    keys = []
    for said_of, call_id in ((listed, "call_list"), (refunded, "call_refund")):
        session, key = said_of["session"], said_of["key"]
        assert key.startswith(f"{session}:")
        turn, step, call = key.removeprefix(f"{session}:").rsplit(":", 2)
        assert turn and call == call_id
        keys.append((turn, step))
    assert keys[0][0] == keys[1][0] and keys[0][1] != keys[1][1]


async def test_a_model_failure_says_the_built_in_loop_s_words(local_slack, start_app, fake):
    fake.reply_recorded("openai_429_insufficient_quota.json")
    await start_app(ScriptedModel([]), [], agent=native(model_of(fake), who_tools()))
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> hello")

    await said(local_slack, ts, OUT_OF_CREDIT)
    assert "could not answer" not in json.dumps([m.text for m in local_slack.messages(GENERAL, ts)])


async def test_an_answer_cut_by_a_content_filter_says_so_as_the_built_in_loop_does(local_slack, start_app, fake):
    fake.reply_recorded("azure_stream_content_filter.sse")
    await start_app(ScriptedModel([]), [], agent=native(model_of(fake), who_tools()))
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> hello")

    text = await said(local_slack, ts, "Most people have their own")
    assert FILTERED_NOTE.strip("_") in text


async def test_the_model_sees_the_configured_history_window_of_a_long_conversation(local_slack, start_app, fake):
    for answer in ("Answer one.", "Answer two.", "Answer three."):
        fake.reply_text(answer)
    bot = await start_app(ScriptedModel([]), [], agent=native(model_of(fake), who_tools(), instructions="Be brief."),
                          BOT_HISTORY_WINDOW="3")
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> first question")
    await said(local_slack, ts, "Answer one.")
    for text, answer in (("second question", "Answer two."), ("third question", "Answer three.")):
        await local_slack.post_message(ALICE, GENERAL, text, thread_ts=ts)
        await said(local_slack, ts, answer)
    await bot.runtime.wait_idle()

    # the instructions, then the newest three messages from a person's message on (the built-in loop's view)
    assert [(m["role"], m["content"]) for m in fake.requests[-1].body["messages"]] == [
        ("system", "Be brief."), ("user", "second question"), ("assistant", "Answer two."),
        ("user", "third question")]
    assert len(fake.requests) == 3


def lookup_tool(ran: list[str]) -> Tool:
    @tool
    async def lookup_charge(charge_id: str) -> dict[str, Any]:
        """Look a charge up."""
        ran.append(charge_id)
        return {"charge_id": charge_id, "amount": 500}

    return lookup_charge


async def test_what_the_owner_writes_while_the_model_thinks_is_read_before_its_next_call_once(
        local_slack, start_app, fake):
    ran: list[str] = []
    fake.reply_delay(1.5)  # the model thinks: the owner writes meanwhile
    fake.reply_tool_call("lookup_charge", {"charge_id": "ch_1"}, "call_look")
    fake.reply_text("ch_2 it is: looked up.")
    fake.reply_text("You're welcome.")
    bot = await start_app(ScriptedModel([]), [], agent=native(model_of(fake), [lookup_tool(ran)]))

    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> look up ch_1")
    await local_slack.wait_for(lambda: len(fake.requests) == 1)
    # (mentioned: a thread's replies that do not are taken once its session is stored, with the turn's start)
    await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> actually, ch_2", thread_ts=ts)
    await said(local_slack, ts, "ch_2 it is")
    await bot.runtime.wait_idle()

    assert ran == ["ch_1"]
    second = [(m["role"], m.get("content")) for m in fake.requests[1].body["messages"]]
    assert second[-2:] == [("tool", json.dumps({"charge_id": "ch_1", "amount": 500})), ("user", "actually, ch_2")]
    assert len(fake.requests) == 2  # taken by the turn it steered: it started no turn of its own

    # the next turn reads the conversation with it once
    await local_slack.post_message(ALICE, GENERAL, "thanks", thread_ts=ts)
    await said(local_slack, ts, "You're welcome.")
    contents = [m.get("content") for m in fake.requests[-1].body["messages"]]
    assert contents.count("actually, ch_2") == 1 and contents[-1] == "thanks"


async def test_words_typed_past_an_open_card_end_it_and_the_model_reads_them_with_its_rejection(
        local_slack, start_app, fake):
    fake.reply_tool_call("refund_team", {"team_id": TEAM_ID}, "call_refund")
    fake.reply_text("Understood: no refund.")
    bot = await start_app(ScriptedModel([]), [], agent=native(model_of(fake), who_tools()))
    ts, card = await mention_and_wait_for_card(local_slack, "refund our last charge")

    await local_slack.post_message(ALICE, GENERAL, "never mind, keep the charge", thread_ts=ts)
    await said(local_slack, ts, "Understood: no refund.")
    await bot.runtime.wait_idle()

    # the card ends unanswered ("ignored"), its call does not run, and the model reads why and the words at once
    told = json.loads(told_the_model(fake, "call_refund"))
    assert (told["status"], told["message"], told["approval"]["status"]) == ("rejected", IGNORED_MESSAGE, "ignored")
    assert fake.requests[-1].body["messages"][-1] == {"role": "user", "content": "never mind, keep the charge"}
    assert len(fake.requests) == 2  # one model call read both: the words started no turn of their own


async def test_an_approved_call_that_asks_runs_under_its_approver_once_answered(local_slack, start_app, fake):
    def bob_approves(ctx) -> object:  # noqa: ANN001 - a response policy
        return allowed() if ctx.response.principal.slack_user_id == BOB else rejected("Only Bob approves.")

    @tool(approval=Approval(request=always(), response=bob_approves))
    async def refund_to(team_id: str, ctx: ToolContext) -> dict[str, Any]:
        """Refund a team's last charge to the account the customer picks."""
        account = await ctx.ask("Which account?", ["card", "wallet"])
        return {**who(ctx), "account": account.value}

    fake.reply_tool_call("refund_to", {"team_id": OTHER_TEAM_ID}, "call_refund")
    fake.reply_text("Done.")
    await start_app(ScriptedModel([]), [], agent=native(model_of(fake), [refund_to]))
    ts, card = await mention_and_wait_for_card(local_slack, "refund our last charge")
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for(lambda: "Which account?" in json.dumps(card_in(local_slack, ts).blocks))

    await local_slack.post_message(ALICE, GENERAL, "wallet", thread_ts=ts)
    await said(local_slack, ts, "Done.")

    told = json.loads(told_the_model(fake, "call_refund"))
    assert (told["account"], told["tenant"]) == ("wallet", TEAM_ID)
    assert told["principal"] == f"slack:{TEAM_ID}:{BOB}", "the run after the answer is still the approver's"


async def test_a_turn_stopped_at_its_card_carries_on_into_the_next_with_its_call_read_as_cancelled(
        local_slack, start_app, fake):
    """Alice stops her turn while its refund waits on Bob, then asks something else in the thread: the model
    reads the stopped turn's request and its call cancelled, as the built-in loop's does (before, the next turn
    began from the conversation before the stopped one, her first request forgotten)."""
    fake.reply_tool_call("refund_team", {"team_id": TEAM_ID}, "call_refund")
    fake.reply_text("Here are the charges.")
    await start_app(ScriptedModel([]), [], agent=native(model_of(fake), who_tools()))
    ts, card = await mention_and_wait_for_card(local_slack, text="refund our last charge")
    await local_slack.wait_for(lambda: local_slack.assistant_state(GENERAL, ts).session_status == "suspended")
    pressed = await local_slack.stop_agent_session(ALICE, GENERAL, ts, late=True)  # Slack's stop button
    assert pressed is not None and pressed.status == 200
    await said(local_slack, ts, "Stopped")
    await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> list our charges instead", thread_ts=ts)
    await said(local_slack, ts, "Here are the charges.")
    messages = fake.requests[-1].body["messages"]
    assert [m["role"] for m in messages if m["role"] != "system"] == ["user", "assistant", "tool", "user"]
    assert "refund our last charge" in messages[0 if messages[0]["role"] == "user" else 1]["content"]
    cancelled = json.loads(next(m for m in messages if m["role"] == "tool")["content"])
    assert (cancelled["status"], cancelled["code"]) == ("rejected", "TURN_CANCELLED")
