"""The house rules of DESIGN §2 and docs/DESIGN.md, read from the code's own imports.

Each rule is what a newcomer relies on when they open the tree: the engine (``bot/`` but its
composition root) imports nothing of Slack, Redis or our frontends; ``bot/``'s own rooms stand on floors,
each importing only itself and the rooms below it; ``handlers/`` and ``blocks/`` never reach Redis; no
room's modules import each other in a loop; no product module grows past what one person reads in a
sitting. The imports are parsed (nothing is imported), so a rule broken anywhere in a
file — at module level or inside a function — fails here with the file and the line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("bot", "handlers", "blocks", "store", "localslack")
# the engine's composition root and CLI: the only bot/ modules that may wire the outside in
COMPOSITION_ROOT = {"bot.app", "bot.__main__"}
# bot/'s rooms, bottom up (docs/DESIGN.md, "The house on one page"): each imports only itself and those below.
# The contract is bot/'s top files (the face, the author's API, the models every room shares) and bot/models/;
# the top floor is the composition root, the terminal frontend it starts (``python -m bot chat``) and what both
# build from the settings without Slack (``bot.assembly``: the model, the tools).
BOT_FLOORS = ("contract", "ops", "builtin", "backends", "engine", "connections", "top floor")
BOT_FOLDERS = {"ops", "builtin", "backends", "engine", "connections"}  # bot/<folder>/: a room of its own
TOP_FLOOR = COMPOSITION_ROOT | {"bot.console", "bot.assembly"}
MAX_LINES = 600
# handlers/'s rooms, top down (docs/DESIGN.md, "The house on one page"): each imports only itself and those below.
# Plain HTTP routes hand requests to the listeners; the listeners (handlers/*.py and the package's face) call the
# outbound frontend; all of them stand on what the composition root hands them and Slack's word on people.
HANDLERS_ROOMS = ("routes", "listeners", "delivery", "shared")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # what it imports, dotted (absolute)
    line: int
    type_only: bool  # inside ``if TYPE_CHECKING:``: a name for annotations, never loaded


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _product_files() -> list[Path]:
    return sorted(p for room in ROOMS for p in (ROOT / room).rglob("*.py"))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path, module: str | None = None) -> list[Import]:
    module = module or _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    visit_stmt(stmt, True)
                for stmt in child.orelse:
                    visit_stmt(stmt, type_only)
                continue
            visit_stmt(child, type_only)

    def visit_stmt(node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend(Import(module, alias.name, node.lineno, type_only) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append(Import(module, base, node.lineno, type_only))
            # ``from bot import builtin`` names a submodule: count it as one
            found.extend(Import(module, f"{base}.{alias.name}", node.lineno, type_only)
                         for alias in node.names if _is_module(f"{base}.{alias.name}"))
        else:
            visit(node, type_only)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), False)
    return found


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _room(dotted: str) -> str:
    return dotted.split(".")[0]


@cache
def _all_imports() -> tuple[Import, ...]:
    """Parsed when a rule first asks (not at collection, where every test worker would pay ~1 s for it)."""
    return tuple(imp for path in _product_files() for imp in _imports(path))


def _where(imp: Import) -> str:
    return f"{imp.module.replace('.', '/')}.py:{imp.line} imports {imp.target}"


def _breaking(rule) -> list[str]:
    return [_where(imp) for imp in _all_imports() if rule(imp)]


def test_the_engine_imports_nothing_outward():
    """bot/ (but its composition root) knows nothing of Slack, Redis, our store or our frontends."""
    outward = {"handlers", "blocks", "store", "localslack", "slack_bolt", "slack_sdk", "redis"}
    assert _breaking(lambda imp: _room(imp.module) == "bot" and imp.module not in COMPOSITION_ROOT
                     and _room(imp.target) in outward) == []


def _bot_room(dotted: str) -> str:
    """Which of bot/'s rooms a bot module is in: ``bot.engine.turns`` → engine, ``bot.tools`` → contract."""
    if dotted in TOP_FLOOR:
        return "top floor"
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in BOT_FOLDERS else "contract"


