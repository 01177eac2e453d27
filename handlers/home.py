"""App Home: "Waiting on you", "Requested by you", standing approvals (revocable by their requester
and by admins) and, for admins, the approver-list editor.

Who sees a request under "Waiting on you" is decided by the request's *real* response policy, run
as a dry run: a ``ResponseContext`` saying "this viewer approves" goes through exactly the function
the runtime will run on a click (``approvers()``, ``four_eyes()``, ``n_of_m()``, a user's own
policy, or the default requester-only). So the inbox can never disagree with what a click would do,
including for custom policies that say nothing about themselves. Response policies must therefore
be free of side effects (they normally are: they read and decide). A policy that fails or is slow
hides the request (fail closed); the thread card still shows it.

The buttons on App Home cards use the same ``hitl:`` action ids as the cards in threads, so
``handlers/answers.py`` settles them.

Nothing here waits on Slack before Slack gets its answer (issue 8): building a home asks Slack
(``users.info``, permalinks, ``views.publish``), so it always runs in a tracked background task.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from slack_bolt.async_app import AsyncApp

from blocks.actions import (
    APPROVERS_ACTION_PATTERN,
    REMOVE_SCHEDULE_ACTION_ID,
    REVOKE_GRANT_ACTION_ID,
    decode_approvers_action_id,
)
from blocks.home import HomeRequest, home_view
from bot.approval import Decision
from bot.governance import lists_read
from bot.principals import Principal, slack_user
from bot.protocol import (
    ApprovalCandidate,
    Event,
    InputRequested,
    InputResolved,
    InputRespondersChanged,
    RequestRecord,
)
from bot.session import SessionRef
from handlers.governance import (
    ADMIN_CHECK_FAILED,
    NOT_ADMIN,
    Governance,
    list_resource,
    response_policy,
)
from handlers.identity import installation_team, interaction_principal
from store.audit import workspace_key

log = logging.getLogger(__name__)

DRY_RUN_TIMEOUT_SECONDS = 2.0
MAX_PERMALINKS = 10
MAX_REFRESHES = 20  # homes re-published per event, at most
HOME_SEEN_SECONDS = 24 * 3600  # homes published this lately are kept current by HomeRefresh
NOBODY_LOOKING_MEMO_S = 1.0  # "nobody looks at App Home here" is asked of Redis once a second at most
# an admin's pick waits this long for users.info on people not looked up yet, then saves after the ack
PEOPLE_BEFORE_ACK_SECONDS = 0.5


def register(app: AsyncApp, gov: Governance) -> None:
    async def on_home_opened(body: dict[str, Any], event: dict[str, Any]) -> None:
        team, user = installation_team(body), event.get("user")
        if event.get("tab", "home") != "home" or not team or not user:
            return
        # Bolt answers the event when this returns; the home is built and published after that
        gov.deps.runtime.spawn(republish(gov, team, user), what=f"publish the App Home of {user}")

    async def on_edit(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await edit_from_home(gov, ack, body, action)

    async def on_revoke(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        gov.deps.runtime.spawn(revoke_grant(gov, body, action.get("value") or ""), what="revoke a standing approval")

    app.event("app_home_opened")(on_home_opened)
    app.action(APPROVERS_ACTION_PATTERN)(on_edit)
    app.action(REVOKE_GRANT_ACTION_ID)(on_revoke)

    async def on_remove_schedule(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        gov.deps.runtime.spawn(remove_schedule(gov, body, action.get("value") or ""), what="remove a schedule")

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
        gov.deps.runtime.spawn(_check_and_apply(gov, edit),
                               what=f"App Home edit of {name} by {edit.user}")
        return
    note = await _apply_edit(gov, edit, admin)
    await ack()
    gov.deps.runtime.spawn(_after_edit(gov, edit, note), what=f"after the App Home edit by {edit.user}")


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


# --- publishing -------------------------------------------------------------------------------


async def publish_home(gov: Governance, team: str, user_id: str) -> None:
    """Build and publish ``user_id``'s App Home (several Slack calls: run it after the ack)."""
    view = await build_home(gov, team, user_id)
    client = await gov.client_for(team)
    await client.views_publish(user_id=user_id, view=view)
    pipe = gov.redis.pipeline(transaction=False)
    pipe.set(workspace_key(team, "home-seen", user_id), b"1", ex=HOME_SEEN_SECONDS)
    pipe.set(workspace_key(team, "home-seen-any"), b"1", ex=HOME_SEEN_SECONDS)  # lets _refresh skip at once
    await pipe.execute()
    gov.nobody_looking.pop(team, None)


