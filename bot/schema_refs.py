"""JSON Schema ``$ref``s inlined (a model's ``#/$defs/…``, an OpenAPI document's ``#/components/…``), so
what stores, shows or validates a schema never has to follow pointers (:func:`inline_refs`), or, where a
schema refers to itself, has only its own ``$defs`` to follow (:class:`RefBundle`)."""

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


BUNDLE_MAX_DEPTH = 100  # levels of nesting (objects and lists) one resolved schema may have


class RefBundle:
    """Local ``$ref``s of one document resolved for schemas that will share one root (a tool's arguments).

    Each ``$ref`` is inlined, except one that refers back to a schema it is inside (a tree's ``children``
    of the tree): that one stays a ``$ref`` into the root's ``$defs`` (:attr:`defs`), made once, so a
    recursive schema stays finite and exact (validators and models follow ``#/$defs/…``). Only what
    :meth:`inline` is given is resolved: the rest of a large document is never looked at."""

    def __init__(self, document: dict[str, Any], *, error: type[ValueError] = ValueError,
                 max_depth: int = BUNDLE_MAX_DEPTH):
        self.document = document
        self.defs: dict[str, Any] = {}
        self._names: dict[str, str] = {}  # ref → its name in defs
        self._error = error
        self._max_depth = max_depth

    def inline(self, node: Any) -> Any:
        return self._walk(node, (), 0)

    def _walk(self, node: Any, inside: tuple[str, ...], depth: int) -> Any:
        if depth > self._max_depth:
            raise self._error(f"the schema nests more than {self._max_depth} levels deep")
        if isinstance(node, list):
            return [self._walk(n, inside, depth + 1) for n in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        rest = {k: self._walk(v, inside, depth + 1) for k, v in node.items() if k != "$ref"}
        if not (isinstance(ref, str) and ref.startswith("#/")):
            return rest if ref is None else {"$ref": ref, **rest}
        if ref in inside or ref in self._names:  # recursion (or already made a def): point at the def
            return {"$ref": f"#/$defs/{self._define(ref)}", **rest}
        return {**self._walk(self._target(ref), (*inside, ref), depth + 1), **rest}

    def _define(self, ref: str) -> str:
        name = self._names.get(ref)
        if name is None:
            base = ref.rsplit("/", 1)[-1] or "def"
            name, n = base, 1
            while name in self.defs:
                n += 1
                name = f"{base}_{n}"
            self._names[ref] = name
            self.defs[name] = {}  # taken before it is filled: a def may refer to itself
            self.defs[name] = self._walk(self._target(ref), (ref,), 0)
        return name

    def _target(self, ref: str) -> Any:
        target: Any = self.document
        for part in ref[2:].split("/"):
            key = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or key not in target:
                raise self._error(f"{ref} is not in the document")
            target = target[key]
        return target
