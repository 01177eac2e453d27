"""Driving one contender through LocalSlack: mentions, cards, clicks, and the measured phases.

Each contender has its own LocalSlack (its own workspace, call log and request URL), all in the bench's
process with the model server. What a person does is done through LocalSlack's own helpers: a
mention is ``post_message`` (Slack's ``app_mention`` and ``message`` events, signed), a click is
``click`` (a signed ``block_actions`` interaction); the ack latency is LocalSlack's own measure of the
HTTP request it sent (``DeliveryResult.elapsed_s``).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from localslack.models import DeliveryResult, Message
from localslack.seed import ALICE, BOT_USER_ID
from localslack.server import LocalSlack

from .model import BenchModel, result_times
from .procs import Child

CHANNELS = [f"C0HTTP{i:03d}" for i in range(128)]  # threads are spread so no channel's history grows long
CYCLE_TIMEOUT_S = 60.0


class BenchError(RuntimeError):
    """A contender did not do what the cycle needs (the figures would mean nothing)."""


@dataclass
class Thread:
    """One mention and its card, as the bench follows it."""

    channel: str
    ts: str
    tag: str
    sent: float = 0.0  # time.monotonic() just before the mention was sent
    card_ts: str = ""
    action_id: str = ""
    card_seen: float = 0.0  # time.monotonic() when the bench saw the card in Slack


@dataclass
class Counts:
    """What the contender used in a stretch of work: CPU (its process, the bench's, Redis's), Redis
    commands (INFO commandstats, by command; commands inside scripts count), Slack calls by method."""

    cpu_s: float = 0.0
    driver_cpu_s: float = 0.0
    redis_cpu_s: float = 0.0
    redis: Counter[str] = field(default_factory=Counter)
    slack: Counter[str] = field(default_factory=Counter)

    def add(self, other: Counts) -> None:
        self.cpu_s += other.cpu_s
        self.driver_cpu_s += other.driver_cpu_s
        self.redis_cpu_s += other.redis_cpu_s
        self.redis.update(other.redis)
        self.slack.update(other.slack)


@dataclass
class Samples:
    """Everything measured for one contender under one condition."""

    acks_light: list[float] = field(default_factory=list)
    acks_burst: list[float] = field(default_factory=list)
    click_to_end: list[float] = field(default_factory=list)  # click sent → the cycle's last Slack call, 5 clicks/s
    # at 32 concurrent: the tool's result made → the reply's Slack call answered, and its two parts: → the model
    # call carrying the result arrived, → the reply (all wall clock, stamped where they happen)
    result_to_reply: list[float] = field(default_factory=list)
    result_to_model: list[float] = field(default_factory=list)
    model_to_reply: list[float] = field(default_factory=list)
    to_model: list[float] = field(default_factory=list)  # mention sent → its first model request arrived
    to_card: list[float] = field(default_factory=list)  # mention sent → card seen in Slack
    cycles: int = 0
    cycle_wall_s: float = 0.0
    counts: Counts = field(default_factory=Counts)  # over the cycles at 32 concurrent
    light_cycles: int = 0
    light_counts: Counts = field(default_factory=Counts)  # over the cycles at 5 clicks/s


def approve_button(message: Message) -> str | None:
    for block in message.blocks or []:
        if block.get("type") == "actions":
            for element in block.get("elements", []):
                if element.get("type") == "button" and (element.get("text") or {}).get("text") == "Approve":
                    return element["action_id"]
    return None


def _delivered(results: Iterable[DeliveryResult], what: str) -> None:
    for result in results:
        if result.status != 200:
            raise BenchError(f"{what}: HTTP {result.status} {result.error or ''} {result.detail or ''}".strip())


@dataclass
class Side:
    """One contender as the bench drives it."""

    name: str
    key: str  # the tag prefix of its threads: p, b, r, d
    slack: LocalSlack
    child: Child | None = None
    redis: Redis | None = None  # the server the project uses (commands are counted server-wide)
    fixed: Thread | None = None  # raw aiohttp: the one card every click goes to (it keeps no state)
    replies: bool = False  # its cycle ends with a reply in the thread (the project, the durable floor)
    started: int = 0
    samples: dict[str, Samples] = field(default_factory=dict)

    @property
    def has_cycle(self) -> bool:
        return self.fixed is None

    def channel(self) -> str:
        return CHANNELS[self.started % len(CHANNELS)]

    # ---- one cycle, step by step ----------------------------------------------------------------------

    async def mention(self, channel: str) -> Thread:
        tag = f"{self.key}{self.started}"
        self.started += 1
        sent = time.monotonic()
        ts, results = await self.slack.post_message(ALICE, channel, f"<@{BOT_USER_ID}> please refund ch_{tag}")
        _delivered(results, f"{self.name}: mention")
        return Thread(channel, ts, tag, sent)

    async def await_card(self, thread: Thread) -> None:
        def card() -> tuple[str, str] | None:
            for message in self.slack.messages(thread.channel, thread.ts)[1:]:
                if action_id := approve_button(message):
                    return message.ts, action_id
            return None

        thread.card_ts, thread.action_id = await self.slack.wait_for(card, CYCLE_TIMEOUT_S)
        thread.card_seen = time.monotonic()

    async def park(self, channel: str | None = None) -> Thread:
        """A thread waiting on its card (raw aiohttp: its one card)."""
        if self.fixed is not None:
            return self.fixed
        thread = await self.mention(channel or self.channel())
        await self.await_card(thread)
        return thread

    async def click(self, thread: Thread) -> float:
        result = await self.slack.click(ALICE, thread.channel, thread.card_ts, thread.action_id)
        _delivered([result], f"{self.name}: click")
        return result.elapsed_s

    def cycle_ended(self, thread: Thread) -> bool:
        """The project and the durable floor: the reply is in the thread and the card has no buttons left.
        Bolt: the card was updated (its cycle is mention → card, click → card updated)."""
        card = self.slack.message(thread.channel, thread.card_ts)
        if card is None or approve_button(card) is not None:
            return False
        if not self.replies:
            return True
        return any("Refunded" in m.text for m in self.slack.messages(thread.channel, thread.ts))

    def last_call_at(self, thread: Thread, since: float) -> float:
        """When LocalSlack answered the last call about ``thread`` (its card or a post in it) after ``since``."""
        return max((c.at for c in self.slack.calls if c.at >= since and c.params.get("channel") == thread.channel
                    and (c.params.get("thread_ts") == thread.ts or c.params.get("ts") == thread.card_ts)),
                   default=math.nan)

    def note_result_to_reply(self, thread: Thread, samples: Samples) -> None:
        """The reply's Slack call and the stamps the bench's model echoed in it (see ``model.result_times``)."""
        for call in reversed(self.slack.calls):
            if (call.method == "chat.postMessage" and call.params.get("thread_ts") == thread.ts
                    and call.params.get("channel") == thread.channel
                    and (stamps := result_times(str(call.params.get("text") or "")))):
                made, asked = stamps
                samples.result_to_reply.append(call.at - made)
                samples.result_to_model.append(asked - made)
                samples.model_to_reply.append(call.at - asked)
                return

    async def await_end(self, thread: Thread) -> None:
        if self.has_cycle:
            await self.slack.wait_for(lambda: self.cycle_ended(thread), CYCLE_TIMEOUT_S)

    async def idle(self) -> None:
        if self.child is not None:
            await self.child.idle()

    # ---- what it used ---------------------------------------------------------------------------------

    async def snapshot(self) -> Counts:
        counts = Counts(cpu_s=await self.child.cpu_s() if self.child else 0.0, driver_cpu_s=time.process_time(),
                        slack=Counter(c.method for c in self.slack.calls))
        if self.redis is not None:
            stats = await self.redis.info("commandstats")
            counts.redis = Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()
                                    if k not in ("cmdstat_info", "cmdstat_ping")})
            cpu = await self.redis.info("cpu")
            counts.redis_cpu_s = float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])
        return counts

    async def measured(self, counts: Counts, work: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``work``, wait until the contender is idle, and add what it used to ``counts``."""
        before = await self.snapshot()
        result = await work()
        await self.idle()
        after = await self.snapshot()
        counts.add(Counts(
            cpu_s=after.cpu_s - before.cpu_s, driver_cpu_s=after.driver_cpu_s - before.driver_cpu_s,
            redis_cpu_s=after.redis_cpu_s - before.redis_cpu_s,
            redis=after.redis - before.redis, slack=after.slack - before.slack))
        return result


