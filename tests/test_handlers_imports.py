"""The handlers import one another one way only (issue 8): App Home and ``/approvers`` build on
``handlers.governance``, which imports neither. Every import counts: top level, inside functions and
under ``TYPE_CHECKING``, and module names in strings (``importlib.import_module("handlers.home")``)."""

from __future__ import annotations

import ast
from pathlib import Path

HANDLERS = Path(__file__).resolve().parent.parent / "handlers"


def handlers_imported_by(module: str) -> set[str]:
    """The ``handlers`` modules that ``handlers/<module>.py`` imports, anywhere in the file."""
    tree = ast.parse((HANDLERS / f"{module}.py").read_text(), filename=f"handlers/{module}.py")
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x / from .x import y
                base = "handlers" + (f".{base}" if base else "")
            names.append(base)
            names.extend(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.append(node.value)
    found = {name.split(".")[1] for name in names if name.startswith("handlers.") and name.count(".") >= 1}
    return {m for m in found if (HANDLERS / f"{m}.py").exists()} - {module}


def import_graph() -> dict[str, set[str]]:
    modules = sorted(p.stem for p in HANDLERS.glob("*.py") if p.stem != "__init__")
    return {m: handlers_imported_by(m) for m in modules}


def test_governance_imports_neither_app_home_nor_the_command():
    assert handlers_imported_by("governance").isdisjoint({"commands", "home"}), handlers_imported_by("governance")


def test_the_surfaces_build_on_governance():
    # also proves the parser sees imports at all, so the test above cannot pass vacuously
    assert "governance" in handlers_imported_by("home")
    assert "governance" in handlers_imported_by("commands")


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
