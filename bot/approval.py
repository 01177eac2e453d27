"""Approval policies (DESIGN §6): who decides whether a call runs, and who may settle a request.

A *request policy* runs when the model asks for a call and returns a status: run it
(``not-applicable``/``approved``), refuse it (``denied``) or ask a person (``user-approval``).
A *response policy* runs when someone answers and says whether that answer counts.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from bot.daemon_threads import DaemonThreads
from bot.principals import Principal
from bot.protocol import GrantOffer, GrantScope, Responders
from bot.session import SessionInfo

if TYPE_CHECKING:
    from bot.models.base import ChatModel

log = logging.getLogger(__name__)

StatusType = Literal["not-applicable", "user-approval", "approved", "denied"]


# --- request-time statuses ------------------------------------------------------------------


class PolicyStatus(BaseModel):
    """A request policy's verdict, normalised from any of the accepted status forms."""

    type: StatusType
    reason: str | None = None


def Approved(reason: str | None = None) -> PolicyStatus:  # noqa: N802 - public API spelled like eve
    return PolicyStatus(type="approved", reason=reason)


def Denied(reason: str | None = None) -> PolicyStatus:  # noqa: N802
    return PolicyStatus(type="denied", reason=reason)


def normalize_status(value: Any) -> PolicyStatus:
    """Accept every status form: strings, booleans, None, dicts and PolicyStatus."""
    if isinstance(value, PolicyStatus):
        return value
    if value is None or value is False:
        return PolicyStatus(type="not-applicable")
    if value is True:
        return PolicyStatus(type="user-approval")
    if isinstance(value, str):
        return PolicyStatus(type=value)  # type: ignore[arg-type]  # pydantic rejects unknown strings
    if isinstance(value, dict):
        return PolicyStatus.model_validate(value)
    raise TypeError(f"a request policy returned {value!r}; expected a status string, bool, dict or Approved/Denied")


