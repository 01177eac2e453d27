"""Fuzzing the Slack endpoint: thousands of mutated requests against the running app.

Two approval cards are parked first, the way people make them: alice's refund that only bob may approve
(a custom response policy) and alice's own refund (requester-only). Then the fuzzer sends mutated
copies of real Slack requests taken from LocalSlack (clicks on those cards, mentions, typed replies in
their threads, the freeform modal's submission, ``/approvers``), each mutated at random:

- the signature: missing, wrong secret, stale or future timestamp, garbage timestamp, truncated, a
  signature of another body, the body changed after signing → must be answered 401;
- the body, signed properly: a field set to a value of the wrong type, removed, made huge or deeply
  nested; the body truncated or replaced with garbage; action ids naming unknown requests, the other
  session's request or invented controls; the team switched to another workspace; replays →
  must never be a 5xx.

Every signed click or typed answer comes from someone who may not settle either card (dave, carol,
erin of another workspace, an unknown user), so the promise is simple: nothing the fuzzer sends settles
a card or runs a tool. Afterwards the process is still healthy, no listener logged an error, both
cards are still open with their buttons, and bob and alice can still approve them (each tool runs once).

``FUZZ_REQUESTS`` (default 2,000; 20,000 with ``SOAK=1``) and ``FUZZ_SEED`` (replays a run; ``make test``
uses a fixed seed, ``make soak`` a new one each time).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import secrets
import time
from collections import Counter
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote_plus, urlencode

import httpx
import pytest

from blocks.actions import decode_action_id, modal_metadata
from bot.models.base import ModelResponse
from bot.models.scripted import call, say
from bot.protocol import UnknownRequest
from localslack.seed import ALICE, BOB, BOT_USER_ID, DAVE, ERIN, FINANCE, GENERAL, OTHER_TEAM_ID
from tests.e2e.conftest import SIGNING_SECRET
from tests.e2e.test_approval_flow import RUNS, button, card_in, finance_refund, refund_charge
from tests.e2e.test_malformed import FORM, JSON, signature

SOAK = os.environ.get("SOAK") == "1"
REQUESTS = int(os.environ.get("FUZZ_REQUESTS") or (20_000 if SOAK else 2_000))
CONCURRENCY = 8
# make test replays one known run, so CI is repeatable; make soak (SOAK=1) explores new seeds
DEFAULT_SEED = 20261203
# people who may settle neither card: bob alone approves the first, alice alone the second
# people who may settle neither card (carol, a workspace admin, may cancel any approval: DESIGN, "Who may cancel")
OUTSIDERS = [(DAVE, None), (ERIN, OTHER_TEAM_ID), ("U0NOBODY", None), ("W0FORGED", OTHER_TEAM_ID)]
TYPED_ANSWERS = ["approve", "yes", "1", "2", "cancel", "no", "¹", "①", "9" * 5000, "approve " * 500]


class RoutingModel:
    """Answers from the last user message alone: "finance refund" and "own refund" ask for the tools,
    a tool result is reported, anything else gets a short text (fuzzed mentions start turns too)."""

    name = "routing"

    async def complete(self, messages: list[dict[str, Any]], tools: list[Any], *, on_text=None) -> ModelResponse:
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            return say(f"Result: {last.get('content')}")
        text = str(last.get("content") or "")
        if "finance refund" in text:
            return call("finance_refund", charge_id="ch_fin", amount=5.0)
        if "own refund" in text:
            return call("refund_charge", charge_id="ch_own", amount=3.0)
        if "which day" in text:
            return call("ask_question", question="Which day works?", options=[{"label": "Saturday"}, {"label": "Sunday"}])
        return say("noted")


# --- mutations ------------------------------------------------------------------------------------


def garbage(rng: random.Random) -> Any:
    """A value of a random wrong kind."""
    choices: list[Callable[[], Any]] = [
        lambda: None, lambda: True, lambda: 0, lambda: -1, lambda: 2**70, lambda: 1e308, lambda: [],
        lambda: {}, lambda: "", lambda: "x" * rng.choice([1, 3001, 100_000]), lambda: "é\u0000\u202e☃",
        lambda: [[[[[[[[[[[]]]]]]]]]]], lambda: {"id": {"id": {"id": None}}}, lambda: ["U0ALIC", 7],
        lambda: "hitl:" + secrets.token_hex(rng.randrange(1, 40)), lambda: rng.random(),
    ]
    return rng.choice(choices)()


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a field of a JSON value (dict keys and list indexes)."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            found.append((*prefix, key))
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.append((*prefix, index))
            found += paths(item, (*prefix, index))
    return found


def set_path(doc: Any, path: tuple, value: Any, *, delete: bool = False) -> None:
    for part in path[:-1]:
        doc = doc[part]
    if delete:
        del doc[path[-1]]
    else:
        doc[path[-1]] = value


def as_outsider(payload: dict[str, Any], rng: random.Random) -> None:
    """Make the payload come from someone who may settle neither card."""
    user, team = rng.choice(OUTSIDERS)
    if isinstance(payload.get("user"), dict):  # interactions
        payload["user"] = {**payload["user"], "id": user, "team_id": team or payload["user"].get("team_id")}
    event = payload.get("event")
    if isinstance(event, dict):  # events
        event["user"] = user
        if team:
            event["user_team"] = team
    if "user_id" in payload:  # slash commands
        payload["user_id"] = user


def mutate_action_ids(payload: dict[str, Any], rng: random.Random, request_ids: list[str]) -> None:
    actions = payload.get("actions")
    for action in actions if isinstance(actions, list) else []:
        if isinstance(action, dict):
            rid = rng.choice([*request_ids, secrets.token_hex(8) + "." + secrets.token_hex(6), "", "x" * 300])
            control = rng.choice(["btn:0", "btn:1", "btn:99", "select", "freeform", "btn:-1", "nope", "btn:٣"])
            action["action_id"] = f"hitl:{rid}:{control}"


def mutate_body(template: dict[str, Any], rng: random.Random, request_ids: list[str]) -> dict[str, Any] | bytes:
    """A signed-to-be mutation of a template: a new payload, or raw bytes for the unparsable kinds."""
    payload = json.loads(json.dumps(template))
    as_outsider(payload, rng)
    for _ in range(rng.randrange(1, 4)):
        kind = rng.choice(["set", "set", "delete", "actions", "team", "huge", "none"])
        fields = paths(payload)
        if kind == "set" and fields:
            set_path(payload, rng.choice(fields), garbage(rng))
        elif kind == "delete" and fields:
            set_path(payload, rng.choice(fields), None, delete=True)
        elif kind == "actions":
            mutate_action_ids(payload, rng, request_ids)
        elif kind == "team":
            for key in ("team", "team_id"):
                if key in payload:
                    payload[key] = {"id": OTHER_TEAM_ID} if isinstance(payload[key], dict) else OTHER_TEAM_ID
        elif kind == "huge" and fields:
            set_path(payload, rng.choice(fields), "a" * rng.choice([40_000, 400_000]))
    return payload


def wire(payload: dict[str, Any], content_type: str) -> bytes:
    """The body as Slack posts it: JSON for events, form fields for a command, a form's ``payload`` else."""
    if content_type == JSON:
        return json.dumps(payload).encode()
    if "command" in payload:
        return urlencode({k: v if isinstance(v, str) else json.dumps(v) for k, v in payload.items()}).encode()
    return urlencode({"payload": json.dumps(payload)}).encode()


