"""An approval card offers only the decisions its framework takes: "Reply instead" where it takes an answer in
the tool's place (LangGraph's respond, Agent Inbox's response), no Cancel where it takes none, each said in a
plain line; and the settled card of a reply. Pure: requests in, Block Kit dicts out."""

from __future__ import annotations

from datetime import UTC, datetime

from blocks import freeform_modal, render_request, resolution_label, settled_card, settlement_label
from blocks.actions import (
    FREEFORM_ACTION_ID,
    FREEFORM_BLOCK_ID,
    decode_action_id,
    freeform_action_id,
    reason_action_id,
)
from blocks.outcomes import outcome_emoji
from bot.principals import slack_user
from bot.protocol import (
    APPROVE,
    ActionRef,
    InputOption,
    InputRequest,
    InputResponse,
    RequestRecord,
    Resolution,
    approval_options,
)
from tests.blocks_validation import (
    all_elements,
    all_texts,
    assert_valid_blocks,
    assert_valid_message,
    assert_valid_view,
)

ALICE = slack_user("T1", "U0ALICE")
AT = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)


def refund(**kw) -> InputRequest:  # noqa: ANN003
    return InputRequest(request_id="req-1", kind="tool-approval", prompt="Refunds over 30 EUR need a second look",
                        options=kw.pop("options", approval_options()),
                        action=ActionRef(call_id="c1", tool_name="issue_refund", input={"amount": 40}),
                        principal=ALICE, **kw)


def actions_of(blocks: list[dict]) -> list[tuple[str, str]]:
    """Each control as (its label, what it does: the option it answers, or the modal it opens)."""
    out = []
    for element in all_elements(blocks):
        action = decode_action_id(element["action_id"])
        out.append((element["text"]["text"], element["value"] if action.control == "btn" else action.control))
    return out


def test_an_approval_the_framework_lets_people_answer_offers_reply_instead_and_says_what_it_does() -> None:
    blocks = render_request(refund(allow_free_text=True))
    assert_valid_blocks(blocks)
    assert actions_of(blocks) == [("Approve", "approve"), ("Reply instead", "freeform"), ("Cancel", "cancel"),
                                  ("Cancel with reason", "reason")]
    [reply] = [e for e in all_elements(blocks) if e["text"]["text"] == "Reply instead"]
    assert reply == {"type": "button", "text": {"type": "plain_text", "text": "Reply instead"},
                     "action_id": freeform_action_id("req-1"), "value": "req-1"}
    [note] = [b for b in blocks if b["block_id"] == "req-1:replynote:0"]
    assert note == {"type": "context", "block_id": "req-1:replynote:0", "elements": [{
        "type": "mrkdwn", "verbatim": True,
        "text": ":speech_balloon: *Reply instead*: your words go to the agent as `issue_refund`’s result, "
                "and it does not run."}]}


def test_an_approval_without_the_frameworks_respond_has_no_reply_control_or_line() -> None:
    blocks = render_request(refund())
    assert [label for label, _ in actions_of(blocks)] == ["Approve", "Cancel", "Cancel with reason"]
    assert not any("replynote" in b["block_id"] or "nocancel" in b["block_id"] for b in blocks)


def test_an_approval_its_framework_takes_no_cancel_for_has_no_cancel_and_says_so() -> None:
    blocks = render_request(refund(options=[o for o in approval_options() if o.id == APPROVE]))
    assert_valid_blocks(blocks)
    assert actions_of(blocks) == [("Approve", "approve")]
    assert reason_action_id("req-1") not in [e["action_id"] for e in all_elements(blocks)]
    [note] = [b for b in blocks if b["block_id"] == "req-1:nocancel:0"]
    assert note["elements"][0]["text"] == "This agent takes no cancel for `issue_refund`: approve it, or stop the agent."


