"""Reading when a schedule fires (bot.engine.schedules.parse_when): what people write, in UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.engine.schedules import (
    ConfiguredSchedule,
    ScheduleError,
    configured_schedule,
    load_schedules_file,
    parse_when,
    reconcile,
    split_command,
)

NOW = datetime(2026, 12, 4, 10, 30, tzinfo=UTC)


@pytest.mark.parametrize(("text", "first", "every"), [
    ("in 10m", NOW + timedelta(minutes=10), None),
    ("in 2h", NOW + timedelta(hours=2), None),
    ("every 6h", NOW + timedelta(hours=6), 6 * 3600),
    ("daily 09:00", datetime(2026, 12, 5, 9, 0, tzinfo=UTC), 86400),
    ("daily 11:15", datetime(2026, 12, 4, 11, 15, tzinfo=UTC), 86400),
    ("at 2026-12-24 09:00", datetime(2026, 12, 24, 9, 0, tzinfo=UTC), None),
    ("  EVERY   1d ", NOW + timedelta(days=1), 86400),
])
def test_what_people_write_becomes_a_first_time_and_a_repeat(text, first, every) -> None:
    at, repeat, _ = parse_when(text, NOW)
    assert (at, repeat) == (first, every)


@pytest.mark.parametrize(("text", "says"), [
    ("tomorrow", "Write one of"), ("every 2m", "at most every 5 minutes"), ("at 2020-01-01 09:00", "future"),
    ("at soon", "2026-12-24 09:00"), ("in 0m", "future"), ("daily 25:00", "Write one of"),
])
def test_what_cannot_be_read_says_how_to_write_it(text, says) -> None:
    with pytest.raises(ScheduleError, match=says):
        parse_when(text, NOW)


def test_the_time_is_the_first_words_and_the_rest_is_the_prompt() -> None:
    assert split_command("in 10m check the queue") == ("in 10m", "check the queue")
    assert split_command("at 2026-12-24 09:00 send greetings") == ("at 2026-12-24 09:00", "send greetings")


# --- schedules from a file (BOT_SCHEDULES) ---------------------------------------------------------

def _entry(**over: str) -> ConfiguredSchedule:
    values = {"id": "nightly", "team": "T0LOCAL", "channel": "C0GENERAL", "when": "every 6h",
              "prompt": "post the nightly report", "on_behalf_of": "U0ALICE", **over}
    return ConfiguredSchedule.model_validate(values)


def test_a_file_schedule_ticks_on_the_same_grid_whichever_replica_reads_it_first() -> None:
    # two replicas starting a few minutes apart must put in the same tick, or it would fire twice
    early = configured_schedule(_entry(), NOW)
    late = configured_schedule(_entry(), NOW + timedelta(minutes=50))
    assert early.next_at == late.next_at == datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    assert early.schedule_id == "cfg-nightly" and early.every_s == 6 * 3600
    assert early.owner.slack_user_id == "U0ALICE" and early.owner.principal_id == "slack:T0LOCAL:U0ALICE"


def test_a_file_schedule_cannot_be_relative_to_start_up_and_says_what_to_write() -> None:
    with pytest.raises(ScheduleError, match="BOT_SCHEDULES: nightly: .*daily HH:MM"):
        configured_schedule(_entry(when="in 10m"), NOW)


def test_reconcile_keeps_unchanged_schedules_replaces_changed_ones_and_drops_removed_ones() -> None:
    kept, changed, gone = (configured_schedule(_entry(id=i), NOW) for i in ("kept", "changed", "gone"))
    by_hand = kept.model_copy(update={"schedule_id": "a1b2c3d4"})  # made with /agent schedule: not the file's
    stored = [kept.model_copy(update={"next_at": NOW + timedelta(hours=1)}), changed, gone, by_hand]
    edited = configured_schedule(_entry(id="changed", prompt="post the weekly report"), NOW)
    add, remove = reconcile([configured_schedule(_entry(id="kept"), NOW), edited], stored)
    assert [s.prompt for s in add] == ["post the weekly report"]
    assert sorted(s.schedule_id for s in remove) == ["cfg-changed", "cfg-gone"]


def test_a_schedules_file_that_is_wrong_names_the_variable_and_the_field(tmp_path) -> None:
    path = tmp_path / "schedules.yaml"
    path.write_text("schedules:\n  - id: Nightly Report\n    team: T0LOCAL\n")
    with pytest.raises(ScheduleError, match=r"BOT_SCHEDULES: .*schedules\.0\.id"):
        load_schedules_file(str(path))
    with pytest.raises(ScheduleError, match="BOT_SCHEDULES: cannot read"):
        load_schedules_file(str(tmp_path / "missing.yaml"))


def test_daily_is_the_schedulers_wall_clock_even_across_a_dst_change() -> None:
    """``daily 09:00`` in Paris is 07:00 UTC in summer time and 08:00 UTC after the clocks go back."""
    from bot.engine.schedules import new_schedule
    from bot.principals import slack_user

    before_change = datetime(2026, 10, 24, 12, 0, tzinfo=UTC)  # CEST (UTC+2); clocks go back on the 25th
    schedule = new_schedule("T1", "C1", "daily 09:00", "report", slack_user("T1", "U1"), before_change,
                            tz="Europe/Paris")
    assert schedule.tz == "Europe/Paris" and schedule.next_at == datetime(2026, 10, 25, 8, 0, tzinfo=UTC)
    assert schedule.following(schedule.next_at) == datetime(2026, 10, 26, 8, 0, tzinfo=UTC)
    summer = new_schedule("T1", "C1", "daily 09:00", "report", slack_user("T1", "U1"),
                          datetime(2026, 10, 23, 12, 0, tzinfo=UTC), tz="Europe/Paris")
    assert summer.next_at == datetime(2026, 10, 24, 7, 0, tzinfo=UTC)
    assert summer.following(summer.next_at) == datetime(2026, 10, 25, 8, 0, tzinfo=UTC)  # still 09:00 local
    at, _, _ = parse_when("at 2026-12-24 09:00", NOW, tz="Europe/Paris")
    assert at == datetime(2026, 12, 24, 8, 0, tzinfo=UTC)


def test_a_schedule_stored_before_time_zones_keeps_utc() -> None:
    from bot.engine.schedules import Schedule

    old = ('{"schedule_id":"ab12cd34","team_id":"T1","channel":"C1","prompt":"p","owner":{"authenticator":"slack",'
           '"issuer":"T1","principal_type":"user","principal_id":"slack:T1:U1"},"when":"daily 09:00",'
           '"next_at":"2026-12-05T09:00:00Z","every_s":86400}')
    schedule = Schedule.stored(old)
    assert schedule.tz == "UTC" and schedule.following(schedule.next_at) == datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


def test_a_schedule_line_names_its_zone_and_gives_the_next_time_as_a_slack_date() -> None:
    from blocks.schedules import schedule_line
    from bot.engine.schedules import new_schedule
    from bot.principals import slack_user

    daily = new_schedule("T1", "C1", "daily 09:00", "report", slack_user("T1", "U1"), NOW, tz="Europe/Paris")
    line = schedule_line(daily)
    assert "every day at 09:00 Europe/Paris" in line
    assert f"<!date^{int(daily.next_at.timestamp())}^{{date_short_pretty}} at {{time}}|2026-12-05 08:00 UTC>" in line
    assert "· every 6h ·" in schedule_line(new_schedule("T1", "C1", "every 6h", "r", slack_user("T1", "U1"), NOW))


def test_a_file_schedule_may_name_its_zone_and_a_zone_it_cannot_read_names_the_field(tmp_path) -> None:
    paris = configured_schedule(_entry(when="daily 09:00", tz="Europe/Paris"), NOW)
    assert paris.tz == "Europe/Paris" and paris.next_at == datetime(2026, 12, 5, 8, 0, tzinfo=UTC)
    assert configured_schedule(_entry(when="daily 09:00"), NOW).tz == "UTC"  # files written before zones
    path = tmp_path / "schedules.yml"
    path.write_text("schedules:\n- {id: n, team: T0LOCAL, channel: C0GENERAL, when: daily 09:00, prompt: p,"
                    " on_behalf_of: U0ALICE, tz: Mars/Olympus}\n")
    with pytest.raises(ScheduleError, match=r"schedules\.0\.tz: .*Mars/Olympus"):
        load_schedules_file(str(path))
