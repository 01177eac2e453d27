"""Every kind of request Slack documents, signed with the app's secret, is answered 2xx or 4xx — never a
5xx — and so is each one with junk in any field.

``tests/e2e/slack_kinds.py`` holds one of each kind (events of several types, ``block_actions`` of each
element type, view submissions and closes, options requests, shortcuts, slash commands, legacy attachment
actions, dialogs, ``workflow_step_edit``, ``url_verification``, ``app_rate_limited``). The junk run
enumerates, for every field of every kind, a value of the wrong type, the field removed, a huge string, an
unknown id and another workspace's id; ``make test`` sends a fixed sample of them (``KINDS_JUNK``, default
600), ``make soak`` (``SOAK=1``) all of them. Afterwards the process is healthy and a normal approve cycle
still works. ``tests/e2e/test_fuzz.py`` mutates captured clicks on live cards; this covers the kinds.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from slack_sdk.errors import SlackApiError

from localslack.seed import ALICE, GENERAL, OTHER_TEAM_ID
from tests.e2e.slack_kinds import JSON, SECRET_WORDS, encode, kinds, ours
from tests.e2e.test_approval_flow import RUNS, button, mention_and_wait_for_card, refund_charge
from tests.e2e.test_fuzz import WRONG_KINDS, RoutingModel, paths, set_path
from tests.e2e.test_malformed import signed

SOAK = os.environ.get("SOAK") == "1"
JUNK = int(os.environ.get("KINDS_JUNK") or 600)
SEED = 20261204
KINDS = kinds()
OUR_LOGGERS = ("bot", "handlers", "store", "blocks", "slack_bolt", "aiohttp", "slack_sdk")


async def post(http: httpx.AsyncClient, payload: Any, content_type: str) -> httpx.Response:
    body = encode(payload, content_type)
    return await http.post("/slack/events", content=body, headers=signed(body, content_type))


@pytest.fixture
async def bot(local_slack, start_app):
    RUNS.clear()
    return await start_app(RoutingModel(), [refund_charge])


@pytest.mark.parametrize("name", list(KINDS))
async def test_each_kind_is_answered_without_a_5xx(bot, name, caplog):
    payload, content_type = KINDS[name]
    caplog.set_level(logging.INFO)
    async with httpx.AsyncClient(base_url=bot.url, timeout=10) as http:
        response = await post(http, payload, content_type)
    assert 200 <= response.status_code < 300, (name, response.status_code, response.text)
    if payload.get("type") == "block_suggestion":  # a menu with no options, not an error in Slack's UI
        assert response.json() == {"options": []}, response.text
    if payload.get("type") == "view_closed":
        assert response.text == "", response.text
    if payload.get("type") == "url_verification":
        assert payload["challenge"] in response.text
    await asyncio.wait_for(bot.wait_idle(), timeout=10)
    # LOG_CONTENT is off: what a person typed shows in no log line (Bolt's "Unhandled request" included)
    leaked = [f"{r.name}: {r.getMessage()[:200]}" for r in caplog.records if SECRET_WORDS in r.getMessage()]
    assert not leaked, leaked


# --- junk in each field -------------------------------------------------------------------------

WRONG_TYPES: list[Any] = [None, 0, -1, True, 1.5, [], {}, "", "x", [[["deep"]]], {"id": {"id": None}}]


def junk_for(path: tuple, value: Any) -> Iterator[tuple[str, Any]]:
    """What a field can be instead of what Slack sends: ("delete", None) removes it."""
    for wrong in WRONG_TYPES:
        if type(wrong) is not type(value) or wrong != value:
            yield "wrong type", wrong
    yield "delete", None
    yield "huge", "a" * 100_000
    key = str(path[-1])
    if key in ("id", "user", "user_id", "channel", "channel_id", "selected_user", "selected_channel",
               "selected_conversation", "view_id", "message_ts", "ts", "thread_ts", "action_id", "callback_id",
               "block_id", "value", "api_app_id", "trigger_id"):
        yield "unknown id", {"ts": "9999999999.999999", "thread_ts": "1.1", "message_ts": "1.1"}.get(
            key, "hitl:0123456789abcdef.feedface:btn:0" if key == "action_id" else "U0NOBODY")
    if "team" in key or key == "id" and "team" in map(str, path):
        yield "another team", OTHER_TEAM_ID


def every_junk() -> list[tuple[str, str, tuple, Any]]:
    found = []
    for name, (payload, _) in KINDS.items():
        for path in paths(payload):
            value = payload
            for part in path:
                value = value[part]
            for how, junk in junk_for(path, value):
                found.append((name, how, path, junk))
    return found


def mutated(name: str, how: str, path: tuple, junk: Any) -> dict[str, Any]:
    """``name``'s payload with junk at ``path``. An event gets an id of its own first, as each event Slack
    sends has: one id sent again while its first delivery acts is a redelivery, answered 503 on purpose."""
    payload = json.loads(json.dumps(KINDS[name][0]))
    if isinstance(payload.get("event_id"), str):
        payload["event_id"] = f"Ev{next(EVENT_IDS):010d}"
    set_path(payload, path, junk, delete=how == "delete")
    return payload


EVENT_IDS = itertools.count(1)


def slack_said_no(record: logging.LogRecord) -> bool:
    """Slack's answer to what the junk asked for (a 429 to a flood of App Home publishes — the soak sends
    thousands —, ``user_not_found`` for an unknown id): Slack's rules, not a crash of ours."""
    return isinstance(record.exc_info[1] if record.exc_info else None, SlackApiError)


