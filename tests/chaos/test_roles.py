"""Process roles: ``python -m bot run --role web|worker|all``.

Real processes on a real Redis, Slack played by LocalSlack over signed HTTP, the model by the ledger
brain. Web processes receive Slack's requests, record, settle and ack; worker processes drive turns,
run tools and deliver to Slack. What a person and the ledger observe:

- one web and one worker process carry a full approve cycle (mention → card → click → tool → reply),
  Slack talking only to the web process, and the mention is handed over at once (no sweep interval);
- a worker killed with SIGKILL while the tool runs: another worker finishes the turn;
- a web process alone acks and records mentions and clicks (the model hears nothing from it), and the
  turn runs when a worker starts later.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from localslack.seed import ALICE, BOT_TOKEN, BOT_USER_ID, GENERAL
from tests.chaos.harness import (
    REPO_ROOT,
    Cluster,
    Replica,
    Trial,
    click,
    final_replies,
    finish,
    free_port,
    live_cards,
    open_turn,
    poll,
    problems,
)
from tests.e2e.conftest import local_slack  # noqa: F401 - the same LocalSlack fixture as the e2e tests

# the recovery sweep runs every 2 s and a recorded message is due for it 2 s after it was recorded: a
# mention whose card shows sooner than this was handed over, not found by a sweep
SWEEP_FLOOR_S = 2.0


class RoleCluster(Cluster):
    """The chaos cluster, each replica started with its role (BOT_ROLE)."""

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self._role = "all"

    def env(self, port: int) -> dict[str, str]:
        return {**super().env(port), "BOT_ROLE": self._role}

    async def start_as(self, name: str, role: str) -> Replica:
        self._role = role
        return await self.start(name)


@pytest.fixture
async def roles(local_slack, brain, redis, redis_url, tmp_path) -> AsyncIterator[RoleCluster]:  # noqa: F811
    group = RoleCluster(local_slack, brain, redis_url, tmp_path, lease_seconds=1.0, tool_delay=1.0)
    try:
        yield group
    finally:
        await group.stop_all()


async def _status(url: str, method: str = "GET") -> int:
    async with httpx.AsyncClient(timeout=5) as client:
        return (await client.request(method, url)).status_code


async def test_a_web_and_a_worker_process_carry_an_approve_cycle(roles, brain):
    web = await roles.start_as("web", "web")
    worker = await roles.start_as("worker", "worker")
    roles.route("web")
    slack = roles.slack

    trial = Trial("roles-1")
    mentioned = time.monotonic()
    await open_turn(slack, trial)
    card_after_s = time.monotonic() - mentioned
    assert card_after_s < SWEEP_FLOOR_S * 0.95, f"the card took {card_after_s:.2f}s: the mention waited for a sweep"
    assert await click(slack, trial)
    await finish(slack, roles, trial)

    assert problems(trial) == [], trial.describe()
    assert trial.outcome == "wrote"
    [line] = roles.ledger(trial.key)
    assert line[1] == str(worker.proc.pid), "the tool ran in the worker"
    # the worker serves health, not Slack; the web process serves both
    assert await _status(worker.events_url, "POST") == 404
    assert await _status(f"{worker.url}/healthz") == 200
    assert await _status(f"{web.url}/healthz") == 200


async def test_a_worker_killed_mid_tool_is_replaced_by_another(roles):
    await roles.start_as("web", "web")
    first = await roles.start_as("w1", "worker")
    second = await roles.start_as("w2", "worker")
    roles.route("web")
    slack = roles.slack

    trial = Trial("roles-2", moment="tool_running")
    await open_turn(slack, trial)
    assert await click(slack, trial)
    [start] = await poll(lambda: roles.starts(trial.key), 15)
    running = next((r for r in (first, second) if str(r.proc.pid) == start[1]), None)
    assert running is not None, "the tool runs in a worker"
    roles.kill(running.name, "tool_running")
    await finish(slack, roles, trial)

    assert problems(trial) == [], trial.describe()
    assert trial.outcome in ("wrote", "interrupted"), trial.describe()
    survivor = second if running is first else first
    assert final_replies(slack, trial) and survivor.alive


async def test_a_web_process_alone_records_and_a_later_worker_runs_the_turn(roles, brain, redis):
    await roles.start_as("web", "web")
    roles.route("web")
    slack = roles.slack

    trial = Trial("roles-3")
    trial.thread_ts, deliveries = await slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> {trial.command}")
    assert deliveries and all(d.ok for d in deliveries), "Slack got its ack from the web process"
    await asyncio.sleep(SWEEP_FLOOR_S + 1.5)  # longer than any sweep would wait
    assert brain.requests == [], "a web process never calls the model"
    assert live_cards(slack, trial) == []
    assert await redis.zcard(b"hitl:active") == 1, "the message is recorded and the session due"

    worker = await roles.start_as("worker", "worker")
    card = await slack.wait_for(lambda: next(iter(live_cards(slack, trial)), None), 20)
    trial.card_ts = card.ts
    roles.kill("worker")  # the click, too, is taken by the web process alone
    asked = len(brain.requests)
    assert await click(slack, trial)
    await asyncio.sleep(SWEEP_FLOOR_S + 0.5)
    assert len(brain.requests) == asked and roles.starts(trial.key) == [], "nothing ran without a worker"

    worker = await roles.start_as("worker", "worker")
    await finish(slack, roles, trial)
    assert problems(trial) == [], trial.describe()
    assert trial.outcome == "wrote" and trial.clicks == 1, trial.describe()
    assert roles.ledger(trial.key)[0][1] == str(worker.proc.pid)


def test_the_role_is_a_flag_of_run_and_a_setting(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "OPENAI_", "BOT_", "REDIS_"))}
    env["PYTHONPATH"] = str(REPO_ROOT)
    shown = subprocess.run([sys.executable, "-m", "bot", "run", "--help"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "--role" in shown.stdout and "worker" in shown.stdout
    wrong = subprocess.run([sys.executable, "-m", "bot", "run"], cwd=tmp_path, timeout=60,
                           env={**env, "BOT_ROLE": "cook"}, capture_output=True, text=True)
    assert wrong.returncode == 2 and "BOT_ROLE" in wrong.stderr, wrong.stderr
    # the split needs a Slack both roles reach: the local workspace lives inside one `all` process
    local = subprocess.run([sys.executable, "-m", "bot", "run", "--role", "web"], cwd=tmp_path, timeout=60,
                           env=env, capture_output=True, text=True)
    assert local.returncode == 2 and "BOT_ROLE" in local.stderr, local.stderr


async def test_run_role_worker_serves_health_and_no_slack_route(local_slack, redis, redis_url, tmp_path):  # noqa: F811
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "OPENAI_", "BOT_", "REDIS_"))}
    env.update(PYTHONPATH=str(REPO_ROOT), SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET=local_slack.signing_secret,
               SLACK_API_URL=local_slack.api_url, REDIS_URL=redis_url, PORT=str(port), HOST="127.0.0.1",
               BOT_DATA_DIR=str(tmp_path / "data"))
    proc = subprocess.Popen([sys.executable, "-m", "bot", "run", "--role", "worker"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if await _status(f"{url}/readyz") == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "the worker did not start"
            await asyncio.sleep(0.05)
        assert await _status(f"{url}/slack/events", "POST") == 404
        assert await _status(f"{url}/healthz") == 200
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 10)
