"""LangGraph's checkpointer on plain Redis/Valkey (store/langgraph_checkpoints.py), against real LangGraph.

A real graph parks on ``interrupt`` and is resumed by another saver on another connection, as another process
would; the saver honours what LangGraph asks of one (history order, ``before``/``limit``, pending writes,
subgraph namespaces, deleting a thread) and passes LangGraph's own conformance suite; the same graph runs on
a real 3-master Valkey Cluster; hostile thread ids keep to their own slot.
"""

from __future__ import annotations

import asyncio
import operator
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest
import redis.asyncio as redis_asyncio
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES
from langgraph.checkpoint.serde.types import INTERRUPT
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from redis.crc import key_slot
from redis.exceptions import ResponseError

from store.client import RedisClient, open_redis
from store.langgraph_checkpoints import RedisCheckpointSaver


class Refund(TypedDict):
    amount: int
    log: Annotated[list[str], operator.add]


def refund_graph(runs: Counter[str]) -> StateGraph:
    """prepare → approve (asks a person: ``interrupt``) → pay; ``runs`` counts each node's executions."""

    def prepare(state: Refund) -> dict[str, Any]:
        runs["prepare"] += 1
        return {"log": [f"prepared {state['amount']}"]}

    def approve(state: Refund) -> dict[str, Any]:
        runs["approve"] += 1
        answer = interrupt({"question": f"refund {state['amount']}?"})
        return {"log": [f"answer {answer}"]}

    def pay(state: Refund) -> dict[str, Any]:
        runs["pay"] += 1
        return {"log": ["paid"]}

    builder = StateGraph(Refund)
    for name, node in (("prepare", prepare), ("approve", approve), ("pay", pay)):
        builder.add_node(name, node)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "approve")
    builder.add_edge("approve", "pay")
    builder.add_edge("pay", END)
    return builder


