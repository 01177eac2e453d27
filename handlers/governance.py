"""Governance in Slack: approver lists, admins and the audit log (issue 4, DESIGN §10).

:class:`Governance` is built once by ``bot/app.py`` (``Governance.create``). It holds the policy
store, the audit log and the admin check, and is the ``bot.governance.PolicySource`` that the
response-policy helpers (``approvers()``, ``four_eyes()``, ``n_of_m()``, ``tenant_policy()``) read.
Each tool's approver list lives under the resource ``tool:<tool name>``.

The Slack surfaces built on it, App Home (``handlers/home.py``) and ``/approvers``
(``handlers/commands.py``), import this module, never the other way round: ``handlers.register``
registers their listeners and ``bot/app.py`` adds the App Home refresher to the outbox.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from redis.exceptions import RedisError

from blocks.home import ToolPolicyView
from bot.governance import ApproverList, RuleVerdict, use_policy_source
from bot.principals import APP_PRINCIPAL, Principal
from bot.tools import Tool, ToolRegistry
from handlers.admins import AdminCheck, ClientFor
from handlers.deps import SlackDeps
from store.audit import AuditLog
from store.client import RedisClient
from store.policies import PolicyStore, PolicyUpdateConflict, match_rule

log = logging.getLogger(__name__)

NOT_ADMIN = "Only workspace admins can change who approves. Ask an admin, or see the list with `/approvers list`."
# Slack could not say whether someone is an admin (an error, or no answer in time): we refuse, saying so
ADMIN_CHECK_FAILED = "Couldn't check your admin rights just now; try again."
_N_OF_M = re.compile(r"^(\d+)-of-m$")

REQUEST_LABELS = {
    "never": "runs without asking",
    "always": "asks every time",
    "once": "asks once per conversation",
    "auto": "model review, then a person",
    "tenant": "workspace rules",
}


def tool_resource(tool_name: str) -> str:
    return f"tool:{tool_name}"


def response_kind(t: Tool) -> str:
    """The tool's response policy as the helpers name it (``requester-only`` when it has none)."""
    if t.approval.response is None:
        return "requester-only"
    return getattr(t.approval.response, "policy_kind", "custom")


def required_by_kind(kind: str) -> int:
    """``n_of_m(n)`` needs n distinct approvals whatever the list says."""
    match = _N_OF_M.match(kind)
    return int(match.group(1)) if match else 1


def policy_label(t: Tool) -> str:
    """Plain words for a tool's request and response policy, e.g. ``asks every time · approver list``."""
    asks = REQUEST_LABELS.get(t.policy_kind, "custom policy")
    kind = response_kind(t)
    if kind == "requester-only":
        who = "the requester decides"
    elif kind.startswith("approvers:"):
        who = "approver list"
    elif kind == "four-eyes":
        who = "four-eyes (not the requester)"
    elif _N_OF_M.match(kind):
        who = f"{required_by_kind(kind)} approvers"
    else:
        who = "custom approval rule"
    return f"{asks} · {who}"


def needs_people(t: Tool) -> bool:
    """Tools whose calls can wait for a person, so an approver list can matter."""
    return t.policy_kind != "never"


class StorePolicySource:
    """``bot.governance.PolicySource`` over the Redis policy store. Errors propagate: the helpers fail closed."""

    def __init__(self, policies: PolicyStore, workspaces: Any = None) -> None:
        self.policies = policies
        self.workspaces = workspaces  # store.installations.RedisInstallationStore (OAuth mode) or None

    async def approver_list(self, team_id: str, resource: str) -> ApproverList | None:
        policy = await self.policies.get(team_id)
        listing = policy.tool_policy(resource)
        if listing is None:
            return None
        return ApproverList(
            approvers=sorted(policy.eligible_approvers(resource)), required_approvals=listing.required_approvals
        )

    async def allows_external(self, team_id: str) -> bool:
        return (await self.policies.get(team_id)).allow_external

    async def workspace_org(self, team_id: str) -> str | None:
        """Known only where verified requests from that workspace were seen (the OAuth directory)."""
        seen = await self.workspaces.async_workspace(team_id) if self.workspaces is not None else None
        return seen[0] if seen else None

    async def decide(
        self, team_id: str, resource: str, tool_input: dict[str, Any] | None, user_id: str | None
    ) -> RuleVerdict | None:
        policy = await self.policies.get(team_id)
        roles = policy.roles_of(user_id) if user_id else set()
        rule = match_rule(policy, resource, tool_input, roles)
        if rule is None:
            return None
        return RuleVerdict(effect=rule.effect, reason=rule.description or None)


