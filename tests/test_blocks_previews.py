"""A call's preview (``@tool(preview=…)``) on its card, the approver's DM copy and App Home."""

from __future__ import annotations

from blocks import render_request, render_settled
from blocks.notices import approver_notice
from bot.principals import slack_user
from bot.protocol import PREVIEW_UNAVAILABLE, ActionRef, InputRequest, approval_options
from tests.blocks_validation import all_texts, assert_valid_blocks, assert_valid_message

ALICE = slack_user("T1", "U0ALICE")


def approval(preview: str | None) -> InputRequest:
    return InputRequest(
        request_id="req-1",
        kind="tool-approval",
        prompt="Delete old rows.",
        action=ActionRef(call_id="call-1", tool_name="purge_rows", input={"table": "orders"}),
        options=approval_options(),
        principal=ALICE,
        preview=preview,
    )


def preview_lines(blocks: list[dict]) -> list[str]:
    return [t for t in all_texts(blocks) if "review" in t]


def test_card_and_dm_copy_show_the_preview_without_pings():
    req = approval("47 rows will be deleted <!channel> <@U0BOB|boss>, see [the report](https://evil.example/r)")
    card = render_request(req)
    dm = approver_notice(req, channel_id="C1", link=None)
    assert_valid_blocks(card)
    assert_valid_message(dm)
    for blocks in (card, dm["blocks"]):
        [line] = preview_lines(blocks)
        assert "47 rows will be deleted" in line
        assert "<!channel>" not in line and "<@U0BOB" not in line  # a tool may echo user input: no pings
        assert "@channel" in line and "@U0BOB" in line
        assert "evil.example" in line  # a link shows where it goes, as on the card's prompt


def test_unavailable_preview_says_so_and_no_preview_shows_nothing():
    [line] = preview_lines(render_request(approval(PREVIEW_UNAVAILABLE)))
    assert "Preview unavailable" in line
    assert preview_lines(render_request(approval(None))) == []


def test_settled_card_keeps_the_preview_it_was_decided_on():
    settled = render_settled(approval("balance after refund: $12.00"), outcome_label="Approved")
    assert any("balance after refund: $12.00" in t for t in preview_lines(settled["blocks"]))


def test_app_home_lists_a_waiting_request_with_its_preview():
    from blocks.home import HomeRequest, home_view

    view = home_view("U0ME", [HomeRequest(request=approval("47 rows will be deleted"))], [], None)
    assert any("Preview: 47 rows will be deleted" in t for t in preview_lines(view["blocks"]))
