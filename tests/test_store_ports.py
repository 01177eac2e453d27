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


def test_the_turns_port_is_a_dozen_verbs_each_taking_one_typed_command():
    """The engine's port says what it needs (DESIGN §13): each verb takes one command, a frozen slotted
    dataclass (cheap to build on the hot path), and the store implements every verb."""
    import dataclasses
    import inspect
    import typing

    from bot.engine.parts import TurnStore
    from store.turns import RedisTurns

    verbs = {name: fn for name, fn in vars(TurnStore).items() if inspect.iscoroutinefunction(fn)}
    assert 10 <= len(verbs) <= 14, sorted(verbs)
    for name, fn in verbs.items():
        hints = typing.get_type_hints(fn)
        (param, *more) = [p for p in inspect.signature(fn).parameters if p != "self"]
        assert more == [], f"{name} takes one command, not {[param, *more]}"
        command = hints[param]
        assert dataclasses.is_dataclass(command) and command.__dataclass_params__.frozen, f"{name}: {command}"
        assert hasattr(command, "__slots__"), f"{name}: {command} is not slotted"
        assert inspect.iscoroutinefunction(getattr(RedisTurns, name, None)), f"RedisTurns lacks {name}"
