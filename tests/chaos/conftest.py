"""Fixtures for the chaos proofs: a LocalSlack, the ledger brain, and a cluster of real bot processes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.chaos.harness import Cluster, LedgerBrain
from tests.e2e.conftest import local_slack  # noqa: F401 - the same LocalSlack fixture as the e2e tests


@pytest.fixture
async def brain() -> AsyncIterator[LedgerBrain]:
    async with LedgerBrain() as fake:
        yield fake


@pytest.fixture
async def cluster(local_slack, brain, redis, redis_url, tmp_path) -> AsyncIterator[Cluster]:  # noqa: F811
    """Replicas are started by the test; all of them are stopped (SIGTERM, then SIGKILL) afterwards."""
    group = Cluster(local_slack, brain, redis_url, tmp_path, lease_seconds=1.0, tool_delay=1.0)
    try:
        yield group
    finally:
        await group.stop_all()
