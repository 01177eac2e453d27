"""Cards of sub-agents: the delegation card, its settled form, and the label on a
sub-agent's own requests — valid Block Kit, with people's and models' text escaped."""

from __future__ import annotations

import json

from blocks.cards import render_requests, render_settled
from blocks.home import HomeRequest, _requested_row
from bot.principals import slack_user
from bot.protocol import ActionRef, InputOption, InputRequest, approval_options
from tests.blocks_validation import assert_valid_blocks, assert_valid_message

ALICE = slack_user("T1", "UALICE")


def delegation(task: str = "Which plan is <acme> on? *now*") -> InputRequest:
    return InputRequest(
        request_id="abc.1",
        kind="delegation",
        prompt=f"Delegated to *researcher*: {task}",
        action=ActionRef(call_id="d1", tool_name="delegate", input={"agent": "researcher", "task": task}),
        options=[InputOption(id="cancel", label="Cancel")],
        principal=ALICE,
        agent="researcher",
        child_session_id="s>agent:researcher:x:d1",
    )


def test_the_delegation_card_names_the_sub_agent_and_offers_only_cancel():
    [message] = render_requests([delegation()])
    assert_valid_message(message)
    text = json.dumps(message["blocks"])
    assert "*researcher* is working on:" in text and "&lt;acme&gt;" in text and "<acme>" not in text
    buttons = [e["text"]["text"] for b in message["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert buttons == ["Cancel"]
    assert message["text"].startswith("researcher is working on: Which plan")


def test_the_settled_delegation_card_has_no_buttons():
    settled = render_settled(delegation(), outcome_label="Finished", detail="researcher answered")
    assert_valid_message(settled)
    assert all(b["type"] != "actions" for b in settled["blocks"])
    assert "was asked" in json.dumps(settled["blocks"])
    assert ":white_check_mark: *Finished*" in json.dumps(settled["blocks"])  # a sub-agent that answered is good news


def test_a_sub_agents_request_is_labelled_with_its_name_on_cards_and_in_app_home():
    req = InputRequest(
        request_id="abc.2",
        kind="tool-approval",
        prompt="Look a customer up.",
        agent="researcher",
        action=ActionRef(call_id="k1", tool_name="crm_lookup", input={"customer": "acme"}),
        options=approval_options(),
        principal=ALICE,
    )
    [message] = render_requests([req])
    assert_valid_message(message)
    assert "From sub-agent *researcher*" in json.dumps(message["blocks"])

    row = _requested_row(HomeRequest(request=req), 0, None).to_dict()
    assert_valid_blocks([row])
    assert "from sub-agent researcher" in json.dumps(row)


def test_a_delegation_whose_sub_agent_failed_reads_not_finished_with_the_reason():
    from blocks.outcomes import delegation_detail, resolution_label

    failed = {"error": "the sub-agent's turn failed"}
    label = resolution_label(delegation(), "answered", values=failed)
    settled = render_settled(delegation(), outcome_label=label, detail=delegation_detail(delegation(), failed))
    shown = json.dumps(settled["blocks"])
    assert label == "Not finished" and ":white_check_mark:" not in shown
    assert "No answer: the sub-agent's turn failed" in shown
    assert resolution_label(delegation(), "answered", values={"result": "gold"}) == "Finished"
