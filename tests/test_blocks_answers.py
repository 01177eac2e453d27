"""The AI surface's pure builders: answers as a markdown block with feedback buttons, within
Slack's limits (checked with LocalSlack's Block Kit validator), and the split view's greeting and prompts."""

from __future__ import annotations

from blocks.answers import MARKDOWN_TEXT, answer_messages, feedback_block, feedback_value
from blocks.assistant import greeting, suggested_prompts, thread_title
from localslack.blockkit import MESSAGE_BLOCKS_TEXT_MAX, blocks_text_length, validate_blocks

TOOLS = [
    ("lookup_customer", "Look up a customer's plan, seats and last charge. Read-only."),
    ("refund_charge", "Refund part or all of a charge. Needs a finance approver."),
    ("no_doc", ""),
    ("deploy_service", "Deploy a service version to an environment."),
    ("post_announcement", "Post an announcement to a channel."),
    ("fifth", "Do a fifth thing."),
]


def test_an_answer_that_fits_is_one_markdown_block_with_thumbs():
    [message] = answer_messages("| plan | seats |\n|---|---|\n| pro | 12 |\n\n**Done.**")
    assert [b["type"] for b in message["blocks"]] == ["markdown", "context_actions"]
    assert message["blocks"][0]["text"].startswith("| plan |") and "*Done.*" in message["text"]
    assert validate_blocks(message["blocks"]) == []


def test_the_longest_markdown_answer_still_fits_with_its_buttons():
    [message] = answer_messages("x" * (MARKDOWN_TEXT - 100))
    assert (
        validate_blocks(message["blocks"]) == []
        and blocks_text_length(message["blocks"]) <= MESSAGE_BLOCKS_TEXT_MAX
    )


def test_a_longer_answer_falls_back_to_sections_and_the_last_message_has_the_thumbs():
    messages = answer_messages("word " * 5000)
    assert len(messages) > 1 and all(validate_blocks(m["blocks"]) == [] for m in messages)
    assert messages[-1]["blocks"][-1]["type"] == "context_actions"
    assert all(b["type"] == "section" for m in messages[:-1] for b in m["blocks"])
    assert answer_messages("   ") == []


def test_feedback_values():
    element = feedback_block()["elements"][0]
    assert feedback_value({"value": element["positive_button"]["value"]}) == "positive"
    assert feedback_value({"value": element["negative_button"]["value"]}) == "negative"
    assert feedback_value({"value": "other"}) is None


def test_prompts_come_from_the_tools_at_most_four_and_greeting_names_the_person():
    prompts = suggested_prompts(TOOLS)
    assert [p["title"] for p in prompts] == [
        "Look up a customer's plan, seats and…",
        "Refund part or all of a charge",
        "Deploy a service version to an…",
        "Post an announcement to a channel",
    ]
    assert len(prompts) == 4 and all(p["title"] and p["message"] for p in prompts)
    assert all(len(p["title"]) <= 40 for p in prompts)
    assert prompts[1]["message"] == "I'd like to refund part or all of a charge."
    text = greeting("U0ALICE", TOOLS)
    assert text.startswith("Hi <@U0ALICE>!") and "approval" in text
    assert thread_title("  Refund ch_1\n for me  ") == "Refund ch_1 for me" and thread_title("") == "New chat"


def test_a_tools_example_request_is_its_suggested_prompt_as_written():
    prompts = suggested_prompts([("lookup_customer", "Look up a customer's plan.", "Look up Acme"),
                                 ("refund_charge", "Refund part or all of a charge.", None)])
    assert prompts[0] == {"title": "Look up Acme", "message": "Look up Acme"}
    assert prompts[1]["message"] == "I'd like to refund part or all of a charge."
