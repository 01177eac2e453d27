"""Tools described by a JSON schema instead of a pydantic model: MCP servers' tools and OpenAPI operations.

The model is shown the schema as it is, and the arguments it writes are checked against it (JSON Schema
2020-12) before any policy runs, so an invalid call is refused with what was wrong, like any tool's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Unpack

from jsonschema import Draft202012Validator

from bot.models.base import ToolSpec
from bot.tools import Tool, ToolOptions

MAX_PROBLEMS = 10  # schema errors named to the model, at most


class SchemaTool(Tool):
    """A :class:`Tool` whose arguments are a JSON object checked against ``schema``."""

    def __init__(self, fn: Callable[..., Any], schema: dict[str, Any], **options: Unpack[ToolOptions]):
        self.schema = schema
        self.validator = Draft202012Validator(schema)
        super().__init__(fn, **options)

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.schema)

    def parse(self, arguments: str | dict[str, Any] | None) -> dict[str, Any]:
        data = super().parse(arguments)  # a JSON object, or ValueError
        assert isinstance(data, dict)
        problems = [f"{'.'.join(str(p) for p in e.absolute_path) or 'arguments'}: {e.message}"
                    for e in self.validator.iter_errors(data)]
        if problems:
            raise ValueError("invalid arguments: " + "; ".join(sorted(problems)[:MAX_PROBLEMS]))
        return data
