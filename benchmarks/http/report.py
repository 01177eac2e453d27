"""The HTTP benchmark's output: the side-by-side table (goals marked), the floor, the breakdowns; and
``--write-doc``, which replaces the block between the markers in docs/PERFORMANCE.md (prose kept)."""

from __future__ import annotations

import math
import os
import platform
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from .drive import Samples, Side
from .trace import Trace

DOC = Path(__file__).resolve().parents[2] / "docs" / "PERFORMANCE.md"
START = "<!-- bench:http:start (written by `python -m benchmarks.http --write-doc`; edit the prose outside) -->"
START_PREFIX, END = "<!-- bench:http:start", "<!-- bench:http:end -->"
SECTION = "## The HTTP benchmark: the app side by side with bare Bolt and raw aiohttp"


@dataclass(frozen=True)
class Condition:
    """How long Slack's Web API and the model take to answer."""

    slack_ms: float
    model_ms: float

    @property
    def label(self) -> str:
        if not self.slack_ms and not self.model_ms:
            return "Slack and model answering at once"
        if self.slack_ms == self.model_ms:
            return f"Slack and model answering in {self.slack_ms:g} ms"
        return f"Slack answering in {self.slack_ms:g} ms, model in {self.model_ms:g} ms"


@dataclass
class Restarts:
    seconds: dict[tuple[str, int], list[float]] = field(default_factory=dict)  # (side key, parked) → samples
    pending_seen: dict[int, int] = field(default_factory=dict)  # parked → the pending index's size then
    copy_s: dict[int, float] = field(default_factory=dict)


@dataclass
class Run:
    command: str
    started: datetime
    load_at_start: tuple[float, float, float]
    redis: str
    conditions: list[Condition]
    sides: dict[str, Side]
    restarts: Restarts
    args: dict[str, object]
    trace: Trace | None = None
    seconds: float = 0.0
    sqlite_rows: float = math.nan  # the LangGraph peer: checkpoint + write rows per thread it ran


