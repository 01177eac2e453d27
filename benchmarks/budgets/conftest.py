"""The fixtures the budgets share with the suite: the real Redis of tests/conftest.py, the app over
LocalSlack of tests/e2e/conftest.py (imported, so both suites start them the same way)."""

from tests.conftest import redis, redis_url, tmp_data_dir  # noqa: F401 - fixtures
from tests.e2e.conftest import local_slack, start_app  # noqa: F401 - fixtures