async def republish(gov: Governance, team: str, user_id: str) -> None:
    """:func:`publish_home` for background work: a failure is logged; the next visit publishes again."""
    try:
        await publish_home(gov, team, user_id)
    except Exception:
        log.exception("could not publish the App Home of %s in %s", user_id, team)


async def homes_seen(gov: Governance, team: str, user_ids: list[str]) -> list[str]:
    """Those of ``user_ids`` whose App Home we published lately (so it is worth keeping current)."""
    if not user_ids:
        return []
    seen = await gov.redis.mget([workspace_key(team, "home-seen", u) for u in user_ids])
    return [u for u, mark in zip(user_ids, seen, strict=True) if mark is not None]


# --- building the view ------------------------------------------------------------------------


async def viewer_principal(gov: Governance, team: str, user_id: str) -> Principal:
    """The viewer as a click from them would look (their own workspace from users.info, for Slack Connect)."""
    info = await gov.admins.user(team, user_id)
    own_team = info.team_id if info.state == "active" and info.team_id and not info.belongs_to(team) else team
    return slack_user(team, user_id, user_team_id=own_team)


async def build_home(gov: Governance, team: str, user_id: str) -> dict:
    viewer = await viewer_principal(gov, team, user_id)
    records = await gov.deps.store.pending_for_team(team)
    is_admin = await gov.admins.is_admin(team, user_id)
    now = datetime.fromtimestamp(gov.deps.runtime.settings.clock(), UTC)
    schedules = gov.deps.runtime.schedules
    waiting, requested, policies, grants, scheduled = await asyncio.gather(
        _waiting_on(gov, records, viewer),
        _requested_by(gov, records, viewer),
        gov.approver_lists(team) if is_admin else _none(),
        gov.deps.store.grants.list(team, now),
        schedules.list(team) if schedules is not None else _nothing(),
    )
    mine = [g for g in grants if is_admin or (g.requester is not None and g.requester.same_as(viewer))]
    theirs = [s for s in scheduled if is_admin or s.owner.same_as(viewer)]
    return home_view(user_id, waiting, requested, policies, now=now, without_lists=gov.tools_without_lists(),
                     grants=mine, schedules=theirs, revision=_revision(now))


def _revision(now: datetime) -> str:
    """A token that differs between publishes (the time in ms, hex): see ``blocks.home.home_view``."""
    return format(int(now.timestamp() * 1000), "x")


async def _nothing() -> list[Any]:
    return []


async def _none() -> None:
    return None


async def may_settle(gov: Governance, record: RequestRecord, viewer: Principal) -> Decision | None:
    """Would ``viewer`` approving count? The runtime dry-runs the request's own response policy."""
    return await gov.deps.runtime.check_response(record, viewer, within_s=DRY_RUN_TIMEOUT_SECONDS)


async def _waiting_on(gov: Governance, records: list[RequestRecord], viewer: Principal) -> list[HomeRequest]:
    decisions = await asyncio.gather(*(may_settle(gov, r, viewer) for r in records))
    items = []
    for record, decision in zip(records, decisions, strict=True):
        if decision is None or decision.type != "allowed":
            continue
        approvals: list[str] = []
        if decision.required > 1:
            record = await gov.deps.store.get_request(record.request_id)  # with who approved so far
            if viewer.principal_id in record.approvals:
                continue  # they already gave their approval; it waits on others now
            approvals = [p.rsplit(":", 1)[-1] for p in record.approvals]
        items.append(HomeRequest(request=record.request, approvals=approvals, required=decision.required,
                                 undeliverable=record.undeliverable, escalated=record.escalated_to))
    return items


async def _requested_by(gov: Governance, records: list[RequestRecord], viewer: Principal) -> list[HomeRequest]:
    mine = [r for r in records if viewer.same_as(r.request.principal)]
    items = []
    for n, record in enumerate(mine):
        record = await gov.deps.store.get_request(record.request_id)
        tool = gov.registry.get(record.request.action.tool_name) if record.request.action else None
        required, waiting_for = 1, []
        if tool is not None and record.request.kind == "tool-approval":
            required = response_policy(tool).required
            for resource in lists_read(tool.approval.response)[:1]:
                listing = await _listing(gov, record.team_id, resource)
                if listing is not None:
                    required = max(required, listing.required_approvals)
                    waiting_for = [u for u in listing.approvers if f"slack:{record.team_id}:{u}" not in record.approvals]
        status = "waiting for approval" if record.request.kind == "tool-approval" else "waiting for an answer"
        items.append(
            HomeRequest(
                request=record.request,
                status=status,
                can_settle=False,
                approvals=[p.rsplit(":", 1)[-1] for p in record.approvals],
                required=required,
                waiting_for=waiting_for,
                permalink=await _permalink(gov, record) if n < MAX_PERMALINKS else None,
                undeliverable=record.undeliverable,
                escalated=record.escalated_to,
            )
        )
    return items


