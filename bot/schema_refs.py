"""JSON Schema ``$ref``s inlined (a model's ``#/$defs/…``, an OpenAPI document's ``#/components/…``), so
what stores, shows or validates a schema never has to follow pointers."""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 20


def inline_refs(node: Any, document: dict[str, Any], *, too_deep: type[ValueError] = ValueError,
                depth: int = 0) -> Any:
    """``node`` with every local ``$ref`` (``#/…`` into ``document``) replaced by what it points at; keys
    beside a ``$ref`` (a title, a default) are kept over the target's. Raises ``too_deep`` on nesting
    beyond ``MAX_DEPTH`` (a schema that refers to itself)."""
    if depth > MAX_DEPTH:
        raise too_deep("the schema nests (or refers to itself) too deeply")
    if isinstance(node, list):
        return [inline_refs(n, document, too_deep=too_deep, depth=depth + 1) for n in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = document
        for part in ref[2:].split("/"):
            target = target.get(part.replace("~1", "/").replace("~0", "~"), {}) if isinstance(target, dict) else {}
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return {**inline_refs(target, document, too_deep=too_deep, depth=depth + 1),
                **inline_refs(rest, document, too_deep=too_deep, depth=depth + 1)}
    return {k: inline_refs(v, document, too_deep=too_deep, depth=depth + 1) for k, v in node.items()}
