"""Reading the audit log as a person would: it lands with the delivery pass's close, a few milliseconds
after what that pass showed in Slack (store/audit_events.py), so a test that has just seen a reply polls
briefly instead of reading once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from store.audit import AuditEntry, AuditLog

POLL_S = 0.02


async def audit_entries(client: Any, team_id: str, *, until: Callable[[list[AuditEntry]], bool] = bool,
                        timeout_s: float = 5.0, **filters: Any) -> list[AuditEntry]:
    """The workspace's entries matching ``filters`` (``AuditLog.entries``) once ``until(entries)`` holds;
    what is there when ``timeout_s`` runs out otherwise (the test's own assertion then says what is wrong)."""
    log = AuditLog(client)
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        entries = await log.entries(team_id, limit=None, **filters)
        if until(entries) or asyncio.get_running_loop().time() > deadline:
            return entries
        await asyncio.sleep(POLL_S)
