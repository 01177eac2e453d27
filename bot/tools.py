"""Tools the agent can call (DESIGN §6): ``@tool``, ``Tool``, ``ToolContext`` and the registry.

``ctx.ask()`` is durable by replay: the first time a tool asks, the turn parks; when the answer
arrives the tool runs again *from the top* and ``ctx.ask()`` returns the recorded answer. So a
tool must be deterministic up to its last ask: do side effects after asking, or key them by
``ctx.idempotency_key`` (the same on every replay of the same call) — the same rule Temporal
workflows follow.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Generic, Literal, TypeVar, get_type_hints

from pydantic import BaseModel, Field, ValidationError

from bot.approval import Approval, ApprovalContext, Policy, RequestPolicy, as_approval
from bot.daemon_threads import DaemonThreads
from bot.deferred import DeferredModel
from bot.forms import form_schema
from bot.models.base import ToolSpec
from bot.ports import PostedMessage, Workspace
from bot.principals import Principal
from bot.protocol import PREVIEW_UNAVAILABLE, Answer, ChoiceStyle, InputOption
from bot.session import SessionInfo
from bot.tool_options import Card, Deadlines, Execution, grouped

log = logging.getLogger(__name__)


class AskRequest(DeferredModel):
    """A question a tool asked through ``ctx.ask()``; the turn parks until it is answered."""

    index: int
    prompt: str
    options: list[InputOption] = []
    allow_free_text: bool = True
    timeout_s: float | None = None  # unanswered this long, the ask returns ``Answer(status="expired")``
    style: ChoiceStyle = "select"  # how the options are shown: a select menu, buttons or radio buttons
    form: dict[str, Any] | None = None  # ``ctx.form()``: the form's JSON schema (``bot.forms``); no options then


FormModel = TypeVar("FormModel", bound=BaseModel)


class FormAnswer(DeferredModel, Generic[FormModel]):
    """What ``ctx.form()`` returns: the submitted form as the tool's model, and who filled it in."""

    status: Literal["answered", "interrupted", "unavailable", "expired"]
    values: FormModel | None = None  # set when answered
    responder: Principal | None = None


class AskParked(BaseException):  # noqa: N818 - control flow, not an error
    """Raised inside a tool when ``ctx.ask()`` has no recorded answer yet; the turn parks.

    Like ``asyncio.CancelledError`` it is a BaseException, so a tool's ``except Exception`` cannot
    swallow it by accident (and if a tool catches it anyway, the context remembers the ask).
    """

    def __init__(self, ask: AskRequest):
        super().__init__(ask.prompt)
        self.ask = ask


class SessionWorkspace:
    """``ctx.workspace``: what a tool may do in its session's workspace — the tenant is the session's,
    never one the tool (or the model) names."""

    def __init__(self, port: Workspace, team_id: str | None, *,
                 asked_by: Principal | None = None, approved_by: Principal | None = None):
        self._port = port
        self._team_id = team_id
        self._asked_by, self._approved_by = asked_by, approved_by  # from the session and the call, never input

    async def post(self, channel: str, text: str) -> PostedMessage:
        """Post plain ``text`` to ``channel`` (an id or a #name), signed with who asked and who approved;
        raises ``WorkspaceError`` saying why not."""
        return await self._port.post_message(self._team_id, channel, text,
                                             asked_by=self._asked_by, approved_by=self._approved_by)


