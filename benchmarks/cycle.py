"""``python -m benchmarks.cycle``: one approve cycle of the app against a bare Bolt app, side by side.

Both run in this process on loopback, behind the same LocalSlack (signed HTTP both ways, rate limits
off so only the apps are measured, Web API answers optionally delayed). The cycle is what a person
does: a mention, a card in the thread, a click on Approve, the card updated, a reply. The bare Bolt
app does the least that cycle takes (ack, post the card; ack the click, update the card, post the
reply); the app does it for real (Redis, policies, the engine, the outbox, the audit log) with a
scripted model. Contenders alternate in small batches, so machine noise hits both alike.

Figures: click → HTTP ack p50/p99 (what Slack waits for), full cycle p50, CPU per cycle (this
process: both apps share it with LocalSlack, so the ratio understates the app's own cost), Slack Web
API calls per cycle, and Redis commands per cycle (INFO commandstats: commands run inside Lua scripts
count too). Nothing here asserts: it prints (and with ``--write-doc`` records) what it measured.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import BaseModel
from redis.asyncio import Redis
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.app import BotApp, start_bot
from bot.approval import always
from bot.config import Settings
from bot.models.scripted import ScriptedModel, call, say
from bot.tools import tool
from localslack.seed import ALICE, BOT_TOKEN, BOT_USER_ID
from localslack.server import LocalSlack

from .server import open_server

SECRET = "bench-cycle-secret"
DOC = Path(__file__).resolve().parents[1] / "docs" / "PERFORMANCE.md"
START, END = "<!-- bench:cycle:start -->", "<!-- bench:cycle:end -->"


class Refund(BaseModel):
    charge_id: str
    amount: float


@tool(approval=always())
async def refund_charge(args: Refund) -> dict:
    """Refund a charge."""
    return {"refunded": args.charge_id}


def _script() -> ScriptedModel:
    return ScriptedModel([call("refund_charge", charge_id="ch_1", amount=5.0),
                          lambda messages, tools: say("Refunded.")])


def bare_bolt(slack: LocalSlack) -> AsyncApp:
    """The least an app can do for the same cycle, with Bolt's own signature check and parsing."""
    app = AsyncApp(signing_secret=SECRET, client=AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url))
    card = [{"type": "section", "text": {"type": "mrkdwn", "text": "*Approval needed:* `refund_charge`"}},
            {"type": "actions", "elements": [{"type": "button", "action_id": "bolt-approve", "value": "approve",
                                              "text": {"type": "plain_text", "text": "Approve"}}]}]

    @app.event("message")
    async def ignore(ack: Any) -> None:  # the mention's twin event, as the app also receives it
        await ack()

    @app.event("app_mention")
    async def mention(event: dict[str, Any], client: AsyncWebClient) -> None:
        await client.chat_postMessage(channel=event["channel"], thread_ts=event["ts"], text="Approval", blocks=card)

    async def finish(client: AsyncWebClient, where: dict[str, Any]) -> None:
        await client.chat_update(channel=where["channel_id"], ts=where["message_ts"], text="Approved", blocks=[])
        await client.chat_postMessage(channel=where["channel_id"], thread_ts=where.get("thread_ts"), text="Refunded.")

    @app.action("bolt-approve")
    async def approve(ack: Any, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()  # the ack goes out now; the rest after it, as the app does
        pending.add(task := asyncio.create_task(finish(client, body["container"])))
        task.add_done_callback(pending.discard)

    pending: set[asyncio.Task[None]] = set()
    return app


def without_pacing(settings: Settings) -> Settings:
    """The app with SLACK_PACING=off (the setting for apps with raised limits): no waiting for Slack's rates
    (a burst of 4 posts per channel, then one a second; chat.update Tier 3): what the app itself costs."""
    return settings.model_copy(update={"slack_pacing": "off"})


@dataclass
class Contender:
    name: str
    url: str
    acks: list[float] = field(default_factory=list)
    cycles: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    slack_calls: int = 0
    redis_commands: int = 0
    done: int = 0


async def _commands(redis: Redis) -> int:
    stats = await redis.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_info",))


# The app paces its posts per channel as Slack asks (a burst of 4, then one a second): threads are spread
# over enough channels that the figures measure the app, not Slack's limit.
CHANNELS = [f"C0BENCH{i:03d}" for i in range(128)]


def _card(slack: LocalSlack, channel: str, ts: str) -> Any:
    for message in reversed(slack.messages(channel, ts)):
        if any(b.get("type") == "actions" for b in message.blocks or []):
            return message
    return None


async def one_cycle(slack: LocalSlack, who: Contender, n: int) -> None:
    channel = CHANNELS[n % len(CHANNELS)]
    started = time.perf_counter()
    ts, _ = await slack.post_message(ALICE, channel, f"<@{BOT_USER_ID}> refund ch_{n}")
    card = await slack.wait_for(lambda: _card(slack, channel, ts), timeout_s=10)
    button = next(e["action_id"] for b in card.blocks if b.get("type") == "actions" for e in b["elements"])
    clicked = await slack.click(ALICE, channel, card.ts, button)
    await slack.wait_for(lambda: any("Refunded" in m.text for m in slack.messages(channel, ts)), timeout_s=10)
    who.acks.append(clicked.elapsed_s)
    who.cycles.append(time.perf_counter() - started)


async def run_batch(slack: LocalSlack, who: Contender, redis: Redis, bot: BotApp | None, size: int) -> None:
    slack.set_bot_url(who.url)
    calls, commands, cpu = len(slack.calls), await _commands(redis), time.process_time()
    for _ in range(size):
        await one_cycle(slack, who, who.done)
        who.done += 1
    if bot is not None:
        await bot.wait_idle()  # its audit log and deliveries belong to the cycle
    who.cpu_s += time.process_time() - cpu
    who.slack_calls += len(slack.calls) - calls
    who.redis_commands += await _commands(redis) - commands


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def table(app: Contender, unpaced: Contender, bolt: Contender) -> list[str]:
    per = lambda c, v: v / max(c.done, 1)  # noqa: E731
    rows = [
        ("full cycle, p50, app with Slack's pacing off", 1000 * statistics.median(unpaced.cycles),
         1000 * statistics.median(bolt.cycles), "ms", "(info)"),
        ("CPU per cycle, app with Slack's pacing off", 1000 * per(unpaced, unpaced.cpu_s),
         1000 * per(bolt, bolt.cpu_s), "ms", "≤ 1.5 × Bolt"),
        ("click → HTTP ack, p50", _ms(app.acks, 0.5), _ms(bolt.acks, 0.5), "ms", "≤ 1.2 × Bolt"),
        ("click → HTTP ack, p99", _ms(app.acks, 0.99), _ms(bolt.acks, 0.99), "ms", "≤ 1.2 × Bolt"),
        ("full cycle (mention → card → click → reply), p50", 1000 * statistics.median(app.cycles),
         1000 * statistics.median(bolt.cycles), "ms", "(info)"),
        ("CPU per cycle (this process, LocalSlack included)", 1000 * per(app, app.cpu_s),
         1000 * per(bolt, bolt.cpu_s), "ms", "≤ 1.5 × Bolt"),
        ("Slack Web API calls per cycle", per(app, app.slack_calls), per(bolt, bolt.slack_calls), "", "≤ 3"),
        ("Redis commands per cycle (scripts' own included)", per(app, app.redis_commands), 0.0, "", "≤ 40"),
    ]
    out = ["| figure | app | bare Bolt | ratio | goal |", "| --- | ---: | ---: | ---: | --- |"]
    for name, mine, theirs, unit, goal in rows:
        ratio = f"{mine / theirs:.2f}" if theirs else "—"
        out.append(f"| {name} | {mine:,.1f} {unit} | {theirs:,.1f} {unit} | {ratio} | {goal} |")
    return out


async def main(args: argparse.Namespace) -> list[str]:
    server = await open_server()
    redis_url = f"{server.url.split('?')[0].rstrip('/')}" if server.embedded is None else server.url
    redis = Redis.from_url(redis_url)
    slack = LocalSlack(bot_url=None, signing_secret=SECRET, rate_limits=False)
    await slack.start()
    for channel in CHANNELS:
        slack.add_channel(channel, channel.lower(), members=[ALICE])
    tmp = Path(tempfile.mkdtemp(prefix="hitl-cycle-"))
    settings = Settings(_env_file=None, SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET=SECRET,  # type: ignore[call-arg]
                        SLACK_API_URL=slack.api_url, REDIS_URL=redis_url, BOT_TOOLS="", BOT_DATA_DIR=str(tmp))
    bot = await start_bot(settings, model=_script(), tools=[refund_charge], host="127.0.0.1", port=0,
                          recovery_interval=0)
    fast = await start_bot(without_pacing(settings), model=_script(), tools=[refund_charge], host="127.0.0.1", port=0,
                           recovery_interval=0)
    runner = web.AppRunner(bare_bolt(slack).web_app(path="/slack/events"))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    app = Contender("app", f"{bot.url}/slack/events")
    unpaced = Contender("app, unpaced", f"{fast.url}/slack/events")
    bolt = Contender("bare Bolt", f"http://127.0.0.1:{port}/slack/events")
    bots = {app.name: bot, unpaced.name: fast}
    try:
        for who in (app, unpaced, bolt):  # warm-up, not counted
            await run_batch(slack, who, redis, bots.get(who.name), 2)
            who.__init__(who.name, who.url)  # type: ignore[misc]
        for _ in range(args.cycles // args.batch):
            for who in (app, unpaced, bolt):
                await run_batch(slack, who, redis, bots.get(who.name), args.batch)
    finally:
        await runner.cleanup()
        await fast.close()
        await bot.close()
        await slack.stop()
        await redis.aclose()
        await server.close()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    head = (f"Recorded {datetime.now(UTC):%Y-%m-%d %H:%M} UTC with `.venv/bin/python -m benchmarks.cycle "
            f"--cycles {args.cycles}` ({app.done} cycles each, interleaved in batches of {args.batch}); "
            f"{os.cpu_count()} CPUs, load average {load}; scripted model; Slack answering at once.")
    return [head, "", *table(app, unpaced, bolt)]


def write_doc(lines: list[str]) -> None:
    text = DOC.read_text()
    block = "\n".join([START, *lines, END])
    if START in text:
        before, rest = text.split(START, 1)
        text = before + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip() + "\n\n## One approve cycle, side by side with bare Bolt\n\n" + block + "\n"
    DOC.write_text(text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cycle", description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=60, help="approve cycles per contender (default 60)")
    parser.add_argument("--batch", type=int, default=5, help="cycles in a row before switching (default 5)")
    parser.add_argument("--write-doc", action="store_true", help=f"record the table in {DOC.name}")
    logging.basicConfig(level=logging.WARNING)
    result = asyncio.run(main(parser.parse_args()))
    print("\n".join(result))
    if parser.parse_args().write_doc:
        write_doc(result)
