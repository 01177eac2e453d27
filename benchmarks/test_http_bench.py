"""``python -m benchmarks.http`` runs end to end with tiny samples and prints every figure.

Only that the code paths work: no duration, rate or ratio is asserted (those are the benchmark's
output, docs/PERFORMANCE.md). Starts real processes (the app, bare Bolt, raw aiohttp, the durable floor,
``python -m bot run``) and takes about 15 s on 2 cores (one parked population: the loop over populations is the same).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks.http.__main__ import parse_args, run
from benchmarks.http.instructions import Counted, render
from benchmarks.http.instructions import parse_args as instructions_args
from benchmarks.http.instructions import run as instructions_run
from benchmarks.http.ladder_bench import once_each
from benchmarks.http.ladder_bench import parse_args as ladder_args
from benchmarks.http.ladder_bench import run as ladder_run
from benchmarks.http.report import DOC, END, START_PREFIX
from localslack.models import ApiCall

TINY = ["--clicks", "2", "--burst-clicks", "2", "--cycles", "2", "--concurrency", "2", "--restarts", "1",
        "--parked", "5", "--batch", "2", "--slack-delay-ms", "0,20", "--model-delay-ms", "0,20",
        "--no-peer"]  # the LangGraph peer runs in make bench only (its own extra)
FIGURES = [
    "Approve click → HTTP ack, p50, 5 clicks/s",
    "… p99, 5 clicks/s",
    "… p50, 5 clicks/s, Slack and model answering in 20 ms",
    "… p99, 50 clicks/s",
    "app_mention → its first request at the model server, p50",
    "full approve cycles per second, 32 concurrent threads",
    "CPU per approve cycle (the contender's process)",
    "Redis commands per approve cycle",
    "Slack Web API calls per approve cycle",
    "kill -9 → restart → first click served, p50, 5 other turns parked",
]


async def test_every_figure_is_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    # its own embedded server: with REDIS_URL the bench wants three empty databases, which a test
    # server shared with the suite (one database, flushed before each test) cannot promise
    monkeypatch.delenv("REDIS_URL", raising=False)
    text = await run(parse_args(TINY), TINY)
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in text.splitlines() if line.startswith("| ")}
    for figure in FIGURES:
        row = next((line for name, line in rows.items() if name.startswith(figure)), None)
        assert row is not None, f"missing: {figure}"
        project, bolt = row.split(" | ")[1:3]
        assert "—" not in project and "—" not in bolt, row  # measured on both sides
        assert row.rstrip(" |").endswith(("yes", "**NO**")), row  # a goal, marked
    floor_rows = [line for name, line in rows.items() if name.startswith("floor: ")]
    assert len(floor_rows) == 8 + 2 + 1, floor_rows  # 8 figures, 2 more for the second condition, 1 restart
    for row in floor_rows:  # project, durable floor and bare Bolt all measured
        assert "—" not in " | ".join(row.split(" | ")[1:4]), row
    assert "One cycle under MONITOR" in text


def test_the_doc_has_one_figures_block() -> None:
    text = DOC.read_text()
    assert text.count(START_PREFIX) == text.count(END) <= 1


async def test_the_ladder_measures_every_rung_doing_the_cycle_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # the run itself fails (BenchError) when a contender's thread lacks its card, update or reply, has one
    # twice, or a rung leaves wake-ups behind or an audit chain that does not verify
    monkeypatch.delenv("REDIS_URL", raising=False)
    argv = ["--cycles", "2", "--concurrency", "2"]
    text = await ladder_run(ladder_args(argv), argv)
    header = next(line for line in text.splitlines() if line.startswith("| per approve cycle"))
    assert header.split(" | ")[1:] == ["durable floor", "rung 1", "rung 2", "rung 3", "rung 4", "rung 5", "project |"]
    for figure in ("CPU per cycle", "cycles/s", "Redis commands per cycle", "Slack calls per cycle"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {figure}"))
        assert "—" not in row, row
    assert "The project ÷ the top rung (rung 5)" in text


def test_the_ladder_check_finds_a_post_made_twice_or_missing() -> None:
    def call(method: str, posted: str = "", **params: object) -> ApiCall:
        return ApiCall(method=method, params=params, token=None, response={"ok": True, "ts": posted})

    card = call("chat.postMessage", "2.0", channel="C1", thread_ts="1.0", blocks='[{"text": "Approve"}]')
    cycle = [card, call("chat.update", channel="C1", ts="2.0"), call("chat.postMessage", "3.0", channel="C1",
                                                                      thread_ts="1.0", text="Refunded."),
             call("agents.sessions.setStatus", channel_id="C1", thread_ts="1.0", status="active")]
    assert once_each(cycle, 1) == []
    assert once_each([*cycle, cycle[2]], 1) == ["('C1', '1.0'): 3 posts, not 2 (card, reply)"]
    assert once_each(cycle[:2] + cycle[3:], 1) == ["('C1', '1.0'): 1 posts, not 2 (card, reply)"]
    assert once_each([*cycle, cycle[1]], 1) == ["('C1', '1.0'): card updated 2 times"]
    assert once_each(cycle[:3], 1) == ["('C1', '1.0'): 0 session statuses, not 1"]
    assert once_each(cycle[:3], 1, statuses_too=False) == []


@pytest.mark.skipif(shutil.which("callgrind_control") is None, reason="valgrind is not installed")
async def test_instructions_are_counted_per_cycle_and_tell_more_work_from_less(monkeypatch: pytest.MonkeyPatch) -> None:
    # rung 5 does the floor's cycle and more (the outbox, leases, markers, the contract's events, the audit):
    # a count that did not see the difference would not be counting the contender's cycles
    monkeypatch.delenv("REDIS_URL", raising=False)
    argv = ["--contenders", "d,L5", "--cycles", "4", "--concurrency", "2"]
    text = await instructions_run(instructions_args(argv), argv)
    per_cycle = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] in ("durable floor", "rung 5"):
            assert cells[1] == "4", line
            per_cycle[cells[0]] = float(cells[2].removesuffix(" M"))
    assert 0 < per_cycle["durable floor"] < per_cycle["rung 5"]


async def test_a_framework_in_the_bot_and_alone_each_do_the_cycle(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    # the pydantic-ai pair under cProfile (no valgrind: seconds): the bench model answers the framework's own
    # requests, each side parks on the card and ends with the reply, and the counted cycles are profiled
    monkeypatch.delenv("REDIS_URL", raising=False)
    argv = ["--contenders", "pyd,pydA", "--cycles", "2", "--concurrency", "2", "--profile", str(tmp_path)]
    text = await instructions_run(instructions_args(argv), argv)
    in_the_bot, alone = text.splitlines()
    assert in_the_bot.startswith(f"pydantic_ai in the bot: {tmp_path}/pyd.pstats (python -m pstats), ")
    assert alone == f"pydantic_ai alone: {tmp_path}/pydA.pstats (python -m pstats), 0.0 Redis commands per cycle"
    # the bot's Redis commands per cycle are counted (the alone app keeps its state in sqlite)
    assert float(in_the_bot.split(", ")[1].removesuffix(" Redis commands per cycle")) > 50
    assert (tmp_path / "pyd.pstats").stat().st_size > 0 and (tmp_path / "pydA.pstats").stat().st_size > 0


def test_each_framework_in_the_bot_is_set_beside_it_alone() -> None:
    counted = [Counted("p", "project", 4, 4 * 30_000_000, 40.0),
               Counted("pyd", "pydantic_ai in the bot", 4, 4 * 130_000_000, 180.0),
               Counted("pydA", "pydantic_ai alone", 4, 4 * 65_000_000, 0.0),
               Counted("oai", "openai_agents in the bot", 4, 4 * 110_000_000, 180.0),
               Counted("oaiA", "openai_agents alone", 4, 4 * 100_000_000, 0.0),
               Counted("oaiS", "openai_agents alone, streamed", 4, 4 * 90_000_000, 0.0)]
    lines = render(counted, "bench", 4).splitlines()
    # the goal is read against the framework alone taking its answers streamed, as the bot takes them; without
    # that count, against its plain call
    assert "| pydantic_ai | 130.00 M | — | — | not met | 65.00 M | 2.00 × |" in lines
    assert "| openai_agents | 110.00 M | 90.00 M | 1.22 × | not met | 100.00 M | 1.10 × |" in lines
    assert not any(line.startswith("| langgraph |") for line in lines)  # not counted: no row
