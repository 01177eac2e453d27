"""Scheduled turns as Slack drives them: ``/agent schedule``, fired by the recovery
sweep of any replica exactly once per tick, run by the app on behalf of the person who scheduled it
(their approvals come to them: no deadlock), told apart by ``ctx.session.automated``."""

from __future__ import annotations

import asyncio
import json

import pytest

from bot.approval import always
from bot.models.scripted import ScriptedModel, call, say
from bot.tools import ToolContext, tool
from localslack.seed import ALICE, GENERAL
from tests.e2e.test_approval_flow import button

RUNS: list[bool] = []


@tool(approval=always())
async def restart_api(args: dict, ctx: ToolContext) -> dict:
    """Restart the API."""
    RUNS.append(ctx.session.automated)
    return {"restarted": True}


def unless_automated(ctx) -> str:
    return "not-applicable" if ctx.session.automated else "user-approval"


@tool(approval=unless_automated)
async def nightly_report(args: dict, ctx: ToolContext) -> dict:
    """Post the nightly report."""
    RUNS.append(ctx.session.automated)
    return {"reported": True}


def turns(tool_name: str, n: int) -> ScriptedModel:
    steps = []
    for _ in range(n):
        steps += [call(tool_name), lambda messages, tools: say("Result: " + messages[-1]["content"])]
    return ScriptedModel(steps)


def roots(slack) -> list:
    return [m for m in slack.messages(GENERAL) if "Scheduled by" in (m.text or "")]


async def schedule(slack, text: str) -> str:
    result = await slack.slash_command(ALICE, "/agent", text, channel_id=GENERAL)
    assert result.status == 200
    return result.body  # the private reply is the ack's text


def later(bot, seconds: float) -> None:
    now = bot.runtime.settings.clock() + seconds
    bot.runtime.settings.clock = lambda: now


async def test_a_scheduled_turn_starts_once_in_its_own_thread_and_asks_the_person_who_scheduled_it(
        local_slack, start_app):
    RUNS.clear()
    bot = await start_app(turns("restart_api", 1), [restart_api])
    said = await schedule(local_slack, "schedule in 10m restart the api")
    assert said.startswith(":alarm_clock: Scheduled.") and "in 10m" in said

    await bot.runtime.recover()
    assert roots(local_slack) == []  # not due yet
    later(bot, 11 * 60)
    await asyncio.gather(bot.runtime.recover(), bot.runtime.recover())  # two sweeps at once: one start
    [root] = await local_slack.wait_for(lambda: roots(local_slack) or None)
    assert f"<@{ALICE}>" in root.text and "restart the api" in root.text
    card = await local_slack.wait_for(lambda: next((m for m in local_slack.messages(GENERAL, thread_ts=root.ts)
                                                    if m.blocks and "Approval needed" in json.dumps(m.blocks)), None))
    assert f"<@{ALICE}>" in json.dumps(card.blocks)  # on her behalf: she decides
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=root.ts, predicate=lambda m: "Result:" in m.text)
    assert RUNS == [True]
    await bot.runtime.recover()
    assert len(roots(local_slack)) == 1  # once only: it does not repeat
    assert "You have no schedules" in await schedule(local_slack, "schedules")


