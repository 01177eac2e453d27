"""The handlers import one another one way only: App Home and ``/approvers`` build on
``handlers.shared.governance``, which imports neither; the outbound room (``handlers.delivery``) imports no
listener, not even a listener's helper, and no route. Every import counts: top level, inside functions and
under ``TYPE_CHECKING``, and module names in strings (``importlib.import_module("handlers.home")``)."""

from __future__ import annotations

import ast
from pathlib import Path

HANDLERS = Path(__file__).resolve().parent.parent / "handlers"


def _path(module: str) -> Path:
    """``delivery.channel`` → handlers/delivery/channel.py."""
    return HANDLERS.joinpath(*module.split(".")).with_suffix(".py")


def handlers_imported_by(module: str) -> set[str]:
    """The ``handlers`` modules (dotted below ``handlers``) that ``handlers/<module>.py`` imports, anywhere."""
    tree = ast.parse(_path(module).read_text(), filename=str(_path(module)))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x / from .x import y (within this module's package)
                package = ["handlers", *module.split(".")[:-1]][: max(1, len(module.split(".")) + 1 - node.level)]
                base = ".".join([*package, *([base] if base else [])])
            names.append(base)
            names.extend(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.append(node.value)
    found: set[str] = set()
    for name in names:
        parts = name.split(".")
        if parts[0] != "handlers":
            continue
        # the longest prefix that is a module file: handlers.delivery.channel.SlackChannel → delivery.channel
        for end in range(len(parts), 1, -1):
            if _path(".".join(parts[1:end])).exists():
                found.add(".".join(parts[1:end]))
                break
    return found - {module}


def import_graph() -> dict[str, set[str]]:
    modules = sorted(".".join(p.relative_to(HANDLERS).with_suffix("").parts) for p in HANDLERS.rglob("*.py")
                     if p.stem != "__init__")
    return {m: handlers_imported_by(m) for m in modules}


def test_delivery_imports_no_listener():
    graph = import_graph()
    delivery = [m for m in graph if m.startswith("delivery.")]
    assert "delivery.channel" in delivery and "delivery.sessions" in graph["delivery.channel"]  # the parser sees them
    # the listeners' room is every top-level module (their helpers too: identity, outage…), and above it the routes
    above = {m for m in graph if "." not in m or m.startswith("routes.")}
    assert {"answers", "identity", "routes.results"} <= above
    for module in delivery:
        assert graph[module].isdisjoint(above), (module, graph[module] & above)


def test_governance_imports_neither_app_home_nor_the_command():
    assert handlers_imported_by("shared.governance").isdisjoint({"commands", "home", "delivery.home"}), \
        handlers_imported_by("shared.governance")


def test_the_surfaces_build_on_governance():
    # also proves the parser sees imports at all, so the test above cannot pass vacuously
    assert "shared.governance" in handlers_imported_by("home")
    assert "shared.governance" in handlers_imported_by("commands")


def test_no_import_circle_among_handlers():
    graph = import_graph()
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            cycle = [*path[path.index(module):], module]
            raise AssertionError("import circle: " + " → ".join(cycle))
        if module in done:
            return
        for imported in sorted(graph.get(module, ())):
            visit(imported, [*path, module])
        done.add(module)

    for module in graph:
        visit(module, [])
