"""``@tool``'s options: each is a typed keyword (:class:`Options`), the one documented spelling
(``@tool(prompt=…, editable=True, expires_after=3600)``), so editors complete them and type checkers catch a
misspelling; a misspelt one raises TypeError naming the closest. The same options grouped (``card=Card(…)``,
``deadlines=Deadlines(…)``, ``execution=Execution(…)``) are still accepted, for compatibility;
:func:`grouped` sorts flat keywords into those groups, which is how ``Tool`` reads them."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from datetime import timedelta
from typing import Any, Literal, TypedDict

from pydantic import BaseModel

Notify = Literal["dm", "thread", "none"]
PreviewFn = Callable[..., Any]  # (args[, ctx]) -> str, sync or async
PREVIEW_TIMEOUT_S = 2.0  # a preview's default bound: the card is never held up longer
Prompt = str | Callable[[Any], str]  # a format string over the arguments' fields, or a function of them


class Options(TypedDict, total=False):
    """``@tool``'s options on how a call's request reads, when an unanswered one moves on and how the call
    runs, each a keyword (all optional).

    How the request reads, and what an approver may do on its card: ``prompt``: the card's question, a
    format string over the arguments (``"Refund ${amount:,.2f} on {charge_id}?"``) or a function of them. ``denied_message``: what the model is told when a person cancels
    (their reason, if they gave one, is added as theirs). ``editable=True``: "Edit & approve", a form
    generated from the arguments model (the call runs with the edit; the card and audit show both).
    ``preview``: a read-only function ``(args[, ctx]) -> str`` (sync or async) run with the proposed
    arguments when the card is made; its short text ("47 records will be deleted") is shown on the card;
    past ``preview_timeout`` seconds (default 2) or on an error the card says "preview unavailable".
    ``notify``: how the people who may approve are told ("dm": a direct message with a working copy of the
    card, "thread": a mention in the thread, "none"; by default a DM when the policy names approvers).
    ``example``: a request a person might type ("Refund $30 on ch_1001"), offered as a suggested prompt in
    assistant threads.

    When an unanswered request moves on (seconds or a timedelta): ``remind_after``, the people who may
    approve are reminded once; ``expires_after``, it resolves "expired" and the model is told nobody
    answered in time; ``escalate_after`` with ``escalate_to`` (an approver list, e.g.
    "tool:refund_managers"), the people on that list may answer too, and are told as approvers are.

    How the call runs: ``idempotent``, safe to run again after a crash mid-call; ``dangerous``, marked so on
    its card; ``external=True`` with ``result=<a pydantic model>``, a person runs it elsewhere and submits
    its result, from the card (a form of ``result``) or by a system posting it to
    ``POST /hitl/requests/<id>/result`` with a token only people the response policy admits get; the
    function itself never runs (its request policy still may deny a call)."""

    prompt: Prompt | None
    denied_message: str | None
    editable: bool
    preview: PreviewFn | None
    preview_timeout: timedelta | float
    notify: Notify | None
    example: str | None
    expires_after: timedelta | float | None
    remind_after: timedelta | float | None
    escalate_after: timedelta | float | None
    escalate_to: str | None
    dangerous: bool
    idempotent: bool
    external: bool
    result: type[BaseModel] | None


@dataclass(frozen=True)
class Card:
    """:class:`Options`' card options as one group (``card=Card(prompt=…)``, accepted for compatibility)."""

    prompt: Prompt | None = None
    denied_message: str | None = None
    editable: bool = False
    preview: PreviewFn | None = None
    preview_timeout: timedelta | float = PREVIEW_TIMEOUT_S
    notify: Notify | None = None
    example: str | None = None


@dataclass(frozen=True)
class Deadlines:
    """:class:`Options`' deadlines as one group (``deadlines=Deadlines(expires_after=…)``, accepted for
    compatibility)."""

    expires_after: timedelta | float | None = None
    remind_after: timedelta | float | None = None
    escalate_after: timedelta | float | None = None
    escalate_to: str | None = None


@dataclass(frozen=True)
class Execution:
    """:class:`Options`' execution options as one group (``execution=Execution(idempotent=True)``, accepted
    for compatibility)."""

    dangerous: bool = False
    idempotent: bool = False
    external: bool = False
    result: type[BaseModel] | None = None


GROUPS: tuple[type[Card] | type[Deadlines] | type[Execution], ...] = (Card, Deadlines, Execution)
GROUP_OF = {f.name: group for group in GROUPS for f in fields(group)}


def grouped(card: Card | None, deadlines: Deadlines | None, execution: Execution | None,
            flat: Options) -> tuple[Card, Deadlines, Execution]:
    """The option groups, with any flat keyword (``prompt=``, ``expires_after=``…) put in its group."""
    check_known(flat)
    given = {Card: card or Card(), Deadlines: deadlines or Deadlines(), Execution: execution or Execution()}
    for group in GROUPS:
        mine = {k: v for k, v in flat.items() if GROUP_OF[k] is group}
        if mine:
            given[group] = replace(given[group], **mine)  # type: ignore[type-var]
    return given[Card], given[Deadlines], given[Execution]  # type: ignore[return-value]


OWN = ("name", "description", "approval", "approval_key", "card", "deadlines", "execution")  # Tool's own


def check_known(options: Any) -> None:
    """Raise TypeError for an option ``@tool`` does not have, naming the closest it has."""
    for given in sorted(set(options) - set(GROUP_OF)):
        near = difflib.get_close_matches(given, [*OWN, *GROUP_OF], n=1)
        hint = f"; did you mean {near[0]!r}?" if near else f"; the options are {', '.join([*OWN, *GROUP_OF])}"
        raise TypeError(f"@tool has no option {given!r}{hint}")
