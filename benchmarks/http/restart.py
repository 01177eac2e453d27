"""kill -9 → restart → first click served, for each contender, with 0 … N turns parked in the project's Redis.

Every restart is a fresh interpreter: the project as ``python -m bot run`` (configured by environment
variables, as deployed), the durable floor as ``python -m benchmarks.http.durable``, bare Bolt and raw
aiohttp as ``python -m benchmarks.http.bare bolt|raw``. The clock starts when the process is spawned and
stops when a signed click on a card gets its HTTP 200: the bench clicks every 5 ms until then (a refused
connection is not a click). For the project and the durable floor the card is a real parked turn (parked by the previous process before it was killed), and the bench then waits
for the turn's reply, so the click is known to have counted. Between restarts the process is killed
with SIGKILL once it has settled (no clean shutdown).

The parked population beside that one real turn is written by copying it (``benchmarks.population``:
every key of the session, ids rewritten) into the database before the first measured restart.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from redis.asyncio import Redis
from slack_sdk.web.async_client import AsyncWebClient

from blocks.actions import decode_action_id
from bot.session import session_slot, slack_session_id
from localslack.seed import BOT_TOKEN, TEAM_ID
from store.turns import RedisTurns

from ..population import Cloner, Template, read_template
from .bare import BOLT_ACTION, approve_card
from .drive import BenchError, Side, Thread, approve_button
from .procs import child_env

POLL_S = 0.005
START_TIMEOUT_S = 60.0
SETTLE_S = 0.2  # let the process finish what it was doing before it is killed (a kill while idle)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ThreadCloner(Cloner):
    """``Cloner`` for a turn parked in a LocalSlack channel (the engine bench's copies live in its own
    team and channel)."""

    def __init__(self, redis: Redis, template: Template, channel: str):
        super().__init__(redis, template)
        self.channel = channel
        self.pending_key = RedisTurns.pending_key(TEAM_ID)

    def ids(self, n: int) -> dict[bytes, bytes]:
        thread_ts = f"1719000000.{n:06d}"
        slot = session_slot(slack_session_id(TEAM_ID, self.channel, thread_ts))
        t = self.template
        return {t.request_tail: f"{n:012x}".encode(), t.thread_ts: thread_ts.encode(),
                t.turn_id: f"turn_{n:012x}".encode(), t.call_id: f"call_{n:024x}".encode(), t.slot: slot.encode()}

    def session_id(self, n: int) -> str:
        return slack_session_id(TEAM_ID, self.channel, f"1719000000.{n:06d}")


@dataclass
class Launch:
    """How one contender is started afresh."""

    side: Side
    args: list[str]
    env: dict[str, str]
    log: Path
    process: asyncio.subprocess.Process | None = None
    port: int = 0

    async def spawn(self, port: int) -> None:
        self.port = port
        log = self.log.open("ab")
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, *[a.replace("{port}", str(port)) for a in self.args], cwd=self.log.parent,
            env=child_env({k: v.replace("{port}", str(port)) for k, v in self.env.items()}),
            stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        self.side.slack.set_bot_url(f"http://127.0.0.1:{port}/slack/events")

    async def wait_healthy(self) -> None:
        """Until ``GET /healthz`` answers (the project's health route): before the bench talks to it."""
        deadline = time.monotonic() + START_TIMEOUT_S
        async with aiohttp.ClientSession() as http:
            while time.monotonic() < deadline:
                try:
                    async with http.get(f"http://127.0.0.1:{self.port}/healthz") as answer:
                        if answer.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)
        raise BenchError(f"{self.side.name} did not come up; see {self.log}")

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()  # SIGKILL: no shutdown, nothing flushed
            await self.process.wait()
        self.process = None


async def first_click(launch: Launch, thread: Thread) -> float:
    """Seconds from spawning the process until a signed click on ``thread``'s card is answered 200."""
    began = time.monotonic()
    await launch.spawn(free_port())
    while time.monotonic() - began < START_TIMEOUT_S:
        result = await launch.side.slack.click("U0ALICE", thread.channel, thread.card_ts, thread.action_id)
        if result.status == 200:
            return time.monotonic() - began
        if result.status is not None:
            raise BenchError(f"{launch.side.name} answered a click with HTTP {result.status} after a restart")
        assert launch.process is not None
        if launch.process.returncode is not None:
            raise BenchError(f"{launch.side.name} exited with {launch.process.returncode}; see {launch.log}")
        await asyncio.sleep(POLL_S)
    raise BenchError(f"{launch.side.name} did not answer a click within {START_TIMEOUT_S:.0f} s; see {launch.log}")