class ToolContext:
    """What a tool knows about the call it serves."""

    def __init__(
        self,
        *,
        session: SessionInfo,
        principal: Principal | None,
        call_id: str,
        idempotency_key: str,
        answers: list[Answer] | None = None,
        can_ask: bool = True,
        workspace: Workspace | None = None,
    ):
        self.session = session
        # None where the frontend gives tools nothing to act with (e.g. a test runtime)
        self.workspace = (SessionWorkspace(workspace, session.team_id, asked_by=session.auth.current, approved_by=principal)
                          if workspace is not None else None)
        self.principal = principal  # whose authority the call runs under (the approver, once approved)
        self.call_id = call_id
        self.idempotency_key = idempotency_key
        self.log = logging.LoggerAdapter(log, {"call_id": call_id, "session_id": session.id})
        self._answers = list(answers or [])
        self._asked = 0
        self._can_ask = can_ask
        self.parked: AskRequest | None = None  # the unanswered ask, even if the tool swallowed AskParked
        self._stopped = asyncio.Event()

    @property
    def stopped(self) -> bool:
        """True once the turn was stopped (a person's "stop", Slack's stop button, on any replica). An async
        tool's task is cancelled at that moment too (``CancelledError`` at its next await); this flag serves
        what cancellation cannot reach: a sync tool or work in a thread (``asyncio.to_thread``) polls it, and
        a ``finally`` can tell a stop from other errors."""
        return self._stopped.is_set()

    async def wait_stopped(self) -> None:
        """Return once the turn is stopped (e.g. to race a long wait against it)."""
        await self._stopped.wait()

    def stop(self) -> None:
        """Tell the tool its turn was stopped (called by the executor, not by tools)."""
        self._stopped.set()

    @property
    def tenant(self) -> str | None:
        """The workspace this call belongs to — from the session, never from tool input."""
        return self.session.team_id

    async def ask(
        self,
        prompt: str,
        options: list[str] | list[InputOption] | None = None,
        allow_free_text: bool = True,
        *,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109 - a durable deadline, not an await bound
        style: ChoiceStyle = "select",
    ) -> Answer:
        """Ask the person and return their answer (durable: see the module's docstring). With
        ``timeout`` (seconds or a timedelta), nobody answering by then returns
        ``Answer(status="expired")`` — fired by a timer in Redis, in any replica, after restarts.
        ``style``: the options as a select menu (default), ``"buttons"`` or ``"radio"`` buttons."""
        index = self._asked
        self._asked += 1
        if index < len(self._answers):
            return self._answers[index]
        if not self._can_ask:
            return Answer(status="unavailable")
        opts = [o if isinstance(o, InputOption) else InputOption(id=o, label=o) for o in options or []]
        if self.parked is None:
            limit = _duration(timeout, "timeout")
            self.parked = AskRequest(index=index, prompt=prompt, options=opts, allow_free_text=allow_free_text,
                                     timeout_s=limit.total_seconds() if limit else None, style=style)
        raise AskParked(self.parked)

    async def form(
        self,
        model: type[FormModel],
        prompt: str,
        *,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109 - a durable deadline, not an await bound
    ) -> FormAnswer[FormModel]:
        """Ask the person to fill in ``model`` as a form and return it (durable like :meth:`ask`: the
        turn parks, and the tool runs again from the top once it is submitted). The card has an "Open
        form" button; typed replies don't answer forms. The form is kept as ``model``'s JSON schema, so
        checks beyond it (custom validators) run here, on the replay: a submission they refuse raises
        ``ValueError`` naming the field. With ``timeout``, nobody submitting by then returns
        ``FormAnswer(status="expired")``."""
        index = self._asked
        if index < len(self._answers):
            self._asked += 1
            answer = self._answers[index]
            if answer.status != "answered":
                return FormAnswer[model](status=answer.status, responder=answer.responder)  # type: ignore[valid-type]
            try:
                values = model.model_validate(answer.values or {})
            except ValidationError as exc:
                raise ValueError(f"the submitted form was refused: {_validation_message(exc)}") from exc
            return FormAnswer[model](status="answered", values=values, responder=answer.responder)  # type: ignore[valid-type]
        schema = form_schema(model)  # FormSchemaError (a ValueError) before parking: the tool fails, saying why
        self._asked += 1
        if not self._can_ask:
            return FormAnswer[model](status="unavailable")  # type: ignore[valid-type]
        if self.parked is None:
            limit = _duration(timeout, "timeout")
            self.parked = AskRequest(index=index, prompt=prompt, allow_free_text=False, form=schema,
                                     timeout_s=limit.total_seconds() if limit else None)
        raise AskParked(self.parked)