async def test_a_policy_may_let_automated_turns_through_and_repeats_stop_when_unscheduled(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(turns("nightly_report", 3), [nightly_report])
    said = await schedule(local_slack, "schedule every 1h post the nightly report")
    schedule_id = said.split("`")[1]
    for n in (1, 2):
        later(bot, 3600 + 1)
        await bot.runtime.recover()
        await local_slack.wait_for(lambda n=n: len(RUNS) == n)
    assert RUNS == [True, True] and len(roots(local_slack)) == 2  # no cards: the policy let them through
    assert schedule_id in await schedule(local_slack, "schedules")
    assert "Removed" in await schedule(local_slack, f"unschedule {schedule_id}")
    later(bot, 3600 + 1)
    await bot.runtime.recover()
    assert len(roots(local_slack)) == 2

    ts, _ = await local_slack.post_message(ALICE, GENERAL, "<@U0BOT> post the nightly report")
    card = await local_slack.wait_for(lambda: next((m for m in local_slack.messages(GENERAL, thread_ts=ts)
                                                    if m.blocks and "Approval needed" in json.dumps(m.blocks)), None))
    assert card is not None and len(RUNS) == 2  # a person's own turn still asks


async def test_a_time_it_cannot_read_says_how_to_write_one(local_slack, start_app):
    await start_app(turns("restart_api", 1), [restart_api])
    said = await schedule(local_slack, "schedule tomorrowish restart")
    assert said.startswith(":warning:") and "daily 09:00" in said
    said = await schedule(local_slack, "schedule every 1m spam")
    assert "at most every 5 minutes" in said


async def test_app_home_lists_schedules_and_the_owner_removes_one(local_slack, start_app):
    from tests.e2e.test_governance import find, open_home

    bot = await start_app(turns("restart_api", 1), [restart_api])
    await schedule(local_slack, "schedule daily 09:00 restart the api")
    home = await open_home(local_slack, ALICE)
    assert "Scheduled" in json.dumps(home.blocks) and "every day at 09:00 Europe/London" in json.dumps(home.blocks)
    assert find(home.blocks, "schedules:remove") is not None
    await local_slack.click_in_view(ALICE, home.id, "schedules:remove")
    await local_slack.wait_for(lambda: find(local_slack.home_view(ALICE).blocks, "schedules:remove") is None)
    assert await bot.runtime.schedules.list("T0LOCAL") == []


async def test_a_tick_fired_again_after_a_crash_starts_nothing_twice(local_slack, start_app):
    """A replica died after starting the tick's thread and turn but before moving the timer on: the next
    sweep fires the same tick again, and finds both already there."""
    from bot.engine.schedules import fire

    RUNS.clear()
    bot = await start_app(turns("nightly_report", 2), [nightly_report])
    said = await schedule(local_slack, "schedule in 10m post the nightly report")
    [scheduled] = await bot.runtime.schedules.list("T0LOCAL")
    assert scheduled.schedule_id in said
    tick_ms = int(scheduled.next_at.timestamp() * 1000)
    store, workspace = bot.runtime.schedules, bot.runtime.parts.workspace
    await fire(store, workspace, bot.runtime, "T0LOCAL", scheduled.schedule_id, tick_ms)
    await store.add(scheduled)  # as if the crash came before the one-shot schedule was cleared
    await fire(store, workspace, bot.runtime, "T0LOCAL", scheduled.schedule_id, tick_ms)
    await local_slack.wait_for(lambda: len(RUNS) == 1)
    await bot.wait_idle()
    assert len(roots(local_slack)) == 1 and RUNS == [True]


def schedules_file(path, prompt: str | None) -> str:
    entry = (f"  - id: nightly\n    team: T0LOCAL\n    channel: {GENERAL}\n    when: every 1h\n"
             f"    prompt: {prompt}\n    on_behalf_of: {ALICE}\n") if prompt else ""
    path.write_text("schedules:\n" + entry if entry else "schedules: []\n")
    return str(path)


async def test_schedules_from_a_file_fire_once_across_replicas_and_follow_the_file(local_slack, start_app, redis,
                                                                                  tmp_path):
    RUNS.clear()
    path = tmp_path / "schedules.yaml"
    config = schedules_file(path, "post the nightly report")
    a = await start_app(turns("nightly_report", 1), [nightly_report], BOT_SCHEDULES=config)
    b = await start_app(turns("nightly_report", 1), [nightly_report], BOT_SCHEDULES=config)  # a second replica
    [scheduled] = await a.runtime.schedules.list("T0LOCAL")
    assert scheduled.schedule_id == "cfg-nightly" and scheduled.owner.slack_user_id == ALICE
    ticks = [m for m in await redis.zrange("hitl:timers", 0, -1) if b"cfg-nightly" in m]
    assert len(ticks) == 1  # both replicas put in the same tick

    for bot in (a, b):
        later(bot, 3600 + 1)
    await asyncio.gather(a.runtime.recover(), b.runtime.recover())
    await local_slack.wait_for(lambda: len(RUNS) == 1)
    [root] = roots(local_slack)
    assert f"<@{ALICE}>" in root.text and "post the nightly report" in root.text
    assert "cfg-nightly" in await schedule(local_slack, "schedules")  # hers: she may remove it by hand too

    await start_app(turns("nightly_report", 1), [nightly_report],
                    BOT_SCHEDULES=schedules_file(path, "post the weekly report"))  # the file was edited
    [edited] = await a.runtime.schedules.list("T0LOCAL")
    assert edited.prompt == "post the weekly report"
    assert len([m for m in await redis.zrange("hitl:timers", 0, -1) if b"cfg-nightly" in m]) == 1

    await start_app(turns("nightly_report", 1), [nightly_report], BOT_SCHEDULES=schedules_file(path, None))
    assert await a.runtime.schedules.list("T0LOCAL") == []  # taken out of the file: gone
    assert [m for m in await redis.zrange("hitl:timers", 0, -1) if b"cfg-nightly" in m] == []


async def test_a_schedules_file_it_cannot_use_stops_the_start_naming_the_variable(local_slack, start_app, tmp_path):
    from bot.config import ConfigError

    path = tmp_path / "schedules.yaml"
    path.write_text(f"schedules:\n  - {{id: soon, team: T0LOCAL, channel: {GENERAL}, when: in 10m, prompt: hi, "
                    f"on_behalf_of: {ALICE}}}\n")
    with pytest.raises(ConfigError, match="BOT_SCHEDULES: soon: .*depends on when the bot starts"):
        await start_app(turns("nightly_report", 1), [nightly_report], BOT_SCHEDULES=str(path))


async def test_editing_a_schedule_while_another_replica_holds_its_tick_leaves_one_chain(local_slack, start_app,
                                                                                       tmp_path):
    """Replica A has claimed the hourly tick and is starting its thread (Slack is slow
    just then) when the file is edited to ``every 2h`` and applied by replica B. The tick A holds still
    fires once; after it only the edited schedule ticks: 2 turns in the next 4 h, not 4 from two chains."""
    from bot.app import _apply_schedules_file

    RUNS.clear()
    path = tmp_path / "schedules.yaml"
    hourly = schedules_file(path, "post the nightly report")
    a = await start_app(turns("nightly_report", 8), [nightly_report], BOT_SCHEDULES=hourly)
    b = await start_app(turns("nightly_report", 8), [nightly_report], BOT_SCHEDULES=hourly)
    [scheduled] = await a.runtime.schedules.list("T0LOCAL")
    now = [scheduled.next_at.timestamp() + 1]  # one clock for both replicas, just past the tick
    for bot in (a, b):
        bot.runtime.settings.clock = lambda: now[0]

    held = local_slack.hold_next("chat.postMessage")  # A's tick posts its thread's first message: held there
    sweep = asyncio.create_task(a.runtime.recover())
    await asyncio.wait_for(held.reached.wait(), 5)
    path.write_text(path.read_text().replace("every 1h", "every 2h"))
    await _apply_schedules_file(str(path), b.runtime.schedules, now[0])  # B deploys the edited file
    held.release()
    await sweep
    await local_slack.wait_for(lambda: len(RUNS) == 1)  # the held tick ran, once

    for _ in range(8):  # four hours in half-hour steps, both replicas sweeping
        now[0] += 1800
        await asyncio.gather(a.runtime.recover(), b.runtime.recover())
        await a.wait_idle()
        await b.wait_idle()
    assert len(roots(local_slack)) == 1 + 2 and len(RUNS) == 1 + 2
    [edited] = await a.runtime.schedules.list("T0LOCAL")
    assert edited.when == "every 2h", "the edit stands: the held tick did not write the old schedule back"


async def test_a_tick_that_is_no_longer_the_schedules_current_one_starts_nothing(local_slack, start_app):
    """A timer left from before an edit (or a next tick put in by a replica whose schedule was edited
    meanwhile) finds its schedule has moved on: it starts no thread and no turn, and changes nothing."""
    from bot.engine.schedules import fire

    RUNS.clear()
    bot = await start_app(turns("nightly_report", 2), [nightly_report])
    await schedule(local_slack, "schedule every 1h post the nightly report")
    [scheduled] = await bot.runtime.schedules.list("T0LOCAL")
    stale_ms = int(scheduled.next_at.timestamp() * 1000) - 30 * 60 * 1000
    await fire(bot.runtime.schedules, bot.runtime.parts.workspace, bot.runtime, "T0LOCAL", scheduled.schedule_id,
               stale_ms)
    await bot.wait_idle()
    assert roots(local_slack) == [] and RUNS == []
    [after] = await bot.runtime.schedules.list("T0LOCAL")
    assert after.next_at == scheduled.next_at


async def test_daily_means_the_schedulers_own_clock_and_says_which_zone(local_slack, start_app):
    """``daily 09:00`` is 09:00 where the person is (``users.info`` ``tz``), and the answer says so; the next
    time is a Slack date token (each reader sees it in their own zone). No zone from Slack: UTC, said."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    local_slack.ws.user(ALICE).tz = "Europe/Paris"
    bot = await start_app(turns("restart_api", 1), [restart_api])
    said = await schedule(local_slack, "schedule daily 09:00 restart the api")
    assert "every day at 09:00 Europe/Paris" in said and "<!date^" in said, said
    [stored] = await bot.runtime.schedules.list("T0LOCAL")
    local = stored.next_at.astimezone(ZoneInfo("Europe/Paris"))
    assert (stored.tz, local.hour, local.minute) == ("Europe/Paris", 9, 0)
    assert local > datetime.fromtimestamp(bot.runtime.settings.clock(), ZoneInfo("Europe/Paris"))

    local_slack.ws.user(ALICE).tz = None  # Slack knows no zone for her (users.info without ``tz``)
    bot.deps.governance.admins.forget("T0LOCAL", ALICE)
    said = await schedule(local_slack, "schedule daily 10:00 restart the api again")
    assert "every day at 10:00 UTC" in said and "couldn't read your time zone" in said, said
