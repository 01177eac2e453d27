"""Who may start, steer or answer a turn: one rule, asked by every entry point (DESIGN §5, Slack Connect).

A member of the installation's workspace (or of its Enterprise Grid org) always may. A Slack Connect
guest may only where the workspace admits outsiders or an admin opened the channel to guests
(``/approvers guests on``). Every way a turn can start asks :func:`admits` with the person a verified
payload named: a mention, a DM (App Home's Messages tab), an assistant thread, ``/agent schedule``, each
tick of a schedule (the owner, in the schedule's channel, as the policy reads *at the tick*), a result
posted to the result API, and every answer to a request (a click, a select, a form: the settle path, after
the response policy let the person answer), as the policy reads *then*: a guest whose channel was closed since she asked answers
nothing, as she could type nothing. Fails closed: a guest is refused when the policy cannot be read. Every
refusal is audited (``guest.refused``).
"""

from __future__ import annotations

import logging

from bot.approval import PolicySource
from bot.governance import is_external
from bot.principals import Principal

log = logging.getLogger(__name__)

# The one refusal a guest gets, wherever they asked.
GUEST_REFUSAL = ("Only people of this workspace can ask the agent here, so your message was not passed on. "
                 "Ask someone from the workspace to run it for you, or a workspace admin to open this channel to "
                 "guests (`/approvers guests on`).")


async def admits(principal: Principal | None, channel_id: str | None, *, source: PolicySource | None,
                 via: str | None = None) -> bool:
    """Whether ``principal`` may start or steer a turn in ``channel_id``, or answer one of its requests.
    ``source``: the policy store the caller was given (None: guests are refused). ``via``: which way they
    came (``message``, ``answer``, ``schedule``, ``schedule tick``, ``result``): a refusal is then audited
    (:func:`audit_refusal`); without it the caller audits it."""
    admitted = await _admits(principal, channel_id, source=source)
    if not admitted and via is not None:
        await audit_refusal(principal, channel_id, source=source, via=via)
    return admitted


async def audit_refusal(principal: Principal | None, channel_id: str | None, *, source: PolicySource | None,
                        via: str) -> None:
    """Put a guest's refusal in the workspace's audit log (``guest.refused``: who, where, which way), as the
    refusals of ``/approvers`` are. The refusal stands whether or not it could be written (logged)."""
    record = getattr(source, "guest_refused", None)  # (a policy source of the caller's own may not audit)
    team = principal.team_id if principal is not None else None
    if principal is None or team is None or record is None:
        return
    try:
        await record(team, principal.principal_id, channel_id, via)
    except Exception:  # noqa: BLE001 - the refusal itself stands; losing its audit entry is logged
        log.exception("could not audit the refusal of %s in %s", principal.principal_id, channel_id)


async def _admits(principal: Principal | None, channel_id: str | None, *, source: PolicySource | None) -> bool:
    if principal is None:
        return False
    if not is_external(principal):
        return True
    team = principal.team_id
    if source is None or team is None:
        return False
    try:
        home, org = principal.attributes.get("user_team_id"), principal.attributes.get("enterprise_id")
        if org and home and await source.workspace_org(home) == org:
            return True  # a colleague from another workspace of the same Grid org is no guest
        return bool(await source.admits_guests(team, channel_id))
    except Exception:  # noqa: BLE001 - fail closed
        log.warning("could not tell whether %s may talk to the agent; refusing", principal.principal_id)
        return False
