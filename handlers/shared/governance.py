"""Governance in Slack: approver lists, admins and the audit log (DESIGN §10).

:class:`SlackPolicySource` is the ``bot.approval.PolicySource`` that the response-policy helpers
(``approvers()``, ``four_eyes()``, ``n_of_m()``, ``tenant_policy()``) and the admission rule read: the policy
store's lists and rules, with Slack's word on who is an admin or an outsider. ``bot/app.py`` builds it first,
from the stores it opened, and hands it to the runtime (``Parts.policies``) and to :class:`Governance`
(``Governance.create``), the App Home and ``/approvers`` side, which also needs the runtime: so the runtime
never waits for Governance to be built (no object is completed after construction).
How a tool's policies read in App Home comes from the policies themselves (``Policy.label``,
``Policy.reads_lists``, ``Policy.required``): a new policy needs nothing here.
An approver list lives under a resource (``tool:<tool name>`` for a tool's own); admins edit the lists
some tool's rule reads (``bot.governance.lists_read``) and the lists tools escalate to.

The runtime passes the source to every policy as ``ctx.policies``: nothing is set on a module. The Slack
surfaces built on it, App Home (``handlers/home.py``) and ``/approvers`` (``handlers/commands.py``), import
this module, never the other way round: ``handlers.register`` registers their listeners and ``bot/app.py``
adds the App Home refresher (``handlers.delivery.home``) as an outbox consumer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from blocks.deadlines import duration_text
from blocks.home import ApproverListView
from bot.approval import CUSTOM_RESPONSE_LABEL
from bot.engine.policy_source import StorePolicySource
from bot.engine.tool_registry import ToolRegistry
from bot.governance import list_name, lists_read
from bot.ops.logs import content
from bot.principals import APP_PRINCIPAL, Principal
from bot.tools import Tool
from handlers.shared.admins import AdminCheck, ClientFor
from handlers.shared.deps import SlackDeps
from store.audit import AuditLog
from store.client import StoreError
from store.home_views import HomeViews
from store.policies import PolicyStore, PolicyUpdateConflict

log = logging.getLogger(__name__)

NOT_ADMIN = "Only workspace admins can change who approves. Ask an admin, or see the list with `/approvers list`."
# Slack could not say whether someone is an admin (an error, or no answer in time): we refuse, saying so
ADMIN_CHECK_FAILED = "Couldn't check your admin rights just now; try again."
# an editor's save waits this long for users.info on the people chosen (it answers within Slack's 3 s)
PEOPLE_CHECK_SECONDS = 1.0


def tool_resource(tool_name: str) -> str:
    return f"tool:{tool_name}"


def list_resource(name: str) -> str:
    """The resource behind ``bot.governance.list_name``."""
    return name if ":" in name else tool_resource(name)


def needs_people(t: Tool) -> bool:
    """Tools whose calls can wait for a person."""
    return t.policy_kind != "never"


def list_uses(tools: list[Tool]) -> dict[str, list[str]]:
    """Each approver list some tool reads → what reads it, in words ("approves `refund_charge`",
    "`pay_big` escalates to it after 8 h"): the only lists worth editing."""
    uses: dict[str, list[str]] = {}
    for t in tools:
        if not needs_people(t):
            continue
        for resource in lists_read(t.approval.response):
            how = "; ".join(label for label in (t.approval.request.label, t.approval.effective_response.label) if label)
            uses.setdefault(resource, []).append(f"approves `{t.name}` ({how or 'custom policy'})")
        if t.escalate_to and t.escalate_after is not None:
            after = duration_text(t.escalate_after)
            uses.setdefault(t.escalate_to, []).append(f"`{t.name}` escalates to it after {after}")
    return dict(sorted(uses.items(), key=lambda item: list_name(item[0])))


def rule_without_list(t: Tool) -> str | None:
    """For a tool that can wait for a person but reads no list: who decides, in words; else None."""
    if not needs_people(t) or lists_read(t.approval.response):
        return None
    return t.approval.effective_response.label or CUSTOM_RESPONSE_LABEL


ADMIN_CHECK_S = 1.0  # users.info's wait when an admin cancels (Slack's ack budget is 3 s)


class SlackPolicySource(StorePolicySource):
    """The policy source of a bot in Slack: the stored lists and rules, and Slack's word (``users.info``,
    cached by ``admins``) on who is an admin and who is from another organisation."""

    def __init__(self, policies: PolicyStore, admins: AdminCheck, workspaces: Any = None) -> None:
        super().__init__(policies, workspaces)
        self.policies: PolicyStore = policies  # Governance edits the lists through it, not only reads them
        self.admins = admins

    async def is_admin(self, team_id: str, user_id: str) -> bool:
        """A workspace admin may cancel any request (``bot.governance.workspace_admin``): asked from the
        settle path, before the click is acknowledged, so Slack gets a bounded wait; unknown is "no"."""
        return await self.admins.admin_status(team_id, user_id, within=ADMIN_CHECK_S) is True

    async def account_active(self, team_id: str, user_id: str) -> bool | None:
        """``bot.engine.result_tokens.Accounts``: Slack's word now (not the admins' cache) on whether the account is
        active; None when Slack cannot say. The caller keeps the answer briefly (``TokenHolders``)."""
        self.admins.forget(team_id, user_id)
        user = await self.admins.user(team_id, user_id)
        return None if user.state == "unknown" else user.state == "active"

    async def outsiders(self, team_id: str, user_ids: list[str]) -> set[str]:
        """``bot.governance.PolicySource.outsiders``: who of ``user_ids`` is from another organisation
        (Slack Connect) while the workspace does not let outsiders answer, from ``users.info`` (cached).
        Raises LookupError when Slack cannot say for someone: the caller then names and tells nobody."""
        if not user_ids or await self.allows_external(team_id):
            return set()
        people = await self.admins.users(team_id, user_ids)
        unknown = [u for u, p in people.items() if p.state == "unknown"]
        if unknown:
            raise LookupError(f"users.info could not say who {', '.join(unknown)} are")
        org = await self.workspace_org(team_id)
        return {u for u, p in people.items() if p.state == "active" and p.outsider(team_id, org)}


class Governance:
    """Approver lists, admins and the audit log of every workspace, for the Slack surfaces that show them.
    What the policies read goes through ``source`` (the runtime's ``ctx.policies`` too)."""

    def __init__(
        self,
        deps: SlackDeps,
        source: SlackPolicySource,
        client_for: ClientFor,
        registry: ToolRegistry,
        home_views: HomeViews,
    ) -> None:
        self.source = source
        self.policies = source.policies  # the stored lists and rules (audited edits)
        self.admins = source.admins  # users.info, cached: one cache for the policies and these surfaces
        self.home_views = home_views  # who looked at their App Home lately (handlers.delivery.home)
        self.deps = deps
        self.audit: AuditLog = deps.audit
        self.client_for = client_for
        self.registry = registry
        # workspaces where nobody looked at App Home lately, until when (monotonic): HomeRefresh asks Redis
        # at most once a second per workspace; a home published by this process clears the entry
        self.nobody_looking: dict[str, float] = {}

    @classmethod
    def create(cls, deps: SlackDeps, source: SlackPolicySource, home_views: HomeViews, client_for: ClientFor,
               registry: ToolRegistry) -> Governance:
        """Built by ``bot/app.py`` after the runtime, over the policy source it gave the runtime; the audit
        log is the app's (``deps.audit``)."""
        return cls(deps, source, client_for, registry, home_views)

    # --- approver lists ---------------------------------------------------------------------

    async def seed_demo(self, team_id: str, refund_approver: str) -> None:
        """Offline demo: ``refund_approver`` approves refunds, unless the workspace's policy was ever edited."""
        if self.registry.get("refund_charge") is None:
            return
        policy = await self.policies.get(team_id)
        if policy.version == 0 and not policy.tools:
            await self.policies.set_approvers(
                team_id, tool_resource("refund_charge"), [refund_approver], actor=APP_PRINCIPAL.principal_id
            )

    def approver_list_uses(self) -> dict[str, list[str]]:
        return list_uses(list(self.registry))

    def tools_without_lists(self) -> list[tuple[str, str]]:
        """(tool, who decides) for the tools whose rule reads no list: admins see why there is nothing to edit."""
        rules = ((t.name, rule_without_list(t)) for t in sorted(self.registry, key=lambda t: t.name))
        return [(name, rule) for name, rule in rules if rule is not None]

    async def approver_lists(self, team_id: str) -> list[ApproverListView]:
        """Each approver list a tool's rule reads, with its people; deactivated people shown as such."""
        policy = await self.policies.get(team_id)
        uses = self.approver_list_uses()
        listings = {r: policy.tool_policy(r) for r in uses}
        listed = [u for listing in listings.values() if listing for u in listing.approvers]
        people = await self.admins.users(team_id, listed)
        required_by_rule = self._required_by_rule()
        views = []
        for resource, used_by in uses.items():
            listing = listings[resource]
            approvers = list(listing.approvers) if listing else []
            gone = [u for u in approvers if people[u].state in ("deleted", "missing")]
            tool = self.registry.get(list_name(resource))
            views.append(
                ApproverListView(
                    list_name=list_name(resource),
                    description=tool.description if tool is not None and len(used_by) == 1 else "",
                    policy_label="; ".join(used_by),
                    approvers=[u for u in approvers if u not in gone],
                    deleted_approvers=gone,
                    required=max(listing.required_approvals if listing else 1, required_by_rule.get(resource, 1)),
                )
            )
        return views

    def _required_by_rule(self) -> dict[str, int]:
        """The approvals each list's n_of_m rule needs, whatever the list says."""
        needed: dict[str, int] = {}
        for t in self.registry:
            for resource in lists_read(t.approval.response):
                needed[resource] = max(needed.get(resource, 1), t.approval.effective_response.required)
        return needed

    async def _outsider_problem(self, team_id: str, user_ids: list[str], within: float) -> str | None:
        """Why the people chosen for a list can't all be on it: an approver the rules would refuse
        (from another organisation) is never listed, so nobody is shown or sent a request they can't
        answer. Fails closed when Slack can't say who they are in time."""
        if not user_ids or await self.source.allows_external(team_id):
            return None
        try:
            people = await asyncio.wait_for(self.admins.users(team_id, user_ids), max(within, 0.05))
        except TimeoutError:
            people = {}
        if any(p.state == "unknown" for p in people.values()) or len(people) < len(set(user_ids)):
            return "couldn't check who everyone chosen is just now; try again."
        org = await self.source.workspace_org(team_id)
        outside = [p.called() for p in people.values() if p.state == "active" and p.outsider(team_id, org)]
        if not outside:
            return None
        who = ", ".join(outside)
        return (f"{who} {'is' if len(outside) == 1 else 'are'} from another organisation (Slack Connect), "
                "and this workspace doesn't let outsiders approve, so nothing was changed.")

    async def save_approvers(self, team_id: str, name: str, user_ids: list[str], actor: Principal,
                             *, within: float = PEOPLE_CHECK_SECONDS) -> str | None:
        """Replace the approver list ``name`` (audited by the store). Returns a problem to show, or None.
        ``within``: how long Slack may take to say who the people chosen are (the caller's ack budget)."""
        resource = list_resource(name)
        if resource not in self.approver_list_uses():
            return f"no tool's rule reads a list called {name}, so it was not saved."
        try:
            if (problem := await self._outsider_problem(team_id, user_ids, within)) is not None:
                return problem
            if user_ids:
                await self.policies.set_approvers(team_id, resource, user_ids, actor=actor.principal_id)
            else:
                await self.policies.remove_approvers(team_id, resource, actor=actor.principal_id)
        except ValueError as exc:
            return str(exc)
        except (StoreError, PolicyUpdateConflict) as exc:
            log.warning("could not save the approvers of %s in %s: %r", resource, team_id, exc)
            return "the approver lists can't be saved right now. Try again in a minute."
        self.deps.tasks.spawn(self._refresh_open_requests(team_id, resource),
                              what=f"open requests after a change of {resource} in {team_id}")
        return None

    async def _refresh_open_requests(self, team_id: str, resource: str) -> None:
        """Open cards and their DM copies say who may answer now; people newly on the list are told."""
        version = (await self.policies.get(team_id)).version  # at least the save's: a later save refreshes again
        changed = await self.deps.runtime.refresh_responders(team_id, resource, version)
        if changed:
            log.info("%d open request(s) of %s in %s now name who may answer after the change", changed,
                     resource, team_id)

    async def listed_before(self, team_id: str, names: list[str]) -> list[str]:
        """Those of the lists ``names`` that have people now (an editor that empties one says what it means;
        one left empty is not news). Nothing when the lists can't be read: the save then says why."""
        if not names:
            return []
        try:
            policy = await self.policies.get(team_id)
        except StoreError:
            return []
        return [n for n in names if policy.tool_policy(list_resource(n)) is not None]

    def empty_list_warning(self, name: str) -> str:
        """What saving ``name`` empty means, for the admin who did it."""
        resource = list_resource(name)
        readers = sorted(t.name for t in self.registry if needs_people(t) and resource in lists_read(t.approval.response))
        tools = " or ".join(f"`{t}`" for t in readers) or f"what reads `{name}`"
        return (f":warning: Nobody can approve {tools} now: requests wait until an admin adds someone to "
                f"the list `{name}` again.")

    async def refuse(self, team_id: str, actor: Principal, what: str, **data: Any) -> None:
        """Audit an edit by someone who may not edit; the caller tells them."""
        try:
            await self.policies.record_refusal(team_id, actor.principal_id, what, data=data)
        except Exception:  # noqa: BLE001 - the refusal itself stands; losing its audit entry is logged
            log.exception("could not audit the refused edit of %s by %s", what, actor.principal_id)

    async def tell(self, team_id: str, user_id: str, text: str) -> None:
        """A private note as a DM (App Home and modals have no channel for an ephemeral)."""
        try:
            client = await self.client_for(team_id)
            dm = await client.conversations_open(users=user_id)
            await client.chat_postMessage(channel=dm["channel"]["id"], text=text)
        except Exception:  # noqa: BLE001 - a note that cannot be shown must not break the action
            log.warning("could not tell %s: %s", user_id, content(text), exc_info=True)  # may hold a token
