"""Start fast: a restarted bot reads and builds only what its first click needs.

- What Redis sees (INFO commandstats) while a bot starts and runs its start-up sweep: no SCAN or KEYS
  (nothing is listed at start), and the same commands whether 1 or 5 turns are parked (the start does not
  grow with the parked population; the 10,000-turn figures are in docs/PERFORMANCE.md, "Start fast").
- What a restarted ``python -m bot run`` imports (``PYTHONPROFILEIMPORTTIME``) until its first click's
  turn has ended: not the model client before a turn calls the model, never the parts this deployment
  does not use (OpenAPI, MCP, OAuth, Socket Mode, the local workspace, the trace exporter).
- Importing the app builds no pydantic validator but the two every start uses (``bot.deferred``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from bot.models.scripted import ScriptedModel, call
from localslack.seed import ALICE, GENERAL
from tests.chaos.harness import REPO_ROOT, Cluster, LedgerBrain, Trial, click, finish, open_turn
from tests.e2e.test_approval_flow import mention_and_wait_for_card, refund_charge

# built by a restarted process only once a turn calls the model (bot.app.ModelOnFirstUse)
MODEL_CLIENT = ("bot.models.openai", "bot.models.transport")
# the model client speaks aiohttp, imported already for Slack: httpx is never needed, first turn included
NOT_FOR_THE_MODEL = ("httpx", "httpcore", "h11", "anyio", "bot.models.httpx_transport")
# what a bot without BOT_OPENAPI_CONFIG, BOT_MCP_CONFIG, SLACK_CLIENT_ID, SLACK_APP_TOKEN, a local workspace or
# OTEL_EXPORTER_OTLP_ENDPOINT never needs, first click included
UNUSED_HERE = ("bot.connections.openapi", "yaml", "jsonschema", "bot.connections.mcp", "mcp", "handlers.routes.oauth", "store.installations",
               "slack_bolt.adapter.socket_mode", "slack_sdk.socket_mode", "localslack",
               "opentelemetry.exporter", "opentelemetry.sdk.trace", "bot.models.demo")
# the models every start builds: the settings it reads, and the principal it acts as (bot.principals.APP_PRINCIPAL)
BUILT_AT_IMPORT = {"bot.config.Settings", "bot.principals.Principal"}

IGNORED = {"info", "config|resetstat", "config|get"}  # the test's own


async def _park(local_slack, start_app, turns: int) -> None:
    bot = await start_app(ScriptedModel([call("refund_charge", charge_id=f"ch_{n}", amount=1.0) for n in range(turns)]),
                          [refund_charge])
    for n in range(turns):
        await mention_and_wait_for_card(local_slack, f"refund ch_{n} please", user=ALICE)
    await bot.wait_idle()
    await bot.close()


async def _commands_of_a_start(start_app, redis) -> Counter[str]:
    await redis.config_resetstat()
    bot = await start_app(ScriptedModel([]), [refund_charge])  # returns after its start-up sweep
    await bot.wait_idle()
    stats = await redis.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()
                    if name.removeprefix("cmdstat_") not in IGNORED})


async def test_a_start_lists_nothing_and_reads_the_same_with_more_turns_parked(local_slack, start_app, redis):
    await _park(local_slack, start_app, 1)
    with_one = await _commands_of_a_start(start_app, redis)
    await _park(local_slack, start_app, 4)
    assert len(local_slack.messages(GENERAL)) == 5
    with_five = await _commands_of_a_start(start_app, redis)

    assert not {"scan", "keys", "hscan", "sscan", "zscan"} & (set(with_one) | set(with_five)), with_five
    assert with_five == with_one, f"one parked: {dict(with_one)}; five parked: {dict(with_five)}"


class _ImportsLogged(Cluster):
    """Replicas that log every import as it completes (``-X importtime``, to their log)."""

    def env(self, port: int) -> dict[str, str]:
        return {**super().env(port), "PYTHONPROFILEIMPORTTIME": "1"}


def _imported(log: Path) -> list[str]:
    return re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", log.read_text(errors="replace"), re.M)


def _of(modules: list[str], packages: tuple[str, ...]) -> list[str]:
    return sorted({m for m in modules if any(m == p or m.startswith(p + ".") for p in packages)})


async def test_a_restarted_bot_imports_the_model_client_when_a_turn_needs_it_and_unused_parts_never(
        local_slack, redis_url, tmp_path):
    async with LedgerBrain() as brain:
        cluster = _ImportsLogged(local_slack, brain, redis_url, tmp_path, tool_delay=0)
        try:
            await cluster.start("before")
            cluster.route("before")
            trial = Trial("k1")
            await open_turn(local_slack, trial)
            cluster.kill("before")
            await cluster.start("after")  # returns once /readyz answers
            cluster.route("after")
            at_start = _imported(cluster.logs[-1])
            assert await click(local_slack, trial)
            await finish(local_slack, cluster, trial)
            after_click = _imported(cluster.logs[-1])
        finally:
            await cluster.stop_all()

    assert trial.reply == "wrote k1" and len(cluster.ledger("k1")) == 1, trial.describe()
    assert "bot.app" in at_start and "slack_bolt" in at_start  # the log is what the process imported
    assert _of(at_start, MODEL_CLIENT) == [], "the model client is built when a turn first calls the model"
    assert _of(after_click, ("bot.models.openai",)) == ["bot.models.openai"]  # ... and then it is
    assert _of(after_click, NOT_FOR_THE_MODEL) == [], "the model client needs nothing aiohttp does not give"
    assert _of(after_click, UNUSED_HERE) == [], "imported without being used by a start or a first click"


def test_importing_the_app_builds_no_validator_before_its_first_use():
    probe = """
import json, pydantic
import bot.app
from bot.protocol import EVENT_ADAPTER

def subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from subclasses(sub)

ours = {f"{c.__module__}.{c.__qualname__}": c.__pydantic_complete__ for c in subclasses(pydantic.BaseModel)
        if c.__module__.split(".")[0] in ("bot", "handlers", "blocks", "store")}
print(json.dumps({"models": ours, "event_adapter": EVENT_ADAPTER.pydantic_complete}))
"""
    ran = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)})
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout)
    assert len(seen["models"]) > 50  # the probe sees the app's models
    assert {name for name, built in seen["models"].items() if built} == BUILT_AT_IMPORT
    assert seen["event_adapter"] is False