def test_reply_instead_opens_a_modal_that_says_the_tool_will_not_run() -> None:
    view = freeform_modal(refund(allow_free_text=True), "C1", "1700000000.000100")
    assert_valid_view(view)
    assert (view["title"]["text"], view["submit"]["text"], view["close"]["text"]) == ("Reply instead", "Send", "Back")
    [intro, typed] = view["blocks"]
    assert intro["text"]["text"] == ("Answer in `issue_refund`’s place: it will not run, and the agent reads your "
                                     "words as its result.")
    assert (typed["block_id"], typed["element"]["action_id"], typed["label"]["text"]) == (
        FREEFORM_BLOCK_ID, FREEFORM_ACTION_ID, "Your reply")


def test_a_question_keeps_its_own_typing_modal() -> None:
    ask = InputRequest(request_id="q-1", kind="question", prompt="Which account?", allow_free_text=True,
                       options=[InputOption(id="card", label="card")])
    view = freeform_modal(ask, "C1", "1.2")
    assert (view["title"]["text"], view["close"]["text"]) == ("Your answer", "Cancel")
    assert view["blocks"][0]["text"]["text"] == "Which account?"


def test_a_settled_reply_says_who_replied_what_the_agent_read_and_that_the_tool_did_not_run() -> None:
    req = refund(allow_free_text=True)
    record = RequestRecord(request=req, session_id="s1", turn_id="t1", team_id="T1", status="settled")
    words = "store credit instead <!channel>"
    response = InputResponse(request_id="req-1", text=words, principal=ALICE)
    message = settled_card(record, Resolution(request_id="req-1", kind="tool-approval", outcome="answered",
                                              response=response), AT)
    assert_valid_message(message)
    assert all_elements(message["blocks"]) == []
    by_id = {b["block_id"]: b for b in message["blocks"]}
    assert by_id["req-1:s-outcome:0"]["text"]["text"].startswith(":speech_balloon: *Replied instead* by <@U0ALICE> · ")
    assert by_id["req-1:s-answer:0"]["text"]["text"] == ":speech_balloon: *store credit instead &lt;!channel&gt;*"
    assert by_id["req-1:s-detail:0"]["elements"][0]["text"] == (
        "issue_refund did not run: the agent read this reply as its result.")
    assert message["text"] == "Replied instead by <@U0ALICE>"
    assert "<!channel>" not in "\n".join(all_texts(message["blocks"]))


def test_reply_labels() -> None:
    req = refund(allow_free_text=True)
    assert resolution_label(req, "answered") == "Replied instead"
    assert resolution_label(req, "answered", "approve") == "Approved"
    assert resolution_label(req, "answered", "cancel") == "Cancelled"
    assert settlement_label("responded") == "Replied instead" and settlement_label("cancelled") == "Cancelled"
    assert outcome_emoji("Replied instead") == ":speech_balloon:"


def test_an_approval_its_framework_will_not_run_offers_only_reply_and_cancel_and_says_so() -> None:
    no_approve = [o for o in approval_options() if o.id != APPROVE]
    blocks = render_request(refund(options=no_approve, allow_free_text=True))
    assert_valid_blocks(blocks)
    assert actions_of(blocks) == [("Reply instead", "freeform"), ("Cancel", "cancel"), ("Cancel with reason", "reason")]
    [note] = [b for b in blocks if b["block_id"] == "req-1:noapprove:0"]
    assert note["elements"][0]["text"] == ("This agent does not let `issue_refund` run from here: reply instead or "
                                           "cancel it.")
    alone = render_request(refund(options=no_approve))
    [note] = [b for b in alone if b["block_id"] == "req-1:noapprove:0"]
    assert note["elements"][0]["text"].endswith("run from here: cancel it.")


def test_an_approval_its_framework_takes_only_as_proposed_says_so_where_edit_would_be() -> None:
    blocks = render_request(refund(fixed_input=True))
    assert_valid_blocks(blocks)
    assert [label for label, _ in actions_of(blocks)] == ["Approve", "Cancel", "Cancel with reason"]
    [note] = [b for b in blocks if b["block_id"] == "req-1:noedit:0"]
    assert note["elements"][0]["text"] == "Approve runs `issue_refund` as proposed: this agent takes no changes to its input."
    assert not any(b["block_id"].endswith(":noedit:0") for b in render_request(refund()))