async def _listing(gov: Governance, team: str | None, resource: str) -> Any:
    if not team:
        return None
    try:
        return await gov.approver_list(team, resource)
    except Exception:  # noqa: BLE001 - the status line is a courtesy; the card still works
        log.warning("approver list of %s in %s unreadable for App Home", resource, team, exc_info=True)
        return None


async def _permalink(gov: Governance, record: RequestRecord) -> str | None:
    raw = await gov.deps.store.channel_get(record.session_id, f"card:{record.request_id}")
    if not raw:
        return None
    card = json.loads(raw)
    try:
        client = await gov.client_for(record.team_id)
        response = await client.chat_getPermalink(channel=card["channel"], message_ts=card["ts"])
        return response.get("permalink")
    except Exception:  # noqa: BLE001 - a missing link is fine
        return None


# --- keeping open homes current ---------------------------------------------------------------


class HomeRefresh:
    """A ``bot.ports.Channel`` that re-publishes the App Home of the people a request concerns.

    When a request appears, collects an approval, or settles, the requester, the person who
    answered and the people on the tool's approver list get a fresh home — but only those who
    opened their App Home lately (Slack shows a published home until it is replaced, so a stale
    inbox would offer buttons that no longer count). The work runs in the background.
    """

    def __init__(self, gov: Governance) -> None:
        self.gov = gov
        self._asking: dict[str, asyncio.Future[int]] = {}

    async def deliver(self, event: Event, session: SessionRef) -> None:
        team = session.team_id
        if not team:
            return
        if isinstance(event, InputRequested):
            ids = [r.request_id for r in event.requests]
        elif isinstance(event, InputResolved):
            ids = [r.request_id for r in event.resolutions]
        elif isinstance(event, ApprovalCandidate) and event.outcome == "pending" and event.approvals > 0:
            ids = [event.request_id]
        elif isinstance(event, InputRespondersChanged):  # its approver list changed: the people on it now
            ids = [event.request_id]
        else:
            return
        self.gov.deps.runtime.spawn(self._refresh(team, ids), what=f"refresh App Homes for {event.type}")

    async def _anyone_looking(self, team: str) -> bool:
        """Whether anyone in the workspace looked at their App Home lately: asked of Redis at most once a
        second (refreshes spawned together share one question; another replica's visit waits that long)."""
        if time.monotonic() < self.gov.nobody_looking.get(team, 0.0):
            return False
        asking = self._asking.get(team)
        if asking is None:
            asking = self._asking[team] = asyncio.ensure_future(
                self.gov.redis.exists(workspace_key(team, "home-seen-any")))
            asking.add_done_callback(lambda _: self._asking.pop(team, None))
        if await asyncio.shield(asking):
            return True
        self.gov.nobody_looking[team] = time.monotonic() + NOBODY_LOOKING_MEMO_S
        return False

    async def _refresh(self, team: str, request_ids: list[str]) -> None:
        if not await self._anyone_looking(team):
            return  # nobody in the workspace looked at their App Home lately: nothing to do
        records = await self.gov.deps.store.get_requests(request_ids)
        people: set[str] = set()
        for record in records:
            people.update(await _concerned(self.gov, team, record))
        viewers = (await homes_seen(self.gov, team, sorted(people)))[:MAX_REFRESHES]
        for user in viewers:
            try:
                await publish_home(self.gov, team, user)
            except Exception:  # noqa: BLE001 - the next App Home visit publishes it again
                log.warning("could not refresh the App Home of %s in %s", user, team, exc_info=True)


async def _concerned(gov: Governance, team: str, record: RequestRecord) -> set[str]:
    people = {p.slack_user_id for p in (record.request.principal, record.responder) if p and p.slack_user_id}
    tool = gov.registry.get(record.request.action.tool_name) if record.request.action else None
    if tool is not None and record.request.kind == "tool-approval":
        for resource in lists_read(tool.approval.response):
            listing = await _listing(gov, team, resource)
            if listing is not None:
                people.update(listing.approvers)
    return people