def signed_headers(body: bytes, content_type: str) -> dict[str, str]:
    stamp = str(int(time.time()))
    return {"Content-Type": content_type, "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": signature(body, stamp, SIGNING_SECRET)}


class Fuzzer:
    def __init__(self, http: httpx.AsyncClient, seed: int, templates: dict[str, tuple[dict[str, Any], str]],
                 request_ids: list[str]):
        self.http = http
        self.rng = random.Random(seed)
        self.templates = templates
        self.request_ids = request_ids
        self.answers: Counter[tuple[str, int]] = Counter()  # (signed|forged, status) → count
        self.server_errors: list[str] = []
        self.wrongly_accepted: list[str] = []

    def encode(self, payload: dict[str, Any] | bytes, content_type: str, rng: random.Random) -> bytes:
        if isinstance(payload, bytes):
            return payload
        body = wire(payload, content_type)
        roll = rng.random()
        if roll < 0.05:
            return body[: rng.randrange(len(body))]  # truncated
        if roll < 0.08:
            return rng.randbytes(rng.randrange(1, 400))  # garbage
        return body

    def request(self, rng: random.Random) -> tuple[str, bytes, dict[str, str], str]:
        name = rng.choice(list(self.templates))
        template, content_type = self.templates[name]
        body = self.encode(mutate_body(template, rng, self.request_ids), content_type, rng)
        stamp = str(int(time.time()))
        headers = {"Content-Type": content_type, "X-Slack-Request-Timestamp": stamp,
                   "X-Slack-Signature": self.sign_at(body, stamp)}
        if rng.random() < 0.25:
            return name, body, self.forge(rng, body, headers), "forged"
        return name, body, headers, "signed"

    def forge(self, rng: random.Random, body: bytes, headers: dict[str, str]) -> dict[str, str]:
        """Headers Slack did not produce for this body."""
        now = int(time.time())
        stamp = headers["X-Slack-Request-Timestamp"]
        kind = rng.randrange(8)
        if kind == 0:
            return {"Content-Type": headers["Content-Type"]}
        if kind == 1:
            return {**headers, "X-Slack-Signature": signature(body, stamp, "not-the-secret")}
        if kind in (2, 3):
            moved = str(now + rng.choice([-1, 1]) * rng.randrange(301, 10**6))
            return {**headers, "X-Slack-Request-Timestamp": moved, "X-Slack-Signature": self.sign_at(body, moved)}
        if kind == 4:
            return {**headers, "X-Slack-Request-Timestamp": rng.choice(["soon", "", "1e9", "-0", "٣٣"])}
        if kind == 5:
            cut = rng.randrange(len(headers["X-Slack-Signature"]))  # never the whole signature
            return {**headers, "X-Slack-Signature": headers["X-Slack-Signature"][:cut]}
        if kind == 6:
            return {**headers, "X-Slack-Signature": self.sign_at(body + b" ", stamp)}
        return {**headers, "X-Slack-Signature": "v0=" + secrets.token_hex(32)}

    def sign_at(self, body: bytes, stamp: str) -> str:
        return signature(body, stamp, SIGNING_SECRET)

    async def send(self, index: int) -> None:
        rng = random.Random(self.rng.random() + index)
        name, body, headers, kind = self.request(rng)
        replay = rng.random() < 0.05
        for _ in range(2 if replay else 1):
            raw_headers = {k: v.encode() for k, v in headers.items()}  # non-ASCII values go out as UTF-8
            response = await self.http.post("/slack/events", content=body, headers=raw_headers)
            self.answers[(kind, response.status_code)] += 1
            if response.status_code >= 500:
                self.server_errors.append(f"{name} {kind} → {response.status_code}: {unquote_plus(body.decode(errors='replace'))[:3000]}")
            if kind == "forged" and response.status_code != 401:
                self.wrongly_accepted.append(f"{name} → {response.status_code}: {body[:300]!r}")

    async def run(self, count: int) -> None:
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(index: int) -> None:
            async with gate:
                await self.send(index)

        for start in range(0, count, 200):
            await asyncio.gather(*(one(i) for i in range(start, min(start + 200, count))))
            health = await self.http.get("/healthz")
            assert health.status_code == 200, f"the process stopped answering after {start + 200} requests"


