"""An interaction's body, decoded by the route's fast path, reads exactly as Bolt's own parser reads it.

Slack posts every interaction as ``payload=<URL-encoded JSON>``. The route decodes that in C
(``handlers.routes.http.interaction_json``) instead of Bolt's ``urllib.parse`` loop; these tests hold it to
Bolt's result for every well-formed body, and to Bolt's own path (None) for anything else.
"""

from __future__ import annotations

import json
from urllib.parse import quote, quote_plus

from hypothesis import given, settings
from hypothesis import strategies as st
from slack_bolt.request.internals import parse_body

from handlers.routes.http import interaction_json

FORM = "application/x-www-form-urlencoded"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
payloads = st.dictionaries(st.text(), json_values, max_size=6)


@settings(max_examples=300, deadline=None)
@given(payloads, st.sampled_from([quote, quote_plus]), st.booleans())
def test_a_well_formed_payload_reads_as_bolt_reads_it(payload, encode, ascii_only) -> None:
    raw = ("payload=" + encode(json.dumps(payload, ensure_ascii=ascii_only))).encode()
    fast = interaction_json(raw)
    assert fast is not None
    assert json.loads(fast) == parse_body(raw.decode(), FORM) == payload


def test_a_card_click_as_slack_sends_it() -> None:
    payload = {"type": "block_actions", "user": {"id": "U0ALICE", "name": "alice"},
               "message": {"text": "Refund $75.00 on ch_2002? 50% off & more = \"quoted\"\nnext line é 💸",
                           "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "*Refund* `ch_2002`"}}]},
               "actions": [{"action_id": "hitl:approve", "value": "req.1+2/3"}]}
    raw = ("payload=" + quote_plus(json.dumps(payload))).encode()
    assert json.loads(interaction_json(raw)) == payload


def test_lowercase_escapes_are_read_as_uppercase_ones() -> None:
    raw = b"payload=%7b%22a%22%3a%22%c3%a9%22%7d"
    assert json.loads(interaction_json(raw)) == {"a": "é"} == parse_body(raw.decode(), FORM)


def test_anything_else_is_left_to_bolt() -> None:
    for raw in (
        b"",
        b"payload=",  # empty: Bolt refuses it (malformed), not this
        b'{"type": "event_callback"}',  # the Events API's JSON
        b"token=x&team_id=T1&command=%2Fapprovers",  # a slash command: several fields
        b"payload=%7B%7D&extra=1",  # more than the payload
        b"payload=%7B%22a%22%3D1%7D=",  # a raw '=': not URL-encoding's
        b"payload=%7B%22a%22%3A%221%0",  # a cut escape
        b"payload=%7B%22a%22%3A%22%zz%22%7D",  # not hex
        b"payload=%7B%22a%22%3A%22x\n%22%7D",  # a raw line break
        b"payload=%7B%22a%22%3A%22%FF%22%7D",  # not UTF-8 once decoded
        b"Payload=%7B%7D",
    ):
        assert interaction_json(raw) is None, raw
