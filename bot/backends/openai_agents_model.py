"""An OpenAI Agents SDK agent's model, as the bot runs it: each tool call of an answer gets an id of its own.

Some servers number tool calls per answer (Kimi K2 on vLLM: ``<tool>:<n>``, the counter restarting every
round), so a call of the second round comes back under the id of one the history already holds. The SDK
refuses such a call (``ModelBehaviorError``: "reused a tool call ID"), or, where its arguments match the
earlier call's, takes it for that call and does not run it; and the bot's execution fence knows a call by its
id. A call whose id the request's own input already holds gets a new one here, in the answer's stream events
and in the response, before the SDK reads any of it: the SDK stores, approves and answers it under that id,
and the model is told its result under it. Ids the server made unique pass as they are.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import aclosing
from typing import Any

from agents import MultiProvider
from agents.models.interface import Model, ModelProvider

from bot.models.wire import new_call_id


def _ids_in(input: Any) -> set[str]:  # noqa: A002 - the SDK's word
    """The call ids the request's input holds (earlier calls and their results): taken."""
    if isinstance(input, str):
        return set()
    found = (item.get("call_id") if isinstance(item, dict) else getattr(item, "call_id", None) for item in input)
    return {call_id for call_id in found if isinstance(call_id, str)}


class _Renames:
    """One answer's renamed calls: an id already taken gets a new one, the same one wherever the call shows."""

    def __init__(self, taken: set[str]):
        self.taken = taken
        self.renamed: dict[str, str] = {}

    def apply(self, items: Iterable[Any]) -> None:
        for item in items:
            call_id = getattr(item, "call_id", None)
            if getattr(item, "type", None) != "function_call" or not isinstance(call_id, str):
                continue
            if call_id in self.renamed:
                item.call_id = self.renamed[call_id]
            elif call_id in self.taken:
                item.call_id = self.renamed[call_id] = new_call_id()
                self.taken.add(item.call_id)


class DistinctCallIds(Model):
    """The agent's model, its answers' reused call ids renamed (the SDK's streamed and plain calls alike)."""

    def __init__(self, model: Model):
        self.model = model

    async def get_response(self, system_instructions: str | None, input: Any,  # noqa: A002 - the SDK's word
                           *args: Any, **kwargs: Any) -> Any:
        response = await self.model.get_response(system_instructions, input, *args, **kwargs)
        _Renames(_ids_in(input)).apply(response.output)
        return response

    def stream_response(self, system_instructions: str | None, input: Any,  # noqa: A002 - the SDK's word
                        *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        stream = self.model.stream_response(system_instructions, input, *args, **kwargs)
        taken = _ids_in(input)
        # a request whose input holds no call (a turn's first step) cannot get a reused id: its stream as it is
        return _renamed(stream, _Renames(taken)) if taken else stream

    async def close(self) -> None:
        await self.model.close()

    async def _cleanup_on_run_end(self, owner: object) -> None:
        await self.model._cleanup_on_run_end(owner)

    def get_retry_advice(self, request: Any) -> Any:
        return self.model.get_retry_advice(request)


# the stream events that carry output items (the SDK reads the calls from these)
_CARRYING = frozenset({"response.output_item.added", "response.output_item.done", "response.completed"})


async def _renamed(stream: AsyncIterator[Any], renames: _Renames) -> AsyncIterator[Any]:
    async with aclosing(stream):  # type: ignore[type-var] - the model's stream is an async generator
        async for event in stream:
            if getattr(event, "type", None) in _CARRYING:
                item = getattr(event, "item", None)  # an output item added, then done
                if item is not None:
                    renames.apply([item])
                response = getattr(event, "response", None)  # the completed response, whose output the SDK reads
                if response is not None and getattr(response, "output", None):
                    renames.apply(response.output)
            yield event


class DistinctCallIdsProvider(ModelProvider):
    """The run's model provider (for agents that name their model), each model it gives wrapped."""

    def __init__(self, provider: ModelProvider):
        self.provider = provider

    def get_model(self, model_name: str | None) -> Model:
        return DistinctCallIds(self.provider.get_model(model_name))

    async def aclose(self) -> None:
        await self.provider.aclose()


def run_model_provider() -> ModelProvider:
    """A run's model provider: the SDK's own (as ``RunConfig`` makes it), its models wrapped."""
    return DistinctCallIdsProvider(MultiProvider())


def with_distinct_call_ids(agent: Any) -> None:
    """The agent's model object, wrapped in place (once); a model named by a string is wrapped by the run's
    provider instead, so the SDK still picks its settings by that name."""
    if isinstance(agent.model, Model) and not isinstance(agent.model, DistinctCallIds):
        agent.model = DistinctCallIds(agent.model)
