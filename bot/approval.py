"""Approval policies (DESIGN §6): who decides whether a call runs, and who may settle a request.

A *request policy* runs when the model asks for a call and returns a status: run it
(``not-applicable``/``approved``), refuse it (``denied``) or ask a person (``user-approval``).
A *response policy* runs when someone answers and says whether that answer counts.

Every policy is a :class:`Policy`, which also says what cards, App Home, MCP and OpenAPI need to know
about it; every verdict is a :class:`Decision`. A plain function is a custom policy, wrapped once.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import ConfigDict, Field, model_validator

from bot.daemon_threads import DaemonThreads
from bot.deferred import DeferredModel
from bot.principals import Principal
from bot.protocol import GrantOffer, GrantScope, Responders
from bot.session import SessionInfo

if TYPE_CHECKING:
    from bot.models.base import ChatModel

log = logging.getLogger(__name__)

# --- the one verdict type -------------------------------------------------------------------

REQUEST_DECISIONS = ("not-applicable", "user-approval", "approved", "denied")
RESPONSE_DECISIONS = ("allowed", "rejected")
StatusType = Literal["not-applicable", "user-approval", "approved", "denied"]
DecisionType = Literal["not-applicable", "user-approval", "approved", "denied", "allowed", "rejected"]


class Decision(DeferredModel):
    """What a policy decided. A request policy: run it (``not-applicable``/``approved``), refuse it
    (``denied``) or ask a person (``user-approval``). A response policy: the answer counts (``allowed``,
    once ``required`` distinct people approved) or not (``rejected``, with a reason people can act on).
    Workspace rules (``tenant_policy``) decide with the request policy's words."""

    model_config = ConfigDict(frozen=True)

    type: DecisionType
    reason: str | None = None
    required: int = Field(default=1, ge=1)  # distinct approvers needed before an approval settles

    @model_validator(mode="before")
    @classmethod
    def _status_spelling(cls, data: Any) -> Any:
        # a response policy may return {"status": "allowed"} (its dict form predates this type)
        if isinstance(data, dict) and "type" not in data and "status" in data:
            data = {**data, "type": data["status"]}
            del data["status"]
        return data


def Approved(reason: str | None = None) -> Decision:  # noqa: N802 - public API spelled like eve
    return Decision(type="approved", reason=reason)


def Denied(reason: str | None = None) -> Decision:  # noqa: N802
    return Decision(type="denied", reason=reason)


def allowed(*, required: int = 1) -> Decision:
    return Decision(type="allowed", required=required)


def rejected(reason: str) -> Decision:
    return Decision(type="rejected", reason=reason)


# What a request policy may return. ``Decision`` (``Approved(reason)``/``Denied(reason)`` make one) is the
# documented spelling; the rest are kept for policies written before it, and read here, in one place:
# a status string, a dict ``{"type"|"status": …, "reason": …}``, True (ask a person), False or None (run).
RequestVerdict = Decision | StatusType | dict[str, Any] | bool | None
# What a response policy may return: ``allowed()``/``rejected(reason)``, or their dict form.
ResponseVerdict = Decision | dict[str, Any]


def normalize_status(value: RequestVerdict) -> Decision:
    """A request policy's answer in any accepted form (:data:`RequestVerdict`), as a :class:`Decision`."""
    if value is None or value is False:
        return Decision(type="not-applicable")
    if value is True:
        return Decision(type="user-approval")
    if isinstance(value, str | dict):
        value = Decision.model_validate({"type": value} if isinstance(value, str) else value)
    if isinstance(value, Decision) and value.type in REQUEST_DECISIONS:
        return value
    raise TypeError(f"a request policy returned {value!r}; expected a status string, bool, dict or Approved/Denied")


def normalize_decision(value: ResponseVerdict) -> Decision:
    """A response policy's answer: ``allowed()``/``rejected(reason)`` or their dict form."""
    if isinstance(value, dict):
        value = Decision.model_validate(value)
    if isinstance(value, Decision) and value.type in RESPONSE_DECISIONS:
        return value
    raise TypeError(f"a response policy returned {value!r}; expected allowed() or rejected(reason)")


