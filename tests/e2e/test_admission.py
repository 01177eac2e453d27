"""One admission check for every way a turn can start or go on: a Slack Connect guest the
guest gate refuses gets the same refusal at a mention, a DM (App Home's Messages tab), an assistant thread,
``/agent schedule`` and a card's buttons; no turn starts, no schedule is kept, no tick runs as them once their
channel is closed, and neither a click nor the result API answers a request for them. Every refusal is in
the workspace's audit log (``guest.refused``: who, where, by which way). After ``/approvers guests on`` the
same guest works."""

from __future__ import annotations

import json

import aiohttp
from pydantic import BaseModel

from bot.approval import Approval, always
from bot.engine.admission import GUEST_REFUSAL
from bot.models.scripted import ScriptedModel, call, say
from bot.session import slack_session_id
from bot.tools import ToolContext, tool
from localslack.seed import ALICE, BOT_USER_ID, CAROL, ERIN, GENERAL, TEAM_ID
from tests.audit_polling import audit_entries
from tests.e2e.test_approval_flow import RUNS, button, card_in, refund_charge, refund_script
from tests.e2e.test_external import token_of
from tests.e2e.test_schedules import later, roots


def answers(n: int = 4) -> ScriptedModel:
    return ScriptedModel([say("Done.") for _ in range(n)])


async def open_to_guests(slack, on: bool = True) -> None:
    word = "now ask" if on else "no longer ask"
    before = sum(word in e.text for e in slack.ephemerals(CAROL))
    await slack.slash_command(CAROL, "/approvers", "guests on" if on else "guests off", channel_id=GENERAL)
    await slack.wait_for(lambda: sum(word in e.text for e in slack.ephemerals(CAROL)) > before)


async def refusals(slack, count: int) -> list:
    return await slack.wait_for(lambda: (told := [e for e in slack.ephemerals(ERIN) if GUEST_REFUSAL in e.text])
                                and len(told) >= count and told)


ERIN_ID = f"slack:{TEAM_ID}:{ERIN}"


async def guest_refusals(bot) -> list[tuple[str | None, str | None, str]]:  # noqa: ANN001
    """The audit's guest refusals: (who, where, which way)."""
    found = await audit_entries(bot.redis.client, TEAM_ID, kind="guest.refused")
    return [(e.actor, e.subject, e.data.get("via")) for e in found]


async def agent(slack, user: str, text: str) -> str:
    result = await slack.slash_command(user, "/agent", text, channel_id=GENERAL)
    assert result.status == 200
    return result.body


async def test_a_refused_guest_mentioning_the_agent_is_told_why_and_nothing_starts(local_slack, start_app):
    bot = await start_app(answers(), [])
    ts, deliveries = await local_slack.post_message(ERIN, GENERAL, f"<@{BOT_USER_ID}> hello")
    await refusals(local_slack, 1)
    await bot.wait_idle()
    assert not await bot.store.exists(slack_session_id(TEAM_ID, GENERAL, ts))
    for delivered in deliveries:  # Slack's redeliveries: nothing more is told or audited
        assert (await local_slack.redeliver(delivered)).status == 200
    await bot.wait_idle()
    # told where she wrote: a message of her own with no replies has no thread anyone would open (seen
    # in the browser walk: the refusal sat unseen in that thread)
    [told] = [e for e in local_slack.ephemerals(ERIN) if e.channel == GENERAL]
    assert told.thread_ts is None
    assert await guest_refusals(bot) == [(ERIN_ID, f"channel:{GENERAL}", "message")], "audited, once"

    await open_to_guests(local_slack)
    ts, _ = await local_slack.post_message(ERIN, GENERAL, f"<@{BOT_USER_ID}> hello")
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Done." in m.text)


async def test_a_refused_guest_in_a_dm_with_the_app_is_told_why_and_nothing_starts(local_slack, start_app):
    """The App Home's Messages tab is the DM with the app: the same gate, the same words."""
    bot = await start_app(answers(), [])
    dm = local_slack.dm_channel(ERIN)
    await local_slack.post_message(ERIN, dm, "hello")
    await refusals(local_slack, 1)
    await bot.wait_idle()
    assert not await bot.store.exists(slack_session_id(TEAM_ID, dm, "dm"))

    await bot.deps.governance.policies.set_allow_external(TEAM_ID, True, actor="test")  # outsiders admitted
    await local_slack.post_message(ERIN, dm, "hello")
    await local_slack.wait_for_message(dm, predicate=lambda m: "Done." in m.text)


async def test_a_refused_guest_in_an_assistant_thread_is_told_why_and_nothing_starts(local_slack, start_app):
    bot = await start_app(answers(), [])
    dm, thread_ts, _ = await local_slack.open_assistant(ERIN, context_channel=GENERAL)
    await local_slack.post_message(ERIN, dm, "hello", thread_ts=thread_ts)
    await refusals(local_slack, 1)
    await bot.wait_idle()
    assert not await bot.store.exists(slack_session_id(TEAM_ID, dm, thread_ts))

    await bot.deps.governance.policies.set_allow_external(TEAM_ID, True, actor="test")
    await local_slack.post_message(ERIN, dm, "hello again", thread_ts=thread_ts)
    await local_slack.wait_for_message(dm, thread_ts=thread_ts, predicate=lambda m: "Done." in m.text)