def _runs_back_up(imp: Import) -> bool:
    """An import by a bot/ module of a bot/ room above its own."""
    return (_room(imp.module) == "bot" and _room(imp.target) == "bot"
            and BOT_FLOORS.index(_bot_room(imp.target)) > BOT_FLOORS.index(_bot_room(imp.module)))


@pytest.mark.parametrize("room", BOT_FLOORS[:-1])
def test_a_room_of_bot_imports_nothing_above_it(room):
    """The contract imports nothing of ops or the engine; ops nothing of the engine or the connections; the
    engine nothing of the connections (MCP, OpenAPI) or the composition root. So a room is read from the
    rooms below it alone, and an arrow back up would say a floor stands on the wrong one."""
    assert _breaking(lambda imp: _bot_room(imp.module) == room and _runs_back_up(imp)) == []


@pytest.mark.parametrize("room", ["handlers", "blocks"])
def test_frontends_never_reach_redis(room):
    """Listeners and builders go through the store's ports; only store/ speaks to Redis."""
    assert _breaking(lambda imp: _room(imp.module) == room and _room(imp.target) == "redis") == []


def test_blocks_are_pure_builders():
    """blocks/ turns the engine's models into Block Kit: no store, no listeners, no I/O."""
    assert _breaking(lambda imp: _room(imp.module) == "blocks"
                     and _room(imp.target) in {"handlers", "store", "localslack", "redis", "httpx",
                                               "aiohttp", "slack_bolt"}) == []


def test_store_knows_no_frontend():
    assert _breaking(lambda imp: _room(imp.module) == "store"
                     and _room(imp.target) in {"handlers", "blocks", "localslack", "slack_bolt"}) == []