ToolFn = Callable[..., Any]


class ShownAs:
    """How cards show a field (``money``); carried where pydantic calls it to adjust the field's JSON
    schema, which it leaves as it is: the model sees a plain number."""

    def __init__(self, how: str) -> None:
        self.how = how

    def __call__(self, schema: dict[str, Any]) -> None:
        return None


def money(currency: str = "USD", **field: Any) -> Any:
    """A pydantic ``Field`` for an amount of money: cards show it as money ("$1,234.50"), the tool
    gets the number. ``field`` goes to ``Field`` (``gt=0``, ``description=``…)."""
    return Field(json_schema_extra=ShownAs(f"money:{currency.upper()}"), **field)


def _titles(model: type[BaseModel] | None) -> dict[str, str]:
    """The input fields' titles (``Field(title=…)``), keyed as cards see the input: what cards name them by."""
    if model is None:
        return {}
    return {info.alias or name: info.title for name, info in model.model_fields.items() if info.title}


def _shown_as(model: type[BaseModel] | None) -> dict[str, str]:
    if model is None:  # a tool taking free-form arguments
        return {}
    return {name: info.json_schema_extra.how for name, info in model.model_fields.items()
            if isinstance(info.json_schema_extra, ShownAs)}
PREVIEW_TIMEOUT_MAX_S = 30.0  # a preview is a glance, not a job
PREVIEW_CHARS = 300  # a preview is a line, not a report
# sync previews: a stuck one is left behind (bounded by the caller), never holding an executor slot
_preview_threads = DaemonThreads(64, "preview")


