"""App Home and the /approvers modal (blocks/home.py, blocks/approvers.py)."""

from __future__ import annotations

from blocks import (
    APPROVERS_CALLBACK_ID,
    ApproverListView,
    HomeRequest,
    approvers_list_text,
    approvers_modal,
    decode_action_id,
    decode_approvers_action_id,
    decode_approvers_submission,
    home_view,
    render_request,
)
from blocks.approvers import approvers_list_modal, loading_modal, notice_modal
from blocks.home import EMPTY_REQUESTED, EMPTY_TOOLS, EMPTY_WAITING, NOT_ADMIN_NOTE
from bot.principals import slack_user
from bot.protocol import ActionRef, InputOption, InputRequest, Responders, approval_options
from tests.blocks_validation import all_elements, all_texts, assert_mrkdwn_escaped, assert_valid_view

BOB = slack_user("T1", "U0BOB")


def approval(request_id: str, n_fields: int = 3) -> InputRequest:
    return InputRequest(
        request_id=request_id,
        kind="tool-approval",
        prompt="Refund a charge. " + "Details. " * 200,
        action=ActionRef(
            call_id="c", tool_name="refund_charge", input={f"k{i}": "v" * 50 for i in range(n_fields)}
        ),
        options=approval_options(),
        principal=BOB,
    )


def question(request_id: str) -> InputRequest:
    return InputRequest(
        request_id=request_id,
        kind="question",
        prompt="Which plan?",
        options=[InputOption(id="Basic", label="Basic"), InputOption(id="Pro", label="Pro")],
        display="select",
        allow_free_text=True,
        principal=BOB,
    )


def policy(name: str, **kw) -> ApproverListView:
    return ApproverListView(list_name=name, description=kw.pop("description", f"{name} does things"), **kw)


def texts(view: dict) -> str:
    return "\n".join(all_texts(view["blocks"]))


def test_empty_home_for_a_non_admin() -> None:
    view = home_view("U0ME", [], [], None)
    assert_valid_view(view)
    assert view["type"] == "home"
    body = texts(view)
    assert EMPTY_WAITING in body and EMPTY_REQUESTED in body and NOT_ADMIN_NOTE in body
    assert all_elements(view["blocks"]) == []


def test_waiting_requests_have_the_same_working_controls_as_thread_cards() -> None:
    waiting = [HomeRequest(request=approval("r:1"), status="waiting"), HomeRequest(request=question("q.2"))]
    view = home_view("U0ME", waiting, [], None)
    assert_valid_view(view)
    controls = all_elements(view["blocks"])
    home_ids = [e["action_id"] for e in controls]
    card_ids = [
        e["action_id"]
        for e in all_elements(render_request(approval("r:1")) + render_request(question("q.2")))
    ]
    assert home_ids == card_ids
    assert [decode_action_id(a).request_id for a in home_ids] == ["r:1"] * 3 + ["q.2"] * 2
    approve = controls[0]
    assert (approve["text"]["text"], approve["value"]) == ("Approve", "approve")
    # the long prompt is shortened on Home, visibly
    title = next(t for t in all_texts(view["blocks"]) if t.startswith("*Approval needed:*"))
    assert len(title) < 800 and title.endswith("…")


def test_requests_the_viewer_cannot_settle_show_without_buttons() -> None:
    view = home_view(
        "U0ME",
        [HomeRequest(request=approval("r1"), can_settle=False, approvals=["U1"], required=2)],
        [],
        None,
    )
    assert_valid_view(view)
    assert all_elements(view["blocks"]) == []
    assert "Approvals: 1 of 2 — <@U1>" in texts(view)
    assert "You can follow this request but not settle it." in texts(view)


def test_requested_by_you_lists_status_waiting_on_and_thread_link() -> None:
    mine = HomeRequest(
        request=approval("r9"),
        status="waiting",
        waiting_for=["U0FIN"],
        permalink="https://acme.slack.com/archives/C1/p1?thread_ts=1&cid=C1",
    )
    view = home_view("U0ME", [], [mine], None)
    assert_valid_view(view)
    body = texts(view)
    assert "*Approval:* `refund_charge` — Refund a charge." in body
    assert (
        "_Status:_ waiting · waiting on <@U0FIN> · <https://acme.slack.com/archives/C1/p1?thread_ts=1&amp;cid=C1|Open thread>"
        in body
    )


