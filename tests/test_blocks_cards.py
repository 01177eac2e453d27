"""Request cards, settled cards, action ids and the freeform modal (blocks/cards.py, blocks/actions.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from blocks import (
    ACTION_ID_PATTERN,
    FREEFORM_ACTION_ID,
    FREEFORM_BLOCK_ID,
    FREEFORM_CALLBACK_ID,
    already_settled_text,
    decode_action_id,
    decode_modal_metadata,
    decode_option_value,
    freeform_answer,
    freeform_modal,
    mention,
    refused_text,
    render_request,
    render_requests,
    render_settled,
    render_waiting,
    replace_request_blocks,
    request_id_of_block,
    resolution_label,
    settlement_label,
)
from blocks.actions import button_action_id, freeform_action_id, select_action_id
from blocks.deadlines import duration_text
from blocks.limits import truncate, truncate_mrkdwn
from blocks.outcomes import outcome_emoji
from bot.principals import APP_PRINCIPAL, slack_bot, slack_user
from bot.protocol import (
    ActionRef,
    InputOption,
    InputRequest,
    Responders,
    approval_options,
    session_limit_options,
)
from tests.blocks_validation import (
    all_elements,
    all_texts,
    assert_valid_blocks,
    assert_valid_message,
    assert_valid_view,
)

ALICE = slack_user("T1", "U0ALICE")


def approval(request_id: str = "req-1", *, tool_input: dict | None = None, **kw) -> InputRequest:
    return InputRequest(
        request_id=request_id,
        kind="tool-approval",
        prompt=kw.pop("prompt", "Refund the customer's last charge."),
        action=ActionRef(call_id="call-1", tool_name=kw.pop("tool_name", "refund_charge"), input=tool_input),
        options=approval_options(),
        principal=kw.pop("principal", ALICE),
        **kw,
    )


def question(request_id: str = "q-1", labels: list[str] | None = None, **kw) -> InputRequest:
    options = [InputOption(id=label, label=label) for label in (labels or [])]
    return InputRequest(
        request_id=request_id,
        kind="question",
        prompt=kw.pop("prompt", "Which plan should I use?"),
        options=options,
        display="select" if options else "text",
        allow_free_text=kw.pop("allow_free_text", True),
        principal=kw.pop("principal", ALICE),
        **kw,
    )


def session_limit(request_id: str = "sl-1") -> InputRequest:
    return InputRequest(
        request_id=request_id,
        kind="session-limit",
        prompt="I have used 20 steps on this turn. Keep going?",
        options=session_limit_options(),
        principal=ALICE,
    )


def buttons(blocks: list[dict]) -> list[dict]:
    return [e for e in all_elements(blocks) if e["type"] == "button"]


def texts(blocks: list[dict]) -> str:
    return "\n".join(all_texts(blocks))


# --- action ids -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_id", ["req-1", "a:b:c", "turn.3:step.2:call_9", "x:btn:3", "y:select", "z:freeform"]
)
def test_action_ids_round_trip_even_when_request_ids_contain_colons(request_id: str) -> None:
    for index in (0, 1, 17):
        decoded = decode_action_id(button_action_id(request_id, index))
        assert decoded is not None
        assert (decoded.request_id, decoded.control, decoded.index) == (request_id, "btn", index)
    select = decode_action_id(select_action_id(request_id))
    assert select is not None and (select.request_id, select.control, select.index) == (
        request_id,
        "select",
        None,
    )
    freeform = decode_action_id(freeform_action_id(request_id))
    assert freeform is not None and (freeform.request_id, freeform.control) == (request_id, "freeform")
    assert ACTION_ID_PATTERN.match(button_action_id(request_id, 0))


@pytest.mark.parametrize(
    "action_id",
    ["approvers:edit:refund", "hitl:", "hitl:req-1", "hitl::select", "hitl:r:btn:", "hitl:r:btn:x", "other"],
)
def test_foreign_or_malformed_action_ids_decode_to_none(action_id: str) -> None:
    assert decode_action_id(action_id) is None


def test_request_ids_too_long_for_slack_ids_are_refused_rather_than_cut() -> None:
    with pytest.raises(ValueError):
        button_action_id("r" * 300, 0)


def test_every_card_control_decodes_back_to_its_request_and_option() -> None:
    req = approval("turn:7:call.2", editable=True)
    blocks = render_request(req)
    decoded = []
    for element in buttons(blocks):
        action = decode_action_id(element["action_id"])
        assert action is not None and action.request_id == "turn:7:call.2"
        if action.control == "btn":
            option_id = decode_option_value(req, element["value"])
            assert req.displayed_options()[action.index].id == option_id
            decoded.append(option_id)
        else:
            decoded.append(action.control)
    assert decoded == ["approve", "edit", "cancel", "reason"]
    assert [b["text"]["text"] for b in buttons(blocks)] == ["Approve", "Edit & approve", "Cancel", "Cancel with reason"]


def test_only_editable_tools_offer_edit_and_approve_but_every_approval_offers_a_reason() -> None:
    labels = [b["text"]["text"] for b in buttons(render_request(approval()))]
    assert labels == ["Approve", "Cancel", "Cancel with reason"]


def test_long_option_ids_travel_as_index_values_and_decode_back() -> None:
    long_id = "option-" + "x" * 293  # 300 characters, over Slack's 150 for option values
    req = InputRequest(
        request_id="q-long",
        kind="question",
        prompt="Pick one",
        options=[InputOption(id="short", label="Short"), InputOption(id=long_id, label="Long " + "y" * 200)],
        display="select",
        style="radio",
    )
    blocks = render_request(req)
    assert_valid_blocks(blocks)
    [radio] = [e for e in all_elements(blocks) if e["type"] == "radio_buttons"]
    values = [o["value"] for o in radio["options"]]
    assert values == ["short", "#1"]
    assert decode_option_value(req, "#1") == long_id
    assert decode_option_value(req, "short") == "short"
    assert decode_option_value(req, "#0") is None  # "short" travels as itself, so #0 means nothing
    assert decode_option_value(req, "#7") is None
    assert decode_option_value(req, "nope") is None
    assert (
        radio["options"][1]["text"]["text"].endswith("…") and len(radio["options"][1]["text"]["text"]) == 75
    )


# --- tool approval --------------------------------------------------------------------------


def test_approval_card_shows_tool_input_requester_and_approve_before_cancel() -> None:
    req = approval(tool_input={"charge_id": "ch_1", "amount": 1200.5, "meta": {"reason": "dup", "n": [1, 2]}})
    blocks = render_request(req)
    assert_valid_blocks(blocks)
    assert blocks[0]["type"] == "section"
    assert blocks[0]["text"]["text"].startswith("*Approval needed:* `refund_charge`")
    assert "Refund the customer's last charge." in blocks[0]["text"]["text"]
    fields = [f["text"] for b in blocks for f in b.get("fields", [])]
    assert fields == ["*charge_id*\nch_1", "*amount*\n1200.5", '*meta*\n`{"reason":"dup","n":[1,2]}`']
    assert "Requested by <@U0ALICE>" in texts(blocks)
    approve, cancel, reason = buttons(blocks)
    assert (approve["text"]["text"], approve["value"], approve.get("style")) == (
        "Approve",
        "approve",
        "primary",
    )
    assert (cancel["text"]["text"], cancel["value"], cancel.get("style")) == ("Cancel", "cancel", None)
    assert reason["text"]["text"] == "Cancel with reason" and decode_action_id(reason["action_id"]).control == "reason"
    assert "confirm" not in approve
    assert [o.id for o in req.displayed_options()] == ["approve", "cancel"]  # typed "1"/"2" match the buttons


def test_approval_with_empty_input_has_no_fields_and_anonymous_requester_says_thread() -> None:
    blocks = render_request(approval(tool_input={}, principal=None))
    assert_valid_blocks(blocks)
    assert not any("fields" in b for b in blocks)
    assert "Requested in this thread" in texts(blocks)


def test_dangerous_tool_asks_for_confirmation_before_approving() -> None:
    blocks = render_request(approval(tool_input={"id": 1}, dangerous=True, tool_name="drop_table"))
    assert_valid_blocks(blocks)
    assert blocks[0]["text"]["text"].startswith(":warning:")
    approve, cancel, _reason = buttons(blocks)
    confirm = approve["confirm"]
    assert confirm["title"]["text"] == "Run drop_table?"
    assert "drop_table" in confirm["text"]["text"]
    assert (confirm["confirm"]["text"], confirm["deny"]["text"], confirm["style"]) == (
        "Run it",
        "Not yet",
        "danger",
    )
    assert "confirm" not in cancel


def test_n_of_m_progress_names_who_approved_and_keeps_buttons() -> None:
    req = approval(tool_input={"a": 1})
    message = render_waiting(req, ["U1"], 2)
    assert_valid_message(message)
    assert "Approvals: 1 of 2 — <@U1>" in texts(message["blocks"])
    assert len(buttons(message["blocks"])) == 3  # Approve, Cancel, Cancel with reason
    # a new iteration of the message gets new block ids
    first = {b["block_id"] for b in render_request(req)}
    assert first.isdisjoint({b["block_id"] for b in message["blocks"]})
    assert "Approvals: 0 of 2" in texts(render_request(req, required=2))


def test_requester_is_never_taken_from_a_non_slack_principal() -> None:
    assert "Requested by the app itself" in texts(render_request(approval(principal=APP_PRINCIPAL)))
    bot_card = render_request(approval(principal=slack_bot("T1", "B1")))
    assert "<@" not in texts(bot_card)
    assert "Requested by Dana" in texts(
        render_request(approval(principal=slack_bot("T1", "B1")), requester_name="Dana")
    )
    assert (
        mention(ALICE) == "<@U0ALICE>" and mention(None) == "someone" and mention(APP_PRINCIPAL) == "someone"
    )


def test_hostile_text_is_escaped_so_it_cannot_ping_or_fake_links() -> None:
    req = approval(
        tool_input={"note": "<!channel> pay <https://evil.example|bank> & more"},
        prompt="Hi <!here> & <@U0BOSS>",
    )
    blocks = render_request(req)
    assert_valid_blocks(blocks)  # checks every < > & in mrkdwn is escaped or a real token
    body = texts(blocks)
    assert "<!channel>" not in body and "<!here>" not in body
    assert "&lt;!channel&gt; pay &lt;https://evil.example|bank&gt; &amp; more" in body


# --- limits ---------------------------------------------------------------------------------


def test_huge_prompt_labels_inputs_and_values_stay_valid_and_visibly_truncated() -> None:
    tool_input = {f"field_{i}": i for i in range(100)}
    tool_input["field_0"] = "v" * 10_000
    req = approval(prompt="p" * 5000, tool_input=tool_input, tool_name="t" * 200)
    blocks = render_request(req)
    assert_valid_blocks(blocks)
    title = blocks[0]["text"]["text"]
    assert len(title) <= 3000 and title.endswith("…")
    assert "`" + "t" * 99 + "…`" in title  # long tool name cut inside its code span
    fields = [f["text"] for b in blocks for f in b.get("fields", [])]
    assert len(fields) == 20
    assert fields[0].endswith("…") and len(fields[0]) == 2000
    assert fields[1] == "*field_1*\n1"
    assert fields[-1] == "*…*\n_81 more fields not shown_"


def test_question_with_many_long_options_uses_a_select_within_limits() -> None:
    options = [
        InputOption(id=f"opt{i}", label=f"{i} " + "L" * 200, description="D" * 300) for i in range(130)
    ]
    req = InputRequest(
        request_id="q-many",
        kind="question",
        prompt="Pick",
        options=options,
        display="select",
        allow_free_text=True,
    )
    blocks = render_request(req)
    assert_valid_blocks(blocks)
    select, freeform = all_elements(blocks)
    assert select["type"] == "static_select" and select["placeholder"]["text"] == "Choose an answer"
    assert len(select["options"]) == 100
    first = select["options"][0]
    assert len(first["text"]["text"]) == 75 and first["text"]["text"].endswith("…")
    assert len(first["description"]["text"]) == 75 and first["description"]["text"].endswith("…")
    assert freeform["text"]["text"] == "Type your own answer"
    assert "Showing the first 100 of 130 options" in texts(blocks)


def test_thirty_requests_are_packed_into_messages_of_at_most_fifty_blocks() -> None:
    reqs = [approval(f"req-{i}", tool_input={f"k{j}": j for j in range(25)}) for i in range(30)]
    messages = render_requests(reqs)
    assert len(messages) > 1
    for message in messages:
        assert_valid_message(message)
    # every card is whole, in order, in exactly one message
    seen: list[str] = []
    for message in messages:
        ids_in_message = []
        for block in message["blocks"]:
            rid = request_id_of_block(block["block_id"])
            if not ids_in_message or ids_in_message[-1] != rid:
                ids_in_message.append(rid)
        seen.extend(ids_in_message)
    assert seen == [r.request_id for r in reqs]
    card_size = len(render_request(reqs[0]))
    assert all(len(m["blocks"]) % card_size == 0 for m in messages)
    assert "Approval needed: refund_charge" in messages[0]["text"]


def test_fallback_text_stays_within_4000_characters_for_many_long_prompts() -> None:
    reqs = [question(f"q{i}", prompt="word " * 600) for i in range(10)]
    for message in render_requests(reqs):
        assert_valid_message(message)
        assert message["text"].endswith("…")


# --- questions and session limits ------------------------------------------------------------


def test_a_question_shows_its_options_as_a_select_menu_and_offers_typing() -> None:
    blocks = render_request(question(labels=["Basic", "Pro", "Enterprise"]))
    assert_valid_blocks(blocks)
    select, freeform = all_elements(blocks)
    assert select["type"] == "static_select"
    assert [o["value"] for o in select["options"]] == ["Basic", "Pro", "Enterprise"]
    assert decode_action_id(select["action_id"]).control == "select"
    assert decode_action_id(freeform["action_id"]).control == "freeform"
    assert freeform["value"] == "q-1" and freeform.get("style") is None


@pytest.mark.parametrize(("style", "shown_as"), [("radio", ["radio_buttons"]), ("buttons", ["button"] * 3)])
def test_a_question_may_ask_for_radio_buttons_or_buttons_instead(style: str, shown_as: list[str]) -> None:
    req = question(labels=["Basic", "Pro", "Enterprise"], style=style)
    blocks = render_request(req)
    assert_valid_blocks(blocks)
    *choices, freeform = all_elements(blocks)
    assert [e["type"] for e in choices] == shown_as
    assert decode_action_id(freeform["action_id"]).control == "freeform"
    if style == "buttons":
        picked = [decode_option_value(req, b["value"]) for b in choices]
        assert picked == ["Basic", "Pro", "Enterprise"]
        assert {decode_action_id(b["action_id"]).control for b in choices} == {"btn"}


def test_question_with_six_options_uses_a_select_and_without_free_text_has_no_typing_button() -> None:
    blocks = render_request(question(labels=[f"o{i}" for i in range(6)], allow_free_text=False))
    assert_valid_blocks(blocks)
    [select] = all_elements(blocks)
    assert select["type"] == "static_select"


def test_open_question_offers_only_a_primary_typing_button() -> None:
    blocks = render_request(question(labels=[]))
    assert_valid_blocks(blocks)
    [button] = all_elements(blocks)
    assert (button["text"]["text"], button.get("style")) == ("Type your own answer", "primary")


def test_session_limit_offers_approve_and_stop() -> None:
    blocks = render_request(session_limit())
    assert_valid_blocks(blocks)
    approve, stop = buttons(blocks)
    assert (approve["text"]["text"], approve["value"], approve["style"]) == ("Approve", "continue", "primary")
    assert (stop["text"]["text"], stop["value"], stop["style"]) == ("Stop", "stop", "danger")
    assert "I have used 20 steps" in texts(blocks)


# --- settled cards --------------------------------------------------------------------------

AT = datetime(2026, 3, 1, 14, 30, tzinfo=UTC)


def test_settled_approval_has_no_controls_and_names_the_decider_and_time() -> None:
    req = approval(tool_input={"charge_id": "ch_1"})
    message = render_settled(req, outcome_label="Approved", decided_by="U7", at=AT)
    assert_valid_message(message)
    assert all_elements(message["blocks"]) == []
    assert message["text"] == "Approved by <@U7>"
    body = texts(message["blocks"])
    assert f":white_check_mark: *Approved* by <@U7> · <!date^{int(AT.timestamp())}^" in body
    assert "|2026-03-01 14:30 UTC>" in body
    assert "*charge_id*\nch_1" in body  # still says what was approved


def test_cancel_shows_the_note_quoted_and_a_stopped_turn_is_no_longer_needed() -> None:
    req = approval()
    cancelled = render_settled(
        req, outcome_label="Cancelled", decided_by="U8", note="Wrong customer\n<!channel>"
    )
    assert_valid_message(cancelled)
    body = texts(cancelled["blocks"])
    assert ":no_entry_sign: *Cancelled* by <@U8>" in body
    assert "> Wrong customer\n> &lt;!channel&gt;" in body

    gone = render_settled(
        req, outcome_label=resolution_label(req, "cancelled"), detail="The turn was stopped."
    )
    assert_valid_message(gone)
    assert ":heavy_minus_sign: *No longer needed*" in texts(gone["blocks"])
    assert "The turn was stopped." in texts(gone["blocks"])
    assert gone["text"] == "No longer needed"


def test_typed_answer_clears_the_question_and_names_who_answered() -> None:
    req = question(labels=["Basic", "Pro"])
    message = render_settled(
        req, outcome_label="Answered", decided_by="U9", answer="Pro, but monthly" + "!" * 4000
    )
    assert_valid_message(message)
    assert all_elements(message["blocks"]) == []
    answer = next(t for t in all_texts(message["blocks"]) if t.startswith(":speech_balloon:"))
    assert (
        answer.startswith(":speech_balloon: *Pro, but monthly")
        and answer.endswith("…*")
        and len(answer) <= 3000
    )
    assert message["text"] == "Answered by <@U9>"


def test_settled_block_ids_differ_from_the_pending_card_and_replace_only_that_card() -> None:
    first, second = approval("req-a", tool_input={"x": 1}), approval("req-a:2", tool_input={"y": 2})
    [message] = render_requests([first, second])
    settled = render_settled(first, outcome_label="Approved", decided_by="U7")
    assert {b["block_id"] for b in settled["blocks"]}.isdisjoint({b["block_id"] for b in message["blocks"]})
    updated = replace_request_blocks(message["blocks"], "req-a", settled["blocks"])
    assert_valid_blocks(updated)
    remaining = [decode_action_id(e["action_id"]).request_id for e in all_elements(updated)]
    assert remaining == ["req-a:2"] * 3  # the sibling card keeps its buttons
    assert updated[: len(settled["blocks"])] == settled["blocks"]
    assert replace_request_blocks(message["blocks"], "missing", settled["blocks"]) == message["blocks"]


def test_outcome_labels() -> None:
    req, ask, limit = approval(), question(), session_limit()
    assert settlement_label("approved") == "Approved" and settlement_label("cancelled") == "Cancelled"
    assert resolution_label(req, "approved") == "Approved"
    assert resolution_label(req, "denied") == "Cancelled"
    assert resolution_label(req, "answered", "approve") == "Approved"
    for outcome in ("ignored", "cancelled", "invalid"):
        assert resolution_label(req, outcome) == "No longer needed"
    assert resolution_label(req, "expired") == "Expired — nobody answered"
    timed = req.model_copy(update={"expires_at": req.created_at + timedelta(hours=24)})
    assert resolution_label(timed, "expired") == "Expired after 24 h — nobody answered"
    assert outcome_emoji(resolution_label(timed, "expired")) == ":hourglass:"
    assert resolution_label(ask, "answered") == "Answered"
    assert resolution_label(limit, "answered", "stop") == "Stopped"
    assert resolution_label(limit, "answered", "continue") == "Approved"


def test_durations_read_as_people_say_them() -> None:
    assert [duration_text(timedelta(seconds=s)) for s in (45, 600, 3600, 9000, 3 * 86400)] == [
        "45 s", "10 min", "1 h", "2 h 30 min", "3 days"]


def test_ephemeral_texts() -> None:
    assert already_settled_text("Approved", "U7") == "Already approved by <@U7>."
    assert already_settled_text("Cancelled", None) == "Already cancelled."
    assert already_settled_text("No longer needed", None) == "This request is no longer needed."
    assert refused_text("Only finance can approve refunds.") == (
        ":no_entry: You can't answer this request: Only finance can approve refunds."
    )
    assert refused_text(None) == ":no_entry: You can't answer this request."
    assert len(refused_text("x" * 5000)) <= 3000
    # a policy naming who may approve keeps its mentions; anything else in angle brackets is shown as typed
    assert refused_text("Only <@U0BOB> or <@W0CAROL> can approve `refund`; <!channel> <https://x.io|x>") == (
        ":no_entry: You can't answer this request: Only <@U0BOB> or <@W0CAROL> can approve `refund`; "
        "&lt;!channel&gt; &lt;https://x.io|x&gt;"
    )


# --- freeform modal -------------------------------------------------------------------------


def test_freeform_modal_carries_the_card_location_and_is_within_limits() -> None:
    req = question("turn:1:q.2", prompt="What should the subject line say? " + "x" * 4000)
    view = freeform_modal(req, "C123", "1700000000.000100")
    assert_valid_view(view)
    assert view["callback_id"] == FREEFORM_CALLBACK_ID
    assert (view["title"]["text"], view["submit"]["text"], view["close"]["text"]) == (
        "Your answer",
        "Send",
        "Cancel",
    )
    [prompt, answer] = view["blocks"]
    assert prompt["text"]["text"].endswith("…")
    assert answer["block_id"] == FREEFORM_BLOCK_ID and answer["label"]["text"] == "Your answer"
    assert answer["element"]["action_id"] == FREEFORM_ACTION_ID and answer["element"]["multiline"] is True
    meta = decode_modal_metadata(view["private_metadata"])
    assert meta is not None
    assert (meta.request_id, meta.channel_id, meta.message_ts) == ("turn:1:q.2", "C123", "1700000000.000100")
    assert json.loads(view["private_metadata"]) == {
        "request_id": "turn:1:q.2",
        "channel_id": "C123",
        "message_ts": "1700000000.000100",
    }


def test_freeform_submission_parsing_ignores_junk() -> None:
    assert decode_modal_metadata("not json") is None
    assert decode_modal_metadata('{"request_id": "r"}') is None
    assert decode_modal_metadata(None) is None
    values = {FREEFORM_BLOCK_ID: {FREEFORM_ACTION_ID: {"type": "plain_text_input", "value": "  Pro plan \n"}}}
    assert freeform_answer(values) == "Pro plan"
    assert freeform_answer({FREEFORM_BLOCK_ID: {FREEFORM_ACTION_ID: {"value": "   "}}}) is None
    assert freeform_answer({}) is None


# --- truncation helpers ---------------------------------------------------------------------


def test_truncation_is_visible_and_never_breaks_mrkdwn_tokens() -> None:
    assert truncate("abcdef", 4) == "abc…" and truncate("abc", 3) == "abc"
    cut = truncate_mrkdwn("see <https://example.com/a/very/long/path|the docs> now", 20)
    assert cut == "see…"
    assert truncate_mrkdwn("a &amp; b &amp; c", 8) == "a &amp;…"
    fenced = truncate_mrkdwn("```\n" + "code line\n" * 50 + "```", 60)
    assert len(fenced) <= 60 and fenced.count("```") == 2 and fenced.endswith("…\n```")


def test_a_10kb_nested_value_is_cut_inside_its_code_span() -> None:
    req = approval(
        tool_input={"rows": [{"id": i, "name": "x" * 20} for i in range(400)], "ok": True, "n": None}
    )
    blocks = render_request(req)
    assert_valid_blocks(blocks)
    rows, ok, n = [f["text"] for b in blocks for f in b.get("fields", [])]
    assert rows.startswith('*rows*\n`[{"id":0,') and rows.endswith("…`") and len(rows) <= 2000
    assert (ok, n) == ("*ok*\ntrue", "*n*\nnull")


def test_expiry_is_shown_as_a_slack_date_and_questions_say_whom_they_are_for() -> None:
    expires = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    blocks = render_request(question(labels=["A", "B"], expires_at=expires))
    assert_valid_blocks(blocks)
    assert f"Question for <@U0ALICE> · expires <!date^{int(expires.timestamp())}^" in texts(blocks)


# --- who may answer, on the card: people find out before they click -----------------------

BOB, CAROL, DAVE = (slack_user("T1", u) for u in ("U0BOB", "U0CAROL", "U0DAVE"))


def _with(responders: Responders | None, **kw) -> InputRequest:  # noqa: ANN003
    req = approval(**kw)
    req.responders = responders
    return req


@pytest.mark.parametrize(
    ("responders", "line"),
    [
        (Responders(rule="requester", people=[ALICE]), "Only <@U0ALICE> (who asked) can approve"),
        (Responders(rule="people", people=[BOB]), "Waiting on <@U0BOB>"),
        (Responders(rule="people", people=[BOB, CAROL]), "Waiting on <@U0BOB> or <@U0CAROL>"),
        (Responders(rule="people", people=[BOB, CAROL, DAVE], required=2),
         "Needs 2 of <@U0BOB>, <@U0CAROL> and <@U0DAVE>"),
        (Responders(rule="people", people=[slack_user("T1", f"U{i}") for i in range(8)]),
         "Waiting on <@U0>, <@U1>, <@U2>, <@U3>, <@U4> or 3 others"),
        (Responders(rule="anyone_but", people=[DAVE]), "Anyone but <@U0DAVE> can approve"),
        (Responders(rule="anyone_but", people=[DAVE], required=2), "Needs 2 people other than <@U0DAVE>"),
        (Responders(rule="anyone"), "Anyone here can approve"),
        (Responders(rule="nobody", description="Nobody is set up to approve `refund_charge` yet"),
         "Nobody is set up to approve `refund_charge` yet: a workspace admin adds approvers"),
        (Responders(rule="custom"), "Who can approve is decided by a custom rule"),
        (Responders(rule="custom", description="The on-call <!channel> *lead*"),
         "Who can approve: The on-call &lt;!channel&gt;"),
    ],
    ids=["requester", "one", "two", "two-of-three", "many", "anyone-but", "n-other-than", "anyone", "nobody",
         "custom", "custom-described-verbatim"],
)
def test_the_card_says_who_may_answer(responders, line):
    blocks = render_request(_with(responders))
    assert_valid_blocks(blocks)
    who = next(t for t in all_texts(blocks) if t.startswith("Requested by"))
    assert line in who, who


def test_a_settled_card_no_longer_says_who_may_answer():
    settled = render_settled(_with(Responders(rule="people", people=[BOB])), outcome_label="Approved",
                             decided_by="U0BOB")
    assert "Waiting on" not in json.dumps(settled["blocks"])
    assert "Waiting on" not in json.dumps(render_request(_with(None)))  # not described: no line


def test_a_card_never_says_the_tool_twice_and_a_settled_one_no_longer_asks():
    req = approval(prompt="Run refund_charge?")  # the old default prompt: the tool's name again
    title = render_request(req)[0]["text"]["text"]
    assert title == "*Approval needed:* `refund_charge`"
    described = approval(prompt="Refund a charge.")
    assert render_request(described)[0]["text"]["text"] == "*Approval needed:* `refund_charge`\nRefund a charge."
    settled = render_settled(described, outcome_label="Approved", decided_by="U0BOB")
    assert settled["blocks"][0]["text"]["text"].startswith("*Approval for* `refund_charge`")


def test_money_fields_read_as_money_and_everything_else_as_the_tool_gets_it() -> None:
    req = approval(tool_input={"amount": 1234.5, "fee": -40, "charge_id": "ch_1", "count": 3})
    req.action.shown_as = {"amount": "money:USD", "fee": "money:EUR", "charge_id": "money:USD"}
    fields = [f["text"] for b in render_request(req) for f in b.get("fields", [])]
    assert "*amount*\n$1,234.50" in fields and "*fee*\n-€40.00" in fields
    assert "*charge_id*\nch_1" in fields and "*count*\n3" in fields  # a string is never shown as money


def test_a_money_field_stays_a_plain_number_for_the_model() -> None:
    from bot.demo_tools import refund_charge

    assert refund_charge.shown_as == {"amount": "money:USD"}
    schema = refund_charge.spec().parameters["properties"]["amount"]
    assert schema["type"] == "number" and "shown" not in json.dumps(schema)


def test_schedule_text_names_each_deadline_and_puts_past_ones_in_the_past_tense():
    from blocks.deadlines import schedule_text

    start = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    req = question(labels=["A", "B"]).model_copy(update={
        "created_at": start, "remind_at": start + timedelta(hours=1), "escalate_at": start + timedelta(hours=8),
        "escalate_to": "tool:finance_managers", "expires_at": start + timedelta(days=1)})
    ts = {k: int(getattr(req, k).timestamp()) for k in ("remind_at", "escalate_at", "expires_at")}
    before = schedule_text(req, now=start)
    assert before.startswith(f"Reminder <!date^{ts['remind_at']}^")
    assert f"escalates to the `finance_managers` list <!date^{ts['escalate_at']}^" in before
    assert f"expires <!date^{ts['expires_at']}^" in before
    later = schedule_text(req, now=start + timedelta(hours=9))
    assert later.startswith("Reminded ") and "escalated to the `finance_managers` list" in later
    assert schedule_text(question(labels=["A", "B"]), now=start) == ""


# --- cancel with reason, edit & approve ------------------------------------------------------


def test_the_reason_modal_belongs_to_its_card_and_an_empty_reason_reads_as_none() -> None:
    from blocks.actions import REASON_ACTION_ID, REASON_BLOCK_ID, REASON_CALLBACK_ID
    from blocks.modals import reason_modal, reason_text

    view = reason_modal(approval("req-9"), "C1", "1.5")
    assert_valid_view(view)
    assert view["callback_id"] == REASON_CALLBACK_ID
    meta = decode_modal_metadata(view["private_metadata"])
    assert (meta.request_id, meta.channel_id, meta.message_ts) == ("req-9", "C1", "1.5")
    [reason] = [b for b in view["blocks"] if b["type"] == "input"]
    assert reason["optional"] is True and reason["element"]["multiline"] is True
    typed = {REASON_BLOCK_ID: {REASON_ACTION_ID: {"type": "plain_text_input", "value": "  over budget \n"}}}
    assert reason_text(typed) == "over budget"
    assert reason_text({REASON_BLOCK_ID: {REASON_ACTION_ID: {"type": "plain_text_input", "value": None}}}) is None
    assert reason_text({}) is None


def test_a_card_approved_with_changes_leads_with_what_ran_and_shows_the_change_beside_it() -> None:
    req = approval(tool_input={"charge_id": "ch_1", "amount": 400, "note": "x"}, prompt="Refund $400.00 on ch_1?")
    req.action.shown_as = {"amount": "money:USD"}
    message = render_settled(req, outcome_label="Approved", decided_by="UBOB",
                             edited_input={"charge_id": "ch_1", "amount": 300, "note": "x"},
                             edited_prompt="Refund $300.00 on ch_1?")
    assert_valid_message(message)
    title, *_ = message["blocks"]
    assert "Refund $300.00 on ch_1?" in title["text"]["text"] and "$400.00" not in title["text"]["text"]
    fields = [f["text"] for b in message["blocks"] if b.get("fields") for f in b["fields"]]
    assert "*amount*\n$300.00\n_edited from $400.00_" in fields
    assert "*charge_id*\nch_1" in fields  # unchanged fields say nothing more
    shown = texts(message["blocks"])
    assert shown.index("$300.00") < shown.index("Approved")  # what ran, then who approved it
    unchanged = render_settled(req, outcome_label="Approved", edited_input=dict(req.action.input))
    assert "edited from" not in texts(unchanged["blocks"]) and "Refund $400.00" in texts(unchanged["blocks"])
    pinging = render_settled(req, outcome_label="Approved", edited_input={"charge_id": "<!channel>", "amount": 300},
                             edited_prompt="Refund $300.00 on <!channel>?")
    assert "<!channel>" not in json.dumps(pinging)  # what ran is shown as written, never as a ping


def test_the_cancel_reason_is_quoted_on_the_settled_card_and_cannot_ping_anyone() -> None:
    message = render_settled(approval(), outcome_label="Cancelled", decided_by="UBOB",
                             note="Too much <!channel> — ask <@U0EVE>")
    assert_valid_message(message)
    shown = texts(message["blocks"])
    assert "> Too much" in shown and "<!channel>" not in shown and "<@U0EVE>" not in shown


def _form_request(form: dict) -> InputRequest:
    return InputRequest(request_id="f-1", kind="user-input", prompt="Tell me about the incident.", form=form,
                        principal=ALICE)


def test_a_form_says_what_it_is_for_and_labels_its_fields_in_words() -> None:
    from blocks.cards import render_request
    from blocks.modals import form_modal

    fields = {"type": "object", "properties": {"charge_id": {"type": "string"},
                                               "what_happened": {"type": "string", "title": "What happened?"}}}
    titled = form_modal(_form_request({**fields, "title": "Incident report"}), [], "C1", "1.2")
    assert titled["title"]["text"] == "Incident report"
    named = form_modal(_form_request({**fields, "title": "ShippingAddressForm"}), [], "C1", "1.2")
    assert named["title"]["text"] == "Shipping address form"
    long = form_modal(_form_request({**fields, "title": "A very long title for a form, really"}), [], "C1", "1.2")
    assert len(long["title"]["text"]) <= 24
    untitled = form_modal(_form_request(fields), [], "C1", "1.2")
    assert untitled["title"]["text"] == "Fill in the form"
    card = texts(render_request(_form_request(fields)))
    assert "Charge ID · What happened?" in card and "charge_id" not in card


def test_an_approval_card_names_its_fields_by_the_tools_titles_else_by_their_keys_exactly() -> None:
    req = approval(tool_input={"charge_id": "ch_1", "amount": 40, "note": "x"})
    req.action.labels = {"amount": "Refund amount", "note": "`note` (optional)"}
    fields = [f["text"] for b in render_request(req) if b.get("fields") for f in b["fields"]]
    assert fields == ["*charge_id*\nch_1", "*Refund amount*\n40", "*Note*\nx"]
