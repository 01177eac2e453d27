"""Who may approve what, per workspace: response-policy helpers and the tenant adapter.

Users compose these on their tools::

    @tool(approval=Approval(request=always(), response=approvers("tool:refund_charge")))
    @tool(approval=Approval(request=always(), response=four_eyes()))
    @tool(approval=Approval(request=always(), response=n_of_m(2, "tool:rotate_keys")))
    @tool(approval=tenant_policy("connection:billing__refund"))

The approver lists and rules live in the policy store (edited by admins in App Home or
``/approvers``); the runtime is given it (a ``PolicySource``) and hands it to each policy as
``ctx.policies``. Everything here fails closed: a store that cannot be read rejects or denies, with a reason people can act on.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from bot.approval import (
    AnswerersContext,
    ApprovalContext,
    Decision,
    Policy,
    PolicySource,
    ResponseContext,
    ResponsePolicy,
    allowed,
    as_policy,
    describe_responders,
    rejected,
)
from bot.approval import (
    ApproverList as ApproverList,  # re-exported: where the policy store's adapter has always found it
)
from bot.principals import Principal, workspace_member
from bot.protocol import Responders

log = logging.getLogger(__name__)

UNDESCRIBED_RULE = ("This request's own rule doesn't say how many approvals it needs, so only the people it names "
                    "can approve it; you can cancel it.")
STORE_DOWN = "Approver lists can't be read right now, so nobody can approve this yet. Try again in a minute."
# A key names a tenant when its last word is one of these, alone or with an id suffix, in any case
# or spelling: team, teamId, team_id, TEAM-ID, target_team_id, workspaceIds, tenant, enterprise_id…
TENANT_WORDS = frozenset({"team", "workspace", "tenant", "enterprise"})
# How much of a tool input tenant_policy() inspects; anything bigger is denied, not half-checked.
MAX_INPUT_DEPTH = 64
MAX_INPUT_NODES = 10_000


async def listed_people(source: PolicySource | None, team_id: str, resource: str) -> list[Principal]:
    """The people on a workspace's approver list for ``resource`` (escalation); [] when none or unset."""
    if source is None:
        raise LookupError("no policy source")
    listing = await source.approver_list(team_id, resource)
    users = await _admissible(source, team_id, listing.approvers if listing else [])
    return [workspace_member(team_id, u) for u in users]


async def _admissible(source: PolicySource | None, team_id: str, user_ids: list[str]) -> list[str]:
    """``user_ids`` without the outsiders among them (a list saved before the editor checked, or while the
    workspace let outsiders in): nobody is named as able to answer, or sent a request, who would be
    refused. Raises when that cannot be known: then nobody is named or told."""
    if source is None or not user_ids:
        return user_ids
    outside = await source.outsiders(team_id, user_ids)
    return [u for u in user_ids if u not in outside]


def _user(principal: Principal | None) -> str | None:
    return principal.member_id if principal else None


def is_external(principal: Principal | None) -> bool:
    """A Slack Connect user: their own workspace differs from the installation's."""
    if principal is None or principal.team_id is None:
        return False
    own = principal.attributes.get("user_team_id")
    return bool(own) and own != principal.team_id


def requester_only() -> Policy:
    from bot.approval import requester_only as default

    return default()


def approvers(resource: str, *, allow_self: bool = False) -> Policy:
    """Only people on the resource's approver list may approve; the requester or an approver may cancel.

    An approver who asked for the call cannot approve it themselves unless ``allow_self=True``."""

    async def rule(ctx: ResponseContext) -> Decision:
        requester, responder = ctx.request.principal, ctx.response.principal
        decision = await check_list(ctx, resource, required=None)
        if (decision.type == "allowed" and not allow_self and ctx.response.decision == "approve"
                and requester is not None and requester.same_as(responder)):
            # an approver who asked: say who else may (one not on the list heard who may, above)
            return await _own_request(ctx, resource)
        return decision

    async def responders(ctx: AnswerersContext) -> Responders:
        return await listed_responders(ctx, resource, required=1, exclude_requester=not allow_self)

    return Policy(rule=rule, kind="approvers", label="anyone on the list approves",
                  responders=responders, reads_lists=(resource,))