def test_admin_sees_an_editable_approver_list_per_tool() -> None:
    policies = [
        policy("refund_charge", policy_label="always", approvers=["U1", "U2"], required=1),
        policy("wire_money", policy_label="2 of 3", approvers=["U3"], deleted_approvers=["U9"], required=2),
        policy("lookup", policy_label="never"),
    ]
    view = home_view("U0ADMIN", [], [], policies)
    assert_valid_view(view)
    selects = [e for e in all_elements(view["blocks"]) if e["type"] == "multi_users_select"]
    assert [decode_approvers_action_id(s["action_id"]) for s in selects] == [
        "refund_charge",
        "wire_money",
        "lookup",
    ]
    assert [s.get("initial_users") for s in selects] == [["U1", "U2"], ["U3"], None]
    body = texts(view)
    assert "*`wire_money`* list · 2 of 3 · 2 approvals needed" in body
    assert "~deleted user~ <@U9>" in body
    assert NOT_ADMIN_NOTE not in body
    assert "Approver lists" in body


def test_admin_with_no_tools_sees_an_empty_state() -> None:
    view = home_view("U0ADMIN", [], [], [])
    assert_valid_view(view)
    assert EMPTY_TOOLS in texts(view)


def test_long_lists_fit_in_100_blocks_with_truncation_notes() -> None:
    waiting = [HomeRequest(request=approval(f"w{i}", n_fields=25)) for i in range(40)]
    mine = [HomeRequest(request=question(f"m{i}")) for i in range(40)]
    policies = [policy(f"tool_{i}", policy_label="always", approvers=[f"U{i}"]) for i in range(80)]
    view = home_view("U0ADMIN", waiting, mine, policies)
    assert_valid_view(view)
    assert len(view["blocks"]) <= 100
    body = texts(view)
    assert "of 40. Answer these and the rest will appear" in body
    assert "showing 10 of 40. The rest are in their threads." in body
    assert "showing 30 of 80 lists" in body
    # every shown waiting card is whole: its buttons are there
    shown = {
        decode_action_id(e["action_id"]).request_id
        for e in all_elements(view["blocks"])
        if e["type"] == "button"
    }
    assert len(shown) >= 3


def test_hostile_tool_and_user_text_is_escaped_on_home() -> None:
    evil = policy("<!channel>", policy_label="<b>always</b>", description="& <!here>")
    view = home_view("U0ADMIN", [], [HomeRequest(request=approval("r"), status="<!everyone>")], [evil])
    assert_valid_view(view)  # includes the mrkdwn escaping check
    assert "<!channel>" not in texts(view) and "<!everyone>" not in texts(view)


# --- /approvers -----------------------------------------------------------------------------


def test_approvers_modal_has_one_optional_user_select_per_tool() -> None:
    policies = [
        policy("refund_charge", policy_label="always", approvers=["U1"], required=1),
        policy("wire_money", policy_label="2 of 3", approvers=[], deleted_approvers=["U9", "U8"], required=2),
    ]
    view = approvers_modal(policies)
    assert_valid_view(view)
    assert view["callback_id"] == APPROVERS_CALLBACK_ID
    assert (view["title"]["text"], view["submit"]["text"], view["close"]["text"]) == (
        "Approver lists",
        "Save",
        "Cancel",
    )
    inputs = [b for b in view["blocks"] if b["type"] == "input"]
    assert [b["block_id"] for b in inputs] == ["approvers:refund_charge", "approvers:wire_money"]
    assert all(b["element"]["action_id"] == "users" and b["optional"] is True for b in inputs)
    assert inputs[0]["element"]["initial_users"] == ["U1"] and "initial_users" not in inputs[1]["element"]
    assert inputs[1]["label"]["text"] == "wire_money · 2 of 3"
    assert "2 approvals needed." in inputs[1]["hint"]["text"]
    assert "2 deactivated users will be removed when you save." in inputs[1]["hint"]["text"]


def test_approvers_modal_submission_decodes_to_tool_lists() -> None:
    values = {
        "approvers:refund_charge": {"users": {"type": "multi_users_select", "selected_users": ["U1", "U2"]}},
        "approvers:wire:money": {"users": {"type": "multi_users_select", "selected_users": []}},
        "something_else": {"x": {"value": "y"}},
    }
    assert decode_approvers_submission(values) == {"refund_charge": ["U1", "U2"], "wire:money": []}


def test_approvers_modal_limits() -> None:
    policies = [
        policy(f"tool_{i}_" + "n" * 40, policy_label="always " * 30, description="d" * 5000)
        for i in range(150)
    ]
    view = approvers_modal(policies)
    assert_valid_view(view)
    assert len(view["blocks"]) == 100
    assert "showing 98 of 150 lists" in texts(view)
    first = next(b for b in view["blocks"] if b["type"] == "input")
    assert first["label"]["text"].endswith("…") and len(first["label"]["text"]) <= 150
    assert first["hint"]["text"].startswith("d" * 400) and "…" in first["hint"]["text"]

    empty = approvers_modal([])
    assert_valid_view(empty)
    assert "submit" not in empty and EMPTY_TOOLS in texts(empty)


