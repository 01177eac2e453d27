"""Scheduled turns (DESIGN §12, Time): a prompt the app itself sends, on a schedule, on behalf of a person.

A schedule says when (``in 10m``, ``at 2026-12-24 09:00``, ``every 2h``, ``daily 09:00`` — clock times
are in the scheduler's time zone, ``tz``: an IANA name from ``users.info``, UTC when Slack gave none or for
schedules stored before zones; ``daily`` keeps to the wall clock across DST changes), where (a channel) and what (the prompt); it remembers who made it. Each time it comes due, the app
starts a new thread in that channel and a turn in it, run by the app *on behalf of* that person: their
principal owns the turn, so the approvals it needs go to them (or to whoever the tools' policies name)
and never deadlock, and ``ctx.session.automated`` is True, so a request policy may let an automated
turn through without asking.

Each firing ("tick") is a timer in Redis (``hitl:timers``, like request deadlines): one replica claims
it, starts the thread once (the thread it started is remembered per tick) and the turn once (the
message is keyed by the tick), then puts the next tick in. A replica that dies mid-fire leaves the
claim to expire and another replica finishes the same tick; nothing starts twice.

A tick fires only while it is its schedule's current one (``next_at``), and moving the schedule on is a
compare-and-set on the schedule as the tick read it: an edit (or removal) made while another replica
held a tick wins, and that tick neither starts a second timer chain nor writes the old schedule back.
Every tick also asks the admission rule (``bot.engine.admission``) for its owner in its channel, as it reads
then: a guest whose channel was closed since gets the tick skipped, not a turn run as them.
"""

from __future__ import annotations

import logging
import re
import secrets
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from bot.approval import PolicySource
from bot.deferred import DeferredModel
from bot.engine.admission import admits
from bot.engine.installed import Installed
from bot.ports import Workspace, WorkspaceError
from bot.principals import Principal, slack_user
from bot.protocol import utcnow
from bot.session import SessionRef

log = logging.getLogger(__name__)

