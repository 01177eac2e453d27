"""Decision surfaces cannot be spoofed: hostile text from the model or a tool on cards, in the
freeform modal, on settled cards and in a failed turn's message.

Pure builder tests on the Block Kit dicts. Every card also goes through tests/blocks_validation.py, and
through three invariants checked on every mrkdwn text of it:

* every ``<url|text>`` link shows its real host: its text starts with it, or ends with " (host)";
* the only ``<@…>``, ``<!…>``, ``<#…>`` tokens are the ones the card writes itself (requester, approvers,
  dates), never one the model wrote;
* every mrkdwn text object is ``verbatim``, so Slack adds no links or mentions of its own.
"""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime
from urllib.parse import urlsplit

import pytest

from blocks import (
    freeform_modal,
    markdown_to_mrkdwn,
    render_request,
    render_requests,
    render_settled,
    render_waiting,
)
from blocks.cards import request_summary
from blocks.messages import decision_mrkdwn, decision_plain, literal_mrkdwn
from blocks.status import failure_message
from bot.principals import slack_user
from bot.protocol import ActionRef, InputOption, InputRequest, approval_options
from tests.blocks_validation import (
    all_elements,
    all_texts,
    assert_mrkdwn_escaped,
    assert_valid_blocks,
    assert_valid_message,
    assert_valid_view,
)

ALICE = slack_user("T1", "U0ALICE")
LINK = re.compile(r"<((?:https?|mailto):[^|<>]*)\|([^<>]*)>")
SPECIAL = re.compile(r"<[@!#][^<>]*>")
PLACEHOLDER = re.compile("[\ue000\ue001]")
ADDRESS_LIKE = re.compile(r"://|www\.|[\w-]\.[^\W\d_]{2}")
RLO, PDF, ZWSP = "\u202e", "\u202c", "\u200b"
HIDDEN = ("\u202e", "\u202c", "\u200b", "\u2066", "\u2069", "\u200f", "\ufeff", "\u00ad")


def question(
    prompt: str, labels: list[str] | None = None, descriptions: list[str] | None = None, **kw
) -> InputRequest:
    labels = labels or []
    descriptions = descriptions or [None] * len(labels)  # type: ignore[list-item]
    return InputRequest(
        request_id=kw.pop("request_id", "q-1"),
        kind="question",
        prompt=prompt,
        options=[
            InputOption(id=f"o{i}", label=label, description=description)
            for i, (label, description) in enumerate(zip(labels, descriptions, strict=True))
        ],
        display="select" if labels else "text",
        allow_free_text=True,
        principal=kw.pop("principal", ALICE),
        **kw,
    )


def approval(tool_input: dict, prompt: str = "Run send_email?") -> InputRequest:
    return InputRequest(
        request_id="req-1",
        kind="tool-approval",
        prompt=prompt,
        action=ActionRef(call_id="call-1", tool_name="send_email", input=tool_input),
        options=approval_options(),
        principal=ALICE,
    )