def four_eyes(resource: str | None = None) -> Policy:
    """Someone other than the requester must approve (from the approver list, if a resource is given).

    The requester may still cancel their own request.
    """

    async def rule(ctx: ResponseContext) -> Decision:
        requester, responder = ctx.request.principal, ctx.response.principal
        if ctx.response.decision == "cancel":
            if requester is None or requester.same_as(responder):
                return allowed()
            return await check_list(ctx, resource, required=None) if resource else rejected(
                f"Only {_asker(requester)} or a workspace admin can cancel this request."
            )
        if requester is not None and requester.same_as(responder):
            return rejected("Four-eyes rule: you can't approve your own request — someone else has to.")
        if await _outsider(ctx, responder):
            return rejected("People from other workspaces can't approve requests here.")
        if resource is None:
            return allowed()
        return await check_list(ctx, resource, required=None)

    async def responders(ctx: AnswerersContext) -> Responders:
        if resource is not None:
            return await listed_responders(ctx, resource, required=1, exclude_requester=True)
        return _anyone_but_requester(ctx, required=1)

    label = "anyone on the list but the person who asked approves" if resource else \
        "anyone but the person who asked approves"
    return Policy(rule=rule, kind="four-eyes", label=label,
                  responders=responders, reads_lists=(resource,) if resource else ())


def n_of_m(n: int, resource: str | None = None) -> Policy:
    """The request stays pending until ``n`` distinct eligible people approved (the requester never counts)."""
    if n < 1:
        raise ValueError("n_of_m needs n >= 1")

    async def rule(ctx: ResponseContext) -> Decision:
        requester, responder = ctx.request.principal, ctx.response.principal
        if ctx.response.decision == "cancel":
            if requester is None or requester.same_as(responder):
                return allowed()
            if resource:
                return await check_list(ctx, resource, required=1)
            if await _outsider(ctx, responder):
                return rejected("People from other workspaces can't answer requests here.")
            return allowed()
        if requester is not None and requester.same_as(responder):
            return rejected(f"You can't approve your own request; {n} other people must approve it.")
        if resource is None:
            if await _outsider(ctx, responder):
                return rejected("People from other workspaces can't approve requests here.")
            return allowed(required=n)
        return await check_list(ctx, resource, required=n)

    async def responders(ctx: AnswerersContext) -> Responders:
        if resource is not None:
            return await listed_responders(ctx, resource, required=n, exclude_requester=True)
        return _anyone_but_requester(ctx, required=n)

    label = f"any {n} people {'on the list ' if resource else ''}other than the person who asked approve"
    return Policy(rule=rule, kind="n-of-m", label=label,
                  responders=responders, reads_lists=(resource,) if resource else (), required=n)


def lists_read(policy: Policy | ResponsePolicy | None) -> tuple[str, ...]:
    """The approver lists a response policy reads (``Policy.reads_lists``). Admins are offered exactly
    these lists to edit: never one that does nothing."""
    return as_policy(policy).reads_lists if policy is not None else ()


def _anyone_but_requester(ctx: AnswerersContext, *, required: int) -> Responders:
    requester = ctx.request.principal
    if requester is None:
        return Responders(rule="anyone", required=required)
    return Responders(rule="anyone_but", people=[requester], required=required)


async def listed_responders(ctx: AnswerersContext, resource: str, *, required: int,
                            exclude_requester: bool) -> Responders:
    """The resource's approver list as people, for a policy's ``responders`` (a building block of response
    policies, like :func:`check_list`). Raises when it cannot be read: the card then has no line."""
    team, source = ctx.session.team_id, ctx.policies
    if source is None or team is None:
        raise LookupError("no policy source or no workspace")
    listing = await source.approver_list(team, resource)
    requester = _user(ctx.request.principal)
    users = [u for u in (listing.approvers if listing else []) if not (exclude_requester and u == requester)]
    users = await _admissible(source, team, users)
    need = max(required, listing.required_approvals if listing else 1)  # said even with nobody listed (escalation)
    if not users:
        return Responders(rule="nobody", description=f"Nobody is set up to approve {_named(resource)} yet",
                          required=need)
    return Responders(rule="people", people=[workspace_member(team, u) for u in users], required=need)