MIN_EVERY = timedelta(minutes=5)  # our floor: a schedule is not a busy loop
MAX_AHEAD = timedelta(days=366)
PROMPT_LIMIT = 2000
_UNITS = {"m": 60, "min": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^(\d{1,5})\s*(m|min|h|d)$")
_CLOCK = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")
WHEN_HELP = ("`in 30m`, `in 2h`, `at 2026-12-24 09:00`, `every 6h`, `daily 09:00` (times are in your time zone; "
             f"repeats at most every {int(MIN_EVERY.total_seconds() // 60)} minutes)")


def zone(name: str | None) -> ZoneInfo:
    """The time zone called ``name`` (an IANA name such as ``Europe/Paris``); UTC for none or one unknown here."""
    try:
        return ZoneInfo(name) if name else ZoneInfo("UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def known_zone(name: object) -> str | None:
    """``name`` if it is a time zone this machine knows (``users.info``'s ``tz`` may be absent or odd)."""
    return name if isinstance(name, str) and name and zone(name).key == name else None


def _at_clock(day: date, hour: int, minute: int, tz: ZoneInfo) -> datetime:
    """That wall-clock time on ``day`` in ``tz``, as UTC (zoneinfo picks the offset in force that day)."""
    return datetime.combine(day, time(hour, minute), tzinfo=tz).astimezone(UTC)


class ScheduleError(ValueError):
    """A schedule that can't be made; the message says how to write it."""


class Schedule(DeferredModel):
    schedule_id: str = Field(default_factory=lambda: secrets.token_hex(4))
    team_id: str | None
    channel: str
    prompt: str
    owner: Principal  # on whose behalf each turn runs (and who is asked)
    when: str  # as written, for lists
    next_at: datetime
    every_s: int | None = None  # repeats this often; None: once
    tz: str = "UTC"  # the scheduler's zone (IANA): ``daily``/``at`` clock times are read in it
    created_at: datetime = Field(default_factory=utcnow)
    _stored: str | None = PrivateAttr(default=None)  # the text it was read from (``stored``), if any

    @classmethod
    def stored(cls, raw: str | bytes) -> Schedule:
        """A schedule read from its store, remembering the exact text: the store moves it on only while
        that text is still the current one (an edit in between wins)."""
        schedule = cls.model_validate_json(raw)
        schedule._stored = raw.decode() if isinstance(raw, bytes) else raw
        return schedule

    @property
    def stored_as(self) -> str | None:
        return self._stored

    def following(self, tick: datetime) -> datetime | None:
        """The tick after ``tick`` (None: it does not repeat). ``daily HH:MM`` is the next day's HH:MM on the
        scheduler's wall clock, so a DST change moves the UTC time, not the local one."""
        if not self.every_s:
            return None
        head, _, clock = self.when.partition(" ")
        if head == "daily" and (match := _CLOCK.match(clock)):
            tz = zone(self.tz)
            return _at_clock(tick.astimezone(tz).date() + timedelta(days=1), int(match[1]), int(match[2]), tz)
        return tick + timedelta(seconds=self.every_s)


def parse_when(text: str, now: datetime, tz: str = "UTC") -> tuple[datetime, int | None, str]:
    """(first tick, repeat seconds or None, the spec as it will be shown) from what a person wrote; clock
    times (``daily``, ``at``) are read in the time zone ``tz``."""
    local = zone(tz)
    words = " ".join(text.strip().lower().split())
    head, _, rest = words.partition(" ")
    if head == "in" and (match := _DURATION.match(rest)):
        return now + _duration(match), None, words
    if head == "every" and (match := _DURATION.match(rest)):
        every = _duration(match)
        if every < MIN_EVERY:
            raise ScheduleError(f"repeat at most every {int(MIN_EVERY.total_seconds() // 60)} minutes")
        return now + every, int(every.total_seconds()), words
    if head == "daily" and (match := _CLOCK.match(rest)):
        today = now.astimezone(local).date()
        first = _at_clock(today, int(match[1]), int(match[2]), local)
        if first <= now:
            first = _at_clock(today + timedelta(days=1), int(match[1]), int(match[2]), local)
        return first, 86400, words
    if head == "at":
        try:
            at = datetime.fromisoformat(rest.replace(" ", "T")).replace(tzinfo=local).astimezone(UTC)
        except ValueError:
            raise ScheduleError(f"I can't read {rest!r} as a date and time; write it like 2026-12-24 09:00") from None
        if not now < at <= now + MAX_AHEAD:
            raise ScheduleError("pick a time in the future, within a year")
        return at, None, words
    raise ScheduleError(f"I can't read {text.strip()!r} as a time. Write one of: {WHEN_HELP}")


def _duration(match: re.Match[str]) -> timedelta:
    delta = timedelta(seconds=int(match[1]) * _UNITS[match[2]])
    if not timedelta(0) < delta <= MAX_AHEAD:
        raise ScheduleError("pick a time in the future, within a year")
    return delta


def new_schedule(team_id: str | None, channel: str, when: str, prompt: str, owner: Principal,
                 now: datetime, *, tz: str = "UTC") -> Schedule:
    prompt = prompt.strip()
    if not prompt:
        raise ScheduleError("say what the agent should do, after the time")
    if len(prompt) > PROMPT_LIMIT:
        raise ScheduleError(f"a scheduled prompt is at most {PROMPT_LIMIT} characters")
    tz = zone(tz).key
    first, every, spec = parse_when(when, now, tz)
    return Schedule(team_id=team_id, channel=channel, prompt=prompt, owner=owner, when=spec,
                    next_at=first, every_s=every, tz=tz)


def split_command(text: str) -> tuple[str, str]:
    """``in 10m check the queue`` → (``in 10m``, ``check the queue``): the time spec is the first two
    words, or three for ``at <date> <time>``."""
    words = text.split()
    size = 3 if words[:1] == ["at"] and len(words) > 2 and _CLOCK.match(words[2]) else 2
    return " ".join(words[:size]), " ".join(words[size:])


# --- schedules from a file (BOT_SCHEDULES) ---------------------------------------------------------

CONFIG_PREFIX = "cfg-"  # the ids of schedules a file defines; /agent schedule ids are hex


class ConfiguredSchedule(DeferredModel):
    """One entry of the schedules file: the same schedule in every replica and after every restart."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,39}$")  # stable: the schedule keeps its ticks across restarts
    team: str = Field(pattern=r"^[TE][A-Z0-9]{2,}$")  # the workspace the app is installed in
    channel: str = Field(pattern=r"^[CGD][A-Z0-9]{2,}$")
    when: str  # every …, daily HH:MM or at …; not "in …" (relative to which start-up?)
    prompt: str
    on_behalf_of: str = Field(pattern=r"^[UW][A-Z0-9]{2,}$")  # a person of that workspace: approvals go to them
    tz: str = "UTC"  # the zone its clock times (daily HH:MM, at …) are read in: an IANA name, e.g. Europe/Paris

    @field_validator("tz")
    @classmethod
    def _known(cls, value: str) -> str:
        if known_zone(value) is None:
            raise ValueError(f"{value!r} is not a time zone name like Europe/Paris or UTC")
        return value


class SchedulesFile(DeferredModel):
    model_config = ConfigDict(extra="forbid")

    schedules: list[ConfiguredSchedule] = Field(default_factory=list)


def load_schedules_file(path: str) -> list[ConfiguredSchedule]:
    """The entries of a schedules file (YAML or JSON); ScheduleError names the file and what is wrong."""
    import yaml  # here, not at import: only a bot with a schedules file reads YAML

    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
        entries = SchedulesFile.model_validate(raw).schedules
    except (OSError, yaml.YAMLError) as exc:
        raise ScheduleError(f"BOT_SCHEDULES: cannot read {path}: {exc}") from None
    except ValidationError as exc:
        where = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()[:3])
        raise ScheduleError(f"BOT_SCHEDULES: {path} is not a schedules file ({where})") from None
    seen: set[tuple[str, str]] = set()
    for entry in entries:
        if (entry.team, entry.id) in seen:
            raise ScheduleError(f"BOT_SCHEDULES: schedule id {entry.id!r} appears twice for {entry.team}")
        seen.add((entry.team, entry.id))
    return entries


def configured_schedule(entry: ConfiguredSchedule, now: datetime) -> Schedule:
    """The schedule an entry describes. Its first tick is the same whichever replica works it out:
    ``every N`` ticks on a grid from the epoch, ``daily``/``at`` at their clock time."""
    head = entry.when.strip().lower().split(" ", 1)[0]
    if head == "in":
        raise ScheduleError(f"BOT_SCHEDULES: {entry.id}: {entry.when!r} depends on when the bot starts; "
                            "use every …, daily HH:MM or at YYYY-MM-DD HH:MM")
    try:
        first, every, spec = parse_when(entry.when, now, entry.tz)
        schedule = new_schedule(entry.team, entry.channel, entry.when, entry.prompt,
                                slack_user(entry.team, entry.on_behalf_of), now, tz=entry.tz)
    except ScheduleError as exc:
        raise ScheduleError(f"BOT_SCHEDULES: {entry.id}: {exc}") from None
    if every and head == "every":
        grid = int(now.timestamp()) // every * every + every
        first = datetime.fromtimestamp(grid, UTC)
    return schedule.model_copy(update={"schedule_id": CONFIG_PREFIX + entry.id, "next_at": first, "when": spec,
                                       "every_s": every})


def same_definition(a: Schedule, b: Schedule) -> bool:
    """Whether two schedules say the same thing (ticks and creation times aside)."""
    return (a.team_id, a.channel, a.prompt, a.owner.principal_id, a.when, a.every_s, a.tz) == (
        b.team_id, b.channel, b.prompt, b.owner.principal_id, b.when, b.every_s, b.tz)


def reconcile(wanted: list[Schedule], stored: list[Schedule]) -> tuple[list[Schedule], list[Schedule]]:
    """(to add, to remove) so that the stored file-defined schedules become ``wanted``. One that is
    unchanged is left alone, keeping its next tick: a restart neither skips nor repeats a tick."""
    current = {(s.team_id, s.schedule_id): s for s in stored if s.schedule_id.startswith(CONFIG_PREFIX)}
    add, remove = [], []
    for schedule in wanted:
        old = current.pop((schedule.team_id, schedule.schedule_id), None)
        if old is not None and same_definition(old, schedule):
            continue
        if old is not None:
            remove.append(old)
        add.append(schedule)
    return add, [*remove, *current.values()]


def timer_member(team_id: str | None, schedule_id: str, tick_ms: int) -> str:
    return f"schedule:{team_id or '-'}|{schedule_id}|{tick_ms}"


def parse_member(rest: str) -> tuple[str | None, str, int] | None:
    """(team, schedule id, tick ms) from a timer member's part after ``schedule:``."""
    team, _, tail = rest.partition("|")
    schedule_id, _, tick = tail.partition("|")
    if not schedule_id or not tick.isdigit():
        return None
    return (None if team == "-" else team), schedule_id, int(tick)


class ScheduleStorePort(Protocol):
    async def get(self, team_id: str | None, schedule_id: str) -> Schedule | None: ...
    async def advance(self, schedule: Schedule, after: datetime, following: datetime | None) -> bool: ...
    async def thread_of(self, schedule: Schedule, tick_ms: int, ref: SessionRef | None) -> SessionRef | None: ...


class StartsTurns(Protocol):
    async def post_message(self, ref: SessionRef, principal: Principal | None, text: str, *,
                           message_id: str | None = None, automated: bool = False) -> object: ...


async def fire(schedules: ScheduleStorePort, workspace: Workspace | None, runtime: StartsTurns,
               team_id: str | None, schedule_id: str, tick_ms: int, *, policies: PolicySource | None = None,
               installed: Installed | None = None) -> None:
    """Start tick ``tick_ms`` of a schedule: its thread once, its turn once, then the next tick. Safe to
    run again for the same tick (after a crash, or by a second replica)."""
    schedule = await schedules.get(team_id, schedule_id)
    if schedule is None:
        return  # removed since: nothing to do
    if workspace is None or not hasattr(workspace, "start_thread"):
        log.warning("schedule %s is due, but this frontend cannot start threads", schedule_id)
        return
    tick = datetime.fromtimestamp(tick_ms / 1000, UTC)
    if int(schedule.next_at.timestamp() * 1000) != tick_ms:
        # not the schedule's current tick: it was edited (or moved on) while this timer waited or was
        # held; the current tick has its own timer, so firing this one would start a second chain
        log.info("schedule %s: tick %d is no longer its current one (%s); dropped", schedule_id, tick_ms,
                 schedule.next_at.isoformat())
        return
    if installed is not None and not await installed.installed(schedule.team_id):
        # its workspace uninstalled the app: no turn runs there unseen. Skipped, kept: a reinstall resumes it
        log.warning("schedule %s: the app is not installed in workspace %s; tick skipped", schedule_id,
                    schedule.team_id)
        await schedules.advance(schedule, tick, schedule.following(tick))
        return
    if not await admits(schedule.owner, schedule.channel, source=policies, via="schedule tick"):
        # asked at every tick, not only when it was made: a guest whose channel was closed since gets no
        # turn run as them. The tick is skipped, the schedule kept (reopening the channel resumes it).
        log.warning("schedule %s: %s may no longer start turns in %s; tick skipped", schedule_id,
                    schedule.owner.principal_id, schedule.channel)
        await schedules.advance(schedule, tick, schedule.following(tick))
        return
    ref = await schedules.thread_of(schedule, tick_ms, None)
    if ref is None:
        try:
            started = await workspace.start_thread(schedule.team_id, schedule.channel,  # type: ignore[attr-defined]
                                                   owner=schedule.owner, prompt=schedule.prompt)
        except WorkspaceError as exc:  # the channel is gone, the app was removed…: skip this tick, say why
            log.warning("schedule %s could not start its thread in %s: %s", schedule_id, schedule.channel, exc)
            await schedules.advance(schedule, tick, schedule.following(tick))
            return
        ref = await schedules.thread_of(schedule, tick_ms, started)  # first writer's thread wins
    assert ref is not None
    await runtime.post_message(ref, schedule.owner, schedule.prompt, message_id=f"sched:{schedule_id}:{tick_ms}",
                               automated=True)
    await schedules.advance(schedule, tick, schedule.following(tick))
