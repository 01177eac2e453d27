"""Markdown → mrkdwn against CommonMark's own emphasis examples (a subset taken from the spec; the expected
Slack rendering is derived from the spec's HTML: <em> → _x_, <strong> → *x*, Slack's three escapes)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from blocks.messages import markdown_to_mrkdwn

SPEC = json.loads((Path(__file__).parent / "data" / "commonmark_emphasis.json").read_text())


def slack_rendering(spec_html: str) -> str:
    body = re.fullmatch(r"<p>(.*)</p>", spec_html, re.S)
    assert body is not None, spec_html
    text = body.group(1).replace("<em>", "_").replace("</em>", "_")
    text = text.replace("<strong>", "*").replace("</strong>", "*")
    return html.unescape(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@pytest.mark.parametrize("case", SPEC["examples"], ids=lambda case: f"example-{case['example']}")
def test_emphasis_renders_as_commonmark_reads_it(case: dict) -> None:
    assert markdown_to_mrkdwn(case["markdown"]) == slack_rendering(case["html"])


def test_the_subset_holds_the_intraword_underscore_examples() -> None:
    chosen = {case["markdown"] for case in SPEC["examples"]}
    assert {"foo__bar__", "5__6__78", "пристаням__стремятся__", "__foo__bar", "__foo__bar__baz__"} <= chosen


@pytest.mark.parametrize(
    ("markdown", "shown"),
    [
        ("Use everything__get-sum or memory__read_graph.", "Use everything__get-sum or memory__read_graph."),
        ("call `memory__read_graph` then __done__", "call `memory__read_graph` then *done*"),
        ("**bold** and __bold__ and snake__case__name", "*bold* and *bold* and snake__case__name"),
    ],
)
def test_double_underscores_inside_a_word_stay_as_written(markdown: str, shown: str) -> None:
    assert markdown_to_mrkdwn(markdown) == shown