# --- where approver lists and workspace rules come from ------------------------------------------


class ApproverList(DeferredModel):
    approvers: list[str]  # Slack user ids
    required_approvals: int = 1


class PolicySource(Protocol):
    """Where approver lists and rules come from (``bot.engine.policy_source.StorePolicySource`` over the policy
    store; ``handlers.shared.governance.SlackPolicySource`` adds Slack's word on admins and outsiders). The runtime is given one (``Parts.policies``) and passes it to every policy in its context
    (``ctx.policies``); nothing keeps it on a module."""

    async def approver_list(self, team_id: str, resource: str) -> ApproverList | None: ...
    async def allows_external(self, team_id: str) -> bool: ...
    async def outsiders(self, team_id: str, user_ids: list[str]) -> set[str]:
        """Who of ``user_ids`` is from another organisation while the workspace keeps outsiders out (their
        approvals would be refused); raises when it cannot be known."""
    async def admits_guests(self, team_id: str, channel_id: str | None) -> bool:
        """Whether Slack Connect guests may talk to the agent in this channel (or the whole workspace)."""
    async def workspace_org(self, team_id: str) -> str | None:
        """The Enterprise Grid org a workspace belongs to, as verified requests said; None if unknown."""
    async def is_admin(self, team_id: str, user_id: str) -> bool:
        """Whether ``user_id`` administers the workspace ``team_id`` (Slack says so, or BOT_ADMINS); False
        when it cannot be told in time (fail closed)."""
    async def decide(
        self, team_id: str, resource: str, tool_input: dict[str, Any] | None, user_id: str | None
    ) -> Decision | None:
        """The workspace's rule for a call, as a request policy's decision; None when no rule matches."""
    async def guest_refused(self, team_id: str, principal_id: str, channel_id: str | None, via: str) -> None:
        """Audit that a guest was refused in ``channel_id`` (``bot.engine.admission``; optional: a source without it
        audits nothing)."""


# --- what policies see ------------------------------------------------------------------------


