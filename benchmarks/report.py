"""The figures as Markdown: printed by every run, written into docs/PERFORMANCE.md with --write-doc."""

from __future__ import annotations

import os
import platform
import shlex
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import redis

from .measure import BytesFigures, Population, RoundTripFigures, percentile

DOC = Path(__file__).resolve().parents[1] / "docs" / "PERFORMANCE.md"
START = (
    "<!-- bench:figures:start (written by `python -m benchmarks --write-doc`; edit the prose outside) -->"
)
END = "<!-- bench:figures:end -->"
ROUND_TRIP_TARGET = 2
P99_TARGET = 1.10
# the memory settings our embedded server changes (store/embedded.py), at their Redis/Valkey defaults
SERVER_DEFAULTS = {"stream-node-max-bytes": "4096", "hash-max-listpack-value": "64"}


@dataclass
class RunInfo:
    argv: list[str]
    started: datetime
    server: str
    version: str
    load_at_start: tuple[float, float, float]
    seconds: float = 0.0
    config: list[str] = field(default_factory=list)  # CONFIG SET applied for this run


def command_line(argv: list[str]) -> str:
    python = Path(sys.executable)
    try:
        python = python.relative_to(Path.cwd())
    except ValueError:
        pass
    redis_url = "REDIS_URL=… " if os.environ.get("REDIS_URL") else ""
    return redis_url + shlex.join([str(python), "-m", "benchmarks", *argv])


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _yes(ok: bool) -> str:
    return "yes" if ok else "**NO**"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def _spread(values: list[int]) -> str:
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}–{high}"


def block_ratios(small: list[float], large: list[float], blocks: int = 5) -> list[float]:
    """p99(large) / p99(small) within each of ``blocks`` consecutive slices of the samples."""
    size = min(len(small), len(large)) // blocks
    if size < 20:
        return []
    return [
        percentile(large[i * size : (i + 1) * size], 99) / percentile(small[i * size : (i + 1) * size], 99)
        for i in range(blocks)
    ]


def _latency_rows(pops: list[Population]) -> list[str]:
    """pops: the 100-turn population, its control twin (same size, only noise differs), the large one."""
    small, control, large = pops
    rows = [
        f"| settle→resume p50 / p99, {p.label} ({len(p.resume)} resumes) "
        f"| {_ms(percentile(p.resume, 50))} / {_ms(percentile(p.resume, 99))} | | |"
        for p in pops
    ]
    ratio = percentile(large.resume, 99) / percentile(small.resume, 99)
    rows.append(
        f"| **p99 at {large.label} ÷ p99 at {small.label}** | {ratio:.3f} | ≤ {P99_TARGET:.2f} "
        f"| {_yes(ratio <= P99_TARGET)} |"
    )
    noise = percentile(control.resume, 99) / percentile(small.resume, 99)
    rows.append(
        f"| control: p99 at {control.label} ÷ p99 at {small.label} (same size: noise only) "
        f"| {noise:.3f} | (info) | |"
    )
    for other in (large, control):
        blocks = block_ratios(small.resume, other.resume)
        if blocks:
            rows.append(
                f"| … p99 {other.label} ÷ {small.label} in {len(blocks)} consecutive blocks of the run "
                f"| {', '.join(f'{b:.2f}' for b in blocks)} | | |"
            )
    for other in (large, control):
        p50 = percentile(other.resume, 50) / percentile(small.resume, 50)
        rows.append(f"| p50 at {other.label} ÷ p50 at {small.label} | {p50:.3f} | (info) | |")
    rows += [
        f"| baseline GET + SET (2 round trips) p50 / p99, {p.label} database "
        f"| {_ms(percentile(p.baseline, 50))} / {_ms(percentile(p.baseline, 99))} | | |"
        for p in pops
    ]
    rows += [
        f"| resume ÷ baseline, p50 / p99, {p.label} "
        f"| {percentile(p.resume, 50) / percentile(p.baseline, 50):.1f} / "
        f"{percentile(p.resume, 99) / percentile(p.baseline, 99):.1f} | | |"
        for p in pops
    ]
    rows.append(
        f"| round trips per measured resume, {' / '.join(p.label for p in pops)} "
        f"| {' / '.join(_spread(p.resume_round_trips) for p in pops)} | (info: none grows with N) | |"
    )
    return rows