# every kind a listener could be handed instead of what Slack sends: a list, an object, a number, null
WRONG_KINDS: list[Any] = [["x"], {"x": 1}, 7, None]


def wrong_kinds_everywhere(templates: dict[str, tuple[dict[str, Any], str]]) -> list[tuple[str, tuple, Any]]:
    """(template, path, junk) for every nested field of every template but the blocks a card or view is drawn
    with (Slack echoes them; no listener reads them), each field given each of ``WRONG_KINDS``."""
    found = []
    for name, (template, _) in templates.items():
        for path in paths(template):
            if "blocks" not in path:
                found += [(name, path, junk) for junk in WRONG_KINDS]
    return found


# --- the tests ------------------------------------------------------------------------------------


async def park_card(slack, text: str) -> tuple[str, Any]:
    ts, deliveries = await slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> {text}")
    assert all(d.ok for d in deliveries), deliveries
    return ts, await slack.wait_for(lambda: card_in(slack, ts), timeout_s=10)


async def captured_click(slack, card, label: str) -> dict[str, Any]:
    """The exact block_actions payload Slack would send for alice's click (not delivered)."""
    previous = slack.bot_url
    slack.set_bot_url(None)
    try:
        result = await slack.click(ALICE, GENERAL, card.ts, button(card, label))
    finally:
        slack.set_bot_url(previous)
    assert result.payload, result
    return result.payload


async def captured_pick(slack, card, option_label: str) -> dict[str, Any]:
    """The exact block_actions payload Slack would send for alice's pick in a card's menu (not delivered)."""
    menu = next(e for b in card.blocks for e in b.get("elements", []) if "options" in e)
    value = next(o["value"] for o in menu["options"] if o["text"]["text"] == option_label)
    previous = slack.bot_url
    slack.set_bot_url(None)
    try:
        result = await slack.select(ALICE, GENERAL, card.ts, menu["action_id"], value)
    finally:
        slack.set_bot_url(previous)
    assert result.payload and result.payload["actions"][0].get("selected_option"), result
    return result.payload