class ApprovalContext(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    session: SessionInfo
    tool_name: str
    tool_input: dict[str, Any] | None = None
    call_id: str
    approved_tools: frozenset[str] = frozenset()
    approval_key: str | None = None  # the tool's approval key for this call (grants are stored under it)
    tool_description: str = ""
    reviewer: Any = Field(default=None, exclude=True)  # the configured ChatModel, for auto()


RequestPolicy = Callable[[ApprovalContext], Any]


async def evaluate_request_policy(
    policy: RequestPolicy, ctx: ApprovalContext, *, timeout: float | None = None  # noqa: ASYNC109 - API
) -> PolicyStatus:
    """Run a request policy and normalise its status; raises TimeoutError after ``timeout`` seconds.

    Callers must treat any exception, TimeoutError included, as "denied".
    """
    return normalize_status(await _evaluate(policy, ctx, timeout))


# --- running user policies without blocking the event loop -------------------------------------

_INLINE = "_runs_inline"  # set on built-in policies that only look at the context
MAX_POLICY_THREADS = 64


_threads = DaemonThreads(MAX_POLICY_THREADS, "policy")


def _is_async(fn: Any) -> bool:
    # a coroutine function (also behind functools.partial), or an object with ``async def __call__``
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


async def _call(policy: Callable[[Any], Any], ctx: Any) -> Any:
    if getattr(policy, _INLINE, False) or _is_async(policy):
        result = policy(ctx)  # built-ins are instant; async policies yield on their own
    else:
        # a plain function may block (I/O, a lock): off the loop, so lease renewals, acks and the
        # timeout around it keep running
        result = await _threads.run(policy, ctx)
    if inspect.isawaitable(result):
        result = await result
    return result


async def _evaluate(policy: Callable[[Any], Any], ctx: Any, limit: float | None) -> Any:
    if limit is None:  # unbounded here; the caller may bound it (asyncio.wait_for) itself
        return await _call(policy, ctx)
    async with asyncio.timeout(limit):
        return await _call(policy, ctx)


def _named(kind: str, fn: RequestPolicy, *, inline: bool = False) -> RequestPolicy:
    fn.policy_kind = kind  # type: ignore[attr-defined]  # lets UIs label a tool's policy
    if inline:
        setattr(fn, _INLINE, True)
    return fn


# Request policies that never read ``approved_tools``: approving their calls grants nothing.
_GRANTLESS_KINDS = frozenset({"never", "always", "auto", "tenant"})


def records_grant(policy: Approval | RequestPolicy | None) -> bool:
    """Whether approving a call under this request policy should record a session grant.

    True for ``once()`` and for custom policies (they may read ``approved_tools`` to decide);
    False for the built-ins that ignore grants, so approving an ``always()`` call never lets a
    ``once()`` or custom tool sharing its approval key skip its prompt.
    """
    request = as_approval(policy).request
    return getattr(request, "policy_kind", None) not in _GRANTLESS_KINDS


def never() -> RequestPolicy:
    """Run without asking (the default)."""
    return _named("never", lambda ctx: "not-applicable", inline=True)


DEFAULT_GRANT_DAYS = 7
MAX_GRANT_DAYS = 90


def always(grantable: bool | Iterable[GrantScope] = False, *, grant_days: int = DEFAULT_GRANT_DAYS) -> RequestPolicy:
    """Ask a person every time — unless ``grantable`` lets the approver also say "don't ask again":
    ``"conversation"`` (this conversation), ``"requester"`` (this requester, any conversation, for
    ``grant_days`` days), or both (``True``). Approving without choosing one grants nothing."""
    scopes = _scopes(grantable)
    if not scopes:
        return _named("always", lambda ctx: "user-approval", inline=True)
    return _offering(_named("always", _unless_granted(), inline=True), scopes, grant_days)


def once(*, grant_days: int | None = None) -> RequestPolicy:
    """Ask the first time; after an explicit approval the tool runs without asking in this session.
    With ``grant_days``, the approver may instead say "don't ask this requester again" for that long,
    in any conversation.

    Grants are scoped by the tool's ``approval_key`` (the tool name when it has none): approving
    ``deploy`` to prod does not approve ``deploy`` to staging. A grant never approves a request that
    is already pending: approving one of two pending prompts does not approve the other (see
    ``ApprovalContext.approved_tools``); only calls asked for after it run without asking.
    """
    policy = _named("once", _unless_granted(), inline=True)
    return _offering(policy, ("requester",), grant_days) if grant_days else policy


def _unless_granted() -> RequestPolicy:
    """A new policy function each time: each carries its own kind and offers as attributes."""

    def policy(ctx: ApprovalContext) -> StatusType:
        granted = (ctx.approval_key or ctx.tool_name) in ctx.approved_tools
        return "not-applicable" if granted else "user-approval"

    return policy


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


def _offering(policy: RequestPolicy, scopes: tuple[GrantScope, ...], days: int) -> RequestPolicy:
    if not 1 <= days <= MAX_GRANT_DAYS:
        raise ValueError(f"grant_days must be 1 to {MAX_GRANT_DAYS}, not {days!r}")
    policy.grant_offers = [GrantOffer(scope=s, days=days if s == "requester" else None)  # type: ignore[attr-defined]
                           for s in scopes]
    return policy


def grant_offers(policy: Approval | RequestPolicy | None) -> list[GrantOffer]:
    """The "don't ask again" scopes a tool's request policy lets approvers choose."""
    return list(getattr(as_approval(policy).request, "grant_offers", []))


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
) -> RequestPolicy:
    """Let a model review each call: ``clear`` runs it, ``caution`` (or any failure) asks a person.

    The tool input is sent to the reviewing model. Inputs over 64 KiB are never sent: they go
    straight to a person.
    """

    async def review(ctx: ApprovalContext) -> PolicyStatus:
        reviewer = model or ctx.reviewer
        payload = json.dumps(ctx.tool_input, default=str, sort_keys=True)
        if len(payload.encode()) > AUTO_MAX_INPUT_BYTES:
            return PolicyStatus(type="user-approval", reason="input too large for automatic review")
        if reviewer is None:
            return PolicyStatus(type="user-approval", reason="no review model configured")
        try:
            return await asyncio.wait_for(_classify(reviewer, ctx, payload, instructions, criteria), timeout)
        except TimeoutError:
            log.warning("auto() review of %s timed out after %ss; asking a person", ctx.tool_name, timeout)
            return PolicyStatus(type="user-approval", reason="automatic review timed out")
        except Exception as exc:  # noqa: BLE001 - any failure means a person decides
            log.warning("auto() review of %s failed (%s); asking a person", ctx.tool_name, exc)
            return PolicyStatus(type="user-approval", reason="automatic review failed")

    return _named("auto", review)


async def _classify(
    reviewer: ChatModel,
    ctx: ApprovalContext,
    payload: str,
    instructions: str | None,
    criteria: dict[str, str] | None,
) -> PolicyStatus:
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
        return PolicyStatus(type="approved", reason="automatic review: clear")
    return PolicyStatus(type="user-approval", reason="automatic review: caution")


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


class ResponseDecision(BaseModel):
    status: Literal["allowed", "rejected"]
    reason: str | None = None
    required: int = Field(default=1, ge=1)  # distinct approvers needed before an approval settles


def allowed(*, required: int = 1) -> ResponseDecision:
    return ResponseDecision(status="allowed", required=required)


def rejected(reason: str) -> ResponseDecision:
    return ResponseDecision(status="rejected", reason=reason)