def render(
    run: RunInfo,
    trips: RoundTripFigures,
    sizes: BytesFigures,
    pops: list[Population],
    untuned: BytesFigures | None = None,
) -> str:
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = " ".join(f"{x:.2f}" for x in run.load_at_start)
    lines = [
        f"Recorded {run.started:%Y-%m-%d %H:%M} UTC with `{command_line(run.argv)}` "
        f"(took {run.seconds:.0f} s).",
        "",
        f"Machine: {nproc} CPUs (`nproc`), {cpu_model()}, {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}; {run.version} ({run.server}); redis-py {redis.__version__}; "
        f"load average at start {load}.",
        "",
        *(
            [f"**Server settings changed for this run** (`CONFIG SET`): {'; '.join(run.config)}.", ""]
            if run.config
            else []
        ),
        "| figure | measured | target | met |",
        "| --- | --- | --- | --- |",
    ]
    settle_max = max(trips.settle)
    lines.append(
        f"| Redis round trips per settled answer, `answer(resume=False)` | {_spread(trips.settle)} "
        f"({trips.settle_commands}; {trips.new_connections} connections opened) | ≤ {ROUND_TRIP_TARGET} "
        f"| {_yes(settle_max <= ROUND_TRIP_TARGET)} |"
    )
    lines.append(
        f"| … when the caller already read the record, `answer(resume=False, record=…)` "
        f"| {_spread(trips.settle_with_record)} | (info) | |"
    )
    lines.append(
        f"| round trips for answer + resume to `turn.completed`, `answer(resume=True)` "
        f"| {_spread(trips.full)} | (info) | |"
    )
    lines.append(
        f"| bytes in Redis per parked turn (MEMORY USAGE, all keys of the session) | {sizes.memory:,} B "
        f"| ≤ 1.5 × {sizes.serialized:,} + 1,024 = {sizes.budget:,.0f} B | {_yes(sizes.memory <= sizes.budget)} |"
    )
    if untuned is not None:
        settings = ", ".join(f"{k} {v}" for k, v in SERVER_DEFAULTS.items())
        lines.append(
            f"| … the same on a server with default settings ({settings}), e.g. an untuned "
            f"external Redis | {untuned.memory:,} B | ≤ {untuned.budget:,.0f} B | {_yes(untuned.memory <= untuned.budget)} |"
        )
    lines.append(
        f"| serialized state: state JSON + request record JSON | {sizes.state_json:,} + {sizes.record_json:,} "
        f"= {sizes.serialized:,} B | | |"
    )
    lines.append(
        f"| ratio bytes in Redis / serialized state | {sizes.memory / sizes.serialized:.2f} "
        f"| ≤ {sizes.budget / sizes.serialized:.2f} (for this state) | |"
    )
    lines += _latency_rows(pops)
    lines += [
        "",
        "Keys of one parked turn (a session with one turn waiting on one approval):",
        "",
        "| key (after `hitl:{slot}:`) | type | MEMORY USAGE | data it holds | detail |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    for key in sizes.keys:
        lines.append(f"| `{key.suffix}` | {key.kind} | {key.memory:,} B | {key.payload:,} B | {key.detail} |")
    lines.append(f"| **total** | | **{sizes.memory:,} B** | {sum(k.payload for k in sizes.keys):,} B | |")
    lines += ["", f"What one answer + resume sends, in order: {trips.full_commands}.", "", "Populations:", ""]
    for pop in pops:
        # a few hundred KB of allocator and buffer churn hide the growth of small populations
        memory = (
            f"data in the server (MEMORY STATS dataset + key tables) grew {pop.memory_per_clone:,.0f} B per "
            "parked turn; "
            if pop.size >= 10_000
            else ""
        )
        lines.append(
            f"- {pop.label} ({pop.bench.db_label}): written in {pop.fill_seconds:.1f} s; {memory}"
            f"waited {pop.settle_seconds:.1f} s for a background AOF rewrite to end; workspace pending index "
            f"{pop.pending_index_per_turn:,.0f} B per entry; {pop.clones_checked} copies resumed to "
            "`turn.completed` as a validity check."
        )
    return "\n".join(lines) + "\n"


def write_doc(figures: str, doc: Path = DOC) -> None:
    """Replace the figures between the markers; the prose around them stays as written."""
    text = doc.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"bench: {doc} has no figures markers ({START!r} … {END!r}); not rewriting it")
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    doc.write_text(f"{head}{START}\n{figures}{END}{tail}")
