"""How ``@tool`` reads a function's signature: what arguments the model writes, and how the call is made.

Two forms, told apart by the parameters (the tool's context is the parameter annotated ``ToolContext``,
wherever it is, and may be left out):

- the arguments as one pydantic model, ``(args: Refund, ctx)`` (DESIGN §6; the second parameter is the
  context whatever its annotation), or as the raw JSON object, ``(args: dict, ctx)`` / ``(args, ctx)``;
- plain typed parameters, ``(charge_id: str, amount: float, ctx: ToolContext)``: their model is generated
  from the signature (annotations, defaults, ``Annotated[..., Field(...)]``) with pydantic's
  ``create_model``, so the JSON schema, validation, cards, forms and prompts read it like any model.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, get_origin, get_type_hints

from pydantic import BaseModel, ConfigDict, create_model

_WHOLE = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@dataclass(frozen=True)
class Signature:
    """A tool function's arguments model and how to call it with parsed arguments and a context."""

    model: type[BaseModel] | None  # None: the raw JSON object is passed as it is
    parameters: tuple[inspect.Parameter, ...]
    whole: str | None  # the parameter given the whole arguments (model or dict); None: one per field
    ctx: str | None  # the parameter given the ToolContext, if any

    def call(self, args: BaseModel | dict[str, Any], ctx: Any) -> tuple[list[Any], dict[str, Any]]:
        """The positional and keyword arguments that call the function with ``args`` and ``ctx``."""
        positional: list[Any] = []
        keywords: dict[str, Any] = {}
        for p in self.parameters:
            if p.name == self.ctx:
                value = ctx
            elif p.name == self.whole:
                value = args
            else:
                value = args[p.name] if isinstance(args, dict) else getattr(args, p.name)
            if p.kind in _WHOLE:
                positional.append(value)
            else:
                keywords[p.name] = value
        return positional, keywords


def read_signature(fn: Callable[..., Any], context_type: type) -> Signature:
    """``fn``'s form (see the module's docstring); raises TypeError for a signature no model can describe."""
    parameters = tuple(inspect.signature(fn).parameters.values())
    hints = _hints(fn)
    for p in parameters:
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise TypeError(
                f"tool {_name(fn)}: *{p.name}/**{p.name} cannot be described to the model; "
                "name each parameter"
            )
    contexts = [p.name for p in parameters if _is(hints.get(p.name), context_type)]
    if len(contexts) > 1:
        raise TypeError(f"tool {_name(fn)}: one ToolContext parameter, not {', '.join(contexts)}")
    ctx = contexts[0] if contexts else None
    rest = [p for p in parameters if p.name != ctx]
    first = parameters[0] if parameters else None
    if first is not None and first.name != ctx and len(parameters) <= 2:
        annotation = hints.get(first.name, inspect.Parameter.empty)
        if _is(annotation, BaseModel) or _is_raw(annotation):  # the model form: the second parameter is ctx
            second = parameters[1].name if len(parameters) == 2 else None
            model = annotation if _is(annotation, BaseModel) else None
            return Signature(model=model, parameters=parameters, whole=first.name, ctx=second)
    if len(rest) == 1 and _is(hints.get(rest[0].name), BaseModel):  # (ctx: ToolContext, args: Model)
        return Signature(model=hints[rest[0].name], parameters=parameters, whole=rest[0].name, ctx=ctx)
    return Signature(model=_model_of(fn, rest, hints), parameters=parameters, whole=None, ctx=ctx)


def _model_of(
    fn: Callable[..., Any], parameters: list[inspect.Parameter], hints: dict[str, Any]
) -> type[BaseModel]:
    """The arguments' model, generated from the plain parameters (``create_model``, built when first used)."""
    fields: dict[str, Any] = {}
    for p in parameters:
        if p.name.startswith("_") or (p.name.startswith("model_") and hasattr(BaseModel, p.name)):
            raise TypeError(
                f"tool {_name(fn)}: a parameter cannot be called {p.name} (pydantic keeps the name for "
                "itself); rename it"
            )
        annotation = hints.get(p.name, Any)
        fields[p.name] = (annotation, ... if p.default is inspect.Parameter.empty else p.default)
    model_name = "".join(part.title() for part in _name(fn).split("_")) or "Arguments"
    with (
        warnings.catch_warnings()
    ):  # a field named like an old BaseModel method (json, copy) works as a field
        warnings.filterwarnings("ignore", message=".*shadows an attribute in parent", category=UserWarning)
        return create_model(
            model_name, __config__=ConfigDict(defer_build=True), __module__=fn.__module__, **fields
        )


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    target = fn.__call__ if not inspect.isroutine(fn) and callable(fn) else fn
    try:
        return get_type_hints(target, include_extras=True)
    except (NameError, TypeError) as exc:  # an annotation naming what its module cannot see
        raise TypeError(f"tool {_name(fn)}: its annotations cannot be resolved ({exc})") from exc


def _is(annotation: Any, cls: type) -> bool:
    return inspect.isclass(annotation) and issubclass(annotation, cls)


def _is_raw(annotation: Any) -> bool:
    """An unannotated or dict parameter: the raw JSON object (what JSON-schema tools and old tools take)."""
    if annotation is inspect.Parameter.empty:
        return True
    origin = get_origin(annotation) or annotation
    return _is(origin, Mapping) or origin is dict


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__name__", type(fn).__name__)
