"""``python -m benchmarks.http.instructions``: instructions per approve cycle, counted, not timed.

The ladder's CPU figures move ±5–10 % between runs on these shared machines, more than most single
changes to the core are worth. This counts instead: each contender runs alone under Valgrind's callgrind
with instrumentation off (imports, start, warm-up are not counted), the same cycles as the ladder's are
driven over signed HTTP through its own LocalSlack, and only while they run is instrumentation on. The
count is of the contender's own user-space instructions (the interpreter and the C libraries it calls;
not the kernel, not Redis, not the bench), so it repeats within ~1 % whatever else the machine does.
Instructions are not time (caches, system calls), so a change is judged by both: this says whether it
did less work, the ladder says whether that shows.

Slow: a contender runs ~5 × slower uninstrumented and ~50 × instrumented; the defaults (the floor,
rung 5, the project; 64 cycles at 4 at once) take about 5 minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from redis.asyncio import Redis

from localslack.seed import BOT_TOKEN

from ..server import open_server
from .__main__ import SECRET, UNPACED, db_url, open_slack
from .drive import Samples, Side, throughput_batch
from .framework_agents import installed
from .ladder_bench import _commands, once_each
from .model import BenchModel
from .procs import Child

CONTENDERS = {  # key → (name, module, extra arguments, environment)
    "d": ("durable floor", "benchmarks.http.durable", [], None),
    "L4": ("rung 4", "benchmarks.http.ladder", ["--rung", "4"], None),
    "L5": ("rung 5", "benchmarks.http.ladder", ["--rung", "5"], None),
    "p": ("project", "benchmarks.http.project", ["--data-dir", "{tmp}/project"], UNPACED),
}
# each framework twice: its agent in the bot (the project with BOT_AGENT naming framework_agents' agent) and
# the same agent alone (framework_apps: bare Bolt, the framework's own pause and resume, its state in sqlite)
# (and alone taking the model's answers streamed, as the bot does to show text as it comes: framework_apps --stream)
FRAMEWORKS = {  # key of the framework in the bot → (framework_agents' name, key alone, key alone streamed)
    "pyd": ("pydantic_ai", "pydA", "pydS"),
    "oai": ("openai_agents", "oaiA", "oaiS"),
    "lg": ("langgraph", "lgA", "lgS"),
}
for _key, (_framework, _alone, _streamed) in FRAMEWORKS.items():
    CONTENDERS[_key] = (f"{_framework} in the bot", "benchmarks.http.project",
                        ["--data-dir", f"{{tmp}}/{_key}", "--agent", f"benchmarks.http.framework_agents:{_framework}"],
                        UNPACED)
    CONTENDERS[_alone] = (f"{_framework} alone", "benchmarks.http.framework_apps",
                          ["--framework", _framework, "--data-dir", f"{{tmp}}/{_alone}"], None)
    CONTENDERS[_streamed] = (f"{_framework} alone, streamed", "benchmarks.http.framework_apps",
                             ["--framework", _framework, "--data-dir", f"{{tmp}}/{_streamed}", "--stream"], None)
# the Agents SDK alone, streamed, offering the model the tool the bot adds to its agent (ask_user): the same model
# requests as in the bot, byte for byte (the bot adds no tool to a pydantic-ai or LangGraph agent)
LIKE_FOR_LIKE = {"oai": "oaiT"}
CONTENDERS["oaiT"] = ("openai_agents alone, streamed, with the bot's ask_user", "benchmarks.http.framework_apps",
                      ["--framework", "openai_agents", "--data-dir", "{tmp}/oaiT", "--stream", "--bots-tools"], None)
# the built-in loop as an agent backend (bot.backends.native), the project's cycle on the project's parts
CONTENDERS["pN"] = ("the built-in loop as a backend", "benchmarks.http.project",
                    ["--data-dir", "{tmp}/pN", "--agent", "benchmarks.http.framework_agents:native"], UNPACED)
IN_THE_BOT = {"p", "pN", *FRAMEWORKS}  # the project's processes: a session status per thread
AGENT_PAIRS = ",".join(",".join((key, *alone, *([LIKE_FOR_LIKE[key]] if key in LIKE_FOR_LIKE else [])))
                       for key, (_, *alone) in FRAMEWORKS.items())
WRAPPED_GOAL = 1.2  # a framework in the bot costs at most this many times the framework alone, per cycle
START_TIMEOUT_S = 600.0  # imports under Valgrind, uninstrumented
# Slack's 3 s for an ack, stretched: under Valgrind on a busy machine an ack can take longer, and Slack's
# retry would then count a second delivery (a count of instructions does not depend on the wait)
UNDER_VALGRIND_ACK_S = 30.0
# the bot's delays before it shows a step's progress (its start written alone after 0.5 s, a status line after
# 1.5 s, a stream after 1 s, a settle's "deliver within"), stretched by the slowdown: under Valgrind (~50 ×) or
# cProfile a step of a few ms outlasts them, and they would fire inside a cycle where, run at full speed against
# the bench's instant model, they do not. Every contender in the bot gets the same (the built-in loop too)
INSTRUMENTED = {"BOT_DELAY_SCALE": "50"}
_BEGAN = time.monotonic()


def _say(text: str) -> None:
    print(f"bench instructions [{time.monotonic() - _BEGAN:5.1f} s]: {text}", file=sys.stderr, flush=True)


@dataclass
class Counted:
    key: str
    name: str
    cycles: int
    instructions: int
    commands: float  # Redis commands per cycle (INFO commandstats)

    @property
    def per_cycle(self) -> float:
        return self.instructions / self.cycles


def _callgrind(pid: int, *flags: str) -> None:
    subprocess.run(["callgrind_control", *flags, str(pid)], check=True, capture_output=True, timeout=120)


def _totals(dump: Path) -> int:
    """The instructions a callgrind dump counted (its ``totals:`` line, else its ``summary:``)."""
    text = dump.read_text(errors="replace")
    found = re.search(r"^totals:\s+(\d+)", text, re.M) or re.search(r"^summary:\s+(\d+)", text, re.M)
    if found is None:
        raise RuntimeError(f"no totals in {dump}")
    return int(found.group(1))


async def count_one(key: str, model: BenchModel, redis_url: str, tmp: Path, cycles: int, concurrency: int,
                    keep: Path | None = None, profile: Path | None = None) -> Counted:
    """``profile``: no callgrind; the counted cycles run under cProfile instead, its stats in ``profile``."""
    name, module, extra, env = CONTENDERS[key]
    slack = await open_slack(UNDER_VALGRIND_ACK_S)
    out = tmp / f"callgrind.{key}"
    under = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-instr=no", "--trace-children=no",
             f"--callgrind-out-file={out}.%p", "--quiet"]
    args = ["--secret", SECRET, "--token", BOT_TOKEN, "--model-url", model.base_url, "--redis-url", redis_url,
            "--slack-url", slack.api_url, *(a.format(tmp=tmp) for a in extra)]
    _say(f"{name}: starting{'' if profile else ' under callgrind'} …")
    if key in IN_THE_BOT:
        env = {**(env or {}), **INSTRUMENTED}
    child = await Child.start(module, args, tmp / f"{key}.log", env, under=[] if profile else under,
                              ready_timeout_s=START_TIMEOUT_S)
    side = Side(name, key, slack, child, Redis.from_url(redis_url), replies=True)
    slack.set_bot_url(child.url)
    pid = child.process.pid
    try:
        _say(f"{name}: warming up …")
        await throughput_batch(side, Samples(), concurrency, 2)
        await side.idle()
        samples = side.samples["cycles"] = Samples()  # where the ladder's _commands reads the counts
        if profile is not None:
            await child.profile(True)
            await throughput_batch(side, samples, concurrency, max(1, cycles // concurrency))
            profile.mkdir(parents=True, exist_ok=True)
            await child.profile(False, (profile / f"{key}.pstats").resolve())
            _say(f"{name}: {samples.cycles} cycles profiled: {profile / key}.pstats")
            return Counted(key, name, samples.cycles, 0, _commands(side).total() / samples.cycles)
        _callgrind(pid, "--zero")
        _callgrind(pid, "--instr=on")
        _say(f"{name}: {cycles} cycles counted …")
        await throughput_batch(side, samples, concurrency, max(1, cycles // concurrency))
        _callgrind(pid, "--instr=off")
        for old in tmp.glob(f"callgrind.{key}.*"):
            old.unlink()
        _callgrind(pid, "--dump=counted")
        dumps = sorted(tmp.glob(f"callgrind.{key}.*"))
        if not dumps:
            raise RuntimeError(f"{name}: callgrind wrote no dump")
        if keep is not None:  # for callgrind_annotate: where the instructions went, by C function
            keep.mkdir(parents=True, exist_ok=True)
            for dump in dumps:
                shutil.copy(dump, keep / dump.name)
        problems = once_each(slack.calls, side.started, statuses_too=key in IN_THE_BOT)
        if problems and key not in IN_THE_BOT:  # the project streams its reply (no chat.postMessage)
            raise RuntimeError(f"{name} did not do the cycle once per thread: {'; '.join(problems)}")
        return Counted(key, name, samples.cycles, sum(_totals(d) for d in dumps),
                       _commands(side).total() / samples.cycles)
    finally:
        await child.stop()
        if side.redis is not None:
            await side.redis.aclose()
        await slack.stop()


def render(counted: list[Counted], command: str, concurrency: int) -> str:
    base = {c.key: c.per_cycle for c in counted}
    lines = [f"`{command}` ({concurrency} threads at once; instructions of the contender's process while the "
             "counted cycles ran, ÷ cycles):", "",
             "| contender | cycles | instructions per cycle | ÷ the floor | ÷ rung 5 | Redis commands per cycle |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for c in counted:
        floor = f"{c.per_cycle / base['d']:.2f} ×" if "d" in base else "—"
        rung5 = f"{c.per_cycle / base['L5']:.2f} ×" if "L5" in base else "—"
        lines.append(f"| {c.name} | {c.cycles} | {c.per_cycle / 1e6:.2f} M | {floor} | {rung5} | {c.commands:.1f} |")
    pairs = [(key, alone, streamed) for key, (_, alone, streamed) in FRAMEWORKS.items()
             if key in base and (alone in base or streamed in base)]
    if pairs:
        lines += ["", f"Each framework in the bot ÷ the same framework alone, taking the model's answers streamed as the "
                  f"bot does (goal: at most {WRAPPED_GOAL} ×; without a streamed count, ÷ alone unstreamed); alone: "
                  "its plain call:", "",
                  "| framework | in the bot | alone, streamed | ÷ alone, streamed | goal | alone | ÷ alone |",
                  "| --- | ---: | ---: | ---: | --- | ---: | ---: |"]
        for key, alone, streamed in pairs:
            ratio = base[key] / base[streamed if streamed in base else alone]
            lines.append(f"| {FRAMEWORKS[key][0]} | {base[key] / 1e6:.2f} M | {_beside(base, key, streamed)} | "
                         f"{'met' if ratio <= WRAPPED_GOAL else 'not met'} | {_beside(base, key, alone)} |")
    for key, same in LIKE_FOR_LIKE.items():
        if key in base and same in base:
            lines += ["", f"{CONTENDERS[key][0]} ÷ {CONTENDERS[same][0]} (the same model requests): "
                          f"{base[key] / base[same]:.3f} ×"]
    return "\n".join(lines)


def _beside(base: dict[str, float], key: str, other: str) -> str:
    """Another contender's count and ``key``'s as a multiple of it, as two cells ("—" where not counted)."""
    return f"{base[other] / 1e6:.2f} M | {base[key] / base[other]:.2f} ×" if other in base else "— | —"


def installed_only(keys: list[str]) -> list[str]:
    """``keys`` less the frameworks (both of a pair) whose extra is not installed, saying so."""
    missing = {framework for framework, *_ in FRAMEWORKS.values() if not installed(framework)}
    for framework in sorted(missing):
        _say(f"skipping {framework} (in the bot and alone): its extra is not installed")
    return [k for k in keys if not any(k in (key, *alone, LIKE_FOR_LIKE.get(key)) and framework in missing
                                       for key, (framework, *alone) in FRAMEWORKS.items())]


async def run(args: argparse.Namespace, argv: list[str]) -> str:
    if not args.profile and shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    server = await open_server()
    tmp = Path(tempfile.mkdtemp(prefix="hitl-bench-instructions-"))
    model = BenchModel()
    await model.start()
    counted = []
    try:
        for index, key in enumerate(installed_only(args.contenders)):
            redis_url = db_url(server.url, server.dbs[index % len(server.dbs)])
            counted.append(await count_one(key, model, redis_url, tmp, args.cycles, args.concurrency, args.keep,
                                           args.profile))
            if args.profile:
                continue
            _say(f"{counted[-1].name}: {counted[-1].per_cycle / 1e6:.2f} M instructions per cycle")
    except BaseException:
        for log in sorted(tmp.glob("*.log")):
            if text := log.read_text(errors="replace").strip():
                _say(f"{log.name}:\n{text[-3000:]}")
        raise
    finally:
        await model.stop()
        await server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.profile:
        return "\n".join(f"{c.name}: {args.profile / c.key}.pstats (python -m pstats), "
                         f"{c.commands:.1f} Redis commands per cycle" for c in counted)
    return render(counted, " ".join(["python -m benchmarks.http.instructions", *argv]), args.concurrency)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.http.instructions",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--contenders", default="d,L5,p",
                        help=f"which, in order (of {', '.join(CONTENDERS)}); 'agents': p and each framework in "
                             f"the bot and alone ({AGENT_PAIRS})")
    parser.add_argument("--cycles", type=int, default=64, help="counted cycles per contender (default 64)")
    parser.add_argument("--concurrency", type=int, default=4, help="threads at once (default 4)")
    parser.add_argument("--keep", type=Path, help="copy each contender's callgrind dump into this directory")
    parser.add_argument("--profile", type=Path, help="no callgrind: cProfile the counted cycles instead, each "
                                                     "contender's stats in this directory (<key>.pstats)")
    args = parser.parse_args(argv)
    args.contenders = [k.strip() for k in args.contenders.replace("agents", f"p,{AGENT_PAIRS}").split(",")
                       if k.strip()]
    if unknown := set(args.contenders) - set(CONTENDERS):
        parser.error(f"no such contender: {sorted(unknown)}")
    return args


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.WARNING)
    print(asyncio.run(run(parse_args(argv), argv)))


if __name__ == "__main__":
    main()
