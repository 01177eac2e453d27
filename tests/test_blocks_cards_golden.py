"""The cards Slack receives stay byte-for-byte the same JSON (the card builders' hot path).

``tests/data/cards_golden.json`` holds what the slack_sdk-model builders sent for a representative set of
requests (amounts, long text, approver lists, four-eyes, escalated, expired, cancelled, edited, forms,
questions, sub-agents, previews, grants, App Home). Any builder must render each case to exactly that
JSON (the same keys in the same order: the string is compared, not the parsed dict), and every card must
still pass the Block Kit checks. Record a deliberate change of a card with
``python -m tests.test_blocks_cards_golden --write`` and review the diff.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from blocks import render_requests, render_settled, render_waiting
from blocks.home import HomeRequest, home_view
from blocks.notices import approver_notice
from bot.principals import APP_PRINCIPAL, slack_user
from bot.protocol import (
    ActionRef,
    GrantOffer,
    InputOption,
    InputRequest,
    Responders,
    approval_options,
    session_limit_options,
)
from tests.blocks_validation import assert_valid_message, assert_valid_view

_SEQ = itertools.count(1)
GOLDEN = Path(__file__).parent / "data" / "cards_golden.json"
AT = datetime(2026, 12, 5, 9, 30, tzinfo=UTC)
ALICE, BOB, CAROL, DAVE = (slack_user("T1", u) for u in ("U0ALICE", "U0BOB", "U0CAROL", "U0DAVE"))
LONG = ("Refund the customer's last charge because the order arrived damaged <@U0EVIL> & <!here> "
        "see https://stripe.com/x and **bold** `code` ") * 60


def _approval(rid: str = "", tool_input: dict[str, Any] | None = None, **kw: Any) -> InputRequest:
    rid = rid or f"turn:1:call.{next(_SEQ)}"
    action = ActionRef(call_id="call-1", tool_name=kw.pop("tool_name", "refund_charge"),
                       input={"charge_id": "ch_1", "amount": 40.0} if tool_input is None else tool_input,
                       shown_as=kw.pop("shown_as", {}), labels=kw.pop("labels", {}))
    return InputRequest(request_id=rid, kind="tool-approval", prompt=kw.pop("prompt", "Refund charge ch_1?"),
                        action=action, options=approval_options(), principal=kw.pop("principal", ALICE),
                        created_at=AT, **kw)


def _question(rid: str = "q-1", labels: tuple[str, ...] = (), **kw: Any) -> InputRequest:
    return InputRequest(request_id=rid, kind="question", prompt=kw.pop("prompt", "Which plan should I use?"),
                        options=[InputOption(id=f"o{i}", label=label, description=kw.pop(f"d{i}", None))
                                 for i, label in enumerate(labels)],
                        display="select" if labels else "text", principal=ALICE, created_at=AT, **kw)


MONEY = _approval(tool_input={"charge_id": "ch_1", "amount": 1234.5, "fee": -40, "note": "dup"},
                  shown_as={"amount": "money:USD", "fee": "money:CHF"}, labels={"charge_id": "Charge"})
LONG_TEXT = _approval(prompt=LONG, tool_input={"reason": LONG, "nested": {"a": [1, 2, LONG[:300]]},
                                                "url": "https://user@evil.example/login", "empty": "",
                                                "none": None, "flag": True})
MANY_FIELDS = _approval(tool_input={f"field_{i}": i for i in range(27)})
PEOPLE = _approval(responders=Responders(rule="people", people=[BOB, CAROL, DAVE], description="one a manager"),
                   expires_at=AT + timedelta(hours=4))
FOUR_EYES = _approval(responders=Responders(rule="people", people=[BOB, CAROL, DAVE], required=2))
ANYONE_BUT = _approval(responders=Responders(rule="anyone_but", people=[ALICE]))
REQUESTER = _approval(responders=Responders(rule="requester", people=[ALICE]))
NOBODY = _approval(responders=Responders(rule="nobody"))
CUSTOM = _approval(responders=Responders(rule="custom", description="on-call <@U0X> <!channel>"))
DANGEROUS = _approval(dangerous=True, editable=True, grants=[GrantOffer(scope="conversation")])
GRANTS = _approval(grants=[GrantOffer(scope="conversation"), GrantOffer(scope="requester", days=7)],
                   preview="47 records will be deleted from <https://db.example|prod>")
SUBAGENT = _approval(agent="billing <bot>", preview="__unavailable__", principal=APP_PRINCIPAL)
NO_PRINCIPAL = _approval(principal=None, tool_name="`weird` name\nwith lines", prompt="Run `weird` name?")
SELECT = _question(labels=tuple(f"Plan {i}" for i in range(3)), allow_free_text=True, d0="the cheap one")
RADIO = _question("q-r", labels=("Yes", "No"), style="radio")
BUTTONS = _question("q-b", labels=("Red", "Green"), style="buttons", allow_free_text=True)
HUGE_SELECT = _question("q-h", labels=tuple(f"Option {i}" for i in range(120)))
OPEN = _question("q-o", prompt="")
FORM = InputRequest(request_id="f-1", kind="user-input", prompt="Tell me about the trip", principal=ALICE,
                    created_at=AT, form={"type": "object", "properties": {
                        "city": {"type": "string", "title": "City"}, "nights": {"type": "integer"},
                        "pets": {"type": "boolean"}}})
EXTERNAL = InputRequest(request_id="x-1", kind="external-result", prompt="Run the migration on the replica",
                        action=ActionRef(call_id="c", tool_name="migrate", input={"db": "replica"}),
                        options=[InputOption(id="cancel", label="Cancel")], principal=ALICE, created_at=AT)
DELEGATION = InputRequest(request_id="d-1", kind="delegation", prompt="", agent="researcher",
                          action=ActionRef(call_id="c", tool_name="delegate", input={"task": "Find *3* hotels"}),
                          options=[InputOption(id="stop", label="Stop it")], principal=ALICE, created_at=AT)
LIMIT = InputRequest(request_id="sl-1", kind="session-limit", prompt="I have used 20 steps. Keep going?",
                     options=session_limit_options(), principal=ALICE, created_at=AT)
PENDING = [MONEY, LONG_TEXT, MANY_FIELDS, PEOPLE, FOUR_EYES, ANYONE_BUT, REQUESTER, NOBODY, CUSTOM, DANGEROUS,
           GRANTS, SUBAGENT, NO_PRINCIPAL, SELECT, RADIO, BUTTONS, HUGE_SELECT, OPEN, FORM, EXTERNAL, DELEGATION,
           LIMIT]


def _cases() -> dict[str, Callable[[], Any]]:
    cases: dict[str, Callable[[], Any]] = {}
    for n, req in enumerate(PENDING):
        cases[f"pending-{n}-{req.request_id}"] = lambda req=req: render_requests([req])
        cases[f"settled-{n}-{req.request_id}"] = lambda req=req: render_settled(
            req, outcome_label="Approved", decided_by="U0BOB", at=AT, approvals=["U0BOB"])
    cases["several-in-one-message"] = lambda: render_requests([MONEY, SELECT, FORM, PEOPLE])
    cases["many-cards-split"] = lambda: render_requests(
        [MANY_FIELDS.model_copy(update={"request_id": f"m{i}"}) for i in range(12)])
    cases["four-eyes-waiting"] = lambda: render_waiting(FOUR_EYES, ["U0BOB"], 2)
    cases["escalated-waiting"] = lambda: render_waiting(PEOPLE, [], 1, [CAROL, DAVE])
    cases["escalated-many"] = lambda: render_waiting(PEOPLE, ["U0BOB"], 2, [ALICE, BOB, CAROL, DAVE, *[
        slack_user("T1", f"U0P{i}") for i in range(4)]])
    cases["four-eyes-settled"] = lambda: render_settled(FOUR_EYES, outcome_label="Approved", decided_by="U0CAROL",
                                                        at=AT, approvals=["U0BOB", "U0CAROL"], required=2)
    cases["expired"] = lambda: render_settled(PEOPLE, outcome_label="Expired", at=AT)
    cases["cancelled"] = lambda: render_settled(MONEY, outcome_label="Cancelled", decided_by="U0BOB", at=AT,
                                                note="Not <!here> & not now\nsecond *line*")
    cases["no-longer-needed"] = lambda: render_settled(MONEY, outcome_label="  ", detail="The turn was stopped.")
    cases["edited"] = lambda: render_settled(MONEY, outcome_label="Approved", decided_by="U0BOB", at=AT,
                                             edited_input={"charge_id": "ch_1", "amount": 30, "note": "x",
                                                           "extra": LONG},
                                             edited_prompt="Refund $30 instead?", granted="conversation")
    cases["granted"] = lambda: render_settled(GRANTS, outcome_label="Approved", decided_by="U0BOB", at=AT,
                                              granted="requester")
    cases["answered"] = lambda: render_settled(SELECT, outcome_label="Answered", decided_by="U0BOB", at=AT,
                                               answer="Plan 1")
    cases["answered-long"] = lambda: render_settled(OPEN, outcome_label="Answered", decided_by="U0BOB", at=AT,
                                                    answer=LONG + "\n> quoted *x*")
    cases["form-values"] = lambda: render_settled(FORM, outcome_label="Submitted", decided_by="U0BOB", at=AT,
                                                  values={"city": "Bern <x>", "nights": 3, "pets": False,
                                                          "empty": ""})
    cases["form-empty"] = lambda: render_settled(FORM, outcome_label="Submitted", values={"city": ""})
    cases["requester-name"] = lambda: render_settled(NO_PRINCIPAL, outcome_label="Failed", requester_name="Ops bot",
                                                     detail=LONG)
    cases["approver-notice"] = lambda: approver_notice(FOUR_EYES, channel_id="C1", link="https://x.slack.com/a",
                                                       approvals=["U0BOB"], required=2, escalated=[DAVE])
    cases["home"] = lambda: home_view("U0BOB", [
        HomeRequest(request=MONEY), HomeRequest(request=FOUR_EYES, approvals=["U0BOB"], required=2,
                                                can_settle=False),
        HomeRequest(request=PEOPLE, escalated=[CAROL], undeliverable="channel_not_found"),
        HomeRequest(request=SELECT), HomeRequest(request=FORM)], [], None, now=AT)
    return cases


CASES = _cases()


def _rendered(name: str) -> str:
    return json.dumps(CASES[name](), ensure_ascii=False)


@pytest.mark.parametrize("name", list(CASES))
def test_each_card_is_the_same_json_slack_got_before(name: str) -> None:
    golden = json.loads(GOLDEN.read_text())
    assert _rendered(name) == golden[name]


@pytest.mark.parametrize("name", list(CASES))
def test_each_card_passes_the_block_kit_checks(name: str) -> None:
    rendered = CASES[name]()
    for message in rendered if isinstance(rendered, list) else [rendered]:
        if message.get("type") == "home":
            assert_valid_view(message)
        else:
            assert_valid_message(message)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.write_text(json.dumps({name: _rendered(name) for name in CASES}, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(CASES)} cases to {GOLDEN}")
