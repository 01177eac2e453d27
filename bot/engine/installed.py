"""Whether the app is installed in a workspace: while it is not, nothing of that workspace settles, resumes,
fires or runs.

Slack's ``app_uninstalled`` (or the revocation of the bot's token) marks the workspace uninstalled; a new
installation (or, with one token from the environment, the next request Slack signs for that workspace,
which Slack sends only to an installed app) lifts the mark. Meanwhile its open requests wait: an answer or a
posted result is refused saying why, a turn that comes due is left for later, deadlines and reminders wait,
and a schedule's tick is skipped (the schedule is kept).

Asked on the approve cycle's path, so it costs no round trip there: this process keeps the marks it last
read and reads them again (one read, all workspaces) at most every ``MAX_AGE_S`` seconds, and each recovery
sweep reads them anyway. The replica that receives the uninstall knows at once; the others within that age.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Protocol

log = logging.getLogger(__name__)

MAX_AGE_S = 5.0
RETRY_MS = 60_000  # a turn of an uninstalled workspace that came due is looked at again this often

NOT_INSTALLED = (
    "The app is not installed in this workspace any more, so nothing can settle its requests now: "
    "they wait until the app is installed again."
)


class InstallMarks(Protocol):
    """Where the marks persist (``store.installations.InstallMarks``)."""

    async def uninstalled(self) -> set[str]: ...
    async def mark_uninstalled(self, team_ids: Iterable[str]) -> None: ...
    async def mark_installed(self, *team_ids: str) -> None: ...


class NotInstalled(Exception):  # noqa: N818 - a verdict: the work waits for a reinstall
    def __init__(self, team_id: str):
        super().__init__(f"the app is not installed in workspace {team_id}")
        self.team_id = team_id


class Installed:
    """The rule, with this process's brief copy of the marks. ``marks`` None: every workspace is installed."""

    def __init__(self, marks: InstallMarks | None = None, *, max_age_s: float = MAX_AGE_S):
        self._marks = marks
        self._max_age_s = max_age_s
        self._gone: frozenset[str] = frozenset()
        self._read_at = float("-inf")

    async def refresh(self) -> None:
        """Read the marks again (the recovery sweep calls this)."""
        if self._marks is not None:
            self._gone = frozenset(await self._marks.uninstalled())
            self._read_at = time.monotonic()

    async def installed(self, team_id: str | None) -> bool:
        """Is the app installed in ``team_id``? (A session of no workspace always is.)"""
        if self._marks is None or not team_id:
            return True
        if time.monotonic() - self._read_at > self._max_age_s:
            await self.refresh()
        return team_id not in self._gone

    async def require(self, team_id: str | None) -> None:
        if not await self.installed(team_id):
            raise NotInstalled(str(team_id))

    def known_uninstalled(self, team_id: str | None) -> bool:
        """As this process last read it, without reading (for a check on every request Slack sends)."""
        return bool(team_id) and team_id in self._gone

    async def uninstalled_from(self, team_ids: Iterable[str]) -> None:
        teams = [t for t in team_ids if t]
        if self._marks is None or not teams:
            return
        await self._marks.mark_uninstalled(teams)
        self._gone = self._gone | set(teams)
        log.warning(
            "the app is not installed in %s any more: its requests wait, its turns and schedules stop "
            "until it is installed again",
            ", ".join(sorted(teams)),
        )

    async def installed_in(self, team_id: str) -> None:
        if self._marks is None:
            return
        await self._marks.mark_installed(team_id)
        if team_id in self._gone:
            self._gone = self._gone - {team_id}
            log.info("the app is installed in %s again: its waiting requests may settle", team_id)