class Tool:
    """A callable the model may use, with its input model and approval policy.

    Options come in groups: ``card=Card(...)`` (how the request reads), ``deadlines=Deadlines(...)`` (when an
    unanswered one moves on), ``execution=Execution(...)`` (how the call runs); each group's fields may
    also be given as flat keywords (``prompt="..."``, ``expires_after=3600``)."""

    def __init__(
        self,
        fn: ToolFn,
        *,
        name: str | None = None,
        description: str | None = None,
        approval: Approval | Policy | RequestPolicy | None = None,
        approval_key: Callable[[Any], str] | None = None,
        card: Card | None = None,
        deadlines: Deadlines | None = None,
        execution: Execution | None = None,
        **flat: Any,
    ):
        card, deadlines, execution = grouped(card, deadlines, execution, flat)
        self.card, self.deadlines, self.execution = card, deadlines, execution
        self.fn = fn
        self.example = card.example  # a request a person might type: a suggested prompt in assistant threads
        self.name = name or fn.__name__
        self.description = (description or inspect.getdoc(fn) or "").strip()
        self.approval = as_approval(approval)
        self.approval_key_fn = approval_key
        self.dangerous = execution.dangerous
        self.idempotent = execution.idempotent
        self.notify = card.notify
        self.expires_after = _duration(deadlines.expires_after, "expires_after")
        self.remind_after = _duration(deadlines.remind_after, "remind_after")
        self.escalate_after = _duration(deadlines.escalate_after, "escalate_after")
        if (deadlines.escalate_after is None) != (deadlines.escalate_to is None):
            raise ValueError("escalate_after and escalate_to go together (after how long, to which approver list)")
        self.escalate_to = deadlines.escalate_to
        self.input_model = _input_model(fn)
        if card.editable and self.input_model is None:
            raise ValueError(f"{self.name}: editable=True needs a pydantic model as the tool's first parameter")
        self.editable = card.editable  # approvers may change the arguments first ("Edit & approve")
        self.prompt = card.prompt
        self.denied_message = card.denied_message  # what the model is told when a person does not approve
        if execution.external != (execution.result is not None):
            raise ValueError(f"{self.name}: external=True and result=<a pydantic model> go together")
        self.external = execution.external  # a person runs it elsewhere and submits its result
        self.result_model = execution.result
        self.result_form = form_schema(execution.result) if execution.result is not None else None
        self.shown_as = _shown_as(self.input_model)
        self.labels = _titles(self.input_model)
        self._wants_ctx = len(inspect.signature(fn).parameters) >= 2
        self.preview_fn = card.preview  # read-only: what the call would do, shown on its card (never runs the tool)
        limit = _duration(card.preview_timeout, "preview_timeout")
        assert limit is not None
        if limit.total_seconds() > PREVIEW_TIMEOUT_MAX_S:  # it holds up the card (and the turn's pass) that long
            raise ValueError(f"{self.name}: preview_timeout is at most {PREVIEW_TIMEOUT_MAX_S:g} s, "
                             f"not {card.preview_timeout!r}")
        self.preview_timeout = limit.total_seconds()
        self._spec: ToolSpec | None = None

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    @property
    def policy_kind(self) -> str:
        return self.approval.request.kind

    def spec(self) -> ToolSpec:
        """What the model is told about the tool; built once (a JSON schema costs milliseconds)."""
        if self._spec is None or self._spec.name != self.name or self._spec.description != self.description:
            if self.input_model is None:
                params: dict[str, Any] = {"type": "object", "properties": {}}
            else:
                params = self.input_model.model_json_schema()
            self._spec = ToolSpec(name=self.name, description=self.description, parameters=params)
        return self._spec

    def parse(self, arguments: str | dict[str, Any] | None) -> BaseModel | dict[str, Any]:
        """Validate raw model arguments; raises ValueError with a message the model can act on."""
        if isinstance(arguments, str):
            try:
                data = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"arguments are not valid JSON: {exc.msg}") from exc
        else:
            data = arguments or {}
        if not isinstance(data, dict):
            raise ValueError("arguments must be a JSON object")
        if self.input_model is None:
            return data
        try:
            return self.input_model.model_validate(data)
        except ValidationError as exc:
            raise ValueError(_validation_message(exc)) from exc

    def approval_prompt(self, args: BaseModel | dict[str, Any]) -> str | None:
        """The card's question for this call (``prompt=``), or None to use the description's first line.
        A template that does not fit the arguments is logged and left out, never fatal to the turn."""
        if self.prompt is None:
            return None
        try:
            if callable(self.prompt):
                text = self.prompt(args)
            else:
                fields = args.model_dump() if isinstance(args, BaseModel) else dict(args)
                text = self.prompt.format(**fields)
        except Exception as exc:  # noqa: BLE001 - a user's template: fall back, say why in the log
            log.warning("tool %s: its prompt could not be filled in (%r); using its description", self.name, exc)
            return None
        return str(text).strip() or None

    def approval_context(self, args: BaseModel | dict[str, Any], *, session: SessionInfo, call_id: str,
                         reviewer: Any, approved_tools: frozenset[str] = frozenset(),
                         policies: Any = None) -> ApprovalContext:
        """What this tool's request policy is asked about one call with ``args`` (``policies``: the
        runtime's ``PolicySource``, for rules that read the workspace's lists)."""
        return ApprovalContext(session=session, tool_name=self.name, tool_input=as_dict(args), call_id=call_id,
                               approved_tools=approved_tools, approval_key=self.approval_key(args),
                               tool_description=self.description, reviewer=reviewer, policies=policies)

    def approval_key(self, args: BaseModel | dict[str, Any]) -> str:
        return self.approval_key_fn(args) if self.approval_key_fn else self.name

    async def preview(self, args: BaseModel | dict[str, Any], ctx: ToolContext) -> str | None:
        """The card's preview of this call: ``preview``'s text, cut to PREVIEW_CHARS, or PREVIEW_UNAVAILABLE
        when it raises or runs past ``preview_timeout`` (the request is never held up longer); None when
        the tool has none. A sync preview runs in a thread; one that overruns is left behind, not awaited."""
        if self.preview_fn is None:
            return None
        fn = self.preview_fn
        call_args = (args, ctx) if len(inspect.signature(fn).parameters) >= 2 else (args,)
        try:
            async with asyncio.timeout(self.preview_timeout):
                if inspect.iscoroutinefunction(fn):
                    text = await fn(*call_args)
                else:
                    # not asyncio.to_thread: a stuck thread must not keep the await (or the default
                    # executor's shutdown) waiting past the bound, so it gets a daemon thread of its own
                    text = await _preview_threads.run(fn, *call_args)
                if inspect.isawaitable(text):
                    text = await text
        except Exception as exc:  # noqa: BLE001 - a broken or slow preview must not stop the request
            kind = "timed out" if isinstance(exc, TimeoutError) else f"failed ({type(exc).__name__})"
            log.warning("tool %s: its preview %s; the card says it is unavailable", self.name, kind)
            return PREVIEW_UNAVAILABLE
        shown = " ".join(str(text).split()) if text is not None else ""
        return _cut(shown, PREVIEW_CHARS) or None

    @property
    def cancellable(self) -> bool:
        """Can a stop cancel a run? Not a sync tool's: its thread would go on after a recorded stop."""
        return inspect.iscoroutinefunction(self.fn)

    async def invoke(self, args: BaseModel | dict[str, Any], ctx: ToolContext) -> Any:
        call_args = (args, ctx) if self._wants_ctx else (args,)
        if not inspect.iscoroutinefunction(self.fn):
            # a sync tool runs in a thread so it never blocks other sessions, lease renewal or acks
            result = await asyncio.to_thread(self.fn, *call_args)
            return await result if inspect.isawaitable(result) else result
        return await self.fn(*call_args)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def as_dict(args: BaseModel | dict[str, Any]) -> dict[str, Any]:
    """Parsed arguments as plain JSON data (what cards, policies and the audit see), keyed as the model
    reads them back (aliases), so what is shown and judged is what runs."""
    return args.model_dump(mode="json", by_alias=True) if isinstance(args, BaseModel) else dict(args)