async def test_a_wrong_kind_of_team_id_in_any_kind_is_never_5xx(bot):
    """Every field naming a workspace, in every kind of request (Slack's rate-limit notice and a modal's
    suggestions included), given each wrong type: a 4xx or a 200, never a 5xx. The full junk sweep under
    ``make soak`` found two such 500s that the bounded sample in ``make test`` had not drawn."""
    cases = [(name, path, wrong) for name, (payload, _) in KINDS.items() for path in paths(payload)
             if "team" in str(path[-1]) for wrong in WRONG_TYPES]
    assert len(cases) > 100
    failures = []
    async with httpx.AsyncClient(base_url=bot.url, timeout=30) as http:
        for name, path, wrong in cases:
            response = await post(http, mutated(name, "wrong type", path, wrong), KINDS[name][1])
            if response.status_code >= 500:
                failures.append(f"{name}: {wrong!r} at {'.'.join(map(str, path))} → {response.status_code}")
    assert not failures, failures[:20]


@pytest.mark.soak
async def test_junk_in_each_field_never_5xx_and_the_app_still_works(bot, local_slack, caplog, capsys):
    everything = every_junk()
    chosen = everything if SOAK else random.Random(SEED).sample(everything, min(JUNK, len(everything)))
    caplog.set_level(logging.INFO)
    failures: list[str] = []
    statuses: dict[int, int] = {}
    gate = asyncio.Semaphore(8)

    async def one(http: httpx.AsyncClient, case: tuple[str, str, tuple, Any]) -> None:
        name, how, path, junk = case
        async with gate:
            response = await post(http, mutated(name, how, path, junk), KINDS[name][1])
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        if response.status_code >= 500:
            failures.append(f"{name}: {how} at {'.'.join(map(str, path))} → {response.status_code}")

    async with httpx.AsyncClient(base_url=bot.url, timeout=30) as http:
        await asyncio.gather(*(one(http, case) for case in chosen))
        assert (await http.get("/healthz")).status_code == 200
    await asyncio.wait_for(bot.wait_idle(), timeout=30)
    with capsys.disabled():
        print(f"\n== every kind, junk in each field: {len(chosen)} of {len(everything)} requests, {statuses}")
    assert not failures, failures[:20]
    errors = [f"{r.name}: {r.getMessage()[:300]}" for r in caplog.records
              if r.levelno >= logging.ERROR and r.name.split(".")[0] in OUR_LOGGERS and not slack_said_no(r)]
    assert not errors, errors[:10]
    leaked = [f"{r.name}: {r.getMessage()[:200]}" for r in caplog.records if SECRET_WORDS in r.getMessage()]
    assert not leaked, leaked[:5]

    # and the app still works: a normal approve cycle
    _, card = await mention_and_wait_for_card(local_slack, "own refund please")
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=card.thread_ts or card.ts,
                                       predicate=lambda m: "Result:" in m.text, timeout_s=10)
    assert [run["charge"] for run in RUNS] == ["ch_own"]


@pytest.mark.soak
async def test_a_wrong_kind_in_any_field_of_what_our_listeners_handle_is_never_5xx(bot, caplog, capsys):
    """Each request aimed at one of our listeners (``slack_kinds.ours``), each of its fields (nested ones
    included) given a list, an object, a number and null in turn: never a 5xx, no listener fails."""
    cases = [(name, path, junk) for name, (payload, _) in ours().items() for path in paths(payload)
             if "blocks" not in path for junk in WRONG_KINDS]
    caplog.set_level(logging.INFO)
    failures: list[str] = []
    statuses: Counter[int] = Counter()
    gate = asyncio.Semaphore(8)

    async def one(http: httpx.AsyncClient, name: str, path: tuple, junk: Any) -> None:
        async with gate:
            response = await post(http, mutated(name, "wrong type", path, junk), KINDS[name][1])
        statuses[response.status_code] += 1
        if response.status_code >= 500:
            failures.append(f"{name}: {'.'.join(map(str, path))} = {junk!r} → {response.status_code}")

    async with httpx.AsyncClient(base_url=bot.url, timeout=30) as http:
        await asyncio.gather(*(one(http, *case) for case in cases))
        assert (await http.get("/healthz")).status_code == 200
    await asyncio.wait_for(bot.wait_idle(), timeout=30)
    with capsys.disabled():
        print(f"\n== wrong kinds in every field our listeners read: {len(cases)} requests, {dict(sorted(statuses.items()))}")
    assert not failures, (len(failures), failures[:20])
    errors = [f"{r.name}: {r.getMessage()[:300]}" for r in caplog.records
              if r.levelno >= logging.ERROR and r.name.split(".")[0] in OUR_LOGGERS and not slack_said_no(r)]
    assert not errors, errors[:10]


def test_the_catalog_covers_what_slack_documents():
    types = {payload.get("type") or ("command" if "command" in payload else None) for payload, _ in KINDS.values()}
    assert {"event_callback", "block_actions", "view_submission", "view_closed", "block_suggestion", "shortcut",
            "message_action", "command", "interactive_message", "workflow_step_edit", "url_verification",
            "app_rate_limited", "dialog_submission"} <= types
    elements = {p["actions"][0]["type"] for name, (p, _) in KINDS.items()
                if p.get("type") == "block_actions" and not name.startswith("ours:")}
    assert len(elements) == 22, elements
    assert all(ct == JSON for p, ct in KINDS.values() if p.get("type") == "event_callback")
