"""Agent replies: Markdown → mrkdwn, splitting, reply messages, status line (blocks/messages.py)."""

from __future__ import annotations

import random

import pytest

from blocks import markdown_to_mrkdwn, reply_messages, split_message, status_text
from tests.blocks_validation import assert_mrkdwn_escaped, assert_valid_message


@pytest.mark.parametrize(
    ("md", "mrkdwn"),
    [
        ("**bold** and __also bold__", "*bold* and *also bold*"),
        ("*italic* and _italic_", "_italic_ and _italic_"),
        ("***both***", "*_both_*"),
        ("~~gone~~", "~gone~"),
        ("[the docs](https://example.com/a?b=1&c=2)", "<https://example.com/a?b=1&amp;c=2|the docs>"),
        ("![chart](https://example.com/c.png)", "<https://example.com/c.png|chart>"),
        ("[**bold** label](https://x.io)", "<https://x.io|bold label>"),
        ("[local](./file.md)", "local (./file.md)"),
        ("# Title", "*Title*"),
        ("### **Already bold** heading ###", "*Already bold heading*"),
        ("- one\n* two\n+ three", "• one\n• two\n• three"),
        ("- top\n  - nested", "• top\n    ◦ nested"),
        ("- [ ] todo\n- [x] done", "• ☐ todo\n• ☑ done"),
        ("1. first\n2. second", "1. first\n2. second"),
        ("> quoted **text**", "> quoted *text*"),
        ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
        ("use `a **not bold** <b>`", "use `a **not bold** &lt;b&gt;`"),
        # a model's mention names the person, it does not ping them; channels stay links
        ("ping <@U123ABC> in <#C42|general>", "ping @U123ABC in <#C42|general>"),
        ("<!channel> <!here> <!subteam^S1>", "@channel @here @S1"),
        ("see <https://example.com>", "see <https://example.com>"),
        ("see <https://example.com/?a=1&b=2>", "see <https://example.com/?a=1&amp;b=2>"),
        # a label that reads like another address shows the real one
        ("[https://stripe.com/login](https://evil.example/l)", "<https://evil.example/l|evil.example/l>"),
        ("<https://evil.example|https://stripe.com>", "<https://evil.example|evil.example>"),
        ("[<@U1> docs](https://x.io)", "<https://x.io|@U1 docs>"),
        ("x \ue0005\ue000 \ue001y", "x 5 y"),  # our placeholders in a model's text: once an IndexError
        ("---", "──────────"),
        ("snake_case_name and 2*3*4", "snake_case_name and 2*3*4"),
        ("```inline``` code", "```inline``` code"),
    ],
)
def test_markdown_to_mrkdwn(md: str, mrkdwn: str) -> None:
    assert markdown_to_mrkdwn(md) == mrkdwn


def test_code_blocks_are_kept_verbatim_apart_from_slack_escaping() -> None:
    md = "Run this:\n\n```python\nif a < b and **kw:\n    print('# not a heading')\n- not a bullet\n```\nDone **now**."
    assert markdown_to_mrkdwn(md) == (
        "Run this:\n\n```\nif a &lt; b and **kw:\n    print('# not a heading')\n- not a bullet\n```\nDone *now*."
    )


def test_an_unterminated_fence_is_closed() -> None:
    out = markdown_to_mrkdwn("```\ncode that never ends")
    assert out == "```\ncode that never ends\n```"


def test_converted_text_is_always_escaped_for_slack() -> None:
    md = "Tom & Jerry <script> [x](https://a.b/?q=<1>&r=2) `<tag>` <@U1> <!everyone>\n```\n<html>&\n```"
    assert_mrkdwn_escaped(markdown_to_mrkdwn(md))


# --- splitting ------------------------------------------------------------------------------


def test_short_text_is_not_split() -> None:
    assert split_message("hello\n\nworld") == ["hello\n\nworld"]
    assert split_message("") == []


def test_splitting_prefers_paragraphs_then_lines_then_words() -> None:
    paragraphs = "\n\n".join(f"Paragraph {i} " + "word " * 30 for i in range(20))
    pieces = split_message(paragraphs, limit=500)
    assert all(len(p) <= 500 for p in pieces)
    assert all(p.startswith("Paragraph") for p in pieces)  # every piece starts at a paragraph
    assert "\n\n".join(pieces).split() == paragraphs.split()

    lines = "\n".join(f"line {i} " + "x" * 40 for i in range(40))
    pieces = split_message(lines, limit=300)
    assert all(len(p) <= 300 and p.startswith("line ") for p in pieces)
    assert "\n".join(pieces) == lines

    words = " ".join(f"w{i}" for i in range(400))
    pieces = split_message(words, limit=100)
    assert all(len(p) <= 100 for p in pieces)
    assert " ".join(pieces) == words  # no word is broken


