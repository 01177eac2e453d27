"""blocks/tasks.py: a turn's tool calls as Slack's stream chunks, as dicts."""

from __future__ import annotations

from slack_sdk.models.messages.chunk import Chunk, PlanUpdateChunk, TaskUpdateChunk

from blocks.tasks import (
    approved_details,
    cancelled_details,
    display_mode,
    mentioned,
    named,
    plan_chunk,
    result_summary,
    task_chunk,
    waiting_details,
)


def test_a_task_chunk_has_slacks_field_names_and_parses_as_slack_sdks_model():
    chunk = task_chunk({"id": "call_1", "title": "refund_charge", "status": "complete",
                        "details": "approved by @bob", "output": '{"refunded": "ch_1"}', "request_id": "r1"})
    assert chunk == {"type": "task_update", "id": "call_1", "title": "refund_charge", "status": "complete",
                     "details": "approved by @bob", "output": '{"refunded": "ch_1"}'}
    assert isinstance(Chunk.parse(chunk), TaskUpdateChunk)
    assert isinstance(Chunk.parse(plan_chunk()), PlanUpdateChunk)


def test_a_task_chunk_is_one_short_line_each_and_a_known_status():
    chunk = task_chunk({"id": "c", "title": "t\nx", "status": "waiting", "details": "a\n\nb", "output": "o" * 900})
    assert chunk["status"] == "pending" and chunk["title"] == "t x" and chunk["details"] == "a b"
    assert len(chunk["output"]) == 300 and chunk["output"].endswith("…")
    assert "details" not in task_chunk({"id": "c", "title": "t", "status": "pending", "details": ""})


def test_one_call_is_a_timeline_several_a_plan():
    assert display_mode(1) == "timeline" and display_mode(2) == "plan"


def test_details_name_people_by_handle_and_say_why():
    waiting = waiting_details(["U1", "U2"])
    assert waiting == "waiting for <@U1> or <@U2>" and mentioned([waiting]) == ["U1", "U2"]
    assert named(waiting, {"U1": "bob"}) == "waiting for @bob or an approver"
    assert waiting_details([]) == "waiting for approval"
    assert named(approved_details("U1"), {"U1": "bob"}) == "approved by @bob"
    assert cancelled_details("U1", "over the limit") == "cancelled: over the limit"
    assert named(cancelled_details("U1", None), {"U1": "bob"}) == "cancelled by @bob"


def test_a_result_in_one_line():
    assert result_summary("completed", {"refunded": "ch_1"}, None) == '{"refunded": "ch_1"}'
    assert result_summary("completed", "two\nlines", None) == "two lines"
    assert result_summary("completed", None, None) == "done"
    assert result_summary("failed", None, "RuntimeError: timed out") == "failed: RuntimeError: timed out"
    assert result_summary("rejected", {"message": "Denied."}, None) == "not run: Denied."