def mrkdwn_objects(node) -> list[dict]:
    found = []
    if isinstance(node, dict):
        if node.get("type") == "mrkdwn":
            found.append(node)
        for value in node.values():
            found.extend(mrkdwn_objects(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(mrkdwn_objects(value))
    return found


def plain_texts(blocks: list[dict]) -> list[str]:
    """The plain_text of every control people choose from (buttons, options, descriptions)."""
    texts = []
    for element in all_elements(blocks):
        if element["type"] == "button":
            texts.append(element["text"]["text"])
        for option in element.get("options", []):
            texts.append(option["text"]["text"])
            if "description" in option:
                texts.append(option["description"]["text"])
    return texts


def assert_links_show_their_host(text: str) -> None:
    """Each link's text starts with its host, or is words (no address in them) and " (host)"."""
    for match in LINK.finditer(text):
        url, label = match.groups()
        assert url.startswith(("https://", "http://")), f"only http(s) links are clickable: {match.group(0)}"
        host = urlsplit(url.replace("&amp;", "&")).netloc
        assert "@" not in host, f"a link with user info: {url}"
        shown = host if len(host) <= 64 else "…" + host[-63:]  # a long host keeps its end
        if label.startswith(shown):
            continue
        assert label.endswith(f" ({shown})"), f"a link to {host} that does not say so: {match.group(0)!r}"
        words = label.removesuffix(f" ({shown})")
        assert not ADDRESS_LIKE.search(words), f"a label that reads like an address: {match.group(0)!r}"


def assert_safe_card(blocks: list[dict], allowed: set[str]) -> str:
    """The three invariants of this module, on top of Slack's own rules; returns all texts, joined."""
    assert_valid_blocks(blocks)
    for obj in mrkdwn_objects(blocks):
        assert obj.get("verbatim") is True, obj
        assert_links_show_their_host(obj["text"])
        tokens = set(SPECIAL.findall(obj["text"]))
        assert tokens <= allowed, f"a mention the card did not write itself: {tokens - allowed}"
    body = "\n".join(all_texts(blocks))
    for char in HIDDEN:
        assert char not in body, f"hidden character U+{ord(char):04X} on the card"
    for text in [*plain_texts(blocks), blocks[0]["text"]["text"]]:  # what the model wrote, as rendered
        assert not PLACEHOLDER.search(text), f"a placeholder of the converter leaked: {text!r}"
    return body


# --- disguised links ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "shown"),
    [
        # a URL whose label is another URL: the label is replaced by where the link really goes
        (
            "Refund at <https://evil.example/pay|https://stripe.com/refund>",
            "<https://evil.example/pay|evil.example/pay>",
        ),
        (
            "Refund at [https://stripe.com/refund](https://evil.example/pay)",
            "<https://evil.example/pay|evil.example/pay>",
        ),
        ("Log in at [stripe.com](https://evil.example)", "<https://evil.example|evil.example>"),
        ("Log in at [ｓｔｒｉｐｅ．ｃｏｍ](https://evil.example)", "<https://evil.example|evil.example>"),
        ("Log in at [www.stripe.com/login](https://evil.example)", "<https://evil.example|evil.example>"),
        # a label in words keeps its words, and the host follows it
        (
            "Read <https://evil.example/p?a=1&b=2|the refund policy>",
            "<https://evil.example/p?a=1&amp;b=2|the refund policy (evil.example)>",
        ),
        (
            "Read [the **refund** policy](https://evil.example/p)",
            "<https://evil.example/p|the refund policy (evil.example)>",
        ),
        # where a click goes is rebuilt from the URL's parts: what is shown is what opens
        ("See https://stripe.com@evil.example/login.", "<https://evil.example/login|evil.example/login>."),
        ("See <https://stripe.com:pw@evil.example/|Stripe>", "<https://evil.example/|Stripe (evil.example)>"),
        ("See https://%65vil.example/x", "<https://evil.example/x|evil.example/x>"),
        (
            "See https:\\\\evil.example\\@stripe.com",
            "<https://evil.example/@stripe.com|evil.example/@stripe.com>",
        ),
        ("See https:evil.example/x", "<https://evil.example/x|evil.example/x>"),
        ("See https://strіpe.com/login", "<https://xn--strpe-p2e.com/login|xn--strpe-p2e.com/login>"),
        ("See HTTPS://EVIL.EXAMPLE:8443/A", "<https://evil.example:8443/A|evil.example:8443/A>"),
        (
            "See (https://docs.example.com/a_(b)).",
            "(<https://docs.example.com/a_(b)|docs.example.com/a_(b)>).",
        ),
    ],
)
def test_a_link_in_a_prompt_always_shows_its_real_host(prompt: str, shown: str) -> None:
    blocks = render_request(question(prompt))
    body = assert_safe_card(blocks, {"<@U0ALICE>"})
    assert shown in blocks[0]["text"]["text"]
    assert "stripe.com/refund" not in body


@pytest.mark.parametrize(
    ("prompt", "shown"),
    [
        (
            "Open <javascript:alert(document.cookie)|https://stripe.com>",
            "Open javascript:alert(document.cookie)",
        ),
        ("Open [the dashboard](javascript:alert(1))", "Open the dashboard (javascript:alert(1))"),
        ("Open <data:text/html;base64,PHNjcmlwdD4=|stripe.com>", "Open data:text/html;base64,PHNjcmlwdD4="),
        ("Open <file:///etc/passwd|report>", "Open report (file:///etc/passwd)"),
        ("Mail <mailto:ceo@evil.example|ceo@stripe.com>", "Mail mailto:ceo@evil.example"),
        ("Open <slack://open?team=T1|Slack>", "Open Slack (slack://open?team=T1)"),
    ],
)
def test_links_that_are_not_http_are_shown_as_text_not_clickable(prompt: str, shown: str) -> None:
    blocks = render_request(question(prompt))
    assert_safe_card(blocks, {"<@U0ALICE>"})
    assert blocks[0]["text"]["text"] == shown  # the real target is what people read, and nothing is clickable


def test_approval_card_prompt_and_freeform_modal_get_the_same_treatment() -> None:
    prompt = "Pay <https://evil.example/pay|https://stripe.com/pay> now <!channel>"
    card = render_request(approval({"amount": 5}, prompt=prompt))
    title = card[0]["text"]["text"]
    assert title.startswith(
        "*Approval needed:* `send_email`\nPay <https://evil.example/pay|evil.example/pay> now @channel"
    )
    assert_safe_card(card, {"<@U0ALICE>"})

    view = freeform_modal(question(prompt), "C1", "1.2")
    assert_valid_view(view)
    modal_prompt = view["blocks"][0]["text"]
    assert modal_prompt["verbatim"] is True
    assert modal_prompt["text"] == "Pay <https://evil.example/pay|evil.example/pay> now @channel"


# --- mentions -------------------------------------------------------------------------------


def test_mentions_the_model_writes_become_plain_names_and_the_cards_own_stay_real() -> None:
    prompt = (
        "Ask <@U0BOB> or <@U0BOB|alice>, tell <!channel> <!here|here> <!everyone>, "
        "page <!subteam^S0ADMINS|@security>, see <#C0SECRET|general>, "
        "by <!date^1700000000^{date}^https://evil.example|today>"
    )
    expires = datetime(2026, 3, 2, tzinfo=UTC)
    blocks = render_request(question(prompt, expires_at=expires))
    our_date = f"<!date^{int(expires.timestamp())}^{{date_short_pretty}} at {{time}}|2026-03-02 00:00 UTC>"
    assert_safe_card(blocks, {"<@U0ALICE>", our_date})
    assert blocks[0]["text"]["text"] == (
        "Ask @U0BOB or @U0BOB, tell @channel @here @everyone, page @S0ADMINS, see #C0SECRET, by today"
    )
    who = blocks[1]["elements"][0]["text"]
    assert who.startswith("Question for <@U0ALICE> · expires <!date^")  # our own mention and date stay tokens


def test_n_of_m_approvers_stay_mentions_while_the_prompt_cannot_add_any() -> None:
    req = approval({"to": "<@U0BOB>"}, prompt="Approved already by <@U0CAROL>")
    message = render_waiting(req, ["U0DAVE"], 2)
    assert_valid_message(message)
    body = assert_safe_card(message["blocks"], {"<@U0ALICE>", "<@U0DAVE>"})
    assert "Approvals: 1 of 2 — <@U0DAVE>" in body
    assert "Approved already by @U0CAROL" in body
    assert "*to*\n&lt;@U0BOB&gt;" in body  # an argument is shown exactly as the tool gets it
    assert "<!channel>" not in message["text"] and "<@U0CAROL>" not in message["text"]


def test_option_labels_and_descriptions_show_hosts_and_plain_names() -> None:
    labels = [
        "<https://evil.example|Stripe> <!here>",
        "[https://stripe.com](https://evil.example/x)",
        "<@U0BOB>",
    ]
    descriptions = [f"{RLO}moc.epirts{PDF}", "<javascript:alert(1)|safe>", "x" * 100]
    for req in (
        question("Pick", labels, descriptions),  # radio buttons
        question("Pick", labels * 2, descriptions * 2),
    ):  # a select menu
        blocks = render_request(req)
        assert_safe_card(blocks, {"<@U0ALICE>"})
        texts = plain_texts(blocks)
        assert texts[:6] == [
            "Stripe (evil.example) @here",
            "moc.epirts",
            "evil.example/x",
            "safe (javascript:alert(1))",
            "@U0BOB",
            "x" * 74 + "…",
        ]
    assert request_summary(question("<!here> [https://stripe.com](https://evil.example)")) == (
        "Question: @here evil.example"
    )


def test_the_fallback_text_cannot_mention_or_link_either() -> None:
    req = question(
        "<!channel> see <https://evil.example|https://stripe.com> [a](https://evil.example) <@U0BOB>"
    )
    [message] = render_requests([req])
    assert_valid_message(message)  # every < > & escaped, apart from real tokens
    assert message["text"] == "Question: @channel see evil.example a (evil.example) @U0BOB"


# --- the tool's input -----------------------------------------------------------------------


def fields_of(blocks: list[dict]) -> list[str]:
    return [f["text"] for b in blocks for f in b.get("fields", [])]


def test_argument_values_are_shown_exactly_and_hosts_named_when_the_text_hides_them() -> None:
    tool_input = {
        "body": "Click [https://stripe.com/login](https://evil.example/l) <!channel>",
        "slack_link": "<https://evil.example|https://stripe.com/refund>",
        "userinfo": "https://stripe.com@evil.example/login",
        "escaped_host": "https://%65vil.example",
        "lookalike": "https://strіpe.com/login",
        "hidden": f"https://evil{ZWSP}.example/{RLO}x",
        "plain": "https://docs.example.com/guide and HTTPS://Docs.Example.com",
        "nested": {"links": ["https://stripe.com@evil2.example", "https://ok.example"]},
        f"<@U0BOB>{RLO}": "name",
    }
    blocks = render_request(approval(tool_input))
    assert_safe_card(blocks, {"<@U0ALICE>"})
    assert fields_of(blocks) == [
        # both hosts are plainly there: shown as written, nothing added
        "*body*\nClick [https://stripe.com/login](https://evil.example/l) &lt;!channel&gt;",
        "*slack_link*\n&lt;https://evil.example|https://stripe.com/refund&gt;",
        # the text reads like one host and goes to another: the real one is named
        "*userinfo*\nhttps://stripe.com@evil.example/login\n_↳ links to evil.example_",
        "*escaped_host*\nhttps://%65vil.example\n_↳ links to evil.example_",
        "*lookalike*\nhttps://strіpe.com/login\n_↳ links to xn--strpe-p2e.com_",
        # hidden characters are what the tool gets, so they are written out, not dropped
        "*hidden*\nhttps://evil[U+200B].example/[U+202E]x\n_↳ links to evil.example_",
        "*plain*\nhttps://docs.example.com/guide and HTTPS://Docs.Example.com",
        '*nested*\n`{"links":["https://stripe.com@evil2.example","https://ok.example"]}`'
        "\n_↳ links to evil2.example_",
        "*&lt;@U0BOB&gt;[U+202E]*\nname",
    ]


def test_a_real_host_cut_off_by_truncation_is_still_named() -> None:
    body = "[https://stripe.com/" + "a" * 3000 + "](https://evil.example/x)"
    [field] = fields_of(render_request(approval({"body": body})))
    assert len(field) <= 2000
    assert "evil.example/x" not in field.split("\n")[1]  # the link itself was cut off…
    assert field.endswith("…\n_↳ links to evil.example_")  # …so its host is named below the value


def test_many_hosts_in_one_value_are_listed_briefly() -> None:
    value = " ".join(f"https://x@h{i}.example" for i in range(12))
    [field] = fields_of(render_request(approval({"v": value})))
    assert field.endswith(
        "_↳ links to h0.example, h1.example, h2.example, h3.example, h4.example and 7 more_"
    )


# --- brackets, hidden characters, long hosts --------------------------------------------------


@pytest.mark.parametrize(
    "prompt",
    [
        "<https://evil.example|<https://stripe.com|stripe>>",
        "[[https://stripe.com](https://evil.example)](https://evil2.example)",
        "[<https://stripe.com|stripe>](https://evil.example)",
        "<https://evil.example|[stripe](https://stripe.com)>",
        "<<!channel>> <<@U0BOB>|x>",
        "<https://evil.example|unclosed and [a](https://evil.example",
        "]]((<https://evil.example|x>))[[",
        "`<!channel>` ```<https://evil.example|https://stripe.com>``` *<@U0BOB>*",
        "<https://evil.example|x|https://stripe.com>",
        "<https://evil.example\n|https://stripe.com>",
        "\ue0001\ue000 \ue001 <https://evil.example|https://stripe.com>",
    ],
)
def test_nested_and_mismatched_brackets_neither_break_the_card_nor_hide_a_host(prompt: str) -> None:
    assert_safe_card(
        render_request(question(prompt)), {"<@U0ALICE>"}
    )  # no label names a host it does not go to


def test_hidden_and_direction_characters_are_dropped_from_what_people_read() -> None:
    prompt = (
        f"Pay {RLO}moc.epirts{PDF} at https://evil{ZWSP}.example/{RLO}pay "
        f"and [stri{ZWSP}pe.com](https://evil.example)"
    )
    blocks = render_request(question(prompt, [f"{RLO}evorppa"]))
    assert_safe_card(blocks, {"<@U0ALICE>"})
    assert blocks[0]["text"]["text"] == (
        "Pay moc.epirts at <https://evil.example/pay|evil.example/pay> "
        "and <https://evil.example|evil.example>"
    )
    assert plain_texts(blocks)[0] == "evorppa"


def test_a_very_long_host_keeps_its_end_and_everything_stays_within_limits() -> None:
    host = ".".join(["stripe", "com"] + ["a" * 60] * 3 + ["evil", "example"])  # 209 characters
    label = "the refund page " * 300
    prompt = f"<https://{host}/x|{label}> and https://{host}/{'p' * 4000} " * 3
    blocks = render_request(question(prompt, [f"<https://{host}|x>"], [f"[a](https://{host})"]))
    body = assert_safe_card(blocks, {"<@U0ALICE>"})
    title = blocks[0]["text"]["text"]
    assert len(title) <= 3000 and title.endswith("…")
    assert f"(…{host[-63:]})" in title and title.count("evil.example") >= 2  # its owner stays in view
    assert plain_texts(blocks)[:2] == [f"x (…{host[-63:]})", f"a (…{host[-63:]})"]
    displayed = LINK.sub(lambda m: m.group(2), body)  # what people read: link texts, not their URLs
    assert (
        "stripe.com." + "a" * 60 not in displayed
    )  # the start, which could pass for stripe.com, is what goes


def test_host_shown_for_a_long_host_ends_with_its_real_domain() -> None:
    host = "stripe.com." + "a" * 200 + ".evil.example"
    assert decision_plain(f"<https://{host}|x>").endswith(".evil.example)")
    assert decision_plain(f"https://{host}/path").startswith("…") and "evil.example/path" in decision_plain(
        f"https://{host}/path"
    )


# --- settled cards and people's words ---------------------------------------------------------


def test_a_typed_answer_and_a_note_are_shown_exactly_and_cannot_ping() -> None:
    req = question("Which plan?", ["Basic", "Pro"])
    message = render_settled(
        req,
        outcome_label="Answered",
        decided_by="U0BOB",
        answer="<!channel> Pro — <https://evil.example|https://stripe.com>",
        note=f"see [docs](https://evil.example)\n<@U0CAROL> {RLO}x",
    )
    assert_valid_message(message)
    body = assert_safe_card(message["blocks"], {"<@U0ALICE>", "<@U0BOB>"})
    assert ":speech_balloon: *&lt;!channel&gt; Pro — &lt;https://evil.example|https://stripe.com&gt;*" in body
    assert "> see [docs](https://evil.example)\n> &lt;@U0CAROL&gt; [U+202E]x" in body
    assert message["text"] == "Answered by <@U0BOB>"


# --- failure and refusal texts ------------------------------------------------------------------


def test_a_providers_error_text_is_escaped_and_cannot_mention_or_link() -> None:
    reason = (
        "The model could not answer: model endpoint rejected the request (400): "
        "<!channel> visit <https://evil.example|https://status.openai.com> & <@U0BOB>\n" + RLO + "x" * 5000
    )
    message = failure_message(reason)
    assert_valid_message(message)
    [block] = message["blocks"]
    assert block["text"]["verbatim"] is True and block["text"]["text"] == message["text"]
    text = message["text"]
    assert text.startswith(
        ":warning: The model could not answer: model endpoint rejected the request (400): "
        "&lt;!channel&gt; visit &lt;https://evil.example|https://status.openai.com&gt; "
        "&amp; &lt;@U0BOB&gt; [U+202E]xxx"
    )
    assert text.endswith("…\nSend your message again to retry.") and len(text) < 1100
    assert not SPECIAL.search(text) and not LINK.search(text)
    assert failure_message("")["text"] == ":warning: Something went wrong.\nSend your message again to retry."


# --- replies (not a decision surface, but no disguised links there either) --------------------


def test_replies_show_the_real_address_for_a_label_that_reads_like_another() -> None:
    assert markdown_to_mrkdwn("[https://stripe.com/login](https://evil.example/l)") == (
        "<https://evil.example/l|evil.example/l>"
    )
    assert (
        markdown_to_mrkdwn("<https://evil.example|https://stripe.com>")
        == "<https://evil.example|evil.example>"
    )
    assert markdown_to_mrkdwn("[<https://stripe.com|s>](https://evil.example)") == (
        "<https://evil.example|evil.example>"  # was a link nested in a link's label
    )
    # what a model may write in a reply is unchanged: labels in words, plain links; a mention it writes
    # names the person without pinging them
    assert markdown_to_mrkdwn(
        "[the receipt](https://pay.example/r/1) for <@U1> at <https://pay.example>"
    ) == ("<https://pay.example/r/1|the receipt> for @U1 at <https://pay.example>")
    # private-use characters (our placeholders) in a model's text used to crash the conversion
    assert markdown_to_mrkdwn("x \ue0005\ue000 \ue001y") == "x 5 y"


# --- hostile fuzz ---------------------------------------------------------------------------

FRAGMENTS = [
    "<https://evil.example|https://stripe.com/x>",
    "[https://stripe.com](https://evil.example)",
    "[docs](https://evil.example/a?b=1&c=2)",
    "https://stripe.com@evil.example/",
    "<!channel>",
    "<!here|here>",
    "<@U0BOB>",
    "<@U0BOB|alice>",
    "<#C1|general>",
    "<!subteam^S1|@team>",
    "<javascript:alert(1)|ok>",
    "[x](javascript:alert(1))",
    RLO,
    PDF,
    ZWSP,
    "\u2066",
    "<",
    ">",
    "&",
    "&amp;",
    "|",
    "[",
    "]",
    "(",
    ")",
    "`",
    "```",
    "*",
    "_",
    "~",
    "\n",
    " ",
    "stripe.com",
    "https://strіpe.com",
    "https:\\\\evil.example",
    "<https://" + "h" * 80 + ".evil.example|x>",
    "\ue000",
    "\ue0000\ue000",
    "word",
    "<!date^1^{date}|d>",
    "<https://evil.example|[x](https://y.example)>",
    "<x|",
    "|x>",
    "](",
    "[https://stripe.com](",
]


def hostile(rng: random.Random) -> str:
    return "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 40)))


def test_random_hostile_text_never_breaks_a_card_or_gets_a_mention_or_a_disguised_link_through() -> None:
    rng = random.Random(9)
    for _ in range(300):
        labels = [hostile(rng) for _ in range(rng.randint(0, 7))]
        req = question(hostile(rng), labels, [hostile(rng) for _ in labels])
        assert_safe_card(render_request(req), {"<@U0ALICE>"})
        assert_safe_card(
            render_request(approval({hostile(rng): hostile(rng), "n": [hostile(rng)]}, prompt=hostile(rng))),
            {"<@U0ALICE>"},
        )
        settled = render_settled(
            req, outcome_label="Answered", decided_by="U0BOB", answer=hostile(rng), note=hostile(rng)
        )
        assert_valid_message(settled)
        assert_safe_card(settled["blocks"], {"<@U0ALICE>", "<@U0BOB>"})
        assert_valid_view(freeform_modal(req, "C1", "1.2"))
        for text in (
            decision_mrkdwn(hostile(rng)),
            literal_mrkdwn(hostile(rng)),
            failure_message(hostile(rng))["text"],
        ):
            assert_mrkdwn_escaped(text)
            assert not SPECIAL.search(text)
        reply = markdown_to_mrkdwn(hostile(rng))  # a reply keeps user mentions, nothing that broadcasts
        assert_mrkdwn_escaped(reply)
        assert not re.search(r"<!(?!date\^)", reply) and not PLACEHOLDER.search(reply)


def test_a_cut_label_drops_a_link_whole_rather_than_show_part_of_its_host() -> None:
    label = "A" * 60 + " <https://stripe.com.evil.example|x> tail"
    blocks = render_request(question("Pick", [label, "B"], [label, "b"]))
    assert_safe_card(blocks, {"<@U0ALICE>"})
    option_text, description = plain_texts(blocks)[:2]
    assert option_text == description == "A" * 60 + "…"  # not "AAA… x (stripe.c…"
    assert decision_plain("see <https://stripe.com.evil.example|x>", 100) == "see x (stripe.com.evil.example)"


# --- no ping on the bot's behalf, in any builder ---------------------------

# What a person or the model may type: every way Slack pings someone, as tokens and as bare words.
PINGS = (
    "Hi <!channel> and <!here|here>, <!everyone>! Page <!subteam^S0ADMINS|@security> and <@U0EVE> "
    "<@W0EVE|eve>, then @channel @here @everyone."
)
# Slack's tokens that notify (a date is not one), and the bare words a non-verbatim mrkdwn text turns into them
PING_TOKEN = re.compile(r"<(?:@[^<>]*|!(?!date\^)[^<>]*)>")
PING_WORD = re.compile(r"(?<![\w@])@(?:channel|here|everyone)\b")
# Keys whose strings never reach a person's screen as text (ids, values, URLs)
NOT_TEXT = {"action_id", "block_id", "callback_id", "private_metadata", "value", "url", "type", "style",
            "initial_value", "initial_user", "initial_users", "external_id", "team_id", "user_id"}


def live_pings(node, verbatim: bool = True) -> set[str]:
    """Every mention Slack would make of ``node`` (a message, view, block list or text): tokens in any text
    (mrkdwn, markdown blocks, fallback ``text``, rich_text, plain text too: strictest reading), rich_text
    user/usergroup/broadcast elements, and bare @channel-words in a mrkdwn text that is not ``verbatim``."""
    found: set[str] = set()
    if isinstance(node, str):
        found |= set(PING_TOKEN.findall(node))
        if not verbatim:
            found |= set(PING_WORD.findall(node))
    elif isinstance(node, dict):
        kind = node.get("type")
        if kind in ("user", "usergroup", "broadcast"):
            found.add(f"{kind}:{node.get('user_id') or node.get('usergroup_id') or node.get('range')}")
        loose = kind == "mrkdwn" and not node.get("verbatim")
        for key, value in node.items():
            if key not in NOT_TEXT:
                found |= live_pings(value, verbatim=not loose)
    elif isinstance(node, list):
        for value in node:
            found |= live_pings(value, verbatim)
    return found


def every_builder_output(hostile_text: str) -> dict[str, object]:
    """What every builder that carries someone's or the model's words sends to Slack, for ``hostile_text``."""
    from blocks.answers import answer_messages
    from blocks.approvers import approvers_list_text, approvers_modal
    from blocks.fields import changes_text
    from blocks.home import ApproverListView, HomeRequest, home_view
    from blocks.messages import reply_messages
    from blocks.modals import edit_modal, reason_modal
    from blocks.notices import (
        approver_notice,
        escalation_message,
        notice_digest,
        reminder_message,
        thread_mention,
    )
    from blocks.schedules import schedule_line
    from bot.engine.schedules import Schedule

    h = hostile_text
    asked = question(h, [h, "b"], [h, "d"])
    approve = approval({h: h, "n": [h]}, prompt=h)
    lists = [ApproverListView(resource="tool:refund", list_name="refund", description=h, policy_label=h,
                              approvers=["U0BOB"])]
    schedule = Schedule(team_id="T1", channel="C1", prompt=h, owner=ALICE, when=h,
                        next_at=datetime(2026, 3, 2, tzinfo=UTC))
    return {
        "answer (markdown block)": answer_messages(h),
        "answer (sections, too long for one markdown block)": answer_messages((h + "\n\n") * 140),
        "reply sections": reply_messages(h),
        "reply mrkdwn": markdown_to_mrkdwn(h),
        "question card": render_request(asked),
        "approval card": render_request(approve),
        "cards' fallback": render_requests([asked, approve]),
        "waiting card": render_waiting(approve, ["U0BOB"], 2),
        "settled card": render_settled(asked, outcome_label="Answered", decided_by="U0BOB", answer=h, note=h,
                                       detail=h, edited_input={h: h}),
        "freeform modal": freeform_modal(asked, "C1", "1.2"),
        "reason modal": reason_modal(approve, "C1", "1.2"),
        "edit modal": edit_modal(approve, [], "C1", "1.2"),
        "changes": changes_text(approve, {h: h + "!"}) or "",
        "failure": failure_message(h),
        "approver DM": approver_notice(approve, channel_id="C1", link="https://x.slack.com/archives/C1/p1"),
        "thread mention": thread_mention(approve, ["U0BOB"]),
        "reminder": reminder_message(approve, now_waiting_s=7200),
        "escalation": escalation_message(approve, [slack_user("T1", "U0BOB")], waited_s=3600),
        "digest": notice_digest([asked, approve] * 2, channel_id="C1", link=None),
        "schedule line": schedule_line(schedule, with_owner=True),
        "home": home_view("U0BOB", [HomeRequest(request=asked, requester_name=h, undeliverable=h)],
                          [HomeRequest(request=approve, requester_name=h)], lists, schedules=[schedule]),
        "approvers modal": approvers_modal(lists),
        "approvers text": approvers_list_text(lists),
    }


OURS = {"<@U0ALICE>", "<@U0BOB>"}  # the requester and the decider: the builders write these themselves


@pytest.mark.parametrize("hostile_text", [PINGS, f"`{PINGS}` ```\n{PINGS}\n``` **{PINGS}** > {PINGS}",
                                          "[<!channel>](https://x.example) <https://x.example|<@U0EVE>>"])
def test_no_builder_lets_typed_or_model_text_ping_anyone(hostile_text: str) -> None:
    for builder, output in every_builder_output(hostile_text).items():
        assert live_pings(output) <= OURS, f"{builder}: {live_pings(output) - OURS}"


def test_a_refusal_names_the_people_its_rule_names_but_broadcasts_nothing() -> None:
    from blocks.ephemeral import refused_text

    # a refusal's reason comes from a response policy (code), which names who may answer: those stay
    # mentions; it is shown only to the person refused (an ephemeral), and nothing in it broadcasts
    text = refused_text(PINGS)
    assert live_pings(text) == {"<@U0EVE>"} and "@channel" in text


def test_mentions_in_a_reply_read_as_names_not_pings() -> None:
    [message] = answer_messages_of(PINGS)
    [markdown, _feedback] = message["blocks"]
    assert markdown["type"] == "markdown"
    assert markdown["text"] == ("Hi @channel and @here, @everyone! Page @S0ADMINS and @U0EVE @W0EVE, "
                                "then @channel @here @everyone.")
    assert "<" not in message["text"]
    for section in reply_sections_of(PINGS):  # the long form: mrkdwn sections Slack must not parse
        assert section["text"]["verbatim"] is True


def answer_messages_of(text: str) -> list[dict]:
    from blocks.answers import answer_messages

    return answer_messages(text)


def reply_sections_of(text: str) -> list[dict]:
    from blocks.messages import reply_messages

    return [b for m in reply_messages(text) for b in m["blocks"] if b["type"] == "section"]


def test_a_reply_streamed_in_pieces_never_completes_a_ping_across_two_of_them() -> None:
    from blocks.messages import no_pings, streamable

    whole = "Lunch! <!channel> and <@U0EVE|eve> <b> a < b\nok <!here>"
    shown = [streamable(whole[:n]) for n in range(len(whole) + 1)]
    for before, after in zip(shown, shown[1:], strict=False):
        assert after.startswith(before)  # each piece only adds to what Slack already has
    assert shown[-1] == no_pings(whole) == "Lunch! @channel and @U0EVE <b> a < b\nok @here"
    assert live_pings("".join(a[len(b):] for b, a in zip(shown, shown[1:], strict=False))) == set()
    assert streamable("Lunch! <!chan") == "Lunch! "  # held back until it is closed
