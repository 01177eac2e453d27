"""Handlers reach Redis only through the store's ports (DESIGN §2, the rules of the house).

No module under handlers/ imports the Redis client library (``redis``, ``redis.asyncio``, ``redis.exceptions``)
or touches a ``.redis`` attribute (a raw client held by a store or by a handler object): what handlers need of
Redis is a store method (store/), and the errors the store raises are the store's (``store.client``).
"""

from __future__ import annotations

import ast
from pathlib import Path

HANDLERS = Path(__file__).resolve().parent.parent / "handlers"


def _raw_redis_uses(path: Path) -> list[str]:
    """Where ``path`` imports the Redis library or uses a ``.redis`` attribute, as ``file:line what``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        for module in modules:
            if module == "redis" or module.startswith("redis."):
                found.append(f"{path.name}:{node.lineno} imports {module}")
        if isinstance(node, ast.Attribute) and node.attr == "redis":
            found.append(f"{path.name}:{node.lineno} uses .redis")
    return found


def test_handlers_neither_import_redis_nor_hold_a_raw_client():
    modules = sorted(HANDLERS.rglob("*.py"))
    assert len(modules) > 10  # the walk found the handlers (a moved package would pass vacuously)
    found = [f"{path.parent.relative_to(HANDLERS.parent).as_posix()}/{use}" for path in modules for use in _raw_redis_uses(path)]
    assert found == [], "handlers reach Redis only through store ports:\n" + "\n".join(found)


def test_the_rule_sees_an_import_and_a_raw_client(tmp_path):
    """The check itself finds what it forbids (so an empty list above means something)."""
    sample = tmp_path / "sample.py"
    sample.write_text("import redis.asyncio\nfrom redis.exceptions import RedisError\nfrom store.client import UNREACHABLE\n"
                      "async def f(deps):\n    return await deps.store.redis.get('k')\n")
    assert _raw_redis_uses(sample) == [
        "sample.py:1 imports redis.asyncio", "sample.py:2 imports redis.exceptions", "sample.py:5 uses .redis"]