def _handlers_room(dotted: str) -> str:
    """Which of handlers/' rooms a handlers module is in: ``handlers.delivery.channel`` → delivery,
    ``handlers.answers`` (and the face, ``handlers``) → listeners."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in HANDLERS_ROOMS else "listeners"


def _climbs_in_handlers(imp: Import) -> bool:
    """An import by a handlers module of a handlers room above its own."""
    return (_room(imp.module) == "handlers" and _room(imp.target) == "handlers"
            and HANDLERS_ROOMS.index(_handlers_room(imp.target)) < HANDLERS_ROOMS.index(_handlers_room(imp.module)))


@pytest.mark.parametrize("room", HANDLERS_ROOMS[1:])
def test_a_room_of_handlers_imports_nothing_above_it(room):
    """A click flows one way through the frontend: route → listener → delivery, all on ``shared/``. The outbound
    room imports no listener (a listener's rule would run where no person clicked), a listener no route, and
    ``shared/`` none of the rooms that stand on it: so no two rooms import each other."""
    assert _breaking(lambda imp: _room(imp.module) == "handlers" and _handlers_room(imp.module) == room
                     and _climbs_in_handlers(imp)) == []


def test_the_rules_know_the_rooms_of_handlers_and_see_an_arrow_back_up():
    """The checker itself: every room of handlers/ has its modules on disk; a made-up import of a higher room by
    a lower one is caught, and one downward is not."""
    modules = {_module_name(p) for p in _product_files() if _room(_module_name(p)) == "handlers"}
    assert {_handlers_room(m) for m in modules} == set(HANDLERS_ROOMS)
    assert _handlers_room("handlers") == "listeners" and _handlers_room("handlers.answers") == "listeners"
    assert _climbs_in_handlers(Import("handlers.delivery.home", "handlers.home", 1, False))
    assert _climbs_in_handlers(Import("handlers.answers", "handlers.routes.results", 1, True))
    assert _climbs_in_handlers(Import("handlers.shared.deps", "handlers.delivery.channel", 1, False))
    assert _climbs_in_handlers(Import("handlers.delivery.workspace", "handlers", 1, False))
    assert not _climbs_in_handlers(Import("handlers.answers", "handlers.delivery.private_notes", 1, False))
    assert not _climbs_in_handlers(Import("handlers.routes.results", "handlers.shared.deps", 1, False))


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def _graph(imports: Iterable[Import]) -> dict[str, set[str]]:
    modules = {_module_name(p) for p in _product_files()}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports:
        if imp.target == imp.module:
            continue
        target = imp.target
        while target and target not in modules:  # ``from bot.models.base import X`` → bot.models.base
            target = target.rpartition(".")[0]
        if target and target != imp.module and not imp.module.startswith(target + "."):
            edges[imp.module].add(target)  # a package importing its own face is not a loop
    return edges


def test_no_import_circles():
    """Each room's modules form layers: a loop means modules that cannot be understood apart. An import
    under ``if TYPE_CHECKING:`` counts too (as `farm-studio look` draws it): it is still a dependency, only
    one Python does not load; a shared type belongs below both modules that use it."""
    assert _circles(_graph(_all_imports())) == []


def test_no_product_module_is_too_long_to_read():
    long = {str(p.relative_to(ROOT)): n for p in _product_files()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_the_rules_see_a_circle_and_a_type_only_import(tmp_path):
    """The checker itself: a made-up loop is caught; imports are found wherever they are written."""
    edges = {"bot.a": {"bot.b"}, "bot.b": {"bot.c"}, "bot.c": {"bot.a", "bot.d"}, "bot.d": set()}
    assert _circles(edges) == [["bot.a", "bot.b", "bot.c"]]
    probe = tmp_path / "probe.py"
    probe.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import redis\n"
                     "def f():\n    from store import client\n", encoding="utf-8")
    found = [(i.target, i.type_only, i.line) for i in _imports(probe, "bot.probe")]
    assert found == [("typing", False, 1), ("redis", True, 3), ("store", False, 5),
                     ("store.client", False, 5)]


def test_the_rules_know_the_rooms_of_bot_and_see_an_arrow_back_up():
    """The checker itself: every room of bot/ has its modules on disk; a made-up import of a higher room by a
    lower one is caught, and one downward is not."""
    modules = {_module_name(p) for p in _product_files() if _room(_module_name(p)) == "bot"}
    assert {_bot_room(m) for m in modules} == set(BOT_FLOORS)
    assert _bot_room("bot.engine.turns") == "engine" and _bot_room("bot.engine") == "engine"
    assert _bot_room("bot.tools") == "contract" and _bot_room("bot.models.base") == "contract"
    assert _runs_back_up(Import("bot.tools", "bot.engine.turns", 1, False))
    assert _runs_back_up(Import("bot.ops.metrics", "bot.connections.mcp", 1, True))
    assert _runs_back_up(Import("bot.engine.turns", "bot.app", 1, False))
    assert not _runs_back_up(Import("bot.engine.turns", "bot.ops.logs", 1, False))
    assert not _runs_back_up(Import("bot.connections.openapi", "bot.engine.tool_registry", 1, False))


def _attribute_uses(room: str, names: set[str]) -> list[str]:
    """Where ``room``'s modules name any attribute in ``names`` (``x.held``, ``runtime.drive(...)``)."""
    found = []
    for path in sorted((ROOT / room).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Attribute) and node.attr in names:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    return found


def test_leases_never_leave_the_engine():
    # an answer or a message that arrives is handed to the engine, which settles or records it and resumes the
    # turn itself with the lease it took: the listeners neither hold a turn lease nor drive a turn
    assert _attribute_uses("handlers", {"held", "drive", "process_message", "record_message", "answer"}) == []


def test_listeners_run_their_work_in_their_own_tasks():
    # the engine's tasks are the engine's (turns, deliveries, settles): a listener's notes, modals and App Home
    # go in the listeners' own task group (``SlackDeps.tasks``), which shutdown drains and cancels as well
    found = []
    for path in sorted((ROOT / "handlers").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (isinstance(node, ast.Attribute) and node.attr == "spawn" and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "runtime"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