async def workspace_admin(source: PolicySource | None, team_id: str | None, principal: Principal) -> bool:
    """Whether ``principal`` administers the request's workspace ``team_id``: such an admin may cancel any
    request there (a stuck one nobody else can), never approve one. A person of another workspace, an
    outsider, or an answer that cannot be had in time is no admin here (fail closed)."""
    user = principal.slack_user_id
    check = getattr(source, "is_admin", None)
    if check is None or not team_id or not user or principal.team_id != team_id or is_external(principal):
        return False
    try:
        return await check(team_id, user) is True
    except Exception:  # noqa: BLE001 - unknown: not an admin
        log.warning("could not tell whether %s administers %s", user, team_id, exc_info=True)
        return False


async def escalated_answer(policy: Policy | ResponsePolicy | None, ctx: ResponseContext) -> Decision:
    """The answer of someone a request was escalated to (``bot.engine.timers``), whom ``policy`` itself refused.

    Escalation widens who may answer, never what is required: the requester still can't approve their
    own request, an outsider (Slack Connect, not let in by the workspace) stays one, and an approval
    counts as one of the distinct approvals the rule requires of the people it names (its quorum, as it
    describes itself: ``n_of_m(2)`` still needs two people, an approver list's "2 required" still two).
    A rule that cannot say its quorum right now admits nobody this way (fail closed). A custom rule that does
    not describe itself (no ``responders``) has no quorum to keep: people it was escalated to may cancel,
    never approve, so what it required stays what it alone allows."""
    requester, responder = ctx.request.principal, ctx.response.principal
    if ctx.response.decision == "approve" and requester is not None and requester.same_as(responder):
        return rejected("You can't approve your own request; someone else has to.")
    if await _outsider(ctx, responder):
        return rejected("People from other workspaces can't approve requests here.")
    if ctx.response.decision == "approve" and as_policy(policy or requester_only()).responders is None:
        return rejected(UNDESCRIBED_RULE)
    described = await describe_responders(policy, AnswerersContext(request=ctx.request, session=ctx.session,
                                                                    policies=ctx.policies))
    if described is None:
        return rejected(STORE_DOWN)
    return allowed(required=described.required)


async def _outsider(ctx: ResponseContext, responder: Principal) -> bool:
    """From another organisation (Slack Connect) and not let in by the workspace. A colleague whose own
    workspace is another one of the request's Enterprise Grid org is not an outsider."""
    if not is_external(responder):
        return False
    if await _same_org(ctx, responder.attributes.get("user_team_id")):
        return False
    return not await _external_ok(ctx)


async def _same_org(ctx: ResponseContext, home_team: str | None) -> bool:
    org, source = ctx.session.enterprise_id, ctx.policies
    if source is None or not org or not home_team:
        return False
    try:
        return await source.workspace_org(home_team) == org
    except Exception:  # noqa: BLE001 - unknown: treated as outside the org (fail closed)
        return False


async def _external_ok(ctx: ResponseContext) -> bool:
    if ctx.policies is None or ctx.session.team_id is None:
        return False
    try:
        return await ctx.policies.allows_external(ctx.session.team_id)
    except Exception:  # noqa: BLE001 - unreadable store: external people stay out
        return False


def list_name(resource: str) -> str:
    """How people read an approver list: ``refund_charge`` for "tool:refund_charge" (any other resource
    keeps its full name). The editor keys its controls by it too."""
    kind, _, name = resource.partition(":")
    return name if kind == "tool" and name and ":" not in name else resource


def _named(resource: str) -> str:
    return f"`{list_name(resource)}`"