async def captured_events(slack, text: str, thread_ts: str | None, *, channel: str = GENERAL,
                          author: str = DAVE) -> list[dict[str, Any]]:
    previous = slack.bot_url
    slack.set_bot_url(None)
    try:
        _, deliveries = await slack.post_message(author, channel, text, thread_ts=thread_ts)
    finally:
        slack.set_bot_url(previous)
    return [d.payload for d in deliveries]


class LiveCards:
    """Cards parked the way people make them, and captured requests aimed at them."""

    def __init__(self, bot, cards: list[tuple[str, Any]], request_ids: list[str],
                 templates: dict[str, tuple[dict[str, Any], str]]):
        self.bot, self.cards, self.request_ids, self.templates = bot, cards, request_ids, templates


@pytest.fixture
async def live(local_slack, start_app) -> LiveCards:
    """Alice's finance refund (only bob may approve), her own refund and her question (only she may answer);
    templates of a click on each card, a pick in the question's menu, typed answers, new threads, the freeform
    modal's submission and ``/approvers``."""
    RUNS.clear()
    # the recovery sweep runs as in production: Slack's rate limits push some notes back to it
    bot = await start_app(RoutingModel(), [finance_refund, refund_charge], recovery_interval=0.5)
    fin_ts, fin_card = await park_card(local_slack, "finance refund please")
    own_ts, own_card = await park_card(local_slack, "own refund please")
    day_ts, day_card = await park_card(local_slack, "which day for the offsite?")
    request_ids = [decode_action_id(button(card, label)).request_id
                   for card, label in ((fin_card, "Approve"), (own_card, "Approve"), (day_card, "Type your own answer"))]

    templates: dict[str, tuple[dict[str, Any], str]] = {
        "approve click": (await captured_click(local_slack, fin_card, "Approve"), FORM),
        "cancel click": (await captured_click(local_slack, own_card, "Cancel"), FORM),
        "menu pick": (await captured_pick(local_slack, day_card, "Sunday"), FORM),
    }
    for thread_ts, text in ((fin_ts, "approve"), (own_ts, "yes")):
        for envelope in await captured_events(local_slack, text, thread_ts):
            templates[f"typed answer ({envelope['event']['type']})"] = (envelope, JSON)
    # new threads go to another channel: the agent answers each, and Slack's pace of about one message a
    # second per channel (which the bot keeps) must not queue the approvals' answers behind them
    for envelope in await captured_events(local_slack, f"<@{BOT_USER_ID}> hello", None, channel=FINANCE,
                                          author=ALICE):
        templates[f"new thread ({envelope['event']['type']})"] = (envelope, JSON)
    click = templates["approve click"][0]
    templates["freeform submission"] = ({
        "type": "view_submission", "team": click["team"], "user": click["user"], "api_app_id": click["api_app_id"],
        "trigger_id": click["trigger_id"],
        "view": {"id": "V0FUZZ", "type": "modal", "callback_id": "hitl_freeform",
                 "private_metadata": modal_metadata(request_ids[1], GENERAL, own_card.ts),
                 "state": {"values": {"hitl_freeform_block": {"hitl_freeform_text": {
                     "type": "plain_text_input", "value": "approve"}}}}},
    }, FORM)
    templates["/approvers"] = ({
        "command": "/approvers", "text": "finance_refund add <@U0DAVE>", "user_id": DAVE, "team_id": click["team"]["id"],
        "channel_id": GENERAL, "trigger_id": click["trigger_id"], "response_url": "https://hooks.slack.invalid/x",
    }, FORM)
    return LiveCards(bot, [(fin_ts, fin_card), (own_ts, own_card), (day_ts, day_card)], request_ids, templates)


