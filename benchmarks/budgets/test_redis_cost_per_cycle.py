"""What an approve cycle costs in Redis, as Redis sees it.

Each test runs real approve cycles over signed HTTP through LocalSlack and records, with Redis's own
``MONITOR``, every command the app sent or its scripts ran; it asserts on the commands a change removed,
so the cost cannot creep back unnoticed. The figures per cycle are in docs/PERFORMANCE.md
(``python -m benchmarks.roundtrips``).
"""

from __future__ import annotations

import asyncio
import json

from redis.asyncio import Redis

from benchmarks.budgets.redis_monitor import Monitored, monitored
from benchmarks.roundtrips import RoundTrips, counting
from bot.approval import always
from bot.tools import ToolContext, tool
from localslack.seed import ALICE, BOT_USER_ID, FINANCE, GENERAL
from tests.e2e.test_approval_flow import (
    RUNS,
    Refund,
    button,
    card_in,
    mention_and_wait_for_card,
    refund_charge,
    refund_script,
)

# these pin the built-in loop's writes, round trip by round trip (BOT_LOOP=builtin; the default native loop's
# cycle is pinned in test_framework_cycle.py and counted by benchmarks.http.instructions, contender pN)
BUILTIN = {"BOT_LOOP": "builtin"}


async def one_cycle_seen(local_slack, start_app, redis_url: str) -> Monitored:
    """One approve cycle of a fresh app, with every command Redis ran meanwhile."""
    RUNS.clear()
    bot = await start_app(refund_script(), [refund_charge], **BUILTIN)
    async with monitored(redis_url) as seen:
        await approve_cycle(local_slack, "refund ch_1 please")
        await bot.runtime.wait_idle()
    assert len(RUNS) == 1
    return seen


async def one_cycle_counted(local_slack, start_app, *, typed: bool = False) -> RoundTrips:
    """One approve cycle of a fresh app (the card approved by a click, or ``typed`` in the thread), with the
    app's round trips to Redis by the lines that sent them (benchmarks.roundtrips)."""
    bot = await start_app(refund_script(), [refund_charge], **BUILTIN)
    # a first cycle pays what a process pays once (its scripts loaded into Redis, the audit chain's head
    # learnt): the cycle counted is the steady state's, whatever ran before in this Redis
    # (in another channel: Slack paces posts per channel, and the counted cycle must not wait on that)
    ts, _ = await local_slack.post_message(ALICE, FINANCE, f"<@{BOT_USER_ID}> refund ch_0 please")
    warm = await local_slack.wait_for(lambda: card_in(local_slack, ts, FINANCE))
    await local_slack.click(ALICE, FINANCE, warm.ts, button(warm, "Approve"))
    await local_slack.wait_for_message(FINANCE, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    await bot.runtime.wait_idle()
    RUNS.clear()
    with counting() as trips:
        ts, card = await mention_and_wait_for_card(local_slack, "refund ch_1 please")
        if typed:
            await local_slack.post_message(ALICE, GENERAL, "approve", thread_ts=ts)
        else:
            await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
        await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
        await bot.runtime.wait_idle()
    assert len(RUNS) == 1
    return trips


async def approve_cycle(local_slack, text: str) -> None:
    ts, card = await mention_and_wait_for_card(local_slack, text)
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)


async def test_nobody_looking_at_app_home_is_asked_at_most_once_a_second(local_slack, start_app, redis_url):
    RUNS.clear()
    bot = await start_app(refund_script(), [refund_charge], **BUILTIN)
    async with monitored(redis_url) as seen:
        for n in range(3):  # three quick cycles: each asks for fresh App Homes when its card comes and goes
            await approve_cycle(local_slack, f"refund ch_{n} please")
        await bot.runtime.wait_idle()

    assert len(RUNS) == 3
    looks = seen.times_naming("home-seen-any")
    assert looks, "never asked whether anyone looks at App Home"
    gaps = [b - a for a, b in zip(looks, looks[1:], strict=False)]
    assert all(gap >= 0.95 for gap in gaps), f"asked {len(looks)} times, {gaps} s apart"


