"""What retiring a session needs from outside its slot (store/session_keys.py, Retention): whether its audit
lags. The audit's floor is in the session's slot (``_audit`` in ``P:out``), its progress in the workspace's
(store/audit.py); a script sees one slot, so the caller reads the progress and hands it to the script that
retires (``retire`` in store/turn_scripts.py), which asks for it only when the floor is there.
"""

from __future__ import annotations

import json
from typing import Any

from store.pipelined import evalsha, pipelined


def audit_asked(reply: Any) -> bool:
    """A message's record answers that it needs the session's audit progress (it ended; its audit may lag)."""
    return isinstance(reply, list) and len(reply) == 2 and reply[0] == b"audit"


def progress_key(session_id: str, raw_ref: bytes | str) -> str | None:
    """Where a session's audit progress is, its workspace read from its ref; None without one (nothing of it
    is audited)."""
    from store.audit import AuditLog  # (the audit's key names; the audit itself is the outbox's business)

    team = json.loads(raw_ref).get("team_id") if raw_ref else None
    return AuditLog.progress_key(team, session_id) if team else None


async def audit_progress(redis: Any, session_id: str, raw_ref: bytes | str) -> str:
    """A session's audit progress ('' none)."""
    key = progress_key(session_id, raw_ref)
    progress = await redis.get(key) if key else None
    return progress.decode() if progress else ""


async def retire_audited(redis: Any, retire: Any, keys_of: Any, now: int, claimed: list[tuple[str, int]],
                         verdicts: list[Any]) -> list[Any]:
    """``verdicts`` of the sweep's ``retire`` scripts, those that asked for their audit's progress (4) asked again
    with it: one round trip reads them all, one retires them."""
    asked = [i for i, (verdict, _) in enumerate(verdicts) if verdict == 4]
    if not asked:
        return verdicts
    keys = [progress_key(claimed[i][0], verdicts[i][1]) for i in asked]
    read = iter(await pipelined(redis, [("get", (key,)) for key in keys if key], []) if any(keys) else [])
    progress = [(next(read) or b"").decode() if key else "" for key in keys]
    again = await pipelined(redis, [evalsha(retire, keys_of(claimed[i][0]), [now, p])
                                    for i, p in zip(asked, progress, strict=True)], [retire])
    verdicts = list(verdicts)
    for i, verdict in zip(asked, again, strict=True):
        verdicts[i] = verdict
    return verdicts
