"""App Home's listeners: the tab opened, an admin's pick in an approver list's select, revoking a
standing approval and removing a schedule (DESIGN §10).

What App Home shows, and keeping open homes current as requests come and go, is outbound work:
``handlers.delivery.home``. The buttons on App Home cards use the same ``hitl:`` action ids as the
cards in threads, so ``handlers/answers.py`` settles them.

Nothing here waits on Slack before Slack gets its answer: building a home asks Slack
(``users.info``, permalinks, ``views.publish``), so it always runs in a tracked background task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from slack_bolt.async_app import AsyncApp

from blocks.actions import (
    APPROVERS_ACTION_PATTERN,
    REMOVE_SCHEDULE_ACTION_ID,
    REVOKE_GRANT_ACTION_ID,
    decode_approvers_action_id,
)
from bot.principals import Principal
from handlers.delivery.home import republish
from handlers.identity import installation_team, interaction_principal
from handlers.shared.governance import ADMIN_CHECK_FAILED, NOT_ADMIN, Governance, list_resource

log = logging.getLogger(__name__)

# an admin's pick waits this long for users.info on people not looked up yet, then saves after the ack
PEOPLE_BEFORE_ACK_SECONDS = 0.5


def register(app: AsyncApp, gov: Governance) -> None:
    async def on_home_opened(body: dict[str, Any], event: dict[str, Any]) -> None:
        team, user = installation_team(body), event.get("user")
        if event.get("tab", "home") != "home" or not team or not user:
            return
        # Bolt answers the event when this returns; the home is built and published after that
        gov.deps.tasks.spawn(republish(gov, team, user), what=f"publish the App Home of {user}")

    async def on_edit(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await edit_from_home(gov, ack, body, action)

    async def on_revoke(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        gov.deps.tasks.spawn(revoke_grant(gov, body, action.get("value") or ""), what="revoke a standing approval")

    app.event("app_home_opened")(on_home_opened)
    app.action(APPROVERS_ACTION_PATTERN)(on_edit)
    app.action(REVOKE_GRANT_ACTION_ID)(on_revoke)

    async def on_remove_schedule(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        gov.deps.tasks.spawn(remove_schedule(gov, body, action.get("value") or ""), what="remove a schedule")

    app.action(REMOVE_SCHEDULE_ACTION_ID)(on_remove_schedule)


async def remove_schedule(gov: Governance, body: dict[str, Any], schedule_id: str) -> None:
    """Remove a scheduled turn from App Home: the person it runs for may, and so may a workspace admin."""
    team, viewer = installation_team(body), interaction_principal(body)
    store = gov.deps.runtime.schedules
    if not team or viewer is None or viewer.slack_user_id is None or store is None:
        return
    schedule = await store.get(team, schedule_id)
    if schedule is not None and not schedule.owner.same_as(viewer):
        if not await gov.admins.is_admin(team, viewer.slack_user_id):
            log.warning("%s may not remove schedule %s", viewer.principal_id, schedule_id)
            schedule = None
    if schedule is not None and await store.remove(schedule):
        await gov.audit.append(team, "schedule.removed", actor=viewer.principal_id, subject=schedule_id,
                               data={"owner": schedule.owner.principal_id, "when": schedule.when})
    await republish(gov, team, viewer.slack_user_id)


async def revoke_grant(gov: Governance, body: dict[str, Any], grant_id: str) -> None:
    """Revoke a standing approval from App Home: its requester may, and so may a workspace admin."""
    team, viewer = installation_team(body), interaction_principal(body)
    if not team or viewer is None or viewer.slack_user_id is None:
        return
    grants = gov.deps.store.grants
    grant = await grants.get(team, grant_id)
    if grant is not None and (grant.requester is None or not grant.requester.same_as(viewer)):
        if not await gov.admins.is_admin(team, viewer.slack_user_id):
            log.warning("%s may not revoke grant %s", viewer.principal_id, grant_id)
            grant = None
    if grant is not None and await grants.revoke(grant):
        await gov.audit.append(team, "grant.revoked", actor=viewer.principal_id, subject=grant.request_id,
                               data={"scope": grant.scope, "approval_key": grant.approval_key,
                                     "tool": grant.tool_name, "session_id": grant.session_id,
                                     "requester": grant.requester.principal_id if grant.requester else None})
    await republish(gov, team, viewer.slack_user_id)


async def edit_from_home(gov: Governance, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
    """Someone picked people in a tool's multi-users select: save (admins) or refuse, then show the new home.

    Slack's answer waits on Slack for at most ``PEOPLE_BEFORE_ACK_SECONDS``. When the clicker's admin
    rights and the people chosen (their organisation: an outsider is never listed) are known by then
    (``BOT_ADMINS``, the cached answers from building the home they are looking at, or a quick
    ``users.info``), the change is saved, or the refusal audited, before the ack: a few Redis writes, so an
    acknowledged change is a stored change. Otherwise the ack goes out and the checks and the save
    follow in the background. Either way the note to the clicker and the refreshed home, which shows
    what was stored, come after the ack.
    """
    principal = interaction_principal(body)
    name = decode_approvers_action_id(action.get("action_id", ""))
    if principal is None or principal.team_id is None or principal.slack_user_id is None or name is None:
        await ack()
        return
    chosen = [u for u in action.get("selected_users") or [] if isinstance(u, str)]
    edit = HomeEdit(principal=principal, team=principal.team_id, user=principal.slack_user_id,
                    list_name=name, chosen=chosen)
    admin = gov.admins.cached_admin(edit.team, edit.user)
    if admin and not gov.admins.all_cached(edit.team, chosen):  # a moment for users.info on new people
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(gov.admins.users(edit.team, chosen), PEOPLE_BEFORE_ACK_SECONDS)
    if admin is None or (admin and not gov.admins.all_cached(edit.team, chosen)):
        # who they are (an admin? the people chosen from another organisation?) needs Slack: after the ack
        await ack()
        gov.deps.tasks.spawn(_check_and_apply(gov, edit),
                             what=f"App Home edit of {name} by {edit.user}")
        return
    note = await _apply_edit(gov, edit, admin)
    await ack()
    gov.deps.tasks.spawn(_after_edit(gov, edit, note), what=f"after the App Home edit by {edit.user}")


@dataclass(frozen=True)
class HomeEdit:
    """One pick in an approver list's select on App Home."""

    principal: Principal
    team: str
    user: str
    list_name: str
    chosen: list[str]