def _input_model(fn: ToolFn) -> type[BaseModel] | None:
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        return None
    hints = get_type_hints(fn)
    annotation = hints.get(params[0].name)
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "input"
        parts.append(f"{where}: {err['msg']}")
    return "invalid arguments: " + "; ".join(parts)


def tool(fn: ToolFn | None = None, /, **options: Any) -> Any:
    """Turn a function ``(args: Model, ctx: ToolContext)`` into a :class:`Tool` (sync functions work too),
    as ``@tool`` or ``@tool(...)``. ``options`` are :class:`Tool`'s: ``name``, ``description``, ``approval``,
    ``approval_key``, and the groups ``card=Card(...)``, ``deadlines=Deadlines(...)``,
    ``execution=Execution(...)`` (see each for what its options do), whose fields may also be given flat::

        @tool(approval=always(), card=Card(prompt="Refund ${amount:,.2f}?", editable=True),
              deadlines=Deadlines(expires_after=timedelta(hours=8)))
        async def refund_charge(args: Refund, ctx: ToolContext) -> dict: ...
    """

    def wrap(f: ToolFn) -> Tool:
        return Tool(f, **options)

    if fn is not None:
        return wrap(fn)
    grouped(None, None, None, {k: v for k, v in options.items() if k not in _TOOL_OWN})  # a misspelt option fails here
    return wrap


_TOOL_OWN = frozenset(inspect.signature(Tool.__init__).parameters) - {"self", "fn", "flat"}


def _duration(value: timedelta | float | None, name: str) -> timedelta | None:
    if value is None:
        return None
    delta = value if isinstance(value, timedelta) else timedelta(seconds=float(value))
    if delta <= timedelta(0):
        raise ValueError(f"{name} must be positive, not {value!r}")
    return delta