def policy_source_for(redis: RedisClient) -> StorePolicySource:
    """A policy source for processes without Slack (``python -m bot chat``)."""
    return StorePolicySource(PolicyStore(redis, AuditLog(redis)))


class Governance(StorePolicySource):
    """Approver lists, admins and the audit log of every workspace, for the Slack surfaces that show them."""

    def __init__(
        self,
        deps: SlackDeps,
        policies: PolicyStore,
        audit: AuditLog,
        admins: AdminCheck,
        client_for: ClientFor,
        registry: ToolRegistry,
        redis: RedisClient,
    ) -> None:
        super().__init__(policies)
        self.redis = redis
        self.deps = deps
        self.audit = audit
        self.admins = admins
        self.client_for = client_for
        self.registry = registry

    @classmethod
    def create(cls, deps: SlackDeps, redis: RedisClient, client_for: ClientFor, registry: ToolRegistry,
               workspaces: Any = None) -> Governance:
        audit = AuditLog(redis)
        gov = cls(deps, PolicyStore(redis, audit), audit, AdminCheck(client_for, deps.settings.admins),
                  client_for, registry, redis)
        gov.workspaces = workspaces
        use_policy_source(gov)
        return gov

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

    def editable_tools(self) -> list[Tool]:
        return sorted((t for t in self.registry if needs_people(t)), key=lambda t: t.name)

    async def tool_policies(self, team_id: str) -> list[ToolPolicyView]:
        """Each tool that can ask a person, with its approver list; deactivated people shown as such."""
        policy = await self.policies.get(team_id)
        tools = self.editable_tools()
        listings = {t.name: policy.tool_policy(tool_resource(t.name)) for t in tools}
        listed = [u for listing in listings.values() if listing for u in listing.approvers]
        people = await self.admins.users(team_id, listed)
        views = []
        for t in tools:
            listing = listings[t.name]
            approvers = list(listing.approvers) if listing else []
            gone = [u for u in approvers if people[u].state in ("deleted", "missing")]
            views.append(
                ToolPolicyView(
                    tool_name=t.name,
                    description=t.description,
                    policy_label=policy_label(t),
                    approvers=[u for u in approvers if u not in gone],
                    deleted_approvers=gone,
                    required=max(listing.required_approvals if listing else 1, required_by_kind(response_kind(t))),
                )
            )
        return views

    async def save_approvers(self, team_id: str, tool_name: str, user_ids: list[str], actor: Principal) -> str | None:
        """Replace a tool's approver list (audited by the store). Returns a problem to show, or None."""
        if self.registry.get(tool_name) is None:
            return f"There is no tool called {tool_name}."
        resource = tool_resource(tool_name)
        try:
            if user_ids:
                await self.policies.set_approvers(team_id, resource, user_ids, actor=actor.principal_id)
            else:
                await self.policies.remove_approvers(team_id, resource, actor=actor.principal_id)
        except ValueError as exc:
            return str(exc)
        except (RedisError, PolicyUpdateConflict) as exc:
            log.warning("could not save the approvers of %s in %s: %r", resource, team_id, exc)
            return "the approver lists can't be saved right now. Try again in a minute."
        return None

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
            log.warning("could not tell %s: %s", user_id, text, exc_info=True)