def _mentions(user_ids: list[str], joiner: str = " or ", shown: int = 5) -> str:
    """``<@U1> or <@U2>`` (and how many more on the list past ``shown``)."""
    names = joiner.join(f"<@{u}>" for u in user_ids[:shown])
    return names + (f" (or {len(user_ids) - shown} more on its list)" if len(user_ids) > shown else "")


def _asker(requester: Principal | None) -> str:
    user = requester.slack_user_id if requester is not None else None
    return f"<@{user}> (who asked)" if user else "the person who asked"


async def _own_request(ctx: ResponseContext, resource: str) -> Decision:
    """The refusal for an approver approving their own request: who else on the list may."""
    requester, source, team = _user(ctx.request.principal), ctx.policies, ctx.session.team_id
    try:
        listing = await source.approver_list(team, resource) if source and team else None
        others = await _admissible(source, team or "", [u for u in (listing.approvers if listing else [])
                                                        if u != requester])
    except Exception:  # noqa: BLE001 - the refusal stands; only the names are missing
        others = []
    if not others:
        return rejected(f"You can't approve your own request, and nobody else is on the {_named(resource)} "
                        "list yet: a workspace admin can add approvers in the app's Home tab or with /approvers.")
    return rejected(f"You can't approve your own request; only {_mentions(others)} can.")


async def check_list(ctx: ResponseContext, resource: str | None, *, required: int | None) -> Decision:
    """Whether the answerer is on the approver list ``resource`` of the request's workspace (a building block
    of response policies): the requester may cancel; people of another workspace or organisation, a list
    that can't be read or is empty, and anyone off it are refused, saying who may. Allowed answers need the
    stricter of ``required`` and the list's own setting."""
    responder = ctx.response.principal
    requester = ctx.request.principal
    if ctx.response.decision == "cancel" and (requester is None or requester.same_as(responder)):
        return allowed()
    team, source = ctx.session.team_id, ctx.policies
    if source is None or team is None or resource is None:
        return rejected(STORE_DOWN if source is None else "This request has no workspace, so nobody can approve it.")
    org = ctx.session.enterprise_id
    if responder.team_id != team and not (org and responder.attributes.get("enterprise_id") == org):
        return rejected("You can only approve requests from your own workspace.")
    if await _outsider(ctx, responder):
        return rejected("People from other workspaces can't approve requests here.")
    try:
        listing = await source.approver_list(team, resource)
    except Exception as exc:  # noqa: BLE001 - fail closed, visibly
        log.warning("approver list for %s in %s unreadable: %r", resource, team, exc)
        return rejected(STORE_DOWN)
    if (listing is None or not listing.approvers) and ctx.response.decision == "cancel":
        return rejected(f"Only {_asker(requester)} or a workspace admin can cancel this request.")
    if listing is None or not listing.approvers:
        return rejected(f"Nobody is set up to approve {_named(resource)} yet. A workspace admin can add "
                        "approvers in the app's Home tab or with /approvers.")
    if _user(responder) not in listing.approvers:
        if ctx.response.decision == "cancel":  # say who may do what was tried: cancel, not approve
            return rejected(f"Only {_asker(requester)}, {_mentions(listing.approvers, ', ')} or a workspace admin "
                            "can cancel this request.")
        return rejected(f"Only {_mentions(listing.approvers)} can approve {_named(resource)}.")
    # the stricter of the tool's own rule and the workspace's setting wins
    return allowed(required=max(required or 1, listing.required_approvals))


# --- the tenant adapter (a request policy) ---------------------------------------------------