def test_approvers_read_only_modal_limits() -> None:
    many = [
        policy(f"tool_{i}_" + "n" * 40, policy_label="always " * 30, approvers=[f"U{j:08d}" for j in range(400)],
               deleted_approvers=["U9"])
        for i in range(150)
    ]
    view = approvers_list_modal(many, ["Only workspace admins can change who approves."])
    assert_valid_view(view)
    assert len(view["blocks"]) == 100 and "submit" not in view and view["close"]["text"] == "Close"
    assert not [b for b in view["blocks"] if b["type"] == "input"] and all_elements(view["blocks"]) == []
    assert "showing 98 of 150 lists" in texts(view)
    assert view["blocks"][-1]["block_id"] == "approvers-notes"
    assert all(len(b["text"]["text"]) <= 3000 for b in view["blocks"] if b["type"] == "section")

    one = approvers_list_modal([policy("refund_charge", policy_label="always", approvers=["U1"])])
    assert_valid_view(one)
    assert texts(one).splitlines()[:2] == ["*`refund_charge`* list · always · 1 approval needed", "<@U1>"]
    assert EMPTY_TOOLS in texts(approvers_list_modal([]))
    assert "nothing to set up" in texts(approvers_list_modal([], empty_text="nothing to set up"))


def test_loading_and_notice_modals() -> None:
    for view in (loading_modal(), notice_modal("x" * 5000), notice_modal("")):
        assert_valid_view(view)
        assert view["type"] == "modal" and "submit" not in view and view["title"]["text"] == "Approver lists"
    assert "Loading…" in texts(loading_modal())
    assert texts(notice_modal("x" * 5000)).endswith("…")


def test_approvers_list_text() -> None:
    text = approvers_list_text(
        [
            policy("refund_charge", policy_label="always", approvers=["U1", "U2"]),
            policy("wire_money", policy_label="2 of 3", deleted_approvers=["U9"], required=2),
            policy("lookup", policy_label="never"),
        ]
    )
    assert text.splitlines() == [
        "*Approver lists*",
        "• *`refund_charge`* list · always · 1 approval needed: <@U1>, <@U2>",
        "• *`wire_money`* list · 2 of 3 · 2 approvals needed: ~deleted user~ <@U9>",
        "• *`lookup`* list · never · 1 approval needed: _no approvers set_",
    ]
    assert approvers_list_text([]) == EMPTY_TOOLS
    many = approvers_list_text(
        [
            policy(f"tool_{i}", policy_label="always", approvers=[f"U{j}" for j in range(10)])
            for i in range(100)
        ]
    )
    assert len(many) <= 3000
    assert many.splitlines()[-1].startswith("… and ") and many.splitlines()[-1].endswith(
        "more tools — `/approvers` shows them all."
    )
    assert_mrkdwn_escaped(many)



def test_a_read_only_home_card_still_says_who_may_answer() -> None:
    req = approval("r1")
    req.responders = Responders(rule="people", people=[slack_user("T1", "U0BOB")])
    view = home_view("U0ME", [HomeRequest(request=req, can_settle=False)], [], None)
    assert_valid_view(view)
    assert "Waiting on <@U0BOB>" in texts(view) and "*Approval needed:*" in texts(view)


def test_standing_approvals_link_their_thread_and_calls_under_them_say_whose_they_are():
    """A conversation grant links its thread; the note a call under a grant leaves."""
    from datetime import UTC, datetime

    from blocks.grants import standing_note
    from blocks.home import grant_text
    from bot.protocol import Grant
    from tests.blocks_validation import assert_valid_message

    alice, bob = slack_user("T1", "U0ALICE"), slack_user("T1", "U0BOB")
    here = Grant(scope="conversation", approval_key="refund_charge", tool_name="refund_charge", session_id="s1",
                 channel={"channel_id": "C1", "thread_ts": "1700000000.000100"}, requester=alice, granted_by=bob,
                 request_id="r1")
    assert "<https://slack.com/archives/C1/p1700000000000100|one conversation>" in grant_text(here)
    assert "in one conversation," in grant_text(here.model_copy(update={"channel": {}}))  # older grants: no link
    note = standing_note(here)
    assert_valid_message(note)
    assert note["text"] == (":unlock: Ran without asking, under <@U0BOB>’s standing approval for `refund_charge` "
                            "in this conversation — revoke it in App Home to be asked again.")
    theirs = here.model_copy(update={"scope": "requester", "expires_at": datetime(2026, 12, 11, tzinfo=UTC)})
    assert "for <@U0ALICE> in any conversation (until <!date^" in standing_note(theirs)["text"]