async def test_a_quick_cycle_claims_its_posts_without_a_round_trip_of_their_own(local_slack, start_app, redis_url):
    seen = await one_cycle_seen(local_slack, start_app, redis_url)
    # the deliverer's lock makes it the session's only poster: a post is claimed in the pass's memory, and
    # where it landed is written with the pass's closing round trip (crash safety: test_delivery_guarantees)
    claims = [c for c in seen.commands if c[0] == "HSETNX" and ":chan" in c[1]]
    assert claims == [], f"posts claimed one by one in Redis: {claims}"


async def test_a_mention_is_recorded_once_not_once_per_event_slack_sends(local_slack, start_app, redis_url):
    seen = await one_cycle_seen(local_slack, start_app, redis_url)
    # Slack sends a channel mention twice (``app_mention`` and its ``message`` twin): the twin is left to
    # the mention in memory; a Slack retry of either is still dropped in Redis by message id
    records = [c for c in seen.commands if c[0] == "SET" and ":msg:" in c[1]]
    assert len(records) == 1, f"the mention was recorded {len(records)} times: {records}"


async def test_a_quick_resume_delivers_the_settled_card_with_the_answer_in_one_pass(local_slack, start_app,
                                                                                         redis_url):
    seen = await one_cycle_seen(local_slack, start_app, redis_url)
    passes = [c for c in seen.commands if c[0] == "XRANGE" and c[1].endswith(":events")]
    # one pass brings the card; one brings the settled card and the answer (the settle waits for the quick
    # resume's answer instead of a pass of its own)
    assert len(passes) == 2, f"{len(passes)} delivery passes in one approve cycle"


async def test_a_slow_tool_does_not_hold_up_the_settled_card(local_slack, start_app):
    release = asyncio.Event()

    @tool(name="refund_charge", approval=always())
    async def slow_refund(args: Refund, ctx: ToolContext) -> dict:
        """Refund a charge."""
        await asyncio.wait_for(release.wait(), 10)
        return {"refunded": args.charge_id}

    await start_app(refund_script(), [slow_refund], **BUILTIN)
    ts, card = await mention_and_wait_for_card(local_slack)
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    try:  # the tool is still running: the card already says who approved it
        await local_slack.wait_for(lambda: "Approved" in str(local_slack.message(GENERAL, card.ts).blocks), timeout_s=2)
    finally:
        release.set()
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)


async def test_a_new_message_reads_its_session_with_its_record(local_slack, start_app):
    # the mention, and a typed "approve" that answers the card: each message's record reads the session's
    # state in its own round trip, so trying it as an answer reads nothing alone
    for typed in (False, True):
        trips = await one_cycle_counted(local_slack, start_app, typed=typed)
        assert trips.sent_by("state") == 0, trips.counts


async def test_the_checkpoint_that_makes_a_call_ready_starts_it(local_slack, start_app):
    # the approved call's execution marker is written by the checkpoint that announces it (fenced by the
    # lease in the same script), not by a round trip of its own before the tool runs
    trips = await one_cycle_counted(local_slack, start_app)
    assert trips.sent_by("_begin_call") == 0, trips.counts


async def test_the_resume_reads_its_step_s_requests_with_its_lease(local_slack, start_app):
    # the lease's script returns the records of the parked step's requests with the state: the resume
    # applies the answers without reading them again
    trips = await one_cycle_counted(local_slack, start_app)
    assert trips.sent_by("get_requests", "_resume_step") == 0, trips.counts


async def test_the_settled_card_s_request_is_read_with_its_delivery_pass(local_slack, start_app):
    # the pass's begin reads the records its events name (the settled card's request) with the events, so
    # updating the card reads nothing of its own; the card still says who approved it
    trips = await one_cycle_counted(local_slack, start_app)
    assert trips.sent_by("pass_request") == 0, trips.counts
    settled = [m for root in local_slack.messages(GENERAL) for m in local_slack.messages(GENERAL, root.ts)
               if "Approved" in str(m.blocks)]
    assert settled, "the card was not updated to say it was approved"