def percentile_ms(values: list[float], q: float) -> float:
    """Nearest-rank percentile, in ms."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return 1000 * ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass
class Row:
    name: str
    project: float
    bolt: float
    unit: str
    goal: str
    met: Callable[[float, float], bool] | None  # (project, bolt) → met; None: for information
    compare: str = "ratio"  # "ratio" | "difference" | "none"

    def cells(self) -> list[str]:
        mine, theirs = _value(self.project, self.unit), _value(self.bolt, self.unit)
        if self.compare == "difference":
            relation = f"{self.project - self.bolt:+.1f} {self.unit}"
        elif self.compare == "ratio" and self.bolt and not math.isnan(self.bolt):
            relation = f"{self.project / self.bolt:.2f}"
        else:
            relation = "—"
        met = "" if self.met is None else ("yes" if self.met(self.project, self.bolt) else "**NO**")
        return [self.name, mine, theirs, relation, self.goal, met]


def _value(value: float, unit: str) -> str:
    if math.isnan(value):
        return "—"
    if unit == "ms":
        return f"{value:,.1f} ms"
    if unit == "s":
        return f"{value:,.2f} s"
    if unit == "cores":
        return f"{value:.2f}"
    return f"{value:,.1f}{(' ' + unit) if unit else ''}"


def at_most(factor: float) -> Callable[[float, float], bool]:
    return lambda mine, theirs: mine <= factor * theirs


def at_least(factor: float) -> Callable[[float, float], bool]:
    return lambda mine, theirs: mine >= factor * theirs


def _markdown(header: list[str], rows: list[list[str]], align: str) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _per_cycle(samples: Samples, value: float) -> float:
    return value / samples.cycles if samples.cycles else math.nan


def _light(samples: Samples, value: float) -> float:
    return value / samples.light_cycles if samples.light_cycles else math.nan


def _rate(samples: Samples) -> float:
    return samples.cycles / samples.cycle_wall_s if samples.cycle_wall_s else math.nan


def main_rows(run: Run) -> list[Row]:
    p, b = run.sides["p"].samples, run.sides["b"].samples
    base = run.conditions[0].label
    rows = [
        Row("Approve click → HTTP ack, p50, 5 clicks/s", percentile_ms(p[base].acks_light, 0.5),
            percentile_ms(b[base].acks_light, 0.5), "ms", "≤ 1.2 × Bolt", at_most(1.2)),
        Row("… p99, 5 clicks/s", percentile_ms(p[base].acks_light, 0.99),
            percentile_ms(b[base].acks_light, 0.99), "ms", "≤ 1.2 × Bolt", at_most(1.2)),
    ]
    for cond in run.conditions[1:]:
        rows.append(Row(f"… p50, 5 clicks/s, {cond.label}", percentile_ms(p[cond.label].acks_light, 0.5),
                        percentile_ms(b[cond.label].acks_light, 0.5), "ms", "≤ 1.2 × Bolt", at_most(1.2)))
    rows += [
        Row("… p99, 50 clicks/s", percentile_ms(p[base].acks_burst, 0.99), percentile_ms(b[base].acks_burst, 0.99),
            "ms", "≤ 1.2 × Bolt", at_most(1.2)),
        Row("app_mention → its first request at the model server, p50", percentile_ms(p[base].to_model, 0.5),
            percentile_ms(b[base].to_model, 0.5), "ms", "≤ +10 ms", lambda m, t: m - t <= 10, "difference"),
        Row("full approve cycles per second, 32 concurrent threads", _rate(p[base]), _rate(b[base]), "/s",
            "≥ 0.8 × Bolt", at_least(0.8)),
        Row("CPU per approve cycle (the contender's process)", 1000 * _per_cycle(p[base], p[base].counts.cpu_s),
            1000 * _per_cycle(b[base], b[base].counts.cpu_s), "ms", "≤ 1.5 × Bolt", at_most(1.5)),
        Row("Redis commands per approve cycle (INFO commandstats)", _per_cycle(p[base], p[base].counts.redis.total()),
            _per_cycle(b[base], b[base].counts.redis.total()), "", "≤ 40", lambda m, t: m <= 40, "none"),
        Row("Slack Web API calls per approve cycle", _per_cycle(p[base], p[base].counts.slack.total()),
            _per_cycle(b[base], b[base].counts.slack.total()), "", "≤ 3", lambda m, t: m <= 3),
    ]
    for parked in sorted({n for _, n in run.restarts.seconds}):
        mine, theirs = run.restarts.seconds.get(("p", parked), []), run.restarts.seconds.get(("b", parked), [])
        rows.append(Row(f"kill -9 → restart → first click served, p50, {parked:,} other turns parked",
                        percentile_ms(mine, 0.5), percentile_ms(theirs, 0.5), "ms", "≤ 1.2 × Bolt", at_most(1.2)))
    return rows


def info_rows(run: Run) -> list[Row]:
    p, b = run.sides["p"].samples, run.sides["b"].samples
    base = run.conditions[0].label
    rows = [
        Row("click → ack p50, 50 clicks/s", percentile_ms(p[base].acks_burst, 0.5),
            percentile_ms(b[base].acks_burst, 0.5), "ms", "", None),
        Row("app_mention → card in Slack, p50", percentile_ms(p[base].to_card, 0.5),
            percentile_ms(b[base].to_card, 0.5), "ms", "", None, "difference"),
        Row("full approve cycle, wall time at 32 concurrent (32 ÷ cycles/s)", 1000 * 32 / _rate(p[base]),
            1000 * 32 / _rate(b[base]), "ms", "", None),
        Row("the contender's share of one core while the 32 threads ran", _busy(p[base], own=True),
            _busy(b[base], own=True), "cores", "", None),
        Row("CPU per approve cycle at 5 clicks/s (the contender's process)",
            1000 * _light(p[base], p[base].light_counts.cpu_s), 1000 * _light(b[base], b[base].light_counts.cpu_s),
            "ms", "", None),
        Row("Redis commands per approve cycle at 5 clicks/s", _light(p[base], p[base].light_counts.redis.total()),
            _light(b[base], b[base].light_counts.redis.total()), "", "", None, "none"),
        Row("Redis server CPU per approve cycle", 1000 * _per_cycle(p[base], p[base].counts.redis_cpu_s),
            1000 * _per_cycle(b[base], b[base].counts.redis_cpu_s), "ms", "", None, "none"),
        Row("bench process CPU (LocalSlack, model, load) per cycle", 1000 * _per_cycle(p[base], p[base].counts.driver_cpu_s),
            1000 * _per_cycle(b[base], b[base].counts.driver_cpu_s), "ms", "", None),
        Row("… its share of one core while the cycles ran", _busy(p[base]), _busy(b[base]), "cores", "", None),
    ]
    for cond in run.conditions[1:]:
        c = cond.label
        rows += [
            Row(f"click → ack p99, 5 clicks/s, {c}", percentile_ms(p[c].acks_light, 0.99),
                percentile_ms(b[c].acks_light, 0.99), "ms", "", None),
            Row(f"app_mention → first model request p50, {c}", percentile_ms(p[c].to_model, 0.5),
                percentile_ms(b[c].to_model, 0.5), "ms", "", None, "difference"),
            Row(f"app_mention → card in Slack p50, {c}", percentile_ms(p[c].to_card, 0.5),
                percentile_ms(b[c].to_card, 0.5), "ms", "", None, "difference"),
            Row(f"full approve cycles per second, 32 concurrent, {c}", _rate(p[c]), _rate(b[c]), "/s", "", None),
            Row(f"CPU per approve cycle, {c}", 1000 * _per_cycle(p[c], p[c].counts.cpu_s),
                1000 * _per_cycle(b[c], b[c].counts.cpu_s), "ms", "", None),
        ]
    for parked in sorted({n for _, n in run.restarts.seconds}):
        mine, theirs = run.restarts.seconds.get(("p", parked), []), run.restarts.seconds.get(("b", parked), [])
        rows.append(Row(f"kill -9 → first click served, slowest, {parked:,} other parked", 1000 * max(mine, default=math.nan),
                        1000 * max(theirs, default=math.nan), "ms", "", None))
    return rows


def _busy(samples: Samples, own: bool = False) -> float:
    """CPU seconds per wall second while the cycles ran: the bench's process, or (``own``) the contender's."""
    used = samples.counts.cpu_s if own else samples.counts.driver_cpu_s
    return used / samples.cycle_wall_s if samples.cycle_wall_s else math.nan


def floor_rows(run: Run) -> list[list[str]]:
    """The same requests answered by raw aiohttp: what HTTP and the signature check alone cost here."""
    sides = [run.sides[k] for k in ("p", "b", "r")]
    base = run.conditions[0].label

    def line(name: str, values: list[float]) -> list[str]:
        return [name, *(_value(v, "ms") for v in values)]

    rows = [
        line("click → ack p50, 5 clicks/s", [percentile_ms(s.samples[base].acks_light, 0.5) for s in sides]),
        line("click → ack p99, 5 clicks/s", [percentile_ms(s.samples[base].acks_light, 0.99) for s in sides]),
        line("click → ack p50, 50 clicks/s", [percentile_ms(s.samples[base].acks_burst, 0.5) for s in sides]),
        line("click → ack p99, 50 clicks/s", [percentile_ms(s.samples[base].acks_burst, 0.99) for s in sides]),
    ]
    for parked in sorted({n for _, n in run.restarts.seconds}):
        rows.append(line(f"restart → first click served p50, {parked:,} other parked",
                         [percentile_ms(run.restarts.seconds.get((s.key, parked), []), 0.5) for s in sides]))
    return rows


def durable_rows(run: Run) -> list[list[str]]:
    """The project beside the durable floor (the same cycle with the least durability, ``durable.py``) and
    bare Bolt: how far the project is from what any durable implementation costs, and how far that is
    from Bolt."""
    p, d, b = (run.sides[k].samples for k in ("p", "d", "b"))

    def line(name: str, unit: str, of: Callable[[dict[str, Samples], str], float], cond: str = "") -> list[str]:
        label = cond or run.conditions[0].label
        mine, floor, bolt = of(p, label), of(d, label), of(b, label)
        return [name, _value(mine, unit), _value(floor, unit), _value(bolt, unit), _ratio(mine, floor),
                _ratio(floor, bolt)]

    def cpu(x: dict[str, Samples], c: str) -> float:
        return 1000 * _per_cycle(x[c], x[c].counts.cpu_s)

    rows = [
        line("floor: CPU per cycle", "ms", cpu),
        line("floor: cycles per second, 32 concurrent threads", "/s", lambda x, c: _rate(x[c])),
        line("floor: Redis commands per cycle", "",
             lambda x, c: _per_cycle(x[c], x[c].counts.redis.total())),
        line("floor: Slack calls per cycle", "", lambda x, c: _per_cycle(x[c], x[c].counts.slack.total())),
        line("floor: click → ack p50, 5 clicks/s", "ms", lambda x, c: percentile_ms(x[c].acks_light, 0.5)),
        line("floor: click → ack p99, 5 clicks/s", "ms", lambda x, c: percentile_ms(x[c].acks_light, 0.99)),
        line("floor: click → ack p99, 50 clicks/s", "ms", lambda x, c: percentile_ms(x[c].acks_burst, 0.99)),
        line("floor: app_mention → first model request, p50", "ms", lambda x, c: percentile_ms(x[c].to_model, 0.5)),
    ]
    for cond in run.conditions[1:]:
        rows.append(line(f"floor: CPU per cycle, {cond.label}", "ms", cpu, cond.label))
        rows.append(line(f"floor: cycles per second, {cond.label}", "/s", lambda x, c: _rate(x[c]), cond.label))
    for parked in sorted({n for _, n in run.restarts.seconds}):
        mine, floor, bolt = (percentile_ms(run.restarts.seconds.get((k, parked), []), 0.5) for k in ("p", "d", "b"))
        rows.append([f"floor: restart → first click served, p50, {parked:,} other parked", _value(mine, "ms"),
                     _value(floor, "ms"), _value(bolt, "ms"), _ratio(mine, floor), _ratio(floor, bolt)])
    return rows


PEERS = (("p", "project"), ("d", "durable floor"), ("b", "bare Bolt"), ("l", "LangGraph + SQLite"))


def peer_rows(run: Run) -> list[list[str]]:
    """The peers' table: the project beside the durable floor, bare Bolt and the LangGraph peer."""
    keys = [k for k, _ in PEERS if k in run.sides]
    base = run.conditions[0].label

    def line(name: str, unit: str, of: Callable[[str, Samples], float]) -> list[str]:
        return [name, *(_value(of(k, run.sides[k].samples[base]), unit) for k in keys)]

    def redis(k: str, x: Samples) -> float:  # counted for the contenders that use Redis (project, floor)
        return _per_cycle(x, x.counts.redis.total()) if x.counts.redis.total() else math.nan

    rows = [
        line("cycles/s, 32 threads at once", "/s", lambda k, x: _rate(x)),
        line("CPU per cycle (the contender's process)", "ms", lambda k, x: 1000 * _per_cycle(x, x.counts.cpu_s)),
        line("Redis commands per cycle", "", redis),
        line("Slack calls per cycle", "", lambda k, x: _per_cycle(x, x.counts.slack.total())),
        line("click → the cycle's last Slack call, the reply (p50, 5 clicks/s)", "ms",
             lambda k, x: percentile_ms(x.click_to_end, 0.5)),
        line("the tool's result → the reply's Slack call (p50, 32 threads at once)", "ms",
             lambda k, x: percentile_ms(x.result_to_reply, 0.5)),
        line("click → ack p99 at 50 clicks/s", "ms", lambda k, x: percentile_ms(x.acks_burst, 0.99)),
        line("click → ack p99 at 5 clicks/s", "ms", lambda k, x: percentile_ms(x.acks_light, 0.99)),
        line("app_mention → first model request (p50)", "ms", lambda k, x: percentile_ms(x.to_model, 0.5)),
    ]
    for parked in sorted({n for _, n in run.restarts.seconds}):
        rows.append([f"kill -9 → restart → first click acked (p50), {parked:,} parked in the project's Redis",
                     *(_value(percentile_ms(run.restarts.seconds.get((k, parked), []), 0.5), "ms") for k in keys)])
    if "l" in keys:
        rows.append(["SQLite rows written per thread (checkpoints + writes)",
                     *("" for _ in keys[:-1]), _value(run.sqlite_rows, "")])
    return rows