async def _check_and_apply(gov: Governance, edit: HomeEdit) -> None:
    admin = await gov.admins.admin_status(edit.team, edit.user)
    await _after_edit(gov, edit, await _apply_edit(gov, edit, admin))


async def _apply_edit(gov: Governance, edit: HomeEdit, admin: bool | None) -> str | None:
    """Save the new list, or audit the refusal (``admin`` None: Slack could not say). Returns a note for
    the clicker, if any. Redis only."""
    if admin is not True:
        unsure = {"reason": "admin check failed"} if admin is None else {}
        await gov.refuse(edit.team, edit.principal, list_resource(edit.list_name), via="app_home",
                         selected=edit.chosen, **unsure)
        if admin is None:
            return f":warning: {ADMIN_CHECK_FAILED} Nothing was changed."
        return f":no_entry: {NOT_ADMIN} Nothing was changed."
    problem = await gov.save_approvers(edit.team, edit.list_name, edit.chosen, edit.principal)
    if problem:
        return f":warning: The approver list `{edit.list_name}` was not changed: {problem}"
    return None if edit.chosen else gov.empty_list_warning(edit.list_name)  # saved empty: say what it means


async def _after_edit(gov: Governance, edit: HomeEdit, note: str | None) -> None:
    if note:
        await gov.tell(edit.team, edit.user, note)
    await republish(gov, edit.team, edit.user)