class ApprovalContext(DeferredModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    session: SessionInfo
    tool_name: str
    tool_input: dict[str, Any] | None = None
    call_id: str
    approved_tools: frozenset[str] = frozenset()
    approval_key: str | None = None  # the tool's approval key for this call (grants are stored under it)
    tool_description: str = ""
    reviewer: Any = Field(default=None, exclude=True)  # the configured ChatModel, for auto()
    policies: Any = Field(default=None, exclude=True, repr=False)  # the PolicySource the runtime was given


RequestPolicy = Callable[[ApprovalContext], RequestVerdict | Awaitable[RequestVerdict]]


async def evaluate_request_policy(
    policy: Policy | RequestPolicy, ctx: ApprovalContext, *, timeout: float | None = None  # noqa: ASYNC109 - API
) -> Decision:
    """Run a request policy and normalise its status; raises TimeoutError after ``timeout`` seconds.

    Callers must treat any exception, TimeoutError included, as "denied".
    """
    return normalize_status(await _evaluate(as_policy(policy), ctx, timeout))


# --- the one policy type -----------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Policy:
    """A request or response policy and what it says about itself, for cards, App Home, MCP and OpenAPI.

    ``rule`` decides: ``(ApprovalContext) -> status`` for a request policy, ``(ResponseContext) ->
    allowed() | rejected(reason)`` for a response policy (sync or async). The rest describes it:

    - ``kind``: its name (``never``, ``once``, ``approvers``, ``n-of-m``…; ``custom`` for your own);
    - ``label``: how it reads to people in App Home ("asks every time", "anyone but the person who asked
      approves");
    - ``responders``: who may answer, for the card: a function of :class:`AnswerersContext` returning
      ``Responders`` (sync or async); without one the card says ``description`` or "a custom rule";
    - ``reads_lists``: the approver lists it reads (admins are offered exactly these to edit);
    - ``required``: distinct approvals it needs whatever a list says (``n_of_m(2)``: 2);
    - ``admits_external``: answers from outside the request's workspace reach the rule at all;
    - ``inline``: it only looks at its context, so it runs on the event loop (a plain function of
      yours runs in a thread, where blocking I/O cannot stall the bot);
    - ``grant_offers`` / ``records_grant``: the "don't ask again" scopes it offers, and whether an
      approval under it is remembered for the conversation (``once()`` and custom rules read it).

    A frozen dataclass, not a pydantic model: it carries functions, nothing is parsed or serialised, and
    it stays callable like the plain function it describes (``policy(ctx)`` runs the rule).
    """

    rule: Callable[[Any], Any]
    kind: str = "custom"
    label: str = ""
    responders: Callable[[AnswerersContext], Any] | None = None
    description: str | None = None
    reads_lists: tuple[str, ...] = ()
    required: int = 1
    admits_external: bool = False
    inline: bool = False
    grant_offers: tuple[GrantOffer, ...] = ()
    records_grant: bool = True

    def __call__(self, ctx: Any) -> Any:
        return self.rule(ctx)


CUSTOM_REQUEST_LABEL = "custom policy"
CUSTOM_RESPONSE_LABEL = "a custom rule in its code decides"


def as_policy(policy: Policy | Callable[[Any], Any], *, label: str = "") -> Policy:
    """A policy as the typed :class:`Policy`: a plain function of yours is wrapped once, as a custom rule.
    Its ``responders`` and ``description`` attributes, if it set them, still say who may answer."""
    if isinstance(policy, Policy):
        return policy
    if not callable(policy):
        raise TypeError(f"a policy is a function or a Policy, not {policy!r}")
    return Policy(rule=policy, label=label, responders=getattr(policy, "responders", None),
                  description=getattr(policy, "description", None),
                  reads_lists=tuple(getattr(policy, "reads_lists", ()) or ()))


# --- policies by name (BOT_MCP_CONFIG, BOT_OPENAPI) ------------------------------------------------

_NAMED: dict[str, Callable[[], Policy]] = {}


def named_policy(name: str) -> Callable[[Callable[..., Policy]], Callable[..., Policy]]:
    """Register a policy factory callable without arguments under ``name``, so config files may say it."""

    def register(factory: Callable[..., Policy]) -> Callable[..., Policy]:
        _NAMED[name] = factory
        return factory

    return register


def policy_names() -> tuple[str, ...]:
    return tuple(_NAMED)


def policy_named(name: str) -> Policy:
    """The policy a config file names (``"never"``, ``"always"``, ``"once"``); ValueError for another name."""
    factory = _NAMED.get(name)
    if factory is None:
        raise ValueError(f"no policy is named {name!r}; known: {', '.join(_NAMED)}")
    return factory()


def check_policy_name(name: str) -> str:
    """A pydantic validator for config fields naming a policy."""
    policy_named(name)
    return name


# --- running user policies without blocking the event loop -------------------------------------

MAX_POLICY_THREADS = 64


_threads = DaemonThreads(MAX_POLICY_THREADS, "policy")


def _is_async(fn: Any) -> bool:
    # a coroutine function (also behind functools.partial), or an object with ``async def __call__``
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


async def _call(policy: Policy, ctx: Any) -> Any:
    if policy.inline or _is_async(policy.rule):
        result = policy.rule(ctx)  # built-ins are instant; async policies yield on their own
    else:
        # a plain function may block (I/O, a lock): off the loop, so lease renewals, acks and the
        # timeout around it keep running
        result = await _threads.run(policy.rule, ctx)
    if inspect.isawaitable(result):
        result = await result
    return result


async def _evaluate(policy: Policy, ctx: Any, limit: float | None) -> Any:
    if limit is None:  # unbounded here; the caller may bound it (asyncio.wait_for) itself
        return await _call(policy, ctx)
    async with asyncio.timeout(limit):
        return await _call(policy, ctx)


def records_grant(policy: Approval | Policy | RequestPolicy | None) -> bool:
    """Whether approving a call under this request policy should record a session grant.

    True for ``once()`` and for custom policies (they may read ``approved_tools`` to decide);
    False for the built-ins that ignore grants, so approving an ``always()`` call never lets a
    ``once()`` or custom tool sharing its approval key skip its prompt.
    """
    return as_approval(policy).request.records_grant


@named_policy("never")
def never() -> Policy:
    """Run without asking (the default)."""
    return Policy(rule=lambda ctx: "not-applicable", kind="never", label="runs without asking", inline=True,
                  records_grant=False)


DEFAULT_GRANT_DAYS = 7
MAX_GRANT_DAYS = 90


@named_policy("always")
def always(grantable: bool | Iterable[GrantScope] = False, *, grant_days: int = DEFAULT_GRANT_DAYS) -> Policy:
    """Ask a person every time — unless ``grantable`` lets the approver also say "don't ask again":
    ``"conversation"`` (this conversation), ``"requester"`` (this requester, any conversation, for
    ``grant_days`` days), or both (``True``). Approving without choosing one grants nothing."""
    scopes = _scopes(grantable)
    base = Policy(rule=lambda ctx: "user-approval", kind="always", label="asks every time", inline=True,
                  records_grant=False)
    if not scopes:
        return base
    return replace(base, rule=_unless_granted, grant_offers=_offers(scopes, grant_days))


@named_policy("once")
def once(*, grant_days: int | None = None) -> Policy:
    """Ask the first time; after an explicit approval the tool runs without asking in this session.
    With ``grant_days``, the approver may instead say "don't ask this requester again" for that long,
    in any conversation.

    Grants are scoped by the tool's ``approval_key`` (the tool name when it has none): approving
    ``deploy`` to prod does not approve ``deploy`` to staging. A grant never approves a request that
    is already pending: approving one of two pending prompts does not approve the other (see
    ``ApprovalContext.approved_tools``); only calls asked for after it run without asking.
    """
    return Policy(rule=_unless_granted, kind="once", label="asks once per conversation", inline=True,
                  grant_offers=_offers(("requester",), grant_days) if grant_days else ())


def _unless_granted(ctx: ApprovalContext) -> StatusType:
    granted = (ctx.approval_key or ctx.tool_name) in ctx.approved_tools
    return "not-applicable" if granted else "user-approval"


def _scopes(grantable: bool | Iterable[GrantScope]) -> tuple[GrantScope, ...]:
    if grantable is True:
        return ("conversation", "requester")
    if grantable is False:
        return ()
    scopes = tuple(dict.fromkeys(grantable))
    unknown = [s for s in scopes if s not in ("conversation", "requester")]
    if unknown or not scopes:
        raise ValueError(f"grantable takes True or scopes among 'conversation' and 'requester', not {grantable!r}")
    return scopes


def _offers(scopes: tuple[GrantScope, ...], days: int) -> tuple[GrantOffer, ...]:
    if not 1 <= days <= MAX_GRANT_DAYS:
        raise ValueError(f"grant_days must be 1 to {MAX_GRANT_DAYS}, not {days!r}")
    return tuple(GrantOffer(scope=s, days=days if s == "requester" else None) for s in scopes)


def grant_offers(policy: Approval | Policy | RequestPolicy | None) -> list[GrantOffer]:
    """The "don't ask again" scopes a tool's request policy lets approvers choose."""
    return list(as_approval(policy).request.grant_offers)


AUTO_MAX_INPUT_BYTES = 64 * 1024
AUTO_TIMEOUT_SECONDS = 30.0

DEFAULT_AUTO_INSTRUCTIONS = """You review one tool call an AI agent wants to make on behalf of a person.
Classify it as "clear" (safe to run without asking) or "caution" (a person must approve it).
Answer "caution" when the call could:
- make destructive changes or lose data (delete, overwrite, drop, truncate, revoke);
- expose credentials, secrets, tokens or personal data;
- move money (payments, refunds, transfers, purchases, changes to billing);
- deploy, release or change anything public or in production;
- communicate externally (email, messages or posts to people outside the conversation);
- change permissions, access, roles, configuration or the system itself;
- execute code or commands covertly or in ways the person would not expect.
When an important effect of the call is unclear, answer "caution".
Reply with JSON only: {"decision": "clear" | "caution", "reason": "<one sentence>"}"""

DEFAULT_AUTO_CRITERIA = {
    "clear": "Read-only or easily reversible, affects only the requester, no money, no external effect.",
    "caution": "Anything destructive, financial, external, public, privileged, secret-revealing or unclear.",
}


def auto(
    instructions: str | None = None,
    criteria: dict[str, str] | None = None,
    *,
    model: ChatModel | None = None,
    timeout: float = AUTO_TIMEOUT_SECONDS,
) -> Policy:
    """Let a model review each call: ``clear`` runs it, ``caution`` (or any failure) asks a person.

    The tool input is sent to the reviewing model. Inputs over 64 KiB are never sent: they go
    straight to a person.
    """

    async def review(ctx: ApprovalContext) -> Decision:
        reviewer = model or ctx.reviewer
        payload = json.dumps(ctx.tool_input, default=str, sort_keys=True)
        if len(payload.encode()) > AUTO_MAX_INPUT_BYTES:
            return Decision(type="user-approval", reason="input too large for automatic review")
        if reviewer is None:
            return Decision(type="user-approval", reason="no review model configured")
        try:
            return await asyncio.wait_for(_classify(reviewer, ctx, payload, instructions, criteria), timeout)
        except TimeoutError:
            log.warning("auto() review of %s timed out after %ss; asking a person", ctx.tool_name, timeout)
            return Decision(type="user-approval", reason="automatic review timed out")
        except Exception as exc:  # noqa: BLE001 - any failure means a person decides
            log.warning("auto() review of %s failed (%s); asking a person", ctx.tool_name, exc)
            return Decision(type="user-approval", reason="automatic review failed")

    return Policy(rule=review, kind="auto", label="model review, then a person", records_grant=False)


async def _classify(
    reviewer: ChatModel,
    ctx: ApprovalContext,
    payload: str,
    instructions: str | None,
    criteria: dict[str, str] | None,
) -> Decision:
    crit = criteria or DEFAULT_AUTO_CRITERIA
    system = (instructions or DEFAULT_AUTO_INSTRUCTIONS) + "\n\nCriteria:\n" + "\n".join(
        f"- {k}: {v}" for k, v in crit.items()
    )
    user = f"Tool: {ctx.tool_name}\nDescription: {ctx.tool_description}\nInput (JSON): {payload}"
    response = await reviewer.complete(
        [{"role": "system", "content": system}, {"role": "user", "content": user}], []
    )
    verdict = _parse_verdict(response.text or "")
    if verdict == "clear":
        return Decision(type="approved", reason="automatic review: clear")
    return Decision(type="user-approval", reason="automatic review: caution")


def _parse_verdict(text: str) -> str:
    """``clear`` only when the reviewer unambiguously said so; anything else is caution."""
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        try:
            decision = str(json.loads(text[start : end + 1]).get("decision", "")).strip().lower()
            return "clear" if decision == "clear" else "caution"
        except (ValueError, AttributeError):
            pass
    words = text.strip().lower()
    return "clear" if words in {"clear", '"clear"'} else "caution"


# --- response policies ----------------------------------------------------------------------


class RequestView(DeferredModel):
    request_id: str
    call_id: str | None = None
    tool_name: str | None = None
    # what would run: the proposed input, or the approver's edit of it (so a policy judges what runs)
    tool_input: dict[str, Any] | None = None
    principal: Principal | None = None  # who asked, captured when asked
    proposed_input: dict[str, Any] | None = None  # the input as the agent proposed it, when it was edited


class ResponseView(DeferredModel):
    decision: Literal["approve", "cancel"]
    principal: Principal
    note: str | None = None


class ResponseContext(DeferredModel):
    request: RequestView
    response: ResponseView
    session: SessionInfo
    approvals: list[str] = Field(default_factory=list)  # principal ids that already approved (n-of-m)
    policies: Any = Field(default=None, exclude=True, repr=False)  # the PolicySource the runtime was given


ResponsePolicy = Callable[[ResponseContext], ResponseVerdict | Awaitable[ResponseVerdict]]


class AnswerersContext(DeferredModel):
    """What a response policy sees when it says who may answer (no answer yet)."""

    request: RequestView
    session: SessionInfo
    policies: Any = Field(default=None, exclude=True, repr=False)  # the PolicySource the runtime was given


DESCRIBE_TIMEOUT = 2.0  # describing is for the card: a slow or failing one shows no line, never blocks


async def describe_responders(policy: Policy | ResponsePolicy | None, ctx: AnswerersContext) -> Responders | None:
    """Who may settle, as the policy says (its ``responders``: a function of :class:`AnswerersContext`,
    sync or async, returning ``Responders``). A policy without one is "a custom rule" (its
    ``description``, if any, says which). None when it could not say."""
    policy = as_policy(policy or requester_only())
    if policy.responders is None:
        return Responders(rule="custom", description=policy.description)
    try:
        result = policy.responders(ctx)
        if inspect.isawaitable(result):
            result = await asyncio.wait_for(result, DESCRIBE_TIMEOUT)
        return result if isinstance(result, Responders) else Responders.model_validate(result)
    except Exception as exc:  # noqa: BLE001 - informational only
        log.warning("response policy %r could not say who may answer: %r", policy, exc)
        return None

ONLY_REQUESTER = "Only the person who requested this action can respond to this approval."


def _requester_decides(ctx: ResponseContext) -> Decision:
    requester = ctx.request.principal
    if requester is None or requester.same_as(ctx.response.principal):
        return allowed()
    return rejected(ONLY_REQUESTER)


def _the_requester(ctx: AnswerersContext) -> Responders:
    requester = ctx.request.principal
    return Responders(rule="requester", people=[requester]) if requester else Responders(rule="anyone")


def requester_only() -> Policy:
    """The default: only the person whose turn asked may settle; an anonymous requester lets anyone."""
    return Policy(rule=_requester_decides, kind="requester-only", label="the person who asked decides",
                  responders=_the_requester, inline=True)


def delegation_responses() -> Policy:
    """Who settles a ``delegation`` request (``bot.agents``): its result comes only from the app itself
    (the relay, with the sub-agent's answer); Cancel is the requester's, as the default rule has it."""
    from bot.principals import APP_PRINCIPAL

    def rule(ctx: ResponseContext) -> Decision:
        if ctx.response.decision == "approve":
            if APP_PRINCIPAL.same_as(ctx.response.principal):
                return allowed()
            return rejected("Only the sub-agent's own answer completes this.")
        if ctx.request.principal is None and ctx.response.principal.team_id != ctx.session.team_id:
            return rejected(ONLY_REQUESTER)  # anonymous requester: anyone, but of this workspace
        return _requester_decides(ctx)

    # the app principal belongs to no workspace: answers from outside reach the rule
    return replace(requester_only(), rule=rule, admits_external=True)


async def evaluate_response_policy(
    policy: Policy | ResponsePolicy, ctx: ResponseContext, *, timeout: float | None = None  # noqa: ASYNC109 - API
) -> Decision:
    """Run a response policy; raises TimeoutError after ``timeout`` seconds (callers fail closed)."""
    return normalize_decision(await _evaluate(as_policy(policy), ctx, timeout))


@dataclass(frozen=True)
class Approval:
    """A tool's approval: the request policy and, optionally, who may settle. Plain functions are wrapped
    once here, as custom :class:`Policy` objects."""

    request: Policy
    response: Policy | None = None

    def __init__(self, request: Policy | RequestPolicy, response: Policy | ResponsePolicy | None = None) -> None:
        object.__setattr__(self, "request", as_policy(request, label=CUSTOM_REQUEST_LABEL))
        object.__setattr__(self, "response", None if response is None
                           else as_policy(response, label=CUSTOM_RESPONSE_LABEL))

    @property
    def effective_response(self) -> Policy:
        """The rule that decides who may settle the tool's requests: its own, else ``requester_only()``."""
        return self.response or requester_only()


def as_approval(value: Approval | Policy | RequestPolicy | None) -> Approval:
    if value is None:
        return Approval(request=never())
    if isinstance(value, Approval):
        return value
    return Approval(request=value)