def _ratio(mine: float, theirs: float) -> str:
    return f"{mine / theirs:.2f}" if theirs and not math.isnan(theirs) and not math.isnan(mine) else "—"


def _breakdown(counter: Counter[str], cycles: int, top: int = 14) -> str:
    if not cycles or not counter:
        return "none"
    parts = [f"{name.upper()} {n / cycles:.1f}" for name, n in counter.most_common(top)]
    rest = sum(counter.values()) - sum(n for _, n in counter.most_common(top))
    return ", ".join(parts) + (f", others {rest / cycles:.1f}" if rest else "")


def details(run: Run) -> list[str]:
    p, b, d = (run.sides[k].samples[run.conditions[0].label] for k in ("p", "b", "d"))
    scripts = p.counts.redis.get("evalsha", 0) + p.counts.redis.get("eval", 0)
    lines = [
        f"- Slack calls per cycle, project: {_breakdown(p.counts.slack, p.cycles)}; "
        f"bare Bolt: {_breakdown(b.counts.slack, b.cycles)}; durable floor: {_breakdown(d.counts.slack, d.cycles)}.",
        f"- Redis commands per cycle, durable floor: {_breakdown(d.counts.redis, d.cycles)}.",
        f"- Redis commands per cycle, project (commands run inside scripts included, as INFO commandstats counts "
        f"them; {scripts / max(p.cycles, 1):.1f} of them are EVAL/EVALSHA calls): {_breakdown(p.counts.redis, p.cycles)}.",
    ]
    for parked, seen in sorted(run.restarts.pending_seen.items()):
        copy = f", copies written in {run.restarts.copy_s.get(parked, 0):.1f} s" if parked else ""
        lines.append(f"- Restarts with {parked:,} other parked: the workspace's pending index held {seen:,} "
                     f"open requests at the last restart{copy}.")
    if run.trace is not None:
        lines += run.trace.lines()
    return lines