def thread(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


async def park_then_resume_elsewhere(
    first: RedisClient, second: RedisClient, thread_id: str, meanwhile: Callable[[], object] = lambda: None
) -> Counter[str]:
    """Run the refund graph on ``first`` until it asks, call ``meanwhile``, then resume it with a new saver
    on ``second``."""
    runs: Counter[str] = Counter()
    parked = (
        await refund_graph(runs)
        .compile(checkpointer=RedisCheckpointSaver(first))
        .ainvoke({"amount": 42, "log": []}, thread(thread_id))
    )
    assert [i.value for i in parked["__interrupt__"]] == [{"question": "refund 42?"}]
    assert runs == {"prepare": 1, "approve": 1}
    meanwhile()

    other_process = refund_graph(runs).compile(checkpointer=RedisCheckpointSaver(second))
    done = await other_process.ainvoke(Command(resume="yes"), thread(thread_id))
    assert done == {"amount": 42, "log": ["prepared 42", "answer yes", "paid"]}
    return runs


async def test_a_graph_parked_on_interrupt_resumes_through_another_saver_and_connection(
    redis: redis_asyncio.Redis, redis_url: str
) -> None:
    handle = await open_redis(redis_url)
    try:
        runs = await park_then_resume_elsewhere(redis, handle.client, "refund-1")
    finally:
        await handle.close()
    # prepare is not replayed; approve runs again up to its interrupt, which now returns the answer
    assert runs == {"prepare": 1, "approve": 2, "pay": 1}
    state = (
        await refund_graph(Counter())
        .compile(checkpointer=RedisCheckpointSaver(redis))
        .aget_state(thread("refund-1"))
    )
    assert state.next == () and state.values["log"][-1] == "paid"


async def test_the_interrupt_is_a_pending_write_a_new_saver_sees(
    redis: redis_asyncio.Redis, redis_url: str
) -> None:
    await (
        refund_graph(Counter())
        .compile(checkpointer=RedisCheckpointSaver(redis))
        .ainvoke({"amount": 7, "log": []}, thread("t"))
    )
    handle = await open_redis(redis_url)
    try:
        latest = await RedisCheckpointSaver(handle.client).aget_tuple(thread("t"))
    finally:
        await handle.close()
    assert latest is not None
    interrupts = [value for _, channel, value in latest.pending_writes or [] if channel == INTERRUPT]
    assert [i.value for i in interrupts[0]] == [{"question": "refund 7?"}]


async def test_pending_writes_survive_in_order_and_are_not_duplicated(redis: redis_asyncio.Redis) -> None:
    saver = RedisCheckpointSaver(redis)
    stored = await saver.aput(
        {"configurable": {"thread_id": "w", "checkpoint_ns": ""}},
        _checkpoint({"a": 1}, {"a": 1}),
        {"source": "loop", "step": 0},
        {"a": 1},
    )
    await saver.aput_writes(stored, [("b", "task2 first"), ("c", {"n": 2})], "task2", task_path="~2")
    await saver.aput_writes(stored, [("b", "task1")], "task1", task_path="~1")
    await saver.aput_writes(stored, [("b", "task1 again")], "task1", task_path="~1")  # a retried task

    seen = (await RedisCheckpointSaver(redis).aget_tuple(stored)).pending_writes
    assert seen == [("task1", "b", "task1"), ("task2", "b", "task2 first"), ("task2", "c", {"n": 2})]


async def test_history_is_newest_first_and_honours_before_and_limit(redis: redis_asyncio.Redis) -> None:
    saver = RedisCheckpointSaver(redis)
    graph = refund_graph(Counter()).compile(checkpointer=saver)
    await graph.ainvoke({"amount": 1, "log": []}, thread("h"))
    await graph.ainvoke(Command(resume="ok"), thread("h"))

    history = [s.config["configurable"]["checkpoint_id"] async for s in graph.aget_state_history(thread("h"))]
    assert len(history) == 5  # input, prepare, approve (parked), approve (resumed)... and pay
    assert history == sorted(history, reverse=True)
    listed = [t.config["configurable"]["checkpoint_id"] async for t in saver.alist(thread("h"))]
    assert listed == history
    before = {"configurable": {"thread_id": "h", "checkpoint_id": history[1]}}
    assert [t.checkpoint["id"] async for t in saver.alist(thread("h"), before=before, limit=2)] == history[
        2:4
    ]
    steps = [t.metadata["step"] async for t in saver.alist(thread("h"), filter={"source": "loop"}, limit=3)]
    assert steps == [3, 2, 1]
    parents = [
        t.parent_config["configurable"]["checkpoint_id"] async for t in saver.alist(thread("h"), limit=4)
    ]
    assert parents == history[1:5]


class Outer(TypedDict):
    log: Annotated[list[str], operator.add]


async def test_a_subgraph_parks_and_resumes_in_its_own_namespace(
    redis: redis_asyncio.Redis, redis_url: str
) -> None:
    runs: Counter[str] = Counter()
    inner = refund_graph(runs).compile()  # inherits the parent's checkpointer

    async def call_inner_async(state: Outer) -> dict[str, Any]:
        return {"log": (await inner.ainvoke({"amount": 5, "log": []}))["log"]}

    def outer(saver: RedisCheckpointSaver):
        builder = StateGraph(Outer)
        builder.add_node("refund", call_inner_async)
        builder.add_edge(START, "refund")
        builder.add_edge("refund", END)
        return builder.compile(checkpointer=saver)

    saver = RedisCheckpointSaver(redis)
    await outer(saver).ainvoke({"log": []}, thread("s"))
    parked = await outer(saver).aget_state(thread("s"), subgraphs=True)
    child = parked.tasks[0].state
    assert child.config["configurable"]["checkpoint_ns"].startswith("refund:")
    namespaces = {t.config["configurable"]["checkpoint_ns"] async for t in saver.alist(thread("s"))}
    assert "" in namespaces and any(ns.startswith("refund:") for ns in namespaces)

    handle = await open_redis(redis_url)
    try:
        done = await outer(RedisCheckpointSaver(handle.client)).ainvoke(Command(resume="sure"), thread("s"))
    finally:
        await handle.close()
    assert done == {"log": ["prepared 5", "answer sure", "paid"]}
    assert runs == {"prepare": 1, "approve": 2, "pay": 1}


async def test_deleting_a_thread_removes_all_of_it_and_nothing_else(redis: redis_asyncio.Redis) -> None:
    saver = RedisCheckpointSaver(redis)
    graph = refund_graph(Counter()).compile(checkpointer=saver)
    for name in ("gone", "kept"):
        await graph.ainvoke({"amount": 3, "log": []}, thread(name))

    await saver.adelete_thread("gone")

    assert await saver.aget_tuple(thread("gone")) is None
    assert [t async for t in saver.alist(thread("gone"))] == []
    assert await redis.exists(*saver.thread_keys("gone")) == 0
    assert (await graph.aget_state(thread("kept"))).next == ("approve",)


async def test_a_retention_ttl_bounds_an_idle_thread(redis: redis_asyncio.Redis) -> None:
    saver = RedisCheckpointSaver(redis, ttl_s=0.3)
    await (
        refund_graph(Counter()).compile(checkpointer=saver).ainvoke({"amount": 3, "log": []}, thread("idle"))
    )
    assert all(0 < ttl <= 300 for ttl in [await redis.pttl(k) for k in saver.thread_keys("idle")])
    await asyncio.sleep(0.4)
    assert await saver.aget_tuple(thread("idle")) is None


async def test_values_are_stored_with_langgraphs_serializer_not_pickle(redis: redis_asyncio.Redis) -> None:
    saver = RedisCheckpointSaver(redis)
    await refund_graph(Counter()).compile(checkpointer=saver).ainvoke({"amount": 3, "log": []}, thread("p"))
    types = {
        raw.partition(b"\n")[0]
        for field, raw in (await redis.hgetall(saver.thread_keys("p")[1])).items()
        if field.startswith((b"cp:", b"md:", b"b:"))
    }
    assert b"msgpack" in types and types <= {b"msgpack", b"json", b"null"}  # never b"pickle"


async def test_the_sync_api_points_at_the_async_one(redis: redis_asyncio.Redis) -> None:
    graph = refund_graph(Counter()).compile(checkpointer=RedisCheckpointSaver(redis))
    with pytest.raises(NotImplementedError, match="async only: use aget_tuple"):
        graph.invoke({"amount": 3, "log": []}, thread("sync"))


HOSTILE_IDS = ["{", "}", "}{", "{lg:x}", "a:b:c", "hitl:{lg:0}:i", "ünï©ødé 漢字 🙂", "x" * 20_000, " ", "\n"]


async def test_hostile_thread_ids_keep_to_their_own_slot_and_data(redis: redis_asyncio.Redis) -> None:
    saver = RedisCheckpointSaver(redis)
    for n, thread_id in enumerate(HOSTILE_IDS):
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        await saver.aput(
            config, _checkpoint({"who": n}, {"who": 1}), {"source": "input", "step": n}, {"who": 1}
        )

    for n, thread_id in enumerate(HOSTILE_IDS):
        keys = saver.thread_keys(thread_id)
        assert len({key_slot(k.encode()) for k in keys}) == 1, thread_id
        found = await saver.aget_tuple(thread(thread_id))
        assert found.checkpoint["channel_values"] == {"who": n}
        assert found.config["configurable"]["thread_id"] == thread_id
    all_keys = [k for t in HOSTILE_IDS for k in saver.thread_keys(t)]
    assert len(set(all_keys)) == len(all_keys) == 3 * len(HOSTILE_IDS)
    assert {t.config["configurable"]["thread_id"] async for t in saver.alist(None)} == set(HOSTILE_IDS)


async def test_keys_that_hold_another_threads_data_are_neither_read_nor_written(
    redis: redis_asyncio.Redis,
) -> None:
    saver = RedisCheckpointSaver(redis)
    config = {"configurable": {"thread_id": "mine", "checkpoint_ns": ""}}
    await saver.aput(config, _checkpoint({"x": 1}, {"x": 1}), {"source": "input", "step": -1}, {"x": 1})
    # as if another thread's id had the same digest
    await redis.hset(saver.thread_keys("mine")[1], "tid", "theirs")
    before = await redis.hgetall(saver.thread_keys("mine")[1])

    assert await saver.aget_tuple(thread("mine")) is None
    with pytest.raises(ResponseError, match="another thread"):
        await saver.aput(config, _checkpoint({"x": 2}, {"x": 2}), {"source": "loop", "step": 0}, {"x": 2})
    assert await redis.hgetall(saver.thread_keys("mine")[1]) == before


async def test_a_caller_chosen_checkpoint_id_cannot_reach_into_the_key_space(
    redis: redis_asyncio.Redis,
) -> None:
    saver = RedisCheckpointSaver(redis)
    with pytest.raises(ValueError, match="not a checkpoint id"):
        await saver.aget_tuple({"configurable": {"thread_id": "t", "checkpoint_id": "x\nb:00:00"}})


async def test_langgraphs_conformance_suite_passes(redis: redis_asyncio.Redis) -> None:
    @checkpointer_test(name="RedisCheckpointSaver")
    async def ours():
        yield RedisCheckpointSaver(redis)

    report = await validate(ours)
    failures = {cap: result.failures for cap, result in report.results.items() if result.passed is False}
    assert failures == {}
    assert {cap.value for cap in BASE_CAPABILITIES} <= {cap for cap, r in report.results.items() if r.passed}


async def test_a_graph_parks_and_resumes_on_a_redis_cluster(
    valkey_cluster, cluster_redis: RedisClient
) -> None:
    handle = await open_redis(valkey_cluster.url, cluster=True)
    try:
        # the slot's master forgets the scripts meanwhile (as a promoted replica that never ran them)
        runs = await park_then_resume_elsewhere(
            cluster_redis,
            handle.client,
            "{tenant}:refund/1",
            lambda: (
                valkey_cluster.master_of(RedisCheckpointSaver.thread_keys("{tenant}:refund/1")[0])
                .client()
                .script_flush()
            ),
        )
    finally:
        await handle.close()
    assert runs == {"prepare": 1, "approve": 2, "pay": 1}
    saver = RedisCheckpointSaver(cluster_redis)
    assert {t.config["configurable"]["thread_id"] async for t in saver.alist(None)} == {"{tenant}:refund/1"}
    await saver.adelete_thread("{tenant}:refund/1")
    assert [t async for t in saver.alist(None)] == []


def test_importing_the_bot_and_the_store_does_not_import_langgraph() -> None:
    probe = "import sys, bot, bot.app, store, handlers; print([m for m in sys.modules if m.startswith('langgraph')])"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _checkpoint(values: dict[str, Any], versions: dict[str, Any]) -> dict[str, Any]:
    return {
        "v": 1,
        "id": str(uuid6(clock_seq=-1)),
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": values,
        "channel_versions": versions,
        "versions_seen": {},
        "pending_sends": [],
        "updated_channels": None,
    }