class RequestView(BaseModel):
    request_id: str
    call_id: str | None = None
    tool_name: str | None = None
    # what would run: the proposed input, or the approver's edit of it (so a policy judges what runs)
    tool_input: dict[str, Any] | None = None
    principal: Principal | None = None  # who asked, captured when asked
    proposed_input: dict[str, Any] | None = None  # the input as the agent proposed it, when it was edited


class ResponseView(BaseModel):
    decision: Literal["approve", "cancel"]
    principal: Principal
    note: str | None = None


class ResponseContext(BaseModel):
    request: RequestView
    response: ResponseView
    session: SessionInfo
    approvals: list[str] = Field(default_factory=list)  # principal ids that already approved (n-of-m)


ResponsePolicy = Callable[[ResponseContext], Any]


class AnswerersContext(BaseModel):
    """What a response policy sees when it says who may answer (no answer yet)."""

    request: RequestView
    session: SessionInfo


DESCRIBE_TIMEOUT = 2.0  # describing is for the card: a slow or failing one shows no line, never blocks


async def describe_responders(policy: ResponsePolicy | None, ctx: AnswerersContext) -> Responders | None:
    """Who may settle, as the policy says (its ``responders`` attribute: a function of
    :class:`AnswerersContext`, sync or async, returning ``Responders``). A policy without one is "a
    custom rule" (its ``description`` attribute, if any, says which). None when it could not say."""
    policy = policy or requester_only()
    describe = getattr(policy, "responders", None)
    if describe is None:
        return Responders(rule="custom", description=getattr(policy, "description", None))
    try:
        result = describe(ctx)
        if inspect.isawaitable(result):
            result = await asyncio.wait_for(result, DESCRIBE_TIMEOUT)
        return result if isinstance(result, Responders) else Responders.model_validate(result)
    except Exception as exc:  # noqa: BLE001 - informational only
        log.warning("response policy %r could not say who may answer: %r", policy, exc)
        return None

ONLY_REQUESTER = "Only the person who requested this action can respond to this approval."


def requester_only() -> ResponsePolicy:
    """The default: only the person whose turn asked may settle; an anonymous requester lets anyone."""

    def policy(ctx: ResponseContext) -> ResponseDecision:
        requester = ctx.request.principal
        if requester is None or requester.same_as(ctx.response.principal):
            return allowed()
        return rejected(ONLY_REQUESTER)

    def responders(ctx: AnswerersContext) -> Responders:
        requester = ctx.request.principal
        return Responders(rule="requester", people=[requester]) if requester else Responders(rule="anyone")

    policy.policy_kind = "requester-only"  # type: ignore[attr-defined]
    policy.responders = responders  # type: ignore[attr-defined]
    setattr(policy, _INLINE, True)
    return policy


def delegation_responses() -> ResponsePolicy:
    """Who settles a ``delegation`` request (``bot.agents``): its result comes only from the app itself
    (the relay, with the sub-agent's answer); Cancel is the requester's, as the default rule has it."""
    from bot.principals import APP_PRINCIPAL

    only_requester = requester_only()

    def policy(ctx: ResponseContext) -> ResponseDecision:
        if ctx.response.decision == "approve":
            if APP_PRINCIPAL.same_as(ctx.response.principal):
                return allowed()
            return rejected("Only the sub-agent's own answer completes this.")
        if ctx.request.principal is None and ctx.response.principal.team_id != ctx.session.team_id:
            return rejected(ONLY_REQUESTER)  # anonymous requester: anyone, but of this workspace
        return only_requester(ctx)

    policy.policy_kind = "requester-only"  # type: ignore[attr-defined]
    policy.responders = only_requester.responders  # type: ignore[attr-defined]
    policy.admits_external = True  # type: ignore[attr-defined] - the app principal belongs to no workspace
    setattr(policy, _INLINE, True)
    return policy


async def evaluate_response_policy(
    policy: ResponsePolicy, ctx: ResponseContext, *, timeout: float | None = None  # noqa: ASYNC109 - API
) -> ResponseDecision:
    """Run a response policy; raises TimeoutError after ``timeout`` seconds (callers fail closed)."""
    result = await _evaluate(policy, ctx, timeout)
    if isinstance(result, ResponseDecision):
        return result
    if isinstance(result, dict):
        return ResponseDecision.model_validate(result)
    raise TypeError(f"a response policy returned {result!r}; expected allowed() or rejected(reason)")


@dataclass(frozen=True)
class Approval:
    """A tool's approval: the request policy and, optionally, who may settle."""

    request: RequestPolicy
    response: ResponsePolicy | None = None


def as_approval(value: Approval | RequestPolicy | None) -> Approval:
    if value is None:
        return Approval(request=never())
    if isinstance(value, Approval):
        return value
    return Approval(request=value)


PolicyFn = Callable[..., Awaitable[Any] | Any]
