"""LangGraph's interrupt values as pending calls, and people's answers as the resume values they ask for.

The shapes, as LangChain 1.5 and LangGraph 1.2 write them (plain dicts: nothing here imports either):
- LangChain's ``HumanInTheLoopMiddleware``, batched: ``{"action_requests": [{name, args, description}],
  "review_configs": [{action_name, allowed_decisions}]}``, answered ``{"decisions": [...]}`` in order;
- the middleware per call (``ToolApprovalRequest``): ``{"type": "tool_approval", tool_call_id, name, args,
  description}``, answered with one decision (``approve``, ``edit`` with ``edited_action``, ``reject`` with a
  ``message``, ``respond`` with a ``message``); our own request policy asks in this shape too (``source``);
- Agent Inbox's ``HumanInterrupt`` (or a list of them): ``{action_request: {action, args}, config:
  {allow_accept, allow_edit, allow_respond, allow_ignore}, description}``, answered with a ``HumanResponse``
  (``accept`` / ``edit`` / ``response`` / ``ignore``), in a list when asked in a list;
- anything else is a question: a string, or a dict with ``question`` (or ``prompt``) and ``options``; it is
  answered with the option picked or the words typed.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field

from bot.backends import Answer, Approve, Decision, PendingCall, Reject, Reply

ALL_DECISIONS: frozenset[Decision] = frozenset({"approve", "edit", "reject", "respond"})
OUR_GATE = "bot-policy"  # marks an interrupt our request policy raised (not the graph's own)
DEFAULT_PREFIX = "Tool execution requires approval"  # HumanInTheLoopMiddleware's default description_prefix
REJECTED = "User rejected the tool call for `{name}` with reason: {reason}"  # the middleware's own words


class Asked(BaseModel):
    """How to answer one pending interrupt: its shape and the pending calls it became, in order."""

    interrupt_id: str
    shape: Literal["hitl_batch", "tool_approval", "inbox", "question"]
    call_ids: list[str]
    tool_names: list[str]
    decisions: list[list[str]]  # per call: what the interrupt accepts
    listed: bool = False  # inbox: the value was a list (it is answered with a list)
    in_tool_call: str | None = None  # the tool call whose own code asked (its fence key moves on)
    ours: bool = False  # our request policy asked (our wrapper reads the answer, not the graph's code)
    # per call: the arguments as asked, so an approval where only ``edit`` is taken goes as an edit of them
    arguments: list[dict[str, Any]] = Field(default_factory=list)


def pending_of(interrupt_id: str, value: Any, *, node: str, messages: list[Any], in_tool_call: str | None,
               gated: dict[str, frozenset[Decision]], response_schema: Any = None,
               ) -> tuple[Asked, list[PendingCall]]:
    """One interrupt as pending calls. ``node``: the task that raised it; ``messages``: the thread's;
    ``in_tool_call``: the tool call whose code raised it, if one did; ``gated``: the middleware's decisions
    by tool."""
    if isinstance(value, dict) and isinstance(value.get("action_requests"), list):
        return _hitl_batch(interrupt_id, value, messages)
    if isinstance(value, dict) and value.get("type") == "tool_approval":
        name = value.get("name") or node
        ours = value.get("source") == OUR_GATE
        allowed = ALL_DECISIONS - {"respond"} if ours else gated.get(name) or _in_schema(response_schema)
        call = PendingCall(call_id=value.get("tool_call_id") or interrupt_id, tool_name=name,
                           arguments=value.get("args") or {},
                           prompt=None if ours else described(value.get("description"), name),
                           decisions=allowed)
        return Asked(interrupt_id=interrupt_id, shape="tool_approval", call_ids=[call.call_id], tool_names=[name],
                     decisions=[sorted(allowed)], ours=ours, arguments=[call.arguments]), [call]
    inbox = value if isinstance(value, list) else [value]
    if inbox and all(isinstance(v, dict) and "action_request" in v and "config" in v for v in inbox):
        return _inbox(interrupt_id, inbox, listed=isinstance(value, list))
    tool = (in_tool_call and _tool_name_of(messages, in_tool_call)) or node
    prompt, options = _question(value)
    call = PendingCall(call_id=interrupt_id, tool_name=tool, kind="question", prompt=prompt, options=options,
                       arguments={} if isinstance(value, str) else {"value": value}, decisions=frozenset({"respond"}))
    return Asked(interrupt_id=interrupt_id, shape="question", call_ids=[interrupt_id], tool_names=[tool],
                 decisions=[["respond"]], in_tool_call=in_tool_call), [call]


def resume_value(asked: Asked, answers: list[Answer]) -> Any:
    """What the interrupt's ``interrupt()`` returns for people's answers to its pending calls."""
    answers = [_as_taken(a, d, args) for a, d, args in zip(answers, asked.decisions, _arguments(asked), strict=True)]
    if asked.shape == "hitl_batch":
        return {"decisions": [decision(n, a, d) for n, d, a in zip(asked.tool_names, asked.decisions, answers,
                                                                   strict=True)]}
    if asked.shape == "tool_approval":
        return decision(asked.tool_names[0], answers[0], asked.decisions[0])
    if asked.shape == "inbox":
        responses = [_inbox_response(n, d, a) for n, d, a in zip(asked.tool_names, asked.decisions, answers,
                                                                   strict=True)]
        return responses if asked.listed else responses[0]
    answer = answers[0]  # a question: the pick or the words; a cancel gives the canceller's words
    return answer.value if isinstance(answer, Reply) else answer.message if isinstance(answer, Reject) else (
        answer.arguments)


def _arguments(asked: Asked) -> list[dict[str, Any]]:
    return asked.arguments if len(asked.arguments) == len(asked.call_ids) else [{} for _ in asked.call_ids]


def _as_taken(answer: Answer, allowed: list[str], arguments: dict[str, Any]) -> Answer:
    """An approval as proposed where the interrupt takes ``edit`` but not ``approve``: an edit to the same
    arguments (the card's Approve means the same)."""
    if isinstance(answer, Approve) and answer.arguments is None and "approve" not in allowed and "edit" in allowed:
        return answer.model_copy(update={"arguments": dict(arguments)})
    return answer


def untakeable(asked: Asked, answers: list[Answer]) -> str | None:
    """The tool of a cancel the middleware cannot take (its decisions have neither reject nor respond), if any."""
    if asked.shape not in ("hitl_batch", "tool_approval"):
        return None  # a question takes any words; Agent Inbox's own code reads its answer
    for name, allowed, answer in zip(asked.tool_names, asked.decisions, answers, strict=True):
        if isinstance(answer, Reject) and not {"reject", "respond"} & set(allowed):
            return name
    return None


def decision(tool_name: str, answer: Answer, allowed: list[str] | None = None) -> dict[str, Any]:
    """LangChain's human-in-the-loop decision for one answer. A cancel where the middleware takes no
    ``reject`` but takes ``respond`` (the card offers it then) is told as a respond: the model reads the
    same rejection words the middleware's own reject would give it."""
    if isinstance(answer, Approve):
        if answer.arguments is None:
            return {"type": "approve"}
        return {"type": "edit", "edited_action": {"name": tool_name, "args": answer.arguments}}
    if isinstance(answer, Reject):
        if allowed is not None and "reject" not in allowed and "respond" in allowed:
            return {"type": "respond", "message": REJECTED.format(name=tool_name, reason=answer.message)}
        return {"type": "reject", "message": answer.message}
    return {"type": "respond", "message": _words(answer.value)}


def described(description: Any, tool_name: str) -> str | None:
    """The middleware's description of a call, for the card: its own words, without the raw arguments the
    default one appends (the card shows them as fields); None when it says no more than the card does."""
    text = description.strip() if isinstance(description, str) else ""
    head, tail, _ = text.partition(f"\n\nTool: {tool_name}\nArgs: ")
    text = head.strip() if tail else text
    return None if not text or text == DEFAULT_PREFIX else text


def _hitl_batch(interrupt_id: str, value: dict[str, Any], messages: list[Any]) -> tuple[Asked, list[PendingCall]]:
    requests = value["action_requests"]
    allowed = {c["action_name"]: frozenset(c["allowed_decisions"]) for c in value.get("review_configs", [])}
    ids = _tool_call_ids(messages, requests)
    calls = [PendingCall(call_id=ids[i] or f"{interrupt_id}:{i}", tool_name=r["name"], arguments=r.get("args") or {},
                         prompt=described(r.get("description"), r["name"]),
                         decisions=allowed.get(r["name"], frozenset({"approve", "reject"})))
             for i, r in enumerate(requests)]
    return Asked(interrupt_id=interrupt_id, shape="hitl_batch", call_ids=[c.call_id for c in calls],
                 tool_names=[c.tool_name for c in calls], decisions=[sorted(c.decisions) for c in calls],
                 arguments=[c.arguments for c in calls]), calls


def _inbox(interrupt_id: str, requests: list[dict[str, Any]], *, listed: bool) -> tuple[Asked, list[PendingCall]]:
    calls = []
    for i, request in enumerate(requests):
        allow = request.get("config") or {}
        decisions = {d for d, key in (("approve", "allow_accept"), ("edit", "allow_edit"), ("respond", "allow_respond"))
                     if allow.get(key)}
        if allow.get("allow_ignore") or allow.get("allow_respond"):
            decisions.add("reject")
        action = request["action_request"]
        question = not (allow.get("allow_accept") or allow.get("allow_edit"))
        calls.append(PendingCall(
            call_id=interrupt_id if len(requests) == 1 else f"{interrupt_id}:{i}",
            tool_name=action.get("action", "action"), arguments=action.get("args") or {},
            prompt=request.get("description") or None, kind="question" if question else "approval",
            decisions=frozenset(decisions)))
    return Asked(interrupt_id=interrupt_id, shape="inbox", call_ids=[c.call_id for c in calls],
                 tool_names=[c.tool_name for c in calls], decisions=[sorted(c.decisions) for c in calls],
                 listed=listed, arguments=[c.arguments for c in calls]), calls


def _inbox_response(action: str, decisions: list[str], answer: Answer) -> dict[str, Any]:
    """Agent Inbox's ``HumanResponse`` for one answer."""
    if isinstance(answer, Approve):
        if answer.arguments is None:
            return {"type": "accept", "args": None}
        return {"type": "edit", "args": {"action": action, "args": answer.arguments}}
    if isinstance(answer, Reject):
        return {"type": "response", "args": answer.message} if "respond" in decisions else {"type": "ignore", "args": None}
    return {"type": "response", "args": _words(answer.value)}


def _question(value: Any) -> tuple[str, list[str]]:
    if isinstance(value, str):
        return value, []
    if isinstance(value, dict):
        words = next((value[k] for k in ("question", "prompt", "message", "text") if isinstance(value.get(k), str)), None)
        options = value.get("options") or value.get("choices") or []
        if words:
            return words, [str(o) for o in options] if isinstance(options, list) else []
    return json.dumps(value, default=str), []


def _in_schema(response_schema: Any) -> frozenset[Decision]:
    """The decisions a per-call request's response schema names (its ``type`` constants)."""
    text = json.dumps(response_schema or {})
    return frozenset(d for d in ALL_DECISIONS if f'"{d}"' in text) or frozenset({"approve", "reject"})


def _tool_call_ids(messages: list[Any], requests: list[dict[str, Any]]) -> list[str | None]:
    """The key (``call_key``) of each batched action's tool call: the last AI message's calls, matched in order."""
    last = next((m for m in reversed(messages) if getattr(m, "type", None) == "ai"), None)
    calls = list(getattr(last, "tool_calls", None) or [])
    ids: list[str | None] = []
    for request in requests:
        match = next((c for c in calls if c["name"] == request["name"] and c["args"] == request.get("args")), None)
        if match:
            calls.remove(match)
        ids.append(call_key(messages, match) if match else None)
    return ids


def call_key(messages: list[Any], call: dict[str, Any]) -> str:
    """A tool call's id, made unique in the thread: some servers number calls per answer (``call_0`` every
    round, Kimi K2 on vLLM) or give every call of an answer one id (Xinference), and the fence knows a call by
    this key, so a call under an earlier call's id would replay that call's result instead of running. Read from
    the thread's stored messages, so a replay keys it alike: ``<id>#<n>`` for the n-th later model message
    carrying the id, ``<id>~<k>`` for the k-th later call under it in one message (one of the same name and
    arguments is the same call)."""
    call_id = call["id"]
    carrying = [m for m in messages if getattr(m, "type", None) == "ai"
                and any(c.get("id") == call_id for c in getattr(m, "tool_calls", None) or [])]
    key = f"{call_id}#{len(carrying) - 1}" if len(carrying) > 1 else call_id
    if carrying:
        same_id = [(c.get("name"), c.get("args")) for c in carrying[-1].tool_calls if c.get("id") == call_id]
        mine = (call["name"], call["args"])
        if mine in same_id and (position := same_id.index(mine)):
            key += f"~{position}"
    return key


def _tool_name_of(messages: list[Any], call_id: str) -> str | None:
    for message in reversed(messages):
        for call in getattr(message, "tool_calls", None) or []:
            if call["id"] == call_id:
                return call["name"]
    return None


def _words(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)