class ProjectRestarts:
    """The project (or the durable floor) in one database: always one real turn parked for the next
    process to be clicked."""

    def __init__(self, launch: Launch, redis: Redis):
        self.launch = launch
        self.redis = redis
        self.thread: Thread | None = None

    async def prepare(self, parked: int) -> float:
        """Start a process (not measured), park the real turn, copy it ``parked`` times; kill -9."""
        await self.launch.spawn(free_port())
        # a mention sent before it listens would be retried by LocalSlack later and park a second turn
        await self.launch.wait_healthy()
        await self._park_next()
        began = time.monotonic()
        if parked:
            assert self.thread is not None
            decoded = decode_action_id(self.thread.action_id)
            if decoded is None:
                raise BenchError("the project's card carries no request id")
            request_id = decoded.request_id
            session_id = slack_session_id(TEAM_ID, self.thread.channel, self.thread.ts)
            template = await read_template(RedisTurns(self.redis), session_id, self.thread.ts, request_id)
            await ThreadCloner(self.redis, template, self.thread.channel).write(0, parked)
        took = time.monotonic() - began
        await self.launch.kill()
        return took

    async def _park_next(self) -> None:
        self.thread = await self.launch.side.park()
        await asyncio.sleep(SETTLE_S)

    async def once(self) -> float:
        assert self.thread is not None
        took = await first_click(self.launch, self.thread)
        await self.launch.side.await_end(self.thread)  # the click counted: the turn ran to its reply
        await self._park_next()
        await self.launch.kill()
        return took

    async def parked(self) -> int:
        return int(await self.redis.zcard(RedisTurns.pending_key(TEAM_ID)))


class BareRestarts:
    """Bolt or raw aiohttp: a card posted by the bench (as the bot) for each restart to click."""

    def __init__(self, launch: Launch, action_id: str, updates_card: bool):
        self.launch = launch
        self.action_id = action_id
        self.updates_card = updates_card
        self.client = AsyncWebClient(token=BOT_TOKEN, base_url=launch.side.slack.api_url)
        self.card: Thread | None = None

    async def _card(self) -> Thread:
        if self.card is None or self.updates_card:  # Bolt's click takes the button away
            channel = self.launch.side.channel()
            posted = await self.client.chat_postMessage(channel=channel, text="Approve?",
                                                        blocks=approve_card(self.action_id))
            self.card = Thread(channel, posted["ts"], "", card_ts=posted["ts"], action_id=self.action_id)
        return self.card

    async def once(self) -> float:
        card = await self._card()
        took = await first_click(self.launch, card)
        if self.updates_card:  # Bolt's listener runs after the ack: let it finish before the kill
            slack = self.launch.side.slack
            await slack.wait_for(lambda: (m := slack.message(card.channel, card.ts)) and not approve_button(m), 10)
            await asyncio.sleep(SETTLE_S)
        await self.launch.kill()
        return took


def project_launch(side: Side, secret: str, model_url: str, redis_url: str, data_dir: Path) -> Launch:
    env = {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": secret, "SLACK_API_URL": side.slack.api_url,
           "REDIS_URL": redis_url, "BOT_TOOLS": "benchmarks.http.tools", "BOT_DATA_DIR": str(data_dir),
           "OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": model_url, "MODEL": "bench-model",
           "HOST": "127.0.0.1", "PORT": "{port}", "SLACK_PACING": "off"}
    return Launch(side, ["-m", "bot", "run"], env, data_dir / "project-restarts.log")


def langgraph_launch(side: Side, secret: str, model_url: str, data_dir: Path) -> Launch:
    """The LangGraph peer on its own SQLite file in ``data_dir`` (its parked turns live there, not in Redis)."""
    args = ["-m", "benchmarks.http.langgraph_app", "--secret", secret, "--token", BOT_TOKEN,
            "--slack-url", side.slack.api_url, "--model-url", model_url, "--data-dir", str(data_dir / "langgraph"),
            "--port", "{port}"]
    return Launch(side, args, {}, data_dir / "langgraph-restarts.log")


def floor_launch(side: Side, secret: str, model_url: str, redis_url: str, data_dir: Path) -> Launch:
    args = ["-m", "benchmarks.http.durable", "--secret", secret, "--token", BOT_TOKEN,
            "--slack-url", side.slack.api_url, "--model-url", model_url, "--redis-url", redis_url, "--port", "{port}"]
    return Launch(side, args, {}, data_dir / "durable-restarts.log")


def bare_launch(side: Side, kind: str, secret: str, model_url: str, data_dir: Path) -> Launch:
    args = ["-m", "benchmarks.http.bare", kind, "--secret", secret, "--token", BOT_TOKEN,
            "--slack-url", side.slack.api_url, "--model-url", model_url, "--port", "{port}"]
    return Launch(side, args, {}, data_dir / f"{kind}-restarts.log")


def bolt_restarts(side: Side, secret: str, model_url: str, data_dir: Path) -> BareRestarts:
    return BareRestarts(bare_launch(side, "bolt", secret, model_url, data_dir), BOLT_ACTION, updates_card=True)


def raw_restarts(side: Side, secret: str, model_url: str, data_dir: Path) -> BareRestarts:
    from .bare import RAW_ACTION

    return BareRestarts(bare_launch(side, "raw", secret, model_url, data_dir), RAW_ACTION, updates_card=False)