# ---- phases ------------------------------------------------------------------------------------------


async def clicks_at(side: Side, threads: list[Thread], rate: float,
                    click_to_end: list[float] | None = None) -> list[float]:
    """Click each thread's card, one every 1/rate s whatever the answers (open loop: a slow ack does not
    slow the clicks, as people do not wait for each other); then wait for every cycle to end. With
    ``click_to_end``, each cycle's time from its click until its last Slack call (the reply posted)."""
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def one(index: int, thread: Thread) -> float:
        await asyncio.sleep(max(0.0, start + index / rate - loop.time()))
        sent = time.time()  # wall clock, as LocalSlack stamps the calls it answers
        ack = await side.click(thread)
        await side.await_end(thread)
        if click_to_end is not None and side.has_cycle:
            # from the click to the cycle's last Slack call as LocalSlack answered it (this loop's own lag in
            # seeing it does not count); not from the ack: Bolt sends its ack in 10 ms steps, often after
            # its listener's calls, so "after the ack" would read negative for the Bolt-based contenders
            click_to_end.append(side.last_call_at(thread, since=sent) - sent)
        return ack

    acks = await asyncio.gather(*(one(i, t) for i, t in enumerate(threads)))
    await side.idle()
    return list(acks)


async def light_batch(side: Side, samples: Samples, model: BenchModel, size: int, rate: float) -> None:
    """Park ``size`` threads one at a time (each mention meets an idle app: the mention → model samples),
    then click them at ``rate`` per second."""

    async def work() -> None:
        threads = []
        for _ in range(size if side.has_cycle else 1):
            thread = await side.park()
            await side.idle()
            if side.has_cycle:
                samples.to_model.append(model.first_seen[thread.tag] - thread.sent)
                samples.to_card.append(thread.card_seen - thread.sent)
            threads.append(thread)
        if not side.has_cycle:
            threads = threads * size
        samples.acks_light += await clicks_at(side, threads, rate, samples.click_to_end)

    await side.measured(samples.light_counts, work)
    samples.light_cycles += size


async def burst_batch(side: Side, samples: Samples, size: int, rate: float, parallel: int = 8) -> None:
    """Park ``size`` threads (``parallel`` at a time), let the app go idle, then click them all at ``rate``."""
    threads: list[Thread] = []
    for start in range(0, size if side.has_cycle else 1, parallel):
        count = min(parallel, size - start)
        threads += await asyncio.gather(*(side.park() for _ in range(count)))
    if not side.has_cycle:
        threads = threads[:1] * size
    await side.idle()
    samples.acks_burst += await clicks_at(side, threads, rate)


async def throughput_batch(side: Side, samples: Samples, concurrency: int, per_worker: int) -> None:
    """``concurrency`` people, each doing ``per_worker`` whole cycles back to back in their own threads."""

    async def person() -> None:
        for _ in range(per_worker):
            thread = await side.park()
            await side.click(thread)
            await side.await_end(thread)
            if side.replies:
                side.note_result_to_reply(thread, samples)

    async def everyone() -> float:
        began = time.monotonic()
        await asyncio.gather(*(person() for _ in range(concurrency)))
        return time.monotonic() - began

    await side.idle()
    samples.cycle_wall_s += await side.measured(samples.counts, everyone)
    samples.cycles += concurrency * per_worker