async def test_a_refused_guest_cannot_schedule_turns(local_slack, start_app):
    bot = await start_app(answers(), [])
    said = await agent(local_slack, ERIN, "schedule every 1h post the report")
    assert GUEST_REFUSAL in said
    assert await bot.runtime.schedules.list(TEAM_ID) == []
    assert await guest_refusals(bot) == [(ERIN_ID, f"channel:{GENERAL}", "schedule")]
    later(bot, 3600 + 1)
    await bot.runtime.recover()
    await bot.wait_idle()
    assert roots(local_slack) == []

    await open_to_guests(local_slack)
    said = await agent(local_slack, ERIN, "schedule every 1h post the report")
    assert said.startswith(":alarm_clock: Scheduled.")
    [scheduled] = await bot.runtime.schedules.list(TEAM_ID)
    assert scheduled.owner.attributes["user_team_id"] != TEAM_ID, "stored as the guest she is"


async def test_scheduling_fails_closed_when_slack_cannot_say_who_is_asking(local_slack, start_app):
    """A slash command's payload does not say whether its author is a guest; Slack's ``users.info`` does.
    When it can't be asked, nothing is scheduled (and trying again works)."""
    bot = await start_app(answers(), [])
    local_slack.fail_next("users.info", error="internal_error")
    said = await agent(local_slack, ALICE, "schedule every 1h post the report")
    assert "couldn't check who you are" in said
    assert await bot.runtime.schedules.list(TEAM_ID) == []
    said = await agent(local_slack, ALICE, "schedule every 1h post the report")
    assert said.startswith(":alarm_clock: Scheduled.")


async def test_no_tick_runs_as_a_guest_once_their_channel_is_closed(local_slack, start_app):
    """Admitted when scheduling, then the channel was closed: the ticks are skipped (the schedule stays,
    so reopening the channel resumes it), none runs as her."""
    bot = await start_app(answers(), [])
    await open_to_guests(local_slack)
    said = await agent(local_slack, ERIN, "schedule every 1h post the report")
    assert said.startswith(":alarm_clock: Scheduled.")
    later(bot, 3600 + 1)
    await bot.runtime.recover()
    await local_slack.wait_for(lambda: len(roots(local_slack)) == 1)

    await open_to_guests(local_slack, on=False)
    for _ in range(2):
        later(bot, 3600 + 1)
        await bot.runtime.recover()
    await bot.wait_idle()
    assert len(roots(local_slack)) == 1, "no tick ran as the guest after her channel was closed"
    assert await guest_refusals(bot) == [(ERIN_ID, f"channel:{GENERAL}", "schedule tick")] * 2
    assert len(await bot.runtime.schedules.list(TEAM_ID)) == 1

    await open_to_guests(local_slack)
    later(bot, 3600 + 1)
    await bot.runtime.recover()
    await local_slack.wait_for(lambda: len(roots(local_slack)) == 2)


class Migration(BaseModel):
    database: str


class MigrationResult(BaseModel):
    rows_changed: int


@tool(external=True, result=MigrationResult, approval=Approval(request=always()))
async def run_migration(args: Migration, ctx: ToolContext) -> dict:
    """Run a database migration (by hand, elsewhere)."""
    raise AssertionError("an external tool's function never runs")


async def test_the_result_api_refuses_a_guest_whose_channel_was_closed(local_slack, start_app):
    bot = await start_app(ScriptedModel([call("run_migration", database="orders"),
                                   lambda messages, tools: say("Result: " + messages[-1]["content"])]),
                    [run_migration])
    await open_to_guests(local_slack)
    ts, _ = await local_slack.post_message(ERIN, GENERAL, f"<@{BOT_USER_ID}> migrate orders")
    card = await local_slack.wait_for(lambda: card_in(local_slack, ts))
    await local_slack.click(ERIN, GENERAL, card.ts, button(card, "Get a result token"))
    note = await local_slack.wait_for(lambda: [e for e in local_slack.ephemerals(ERIN) if "Bearer" in e.text])
    url, token = token_of(note[-1].text)
    await open_to_guests(local_slack, on=False)

    async with aiohttp.ClientSession() as http:
        async def post(body: dict) -> tuple[int, dict]:
            async with http.post(url, data=json.dumps(body), headers={"Authorization": f"Bearer {token}"}) as r:
                return r.status, await r.json()

        status, answer = await post({"rows_changed": 3})
        assert status == 403 and answer["error"] == GUEST_REFUSAL
        assert await guest_refusals(bot) == [(ERIN_ID, f"channel:{GENERAL}", "result")]
        assert any(b["type"] == "actions" for b in local_slack.message(GENERAL, card.ts).blocks), "still open"
        await open_to_guests(local_slack)
        status, answer = await post({"rows_changed": 3})
        assert status == 200 and answer["ok"] is True
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)


async def test_a_guest_whose_channel_was_closed_cannot_answer_her_own_earlier_card(local_slack, start_app):
    """Erin asked while #general was open to guests; an admin closed it before she approved. Her click is
    refused like a message of hers would be (the same words, privately), the card stays open and nothing
    runs; the refusal is audited. Reopened, the same click counts."""
    RUNS.clear()
    bot = await start_app(refund_script(), [refund_charge])
    await open_to_guests(local_slack)
    ts, _ = await local_slack.post_message(ERIN, GENERAL, f"<@{BOT_USER_ID}> refund ch_1 please")
    card = await local_slack.wait_for(lambda: card_in(local_slack, ts))
    await open_to_guests(local_slack, on=False)

    clicked = await local_slack.click(ERIN, GENERAL, card.ts, button(card, "Approve"))
    assert clicked.status == 200
    await refusals(local_slack, 1)
    await bot.wait_idle()
    assert RUNS == [] and card_in(local_slack, ts) is not None, "the card is still open; nothing ran"
    assert await guest_refusals(bot) == [(ERIN_ID, f"channel:{GENERAL}", "answer")]

    await open_to_guests(local_slack)
    await local_slack.click(ERIN, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    assert len(RUNS) == 1
