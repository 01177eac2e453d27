"""App Home's view, published to a person, and kept current while requests appear and settle: "Waiting
on you", "Requested by you", standing approvals (revocable by their requester and by admins) and, for
admins, the approver-list editor. Its listeners (the tab opened, edits, revokes) are ``handlers.home``.

Who sees a request under "Waiting on you" is decided by the request's *real* response policy, run
as a dry run: a ``ResponseContext`` saying "this viewer approves" goes through exactly the function
the runtime will run on a click (``approvers()``, ``four_eyes()``, ``n_of_m()``, a user's own
policy, or the default requester-only). So the inbox can never disagree with what a click would do,
including for custom policies that say nothing about themselves. Response policies must therefore
be free of side effects (they normally are: they read and decide). A policy that fails or is slow
hides the request (fail closed); the thread card still shows it.

:class:`HomeRefresh` is an outbox consumer of its own (``bot/app.py`` adds it as ``home``), with its own
cursor: a refresh that fails is offered its event again later, and Slack delivery never repeats for it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

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
from handlers.delivery.channel import card_field
from handlers.shared.governance import Governance

log = logging.getLogger(__name__)

DRY_RUN_TIMEOUT_SECONDS = 2.0
MAX_PERMALINKS = 10
MAX_REFRESHES = 20  # homes re-published per event, at most
NOBODY_LOOKING_MEMO_S = 1.0  # "nobody looks at App Home here" is asked of Redis once a second at most


# --- publishing -------------------------------------------------------------------------------


async def publish_home(gov: Governance, team: str, user_id: str) -> None:
    """Build and publish ``user_id``'s App Home (several Slack calls: run it after the ack)."""
    view = await build_home(gov, team, user_id)
    client = await gov.client_for(team)
    await client.views_publish(user_id=user_id, view=view)
    await gov.home_views.mark_seen(team, user_id)
    gov.nobody_looking.pop(team, None)


async def republish(gov: Governance, team: str, user_id: str) -> None:
    """:func:`publish_home` for background work: a failure is logged; the next visit publishes again."""
    try:
        await publish_home(gov, team, user_id)
    except Exception:
        log.exception("could not publish the App Home of %s in %s", user_id, team)


async def homes_seen(gov: Governance, team: str, user_ids: list[str]) -> list[str]:
    """Those of ``user_ids`` whose App Home we published lately (so it is worth keeping current)."""
    return await gov.home_views.seen(team, user_ids)


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
            required = tool.approval.effective_response.required
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
        return await gov.source.approver_list(team, resource)
    except Exception:  # noqa: BLE001 - the status line is a courtesy; the card still works
        log.warning("approver list of %s in %s unreadable for App Home", resource, team, exc_info=True)
        return None


async def _permalink(gov: Governance, record: RequestRecord) -> str | None:
    raw = await gov.deps.posts.get(record.session_id, card_field(record.request_id))
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
    """The outbox's ``home`` consumer: re-publishes the App Home of the people a request concerns.

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
        if time.monotonic() < self.gov.nobody_looking.get(team, 0.0):
            return  # nobody looked lately (asked within the last second): no task for nothing
        self.gov.deps.tasks.spawn(self._refresh(team, ids), what=f"refresh App Homes for {event.type}")

    async def _anyone_looking(self, team: str) -> bool:
        """Whether anyone in the workspace looked at their App Home lately: asked of Redis at most once a
        second (refreshes spawned together share one question; another replica's visit waits that long)."""
        if time.monotonic() < self.gov.nobody_looking.get(team, 0.0):
            return False
        asking = self._asking.get(team)
        if asking is None:
            asking = self._asking[team] = asyncio.ensure_future(self.gov.home_views.anyone_looking(team))
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