def render(run: Run) -> str:
    load = " ".join(f"{x:.2f}" for x in run.load_at_start)
    counts = ", ".join(f"{k}={v}" for k, v in run.args.items())
    head = [
        f"Recorded {run.started:%Y-%m-%d %H:%M} UTC with `{run.command}` (took {run.seconds:.0f} s; {counts}).",
        "",
        f"Machine: {os.cpu_count()} CPUs (`nproc`), {platform.machine()}, Linux {platform.release()}; Python "
        f"{platform.python_version()}; {run.redis}; load average at start {load}. Conditions: "
        + "; ".join(c.label for c in run.conditions) + ". The project runs with its own pacing of Slack calls off, "
        "as LocalSlack imposes no rate limits on either app.",
        "",
    ]
    header = ["figure", "project", "bare Bolt", "ratio", "goal", "met"]
    table = _markdown(header, [r.cells() for r in main_rows(run)], ["---", "---:", "---:", "---:", "---", "---"])
    info = _markdown(header, [r.cells() for r in info_rows(run)], ["---", "---:", "---:", "---:", "---", "---"])
    floor = _markdown(["figure", "project", "bare Bolt", "raw aiohttp"], floor_rows(run), ["---", "---:", "---:", "---:"])
    durable = _markdown(["figure", "project", "durable floor", "bare Bolt", "project ÷ floor", "floor ÷ Bolt"],
                        durable_rows(run), ["---", "---:", "---:", "---:", "---:", "---:"])
    names = dict(PEERS)
    keys = [k for k, _ in PEERS if k in run.sides]
    peers = _markdown(["per approve cycle", *(names[k] for k in keys)], peer_rows(run), ["---", *("---:" for _ in keys)])
    return "\n".join([*head, "The approve cycle beside its peers:", "", *peers, "", *table,
                      "", "For information:", "", *info, "", "The floor (raw aiohttp: "
                      "signature check, 200):", "", *floor, "", "The durable floor (the project's cycle with the "
                      "least durability: `benchmarks/http/durable.py`):", "", *durable, "", *details(run)])


def write_doc(figures: str) -> None:
    text = DOC.read_text()
    block = f"{START}\n{figures}\n{END}"
    if START_PREFIX in text:
        before, rest = text.split(START_PREFIX, 1)
        text = before + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip() + f"\n\n{SECTION}\n\n{block}\n"
    DOC.write_text(text)
