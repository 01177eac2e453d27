"""Tool calls as tasks of the streamed answer, end to end: the real app over signed HTTP,
LocalSlack as Slack (``task_update`` chunks with Slack's names), real Redis.

A turn whose call still waits or runs after the status delay gets a stream with its tasks; each task ends in
the state its call ended in: approved (complete, "approved by @alice", the result as output), cancelled (error,
"cancelled: <reason>"), refused by the approval policy (error, "refused: …") and a tool that raised (error).
A quick approve cycle starts no stream (its Slack calls are unchanged: ``test_agent_sessions``)."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from bot.approval import Denied, Policy
from bot.models.scripted import ScriptedModel, call, say
from bot.tools import tool
from handlers.delivery.status import STATUS_DELAY_S
from localslack.seed import ALICE, BOT_USER_ID, GENERAL
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card, refund_charge

SLOW_S = STATUS_DELAY_S + 1.0  # a step that takes this long shows its tasks


class Charge(BaseModel):
    charge_id: str


@tool(approval=Policy(rule=lambda ctx: Denied("refunds over $25 need a ticket"), kind="custom",
                      label="refunds need a ticket"))
async def big_refund(args: Charge) -> dict:
    """A refund the policy refuses."""
    return {"refunded": args.charge_id}


@tool()
async def flaky_lookup(args: Charge) -> dict:
    """A lookup that raises."""
    raise RuntimeError(f"the payments API timed out for {args.charge_id}")


def slowly(text: str):  # noqa: ANN201
    """A model step that writes its answer after the status delay (the tasks' stream is up by then)."""
    async def step(messages, tools):  # noqa: ANN001, ARG001
        await asyncio.sleep(SLOW_S)
        return say(text)
    return step


def tasks_message(slack, ts: str):  # noqa: ANN001, ANN201
    return next((m for m in slack.messages(GENERAL, thread_ts=ts) if m.bot_id and m.tasks), None)


async def final_tasks(slack, ts: str) -> list[dict]:  # noqa: ANN001
    message = await slack.wait_for(
        lambda: (m := tasks_message(slack, ts)) is not None and not m.streaming and m, timeout_s=15)
    return message


async def test_an_approved_call_is_a_complete_task_approved_by_whom_with_its_result(local_slack, start_app):
    await start_app(ScriptedModel([call("refund_charge", charge_id="ch_1", amount=5.0), say("Refunded ch_1.")]),
                    [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    live = await local_slack.wait_for(lambda: tasks_message(local_slack, ts), timeout_s=STATUS_DELAY_S + 3)
    assert live.streaming and live.task_display_mode == "timeline"
    assert [(t["title"], t["status"], t["details"]) for t in live.tasks] == [
        ("refund_charge", "pending", "waiting for @alice")]
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    done = await final_tasks(local_slack, ts)
    [task] = done.tasks
    assert task["status"] == "complete" and task["details"] == "approved by @alice"
    assert task["output"] == '{"refunded": "ch_1"}'
    assert done.text == "Refunded ch_1." and [b["type"] for b in done.blocks] == [
        "task_card", "markdown", "context_actions"], "the tasks, the answer, its feedback: one message"
    replies = [m for m in local_slack.messages(GENERAL, thread_ts=ts) if m.bot_id and "Refunded" in m.text]
    assert replies == [done], "the answer ends the tasks' stream: no second post"


async def test_a_cancelled_call_is_an_error_task_that_says_why(local_slack, start_app):
    await start_app(ScriptedModel([call("refund_charge", charge_id="ch_1", amount=5.0), say("Not refunded.")]),
                    [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    await local_slack.wait_for(lambda: tasks_message(local_slack, ts), timeout_s=STATUS_DELAY_S + 3)
    await local_slack.post_message(ALICE, GENERAL, "cancel: the customer already got store credit", thread_ts=ts)
    [task] = (await final_tasks(local_slack, ts)).tasks
    assert (task["status"], task["details"]) == ("error", "cancelled: the customer already got store credit")


async def test_a_call_the_policy_refuses_is_an_error_task_with_the_policys_reason(local_slack, start_app):
    await start_app(ScriptedModel([call("big_refund", charge_id="ch_9"), slowly("That refund needs a ticket.")]),
                    [big_refund])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_9")
    [task] = (await final_tasks(local_slack, ts)).tasks
    assert (task["title"], task["status"]) == ("big_refund", "error")
    assert task["details"] == "refused: refunds over $25 need a ticket"


async def test_a_tool_that_raised_is_an_error_task_with_its_error(local_slack, start_app):
    await start_app(ScriptedModel([call("flaky_lookup", charge_id="ch_3"), slowly("The lookup failed.")]),
                    [flaky_lookup])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> look up ch_3")
    done = await final_tasks(local_slack, ts)
    [task] = done.tasks
    assert (task["title"], task["status"]) == ("flaky_lookup", "error")
    assert task["output"].startswith("failed:")
    assert done.text == "The lookup failed."


async def test_several_calls_in_a_turn_are_one_plan(local_slack, start_app):
    await start_app(ScriptedModel([call("flaky_lookup", charge_id="ch_3"), call("big_refund", charge_id="ch_4"),
                                   slowly("Neither worked.")]), [flaky_lookup, big_refund])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> look up ch_3 and refund ch_4")
    done = await final_tasks(local_slack, ts)
    assert [t["title"] for t in done.tasks] == ["flaky_lookup", "big_refund"]
    assert all(t["status"] == "error" for t in done.tasks)


async def test_where_slack_refuses_task_chunks_the_answer_is_posted_as_before(local_slack, start_app):
    local_slack.ws.stream_tasks_refusal = "invalid_arguments"  # an older workspace
    bot = await start_app(ScriptedModel([call("flaky_lookup", charge_id="ch_3"), slowly("The lookup failed."),
                                         call("flaky_lookup", charge_id="ch_4"), slowly("Failed again.")],
                                        by_turn_position=False), [flaky_lookup])
    for text, answer in (("look up ch_3", "The lookup failed."), ("look up ch_4", "Failed again.")):
        ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> {text}")
        await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m, a=answer: m.text == a)
        await bot.wait_idle()
    starts = [c for c in local_slack.calls if c.method == "chat.startStream"]
    assert [c.response.get("error") for c in starts] == ["invalid_arguments"], "asked once, then never again"


async def test_an_answer_written_slowly_streams_below_its_tasks_in_one_message(local_slack, start_app):
    """The tasks' stream is up (the card waited), the model then writes slowly: its text is appended to the
    same message (no second stream), and the answer's stopStream ends it with the task complete."""
    from bot.models.openai import OpenAIChatModel
    from tests.e2e.test_ai_surface import ANSWER, WORD_DELAY_S
    from tests.fakes.openai_server import FakeOpenAI

    async with FakeOpenAI(api_key="sk-test") as fake:
        fake.reply_tool_call("refund_charge", {"charge_id": "ch_1", "amount": 5.0})
        fake.reply_text(ANSWER, chunk_delay_s=WORD_DELAY_S)
        await start_app(OpenAIChatModel("gpt-4o-mini", base_url=fake.base_url, api_key="sk-test", max_retries=0),
                        [refund_charge])
        ts, card = await mention_and_wait_for_card(local_slack)
        await local_slack.wait_for(lambda: tasks_message(local_slack, ts), timeout_s=STATUS_DELAY_S + 3)
        await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
        grew = await local_slack.wait_for(
            lambda: (m := tasks_message(local_slack, ts)) is not None and m.streaming and m.text and m, timeout_s=10)
        assert ANSWER.startswith(grew.text) and grew.text != ANSWER, "the text grows in the tasks' message"
        done = await final_tasks(local_slack, ts)
    assert done.text == ANSWER and [t["status"] for t in done.tasks] == ["complete"]
    assert [c.method for c in local_slack.calls if "Stream" in c.method].count("chat.startStream") == 1
    assert not [m for m in local_slack.messages(GENERAL, thread_ts=ts) if m.bot_id and m is not done
                and ANSWER[:20] in m.text]