async def test_the_checkpoint_whose_events_go_out_at_once_begins_their_delivery_pass(local_slack, start_app):
    # the park and the turn's end take the deliverer lock and read what a begin reads in their own round
    # trip: a pass sends no begin of its own, and each of the cycle's two passes still closes
    trips = await one_cycle_counted(local_slack, start_app)
    assert trips.sent_by("outbox_begin") == 0, trips.counts
    assert trips.sent_by("outbox_end") == 2, trips.counts


async def test_a_new_message_s_record_takes_the_lease_for_its_drive(local_slack, start_app):
    # the mention's record takes the free turn lease in its own script, with what the drive starts from:
    # the drive that starts the turn takes no lease of its own (and a typed "approve", whose record takes
    # it for the resume, neither)
    for typed in (False, True):
        trips = await one_cycle_counted(local_slack, start_app, typed=typed)
        assert trips.sent_by("_take_lease", "process_message") == 0, trips.counts


async def test_the_settle_that_completes_the_step_takes_the_lease_for_the_resume(local_slack, start_app):
    # the click's settle completes the step and takes the free turn lease with what the resume starts from:
    # no drive of the cycle takes the lease with a round trip of its own
    trips = await one_cycle_counted(local_slack, start_app)
    assert trips.sent_by("_take_lease") == 0, trips.counts


async def test_a_turn_s_start_and_its_model_step_are_written_with_the_park(local_slack, start_app):
    # while the model thinks, nothing needs to be durable that the inbox does not keep (the mention stays
    # queued until the turn's first checkpoint): the mention's drive writes one checkpoint, the park, and the
    # resume three (the calls' start, their results, the turn's end)
    trips = await one_cycle_counted(local_slack, start_app)
    assert trips.sent_by("commit", "_start_turn") == 0, trips.counts
    assert trips.sent_by("commit", "_model_step") <= 2, trips.counts  # the park; the turn's end
    assert trips.sent_by("commit") == 4, trips.counts


async def test_a_lone_call_s_result_is_written_with_its_step_s_checkpoint(local_slack, start_app, redis_url):
    # the step's last (here only) call to finish has its result recorded in its execution marker by the
    # checkpoint that reports the step's results, in the same script: one write, not two
    trips = await one_cycle_counted(local_slack, start_app)
    assert trips.sent_by("_finish_call") == 0, trips.counts
    redis = Redis.from_url(redis_url)
    try:
        markers = [await redis.get(key) async for key in redis.scan_iter(match="*:exec:*")]
    finally:
        await redis.aclose()
    assert markers and all(json.loads(m)["status"] == "completed" for m in markers), markers


async def test_the_settle_takes_its_request_off_the_pending_index_in_its_own_round_trip(local_slack, start_app):
    # the workspace's pending index (App Home, ``bot pending``) is the store's to keep: the settle's round trip
    # carries the ZREM after its script; no delivery pass's close carries it any more (no more round trips)
    trips = await one_cycle_counted(local_slack, start_app)

    def removing(function: str) -> int:
        inside = f" {function}"
        return sum(n for (caller, names), n in trips.counts.items()
                   if "ZREM" in names.upper() and any(frame.endswith(inside) for frame in caller.split(" < ")))

    assert removing("settle") == trips.sent_by("settle", "_settle") == 1, trips.counts
    assert removing("outbox_end") == 0, trips.counts


async def test_a_click_on_the_card_this_process_parked_reads_nothing_before_its_settle(local_slack, start_app):
    # the process keeps the records it parked (with their revision): the click's answer is checked against
    # that copy and its settle checks the revision, so the click sends no read of its own
    trips = await one_cycle_counted(local_slack, start_app)
    assert trips.sent_by("get_request", "_on_action") == 0, trips.counts