def test_a_single_huge_word_is_cut_hard_but_not_inside_an_entity() -> None:
    text = "a" * 95 + "&amp;" + "b" * 200
    pieces = split_message(text, limit=100)
    assert all(len(p) <= 100 for p in pieces)
    assert "".join(pieces) == text
    assert all(not p.endswith("&") and "&amp" not in p.replace("&amp;", "") for p in pieces)


def test_splitting_inside_a_code_block_closes_and_reopens_the_fence() -> None:
    code = "\n".join(f"    statement_{i}()" for i in range(300))
    text = "Here is the script:\n\n```\n" + code + "\n```\n\nThat is all."
    pieces = split_message(text, limit=1000)
    assert len(pieces) > 3
    for piece in pieces:
        assert len(piece) <= 1000
        assert piece.count("```") % 2 == 0, piece[-80:]
    # nothing of the code is lost, and its indentation survives the cuts
    for i in (0, 150, 299):
        assert any(f"\n    statement_{i}()" in p or p.startswith(f"    statement_{i}()") for p in pieces)
    assert pieces[-1].endswith("That is all.")
    assert sum(p.count("statement_") for p in pieces) == 300


def test_split_never_breaks_a_link_token() -> None:
    link = "<https://example.com/" + "p" * 60 + "|a label with spaces>"
    text = ("word " * 15) + link + (" tail" * 20)
    for piece in split_message(text, limit=120):
        assert len(piece) <= 120
        assert_mrkdwn_escaped(piece)


# --- reply messages -------------------------------------------------------------------------


def test_reply_messages_for_a_normal_answer() -> None:
    [message] = reply_messages("**Done.** I refunded `ch_1` — see [the receipt](https://pay.example/r/1).")
    assert_valid_message(message)
    [block] = message["blocks"]
    assert block["text"]["text"] == "*Done.* I refunded `ch_1` — see <https://pay.example/r/1|the receipt>."
    assert message["text"] == block["text"]["text"]


def test_long_replies_become_several_sections_and_messages() -> None:
    md = "\n\n".join(f"## Part {i}\n" + ("Some **text** & more. " * 40) for i in range(250))
    messages = reply_messages(md)
    assert len(messages) >= 2
    for message in messages:
        assert_valid_message(message)
    sections = [b["text"]["text"] for m in messages for b in m["blocks"]]
    assert all(len(s) <= 3000 for s in sections)
    assert sum(s.count("*Part ") for s in sections) == 250
    assert any(m["text"].endswith("…") for m in messages)  # fallback text cut to 4000
    # real Slack refuses a message whose blocks' texts add up to more than 12,000 characters
    assert all(sum(len(b["text"]["text"]) for b in m["blocks"]) <= 12_000 for m in messages)


def test_a_reply_of_full_sections_never_exceeds_the_message_text_budget() -> None:
    md = "\n\n".join("w" * 2990 for _ in range(9))  # nine near-full sections: at most four per message
    messages = reply_messages(md)
    sizes = [sum(len(b["text"]["text"]) for b in m["blocks"]) for m in messages]
    assert all(size <= 12_000 for size in sizes), sizes
    assert sum(sizes) >= 9 * 2990  # nothing lost
    assert [b["block_id"] for m in messages for b in m["blocks"]] == [f"reply:{i}" for i in range(9)]


def test_blank_reply_gives_no_messages() -> None:
    assert reply_messages("") == []
    assert reply_messages("  \n ") == []


def test_status_text() -> None:
    assert status_text("thinking") == ":hourglass_flowing_sand: Thinking…"
    assert status_text("running_tool", "lookup_customer") == ":gear: Running `lookup_customer`…"
    assert status_text("running_tool") == ":gear: Running a tool…"
    long = status_text("running_tool", "<x>" + "t" * 200)
    assert long.startswith(":gear: Running `&lt;x&gt;") and "…`" in long and len(long) < 120
    with pytest.raises(ValueError):
        status_text("dancing")  # type: ignore[arg-type]


def test_random_mrkdwn_always_splits_into_valid_balanced_pieces_without_losing_text() -> None:
    rng = random.Random(7)
    words = ["a", "bb", "&amp;", "<https://x.example/z|a link>", "<@U1>"]
    for _ in range(300):
        lines = []
        for _ in range(rng.randint(1, 40)):
            roll = rng.random()
            if roll < 0.2:
                lines.append("```")
            elif roll < 0.35:
                lines.append("")
            else:
                lines.append(
                    " ".join(
                        rng.choice([*words, "w" * rng.randint(1, 120)]) for _ in range(rng.randint(1, 30))
                    )
                )
        text = "\n".join(lines)
        if text.count("```") % 2:
            text += "\n```"
        limit = rng.randint(40, 400)
        pieces = split_message(text, limit)
        for piece in pieces:
            assert len(piece) <= limit and piece.count("```") % 2 == 0
            assert_mrkdwn_escaped(piece)  # no cut inside an entity or a <…> token
        squash = lambda s: "".join(s.replace("```", "").split())  # noqa: E731
        assert squash("".join(pieces)) == squash(text)
