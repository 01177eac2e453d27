"""Fixtures for the backends' tests: the e2e tests' app over signed HTTP, for those that drive it."""

from __future__ import annotations

from tests.e2e.conftest import local_slack, start_app  # noqa: F401 - the same fixtures as the e2e tests