def marks_by_script(seen: Monitored) -> dict[str, int]:
    """Commands on replay marks of their own (``P:once:…``, store/replay.py) that each script ran, by what its
    first key is (``lease``: a checkpoint; ``req``: a settle; ``msg``: a message's record)."""
    marks: dict[str, int] = {}
    script = ""
    for kind, command in zip(seen.kinds, seen.commands, strict=True):
        if kind != "lua" and command[0] in ("EVALSHA", "EVAL") and len(command) > 3 and "}:" in command[3]:
            script = command[3].split("}:")[1].split(":")[0]
        elif kind == "lua" and any(":once:" in word for word in command[1:2]):
            marks[script] = marks.get(script, 0) + 1
    return marks


async def test_a_message_s_record_keeps_its_replay_mark_in_its_dedupe_mark(local_slack, start_app, redis_url):
    # a record resent after its reply was lost finds its own dedupe mark (tests/test_store_replay.py): it
    # keeps no replay mark of its own
    seen = await one_cycle_seen(local_slack, start_app, redis_url)
    assert marks_by_script(seen).get("msg", 0) == 0, marks_by_script(seen)


async def test_a_settle_keeps_its_replay_mark_in_its_request_s_record(local_slack, start_app, redis_url):
    # the click's settle writes its mark with the request's record, which it reads and writes anyway
    seen = await one_cycle_seen(local_slack, start_app, redis_url)
    assert marks_by_script(seen).get("req", 0) == 0, marks_by_script(seen)


async def test_a_lease_holder_s_checkpoint_keeps_no_replay_mark_key_of_its_own(local_slack, start_app, redis_url):
    # each checkpoint keeps its mark in the session's last mark (the lease fences it: one at a time)
    seen = await one_cycle_seen(local_slack, start_app, redis_url)
    assert marks_by_script(seen).get("lease", 0) == 0, marks_by_script(seen)


async def test_a_script_reads_a_session_s_flags_with_one_mget(local_slack, start_app, redis_url):
    # the lease's reads (a record's, a settle's) and a checkpoint's fencing read the state, the lease, a
    # requested cancel and the failure count with one MGET, not a GET each
    seen = await one_cycle_seen(local_slack, start_app, redis_url)
    alone = [" ".join(c) for kind, c in zip(seen.kinds, seen.commands, strict=True)
             if kind == "lua" and c[0] == "GET" and c[1].endswith((":cancel", ":fails", ":state"))]
    assert alone == [], alone


async def test_a_pass_s_close_writes_the_session_s_cursors_and_audit_floor_in_one_hset(local_slack, start_app,
                                                                                          redis_url):
    seen = await one_cycle_seen(local_slack, start_app, redis_url)
    closes: list[int] = []  # per close script (its keys: the session's out, then its outlock): HSETs of out
    out_key = None
    for kind, command in zip(seen.kinds, seen.commands, strict=True):
        if kind != "lua" and command[0] == "EVALSHA":
            closing = len(command) > 4 and command[3].endswith(":out") and command[4].endswith(":outlock")
            if closing:
                closes.append(0)
            out_key = command[3] if closing else None
        elif kind == "lua" and out_key and command[0] == "HSET" and command[1] == out_key:
            closes[-1] += 1
    assert max(closes, default=0) == 1, closes  # (a pass with nothing to move writes none)


async def test_a_checkpoint_that_lets_the_lease_go_reads_the_session_s_strings_with_one_mget(
        local_slack, start_app, redis_url):
    # the park's and the turn end's reads after their script (what is left to do, read by a process that no
    # longer holds the lease): the state, a requested cancel and the failure count in one MGET
    seen = await one_cycle_seen(local_slack, start_app, redis_url)
    alone = [" ".join(c) for kind, c in zip(seen.kinds, seen.commands, strict=True)
             if kind != "lua" and c[0] == "GET" and c[1].endswith((":fails", ":state"))]
    assert alone == [], alone


