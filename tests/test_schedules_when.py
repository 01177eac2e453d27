"""Reading when a schedule fires (bot.schedules.parse_when): what people write, in UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.schedules import ScheduleError, parse_when, split_command

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
