"""The chaos harness: real ``python -m bot run`` processes, killed with SIGKILL at chosen moments.

Everything the bot talks to is real or a wire-level stand-in living in the test process: Redis is the
session's Valkey (``redis_url``), Slack is ``LocalSlack`` (signed HTTP both ways), the model is
:class:`LedgerBrain` (an OpenAI-compatible endpoint). The tools come from
``tests.fixtures_tools.chaos_tools`` and leave a ledger on disk, which is how a test counts executions
across processes that no longer exist.

- :class:`Cluster` starts N replicas (``start(name)``), kills any of them (``kill(name)``: SIGKILL, no
  goodbye), restarts them, routes LocalSlack's deliveries to one (``route(name)``) or posts one signed
  interaction to several at once (``post_interaction``).
- :class:`Trial` is one turn as a person sees it: a mention "ledger K", a card, a click, a reply.
  ``open_turn``/``click``/``finish`` drive it like a patient user; ``finish`` records what was seen.
- :func:`figures` and :func:`problems` turn trials into the numbers the proofs print and assert.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

import httpx
from aiohttp import web

from localslack.actions import LocalSlackError
from localslack.models import Message
from localslack.seed import ALICE, BOT_TOKEN, BOT_USER_ID, GENERAL
from localslack.server import LocalSlack
from tests.fakes.openai_server import FakeOpenAI, _Completion, _Reply

T = TypeVar("T")
REPO_ROOT = Path(__file__).resolve().parents[2]
API_KEY = "sk-chaos"
SOAK = os.environ.get("SOAK") == "1"

# When the bot is killed, relative to the turn (the four windows the engine must survive).
BEFORE_CLICK, AFTER_ACK, TOOL_RUNNING, RESUMING = "before_click", "after_ack", "tool_running", "resuming"
MOMENTS = (BEFORE_CLICK, AFTER_ACK, TOOL_RUNNING, RESUMING)

INTERRUPTED = "was interrupted and not re-run"


# --- the model -------------------------------------------------------------------------------------


class LedgerBrain(FakeOpenAI):
    """A deterministic model that answers from the conversation alone, so any replica, after any crash,
    gets the same answer: the user says "ledger K" (or "ledger-idem K") → call ``ledger_write``
    (``ledger_write_idem``) with ``{"key": K}``; a tool result → "wrote K", "K was interrupted and not
    re-run: …" or "K failed: …".

    It replaces the base class's FIFO script (which cannot serve concurrent sessions) and keeps its
    wire format, auth check and request log.
    """

    def __init__(self) -> None:
        super().__init__(api_key=API_KEY)
        self.calls_requested: Counter[str] = Counter()  # key → tool calls the brain asked for

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        received = await self._record(request)
        if failure := self._auth_failure(received.headers):
            return failure
        body = received.body if isinstance(received.body, dict) else {}
        reply = self.decide(body.get("messages") or [])
        completion = _Completion(body, reply)
        if body.get("stream"):
            return await completion.stream(request)
        return web.json_response(completion.as_json())

    def decide(self, messages: list[dict[str, Any]]) -> _Reply:
        asked = _last_user_text(messages)
        match = re.search(r"ledger(-idem)?\s+(\S+)", asked)
        if match is None:
            return _Reply("text", text="Say “ledger <key>”.")
        idem, key = bool(match.group(1)), match.group(2)
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            return _Reply("text", text=_result_text(key, str(last.get("content") or "")))
        self.calls_requested[key] += 1
        name = "ledger_write_idem" if idem else "ledger_write"
        call = {
            "id": f"call_{key}_{self.calls_requested[key]}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps({"key": key})},
        }
        return _Reply("tool_calls", tool_calls=[call])


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


def _result_text(key: str, content: str) -> str:
    try:
        parsed = json.loads(content)
    except ValueError:
        parsed = content
    if isinstance(parsed, dict) and parsed.get("status") in ("failed", "rejected"):
        error = str(parsed.get("error") or parsed.get("message") or parsed)
        if "interrupted" in error:
            return f"{key} {INTERRUPTED}: {error}"
        return f"{key} failed: {error}"
    return f"wrote {key}"


# --- processes ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def killed(proc: subprocess.Popen) -> None:
    """kill -9 a bot process and wait for it: no handler runs, nothing is flushed."""
    proc.send_signal(signal.SIGKILL)
    await asyncio.to_thread(proc.wait)


async def stop_process(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """SIGTERM, wait without blocking the event loop, then SIGKILL if it is still there.

    The wait must not block: LocalSlack runs in this event loop, and a bot shutting down gracefully
    is still calling it (a blocking ``proc.wait()`` starves those calls until the bot's own timeouts).
    """
    if proc.poll() is None:
        proc.terminate()
        try:
            await asyncio.to_thread(proc.wait, timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
    await asyncio.to_thread(proc.wait)


@dataclass
class Replica:
    name: str
    proc: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def events_url(self) -> str:
        return f"{self.url}/slack/events"

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


class Cluster:
    """Bot replicas sharing one Redis, one LocalSlack, one model and one ledger."""

    def __init__(
        self,
        slack: LocalSlack,
        brain: LedgerBrain,
        redis_url: str,
        workdir: Path,
        *,
        lease_seconds: float = 1.0,
        tool_delay: float = 1.0,
        agent: str | None = None,
    ):
        self.slack = slack
        self.agent = agent  # BOT_AGENT: a framework's agent (tests.fixtures_tools.ledger_agent_*) drives the turns
        self.brain = brain
        self.redis_url = redis_url
        self.workdir = workdir
        self.lease_seconds = lease_seconds
        self.tool_delay = tool_delay
        self.ledger_path = workdir / "ledger.tsv"
        self.starts_path = workdir / "starts.tsv"
        self.replicas: dict[str, Replica] = {}
        self.kills: Counter[str] = Counter()  # moment → SIGKILLs sent
        self.logs: list[Path] = []
        self._generation = 0

    def env(self, port: int) -> dict[str, str]:
        inherited = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SLACK_", "OPENAI_", "BOT_", "CHAOS_", "REDIS_"))
        }
        return {
            **inherited,
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": self.slack.signing_secret,
            "SLACK_API_URL": self.slack.api_url,
            "REDIS_URL": self.redis_url,
            "PORT": str(port),
            "HOST": "127.0.0.1",
            "BOT_DATA_DIR": str(self.workdir / "data"),
            "BOT_LEASE_SECONDS": str(self.lease_seconds),
            # the same ledger tools, as the built-in loop's or as a framework agent's
            **({"BOT_TOOLS": "", "BOT_AGENT": self.agent} if self.agent else
               {"BOT_TOOLS": "tests.fixtures_tools.chaos_tools"}),
            "OPENAI_BASE_URL": self.brain.base_url,
            "OPENAI_API_KEY": API_KEY,
            "CHAOS_LEDGER": str(self.ledger_path),
            "CHAOS_STARTS": str(self.starts_path),
            "CHAOS_TOOL_DELAY": str(self.tool_delay),
        }

    async def start(self, name: str) -> Replica:
        """Start (or restart) replica ``name``; returns once it answers /readyz.

        A restarted replica gets a new port; if LocalSlack was routed to it, the route follows.
        """
        old = self.replicas.get(name)
        if old is not None and old.alive:
            raise RuntimeError(f"replica {name} is still running")
        port = free_port()
        self._generation += 1
        log_path = self.workdir / f"bot-{name}-{self._generation}.log"
        self.logs.append(log_path)
        log = open(log_path, "w")  # noqa: SIM115 - the child holds it; closed below
        # cwd outside the repository: a developer's .env must not leak into the bot under test
        proc = subprocess.Popen(
            [sys.executable, "-m", "bot", "run"],
            cwd=self.workdir,
            env=self.env(port),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        replica = Replica(name, proc, port, log_path)
        self.replicas[name] = replica
        if old is not None and self.slack.bot_url == old.events_url:
            # Slack keeps delivering to "the app", wherever it runs now
            self.slack.set_bot_url(replica.events_url)
        async with httpx.AsyncClient() as client:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise AssertionError(f"replica {name} exited at start:\n{log_path.read_text()}")
                try:
                    if (await client.get(f"{replica.url}/readyz", timeout=1)).status_code == 200:
                        return replica
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.05)
        raise AssertionError(f"replica {name} did not become ready:\n{log_path.read_text()}")

    def kill(self, name: str, moment: str = "") -> None:
        """SIGKILL: no handler runs, nothing is flushed, sockets just close."""
        replica = self.replicas[name]
        replica.proc.send_signal(signal.SIGKILL)
        replica.proc.wait()
        self.kills[moment or "unspecified"] += 1

    def route(self, name: str) -> None:
        """LocalSlack delivers events and interactions to this replica from now on."""
        self.slack.set_bot_url(self.replicas[name].events_url)

    async def stop_all(self) -> None:
        await asyncio.gather(*(stop_process(r.proc) for r in self.replicas.values()))

    async def post_interaction(self, payload: dict[str, Any], names: Iterable[str]) -> list[int]:
        """POST one signed interaction payload to several replicas at the same time; their HTTP statuses."""
        body = urlencode({"payload": json.dumps(payload)}).encode()
        headers = {"Content-Type": "application/x-www-form-urlencoded", **self.slack.sign(body)}
        async with httpx.AsyncClient(timeout=10) as client:
            sent = [client.post(self.replicas[n].events_url, content=body, headers=headers) for n in names]
            return [r.status_code for r in await asyncio.gather(*sent)]

    # the ledger ---------------------------------------------------------------------------------

    @staticmethod
    def _rows(path: Path, key: str) -> list[list[str]]:
        if not path.exists():
            return []
        rows = [line.split("\t") for line in path.read_text().splitlines() if line]
        return [r for r in rows if r[0] == key]

    def ledger(self, key: str) -> list[list[str]]:
        """The effects for ``key``: one row (key, pid, idempotency key) per line written."""
        return self._rows(self.ledger_path, key)

    def starts(self, key: str) -> list[list[str]]:
        """Executions for ``key``: one row per time a tool body started."""
        return self._rows(self.starts_path, key)

    def log_problems(self, limit: int = 40) -> list[str]:
        """ERROR/WARNING lines (and tracebacks' last lines) from every replica's log, for the report."""
        out: list[str] = []
        for path in self.logs:
            if not path.exists():
                continue
            for line in path.read_text(errors="replace").splitlines():
                if (
                    " ERROR " in line
                    or " WARNING " in line
                    or line.startswith(("Traceback", "redis.", "bot."))
                ):
                    out.append(f"{path.name}: {line[:300]}")
        return out[-limit:]


async def poll(condition: Callable[[], T], timeout_s: float, interval_s: float = 0.02) -> T:
    """Wait until ``condition()`` is truthy (for things outside LocalSlack, like the ledger file)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"condition not met within {timeout_s}s")
        await asyncio.sleep(interval_s)


# --- a turn, as a person sees it ------------------------------------------------------------------


@dataclass
class Trial:
    key: str
    idempotent: bool = False
    moment: str = ""
    thread_ts: str = ""
    card_ts: str = ""
    clicks: int = 0
    reply: str | None = None
    replies: int = 0  # final replies posted for this key (more than one = the turn ended twice)
    lines: int = 0
    executions: int = 0
    live_card: bool = False
    card_outcomes: set[str] = field(default_factory=set)  # distinct settled renderings of the card
    notes: list[str] = field(default_factory=list)

    @property
    def command(self) -> str:
        return f"ledger-idem {self.key}" if self.idempotent else f"ledger {self.key}"

    @property
    def outcome(self) -> str:
        if self.reply is None:
            return "lost"
        if self.reply.startswith(f"wrote {self.key}"):
            return "wrote"
        if INTERRUPTED in self.reply:
            return "interrupted"
        return "failed"

    def describe(self) -> str:
        return (
            f"{self.key} thread={self.thread_ts} moment={self.moment} idem={self.idempotent} outcome={self.outcome} "
            f"lines={self.lines} executions={self.executions} clicks={self.clicks} live_card={self.live_card} "
            f"replies={self.replies} reply={self.reply!r} notes={self.notes}"
        )


def _is_bot(message: Message) -> bool:
    return bool(message.bot_id) or message.user == BOT_USER_ID


def _has_buttons(message: Message) -> bool:
    return any(b.get("type") == "actions" for b in message.blocks or [])


def live_cards(slack: LocalSlack, trial: Trial) -> list[Message]:
    return [m for m in slack.messages(GENERAL, trial.thread_ts) if _is_bot(m) and _has_buttons(m)]


def final_replies(slack: LocalSlack, trial: Trial) -> list[Message]:
    """The bot's answers that end the turn: the brain's texts, or the engine's failure notice."""
    k = re.escape(trial.key)
    pattern = re.compile(rf"^(wrote {k}\b|{k} {INTERRUPTED}|{k} failed)|^:warning:")
    return [
        m
        for m in slack.messages(GENERAL, trial.thread_ts)
        if _is_bot(m) and m.ts != trial.card_ts and pattern.search(m.text or "")
    ]


def approve_button(card: Message) -> str:
    for block in card.blocks or []:
        for element in block.get("elements", []):
            if element.get("type") == "button" and element["text"]["text"] == "Approve":
                return element["action_id"]
    raise LookupError("no Approve button")


async def open_turn(slack: LocalSlack, trial: Trial, timeout_s: float = 20) -> None:
    """Mention the bot with the trial's command and wait for the approval card."""
    trial.thread_ts, deliveries = await slack.post_message(
        ALICE, GENERAL, f"<@{BOT_USER_ID}> {trial.command}"
    )
    if not all(d.ok for d in deliveries):
        trial.notes.append(f"mention not acked: {[d.error or d.status for d in deliveries]}")
    card = await slack.wait_for(lambda: next(iter(live_cards(slack, trial)), None), timeout_s)
    trial.card_ts = card.ts


async def click(slack: LocalSlack, trial: Trial) -> bool:
    """Alice clicks Approve on the trial's card, if it still has buttons; True when Slack got a 200 ack."""
    card = slack.message(GENERAL, trial.card_ts)
    if card is None or not _has_buttons(card):
        return False
    try:
        result = await slack.click(ALICE, GENERAL, trial.card_ts, approve_button(card))
    except (LookupError, LocalSlackError):
        return False  # settled between the look and the click
    trial.clicks += 1
    if not result.ok:
        trial.notes.append(f"click {trial.clicks} not acked: {result.error or result.status}")
    return result.ok


async def click_payload(slack: LocalSlack, trial: Trial) -> dict[str, Any]:
    """The exact signed-to-be ``block_actions`` payload Slack would send for Alice's Approve click.

    LocalSlack builds it as for a real click; with no bot URL the delivery is skipped and the payload
    is returned, to be posted to several replicas by hand.
    """
    card = slack.message(GENERAL, trial.card_ts)
    assert card is not None
    previous = slack.bot_url
    slack.set_bot_url(None)
    try:
        result = await slack.click(ALICE, GENERAL, trial.card_ts, approve_button(card))
    finally:
        slack.set_bot_url(previous)
    assert result.error == "no_bot_url" and result.payload, result
    trial.clicks += 1
    return result.payload


async def finish(
    slack: LocalSlack, cluster: Cluster, trial: Trial, *, timeout_s: float = 25, reclick_after_s: float = 4.0
) -> None:
    """Wait like a patient user until the turn ends, clicking Approve again when the card still offers
    it after a while (a click the crash swallowed), then record what the user and the ledger show."""
    deadline = time.monotonic() + timeout_s
    last_click = None if trial.moment == BEFORE_CLICK else time.monotonic()
    while time.monotonic() < deadline:
        if final_replies(slack, trial):
            break
        if live_cards(slack, trial) and (
            last_click is None or time.monotonic() - last_click >= reclick_after_s
        ):
            await click(slack, trial)
            last_click = time.monotonic()
        try:
            await slack.wait_for(lambda: final_replies(slack, trial), timeout_s=0.5)
        except TimeoutError:
            pass
    replies = final_replies(slack, trial)
    trial.replies = len(replies)
    trial.reply = replies[0].text if replies else None
    if trial.reply is not None:
        # the card is updated when its request settles; give a late render a moment before judging
        try:
            await slack.wait_for(lambda: not live_cards(slack, trial), timeout_s=5)
        except TimeoutError:
            pass
    trial.live_card = bool(live_cards(slack, trial))
    trial.lines = len(cluster.ledger(trial.key))
    trial.executions = len(cluster.starts(trial.key))
    trial.card_outcomes = {
        c.params.get("text") or ""
        for c in slack.calls_to("chat.update")
        if c.params.get("ts") == trial.card_ts and "actions" not in json.dumps(c.params.get("blocks") or "")
    }


# --- what the proofs print and assert -------------------------------------------------------------


def problems(trial: Trial) -> list[str]:
    """Every broken promise this trial shows (empty = it kept them all)."""
    found = []
    if trial.outcome == "lost":
        found.append("lost turn: no final reply")
    if trial.outcome == "failed":
        found.append("turn ended in an unexpected failure")
    if trial.replies > 1:
        found.append(f"the turn answered {trial.replies} times")
    if trial.lines > 1:
        found.append(f"ran {trial.lines} times (double execution)")
    if trial.executions > 1 and not trial.idempotent:  # cut short, it is reported interrupted, never started again
        found.append(f"a call not safe to repeat started {trial.executions} times")
    if trial.outcome == "wrote" and trial.lines == 0:
        found.append("reported written but the ledger has no line")
    if trial.outcome == "interrupted" and trial.idempotent:
        found.append("an idempotent call was reported interrupted instead of re-run")
    if trial.live_card:
        found.append("card still has live buttons after the turn ended")
    return found


def unstopped_streams(slack: LocalSlack) -> dict[str, int]:
    """Each stream Slack saw started (its message's ts) not stopped exactly once: one left streaming is a message
    a person sees never finish. (A second stop that Slack refuses, the stream being over, changes nothing.)"""
    started = Counter(c.response["ts"] for c in slack.calls_to("chat.startStream") if c.response.get("ok"))
    stopped = Counter(c.params.get("ts") for c in slack.calls_to("chat.stopStream") if c.response.get("ok"))
    return {ts: n - stopped[ts] for ts, n in started.items() if n != stopped[ts]}


def figures(trials: list[Trial], cluster: Cluster) -> dict[str, Any]:
    outcomes = Counter(t.outcome for t in trials)
    return {
        "trials": len(trials),
        "kills": dict(cluster.kills),
        "outcomes": dict(outcomes),
        "lost": outcomes.get("lost", 0),
        "doubles": sum(1 for t in trials if t.lines > 1),
        "interrupted_not_rerun": sum(1 for t in trials if t.outcome == "interrupted" and t.lines == 0),
        "interrupted_after_effect": sum(1 for t in trials if t.outcome == "interrupted" and t.lines == 1),
        "live_cards": sum(1 for t in trials if t.live_card),
        "extra_replies": sum(max(t.replies - 1, 0) for t in trials),
        "reclicks": sum(max(t.clicks - 1, 0) for t in trials),
        "executions": sum(t.executions for t in trials),
        "effects": sum(t.lines for t in trials),
        "broken": sum(1 for t in trials if problems(t)),
    }


def report(title: str, trials: list[Trial], cluster: Cluster, extra: dict[str, Any] | None = None) -> str:
    lines = [f"== {title}: " + json.dumps({**figures(trials, cluster), **(extra or {})}, sort_keys=True)]
    for t in trials:
        if problems(t):
            lines.append(f"  BROKEN {t.describe()} -> {problems(t)}")
    if any(problems(t) for t in trials):
        lines.append("  bot log problems (last lines):")
        lines += [f"    {line}" for line in cluster.log_problems()]
        lines.append(f"  logs: {[str(p) for p in cluster.logs]}")
    return "\n".join(lines)
