"""A request policy's verdict has one documented spelling, ``Decision`` (``Approved``/``Denied`` make one);
the older ones (status strings, dicts with ``type`` or ``status``, booleans, None) are read in one place,
as the same Decision, and one type alias names them all, so a type checker accepts each of them."""

from __future__ import annotations

import types
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import pytest

from bot import ApprovalContext, Approved, Decision, Denied
from bot.approval import REQUEST_DECISIONS, RequestPolicy, RequestVerdict, evaluate_request_policy
from bot.session import SessionInfo

ROOT = Path(__file__).resolve().parents[1]
CTX = ApprovalContext(session=SessionInfo(id="s1", team_id="T1"), tool_name="deploy", call_id="c1")

SEVEN = [  # (how it is written, what it means)
    (Decision(type="user-approval", reason="big"), Decision(type="user-approval", reason="big")),
    (Approved("fine"), Decision(type="approved", reason="fine")),
    (Denied("no"), Decision(type="denied", reason="no")),
    ("denied", Decision(type="denied")),
    ({"type": "denied", "reason": "no"}, Decision(type="denied", reason="no")),
    ({"status": "approved", "reason": "ok"}, Decision(type="approved", reason="ok")),
    (True, Decision(type="user-approval")),
    (False, Decision(type="not-applicable")),
    (None, Decision(type="not-applicable")),
]


@pytest.mark.parametrize(("written", "meant"), SEVEN, ids=[repr(w) for w, _ in SEVEN])
async def test_each_spelling_of_a_verdict_reads_as_one_decision_from_sync_and_async_policies(written, meant):
    async def later(ctx: ApprovalContext) -> RequestVerdict:
        return written

    assert await evaluate_request_policy(lambda ctx: written, CTX) == meant
    assert await evaluate_request_policy(later, CTX) == meant


async def test_a_verdict_in_no_accepted_spelling_is_refused():
    for wrong in ("aproved", {"type": "allowed"}, 3):
        with pytest.raises((TypeError, ValueError)):
            await evaluate_request_policy(lambda ctx, wrong=wrong: wrong, CTX)


def members(alias: Any) -> set[Any]:
    return set(get_args(alias)) if get_origin(alias) in (Union, types.UnionType) else {alias}


def test_one_alias_names_every_accepted_spelling_and_request_policies_return_it():
    spelled = members(RequestVerdict)
    [statuses] = [m for m in spelled if get_origin(m) is Literal]
    assert set(get_args(statuses)) == set(REQUEST_DECISIONS)
    assert spelled - {statuses} == {Decision, dict[str, Any], bool, type(None)}
    returns = get_args(RequestPolicy)[-1]  # Callable[[ApprovalContext], <this>]
    assert members(returns) == spelled | {Awaitable[RequestVerdict]}  # not Any


def test_the_tools_reference_documents_decision_as_the_one_spelling():
    page = (ROOT / "docs" / "TOOLS.md").read_text()
    policies = page[page.index("- **Request policies**") : page.index("- **Response policies**")]
    assert "returning a `Decision`" in policies
    assert "still read" in policies  # the older spellings: named once, as accepted