async def test_a_settle_numbers_its_events_and_counts_its_record_s_revision_in_the_writes_it_makes(
        local_slack, start_app, redis_url):
    # one INCRBY for all its events' seqs (not an INCR each); the record's revision set with its close's HSET
    # from the revision it read (not a HINCRBY of its own)
    seen = await one_cycle_seen(local_slack, start_app, redis_url)
    extra = [" ".join(c) for kind, c in zip(seen.kinds, seen.commands, strict=True)
             if kind == "lua" and (c[0] == "INCR" or c[0] == "HINCRBY")]
    assert extra == [], extra


async def test_a_settle_reads_its_turn_s_state_once(local_slack, start_app, redis_url):
    # whether its turn is still there, and what the resume starts from: one MGET, not an EXISTS before it
    seen = await one_cycle_seen(local_slack, start_app, redis_url)
    checks = [" ".join(c) for kind, c in zip(seen.kinds, seen.commands, strict=True)
              if kind == "lua" and c[0] == "EXISTS"]
    assert checks == [], checks


async def test_a_message_s_record_reads_its_session_s_strings_once(local_slack, start_app, redis_url):
    # the session's end (is it to be retired first?) with what the drive starts from: one MGET, no GET before it
    seen = await one_cycle_seen(local_slack, start_app, redis_url)
    ends = [" ".join(c) for kind, c in zip(seen.kinds, seen.commands, strict=True)
            if kind == "lua" and c[0] == "GET" and c[1].endswith(":end")]
    assert ends == [], ends


async def test_a_lease_holder_s_checkpoint_reads_its_replay_mark_with_its_lease_and_writes_it_with_its_state(
        local_slack, start_app, redis_url):
    seen = await one_cycle_seen(local_slack, start_app, redis_url)
    apart = [" ".join(c) for kind, c in zip(seen.kinds, seen.commands, strict=True)
             if kind == "lua" and c[0] in ("HGET", "GET", "SET") and c[1].endswith((":out", ":lease", ":state"))
             and not (c[0] == "SET" and "NX" in c)]  # (a lease taken is a SET NX of its own)
    assert apart == [], apart


async def test_a_checkpoint_writes_the_session_s_ref_only_when_it_changed(local_slack, start_app, redis_url):
    # the ref (where the session's posts go) is written by the session's first checkpoint; the cycle's later
    # checkpoints carry the same ref, and the last mark they read with the lease says it is there already
    seen = await one_cycle_seen(local_slack, start_app, redis_url)
    refs = [c[1] for kind, c in zip(seen.kinds, seen.commands, strict=True)
            if kind == "lua" and c[0] == "HSET" and c[1].endswith(":out") and c[2] == "_ref"]
    assert len(refs) == 1, refs


async def test_a_drive_that_lets_the_lease_go_reads_only_what_came_meanwhile(local_slack, start_app, redis_url):
    # after the park and the turn's end: a stop asked until the script let the lease go (read by the script with
    # its lease) and the inbox; the state is the one just written, grants and the failure count are not needed.
    # The one snapshot the app reads is the next step's (after the calls' results), which needs the grants.
    seen = await one_cycle_seen(local_slack, start_app, redis_url)
    app = [c for kind, c in zip(seen.kinds, seen.commands, strict=True) if kind != "lua"]
    assert [c[0] for c in app if c[0] == "MGET"] == [], app
    assert len([c for c in app if c[0] == "SMEMBERS" and c[1].endswith(":grants")]) == 1, app
    assert len([c for c in app if c[0] == "GET" and c[1].endswith(":cancel")]) == 1, app


async def test_a_pass_takes_a_free_lock_without_reading_it_first(local_slack, start_app, redis_url):
    # the begin's SET NX takes a free deliverer lock; only a lock held (by this pass, a live one, a dead one) is
    # read. So the lock is read once per pass, by its close (is it still ours?)
    seen = await one_cycle_seen(local_slack, start_app, redis_url)
    on_lock = [c[0] for kind, c in zip(seen.kinds, seen.commands, strict=True)
               if kind == "lua" and len(c) > 1 and c[1].endswith(":outlock")]
    assert on_lock.count("GET") == on_lock.count("DEL") > 0, on_lock