async def nothing_settled_and_the_right_people_still_can(local_slack, live: LiveCards) -> None:
    """No card settled and no tool ran; then bob and alice approve the refunds (each tool runs once) and alice
    answers her question."""
    assert RUNS == []
    for rid, (_, card) in zip(live.request_ids, live.cards, strict=True):
        try:
            record = await live.bot.store.get_request(rid)
        except UnknownRequest:  # pragma: no cover - a failure message worth reading
            pytest.fail(f"request {rid} disappeared")
        assert record.status == "open", (rid, record.status, record.responder)
        assert card_in(local_slack, card.thread_ts or card.ts) is not None, "the card lost its buttons"
    [(fin_ts, fin_card), (own_ts, own_card), (day_ts, day_card)] = live.cards
    await local_slack.click(BOB, GENERAL, fin_card.ts, button(fin_card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=fin_ts, predicate=lambda m: "Result:" in m.text,
                                       timeout_s=10)
    await local_slack.click(ALICE, GENERAL, own_card.ts, button(own_card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=own_ts, predicate=lambda m: "Result:" in m.text,
                                       timeout_s=10)
    assert sorted(run["charge"] for run in RUNS) == ["ch_fin", "ch_own"]
    pick = live.templates["menu pick"][0]["actions"][0]
    await local_slack.select(ALICE, GENERAL, day_card.ts, pick["action_id"], pick["selected_option"]["value"])
    await local_slack.wait_for_message(GENERAL, thread_ts=day_ts, predicate=lambda m: "Sunday" in m.text,
                                       timeout_s=10)


def listener_errors(caplog) -> list[str]:
    return [f"{r.name}: {r.getMessage()[:300]}" for r in caplog.records if r.levelno >= logging.ERROR
            and r.name.split(".")[0] in ("bot", "handlers", "store", "blocks", "slack_bolt", "aiohttp")]


@pytest.mark.soak
async def test_fuzzed_requests_never_crash_never_5xx_never_settle(local_slack, live, caplog, capsys):
    bot, templates, request_ids = live.bot, live.templates, live.request_ids
    seed = int(os.environ.get("FUZZ_SEED") or (secrets.randbits(32) if SOAK else DEFAULT_SEED))
    caplog.set_level(logging.ERROR)
    async with httpx.AsyncClient(base_url=bot.url, timeout=30) as http:
        fuzzer = Fuzzer(http, seed, templates, request_ids)
        await fuzzer.run(REQUESTS)
    await asyncio.wait_for(bot.wait_idle(), timeout=30)

    with capsys.disabled():
        answers = {f"{kind} {status}": n for (kind, status), n in sorted(fuzzer.answers.items())}
        print(f"\n== fuzz (seed {seed}): {REQUESTS} requests, answers {json.dumps(answers)}")
    assert not fuzzer.server_errors, fuzzer.server_errors[:10]
    assert not fuzzer.wrongly_accepted, fuzzer.wrongly_accepted[:10]
    errors = listener_errors(caplog)
    assert not errors, errors[:10]
    await nothing_settled_and_the_right_people_still_can(local_slack, live)


@pytest.mark.soak
async def test_a_wrong_kind_of_value_in_any_field_is_refused_never_5xx_never_settles(local_slack, live, caplog, capsys):
    """Each field of each request aimed at the live cards (a click, a menu pick, a typed answer, a modal's
    submission, a command: every nested field a listener reads), given a list, an object, a number and null
    in turn, signed: answered without a 5xx, nothing logged as a failure, nothing settled."""
    cases = wrong_kinds_everywhere(live.templates)
    caplog.set_level(logging.ERROR)
    failures: list[str] = []
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(http: httpx.AsyncClient, index: int, name: str, path: tuple, junk: Any) -> None:
        template, content_type = live.templates[name]
        payload = json.loads(json.dumps(template))
        as_outsider(payload, random.Random(index))
        if "event_id" in payload:  # each request its own event, as Slack sends them (one id, one body; the same
            payload["event_id"] = f"EvFUZZ{index}"  # id twice at once is a redelivery, answered 503 until acted on)
        set_path(payload, path, junk)
        body = wire(payload, content_type)
        async with gate:
            response = await http.post("/slack/events", content=body, headers=signed_headers(body, content_type))
        statuses[response.status_code] += 1
        if response.status_code >= 500:
            failures.append(f"{name}: {'.'.join(map(str, path))} = {junk!r} → {response.status_code}")

    statuses: Counter[int] = Counter()
    async with httpx.AsyncClient(base_url=live.bot.url, timeout=30) as http:
        await asyncio.gather(*(one(http, index, *case) for index, case in enumerate(cases)))
        assert (await http.get("/healthz")).status_code == 200
    await asyncio.wait_for(live.bot.wait_idle(), timeout=30)
    with capsys.disabled():
        print(f"\n== wrong kinds in every field of requests aimed at live cards: {len(cases)} requests, "
              f"answers {dict(sorted(statuses.items()))}")
    assert not failures, (len(failures), failures[:20])
    errors = listener_errors(caplog)
    assert not errors, errors[:10]
    await nothing_settled_and_the_right_people_still_can(local_slack, live)
