"""A request's card once it is resolved, from its stored record and how it ended (blocks.cards.settled_card):
the thread's card and the approvers' copies are both this message. Pure: records in, Block Kit dicts out."""

from __future__ import annotations

from datetime import UTC, datetime

from blocks import settled_card
from blocks.cards import RESULT_BY_TOKEN
from blocks.outcomes import NO_LONGER_NEEDED
from bot.principals import slack_user
from bot.protocol import (
    ActionRef,
    InputOption,
    InputRequest,
    InputResponse,
    RequestRecord,
    Resolution,
    approval_options,
)
from tests.blocks_validation import all_elements, all_texts, assert_valid_message

ALICE = slack_user("T1", "U0ALICE")
BOB = slack_user("T1", "U0BOB")
AT = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)


def refund(**kw) -> InputRequest:  # noqa: ANN003
    return InputRequest(request_id="req-1", kind="tool-approval", prompt="Refund ch_1?", options=approval_options(),
                        action=ActionRef(call_id="c1", tool_name="refund_charge", input={"charge_id": "ch_1"}),
                        principal=ALICE, **kw)


def plan_question() -> InputRequest:
    return InputRequest(request_id="q-1", kind="question", prompt="Which plan?", display="select",
                        options=[InputOption(id="pro", label="Pro plan"), InputOption(id="free", label="Free plan")],
                        principal=ALICE)


def record_of(req: InputRequest, **kw) -> RequestRecord:  # noqa: ANN003
    return RequestRecord(request=req, session_id="s1", turn_id="t1", team_id="T1", status="settled", **kw)


def resolved(req: InputRequest, outcome: str, **answer) -> Resolution:  # noqa: ANN003
    response = InputResponse(request_id=req.request_id, principal=BOB, **answer) if answer else None
    return Resolution(request_id=req.request_id, kind=req.kind, outcome=outcome, response=response)


def text_of(message: dict) -> str:
    return "\n".join(all_texts(message["blocks"]))


def test_an_approval_says_who_approved_and_when_and_offers_no_buttons():
    req = refund()
    message = settled_card(record_of(req), resolved(req, "approved", option_id="approve"), AT)
    assert_valid_message(message)
    assert "*Approved* by <@U0BOB>" in text_of(message)
    assert "<!date^" in text_of(message)
    assert message["text"] == "Approved by <@U0BOB>"
    assert [e for e in all_elements(message["blocks"]) if e.get("type") in ("button", "static_select")] == []


def test_a_question_answered_from_its_menu_shows_the_option_s_label_and_a_typed_one_its_words():
    req = plan_question()
    picked = text_of(settled_card(record_of(req), resolved(req, "answered", option_id="pro"), AT))
    typed = text_of(settled_card(record_of(req), resolved(req, "answered", text="the team plan"), AT))
    assert "Pro plan" in picked and "pro\n" not in picked
    assert "the team plan" in typed and "Pro plan" not in typed


def test_a_request_nobody_answered_is_no_longer_needed_and_names_no_decider():
    req = refund()
    for outcome in ("ignored", "cancelled"):
        message = settled_card(record_of(req), resolved(req, outcome))
        assert NO_LONGER_NEEDED in text_of(message)
        assert "<@U0BOB>" not in text_of(message)


def test_a_result_sent_with_a_token_says_so():
    req = InputRequest(request_id="x-1", kind="external-result", prompt="Paste the wire confirmation",
                       principal=ALICE, action=ActionRef(call_id="c1", tool_name="wire", input={}))
    message = settled_card(record_of(req), resolved(req, "answered", values={"ok": True}, via="api"), AT)
    assert RESULT_BY_TOKEN in text_of(message)
    by_click = settled_card(record_of(req), resolved(req, "answered", values={"ok": True}), AT)
    assert RESULT_BY_TOKEN not in text_of(by_click)


def test_an_edit_shows_only_when_the_edited_call_was_approved():
    req = refund()
    edited = {"charge_id": "ch_2"}
    approved = text_of(settled_card(record_of(req), resolved(req, "approved", option_id="approve",
                                                              edited_input=edited), AT))
    cancelled = text_of(settled_card(record_of(req), resolved(req, "denied", option_id="cancel",
                                                               edited_input=edited), AT))
    assert "ch_2" in approved
    assert "ch_2" not in cancelled and "Cancelled" in cancelled


def test_the_record_s_approvers_and_note_are_on_the_card():
    req = refund()
    record = record_of(req, approvals=["slack:T1:U0CAROL", "slack:T1:U0BOB"], note="checked with finance")
    text = text_of(settled_card(record, resolved(req, "approved", option_id="approve"), AT))
    assert "<@U0CAROL>" in text and "checked with finance" in text