def tenant_policy(resource: str | None = None) -> Policy:
    """Decide calls from the workspace's rules (seed 001's multi-tenant pattern).

    Denies when the session is not pinned to one workspace, when the input names another or an
    unclear tenant under any tenant-like key at any depth (see :func:`is_tenant_key`), when no
    rule allows the call, and when the rules cannot be read. A rule condition on a number that
    is not finite asks a person.
    """

    async def rule(ctx: ApprovalContext) -> Decision:
        team, source = ctx.session.team_id, ctx.policies
        current, initiator = ctx.session.auth.current, ctx.session.auth.initiator
        if not team or not _pinned(team, current, initiator):
            return Decision(type="denied", reason="This session is not tied to a single workspace.")
        problem = _tenant_problem(ctx.tool_input, team)
        if problem is not None:
            return Decision(type="denied", reason=problem)
        if source is None:
            return Decision(type="denied", reason="Workspace rules are not available.")
        try:
            verdict = await source.decide(team, resource or f"tool:{ctx.tool_name}", ctx.tool_input, _user(current))
        except Exception as exc:  # noqa: BLE001
            log.warning("tenant rules for %s unreadable: %r", team, exc)
            return Decision(type="denied", reason="Workspace rules can't be read right now.")
        if verdict is None:
            return Decision(type="denied", reason=f"No rule in this workspace allows {ctx.tool_name}.")
        if verdict.type == "denied" and not verdict.reason:
            return Decision(type="denied", reason=f"{ctx.tool_name} is not allowed here.")
        return verdict

    return Policy(rule=rule, kind="tenant", label="workspace rules", records_grant=False)


def _pinned(team: str, *principals: Principal | None) -> bool:
    for p in principals:
        if p is None:
            return False
        if p.principal_type != "user" or p.team_id != team:
            return False
    return True


_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_FINAL_WORDS = frozenset(w + end for w in TENANT_WORDS for end in ("", "s", "id", "ids"))


def is_tenant_key(key: object) -> bool:
    """``team_id``, ``teamId``, ``Team-ID``, ``target_team_id``, ``workspaces``… but not ``steam`` or ``team_name``."""
    words = [w.lower() for w in _WORDS.findall(str(key))]
    # joining the last words also catches ``team_id``, ``teamID`` and ``teamIDs`` (split as team, i, ds)
    return any("".join(words[-n:]) in _FINAL_WORDS for n in (1, 2, 3) if len(words) >= n)


class _TooBig(Exception):
    pass


def _tenant_problem(tool_input: Any, team: str) -> str | None:
    """Why the input may reach outside ``team`` (a reason for the model), or None when it stays inside.

    Every tenant-like key at any depth must hold exactly ``team`` as a string: another id, a
    second disagreeing field, a list, an object, a number, null or "" all deny, because a tool
    could read any of them as "another workspace" or "all workspaces".
    """
    try:
        found = _tenant_values(tool_input, at=None, depth=0, budget=[MAX_INPUT_NODES])
    except _TooBig:
        return ("The request is too large or too deeply nested to check which workspace it touches, "
                "so it was denied.")
    for at, value in found:
        if not isinstance(value, str):
            return (f"The request's `{_path(at)}` is not a single workspace id; it must be this workspace's id "
                    f"({team}), so the call was denied.")
        if value != team:
            return f"The request names another workspace (`{_path(at)}`); calls stay in yours ({team})."
    return None


# Where a value sits: (key or list index, where its parent sits). Built per node in O(1) and only
# spelled out for the reason, so long keys in large inputs cost nothing.
_At = tuple[object, "_At | None"]


def _tenant_values(value: Any, *, at: _At | None, depth: int, budget: list[int]) -> list[tuple[_At, Any]]:
    """(where, value) of every tenant-like key in ``value``; raises _TooBig past the inspection bounds."""
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_INPUT_DEPTH:
        raise _TooBig
    found: list[tuple[_At, Any]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            where: _At = (key, at)
            if is_tenant_key(key):
                found.append((where, item))
            found.extend(_tenant_values(item, at=where, depth=depth + 1, budget=budget))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found.extend(_tenant_values(item, at=(index, at), depth=depth + 1, budget=budget))
    return found


def _path(at: _At | None) -> str:
    parts: list[str] = []
    while at is not None:
        step, at = at
        parts.append(f"[{step}]" if isinstance(step, int) else f".{str(step)[:40]}")
    return "".join(reversed(parts)).lstrip(".")
