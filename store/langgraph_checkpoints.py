"""A LangGraph checkpointer on plain Redis, Valkey or a Redis Cluster (DESIGN §14).

LangGraph's own Redis checkpointer needs the RedisJSON and RediSearch modules, which Valkey and most managed
Redis lack. This one needs hashes, a sorted set and Lua: every Redis ≥ 6, Valkey, and a Cluster.

Keys of one thread (``T = hitl:{lg:<sha256 of the thread id>}``, one hash slot whatever the id holds):
  T:i   zset, score 0, members ``<ns>:<checkpoint id>`` (``<ns>`` the checkpoint namespace in hex, so a
        namespace is a lexicographic range and its newest checkpoint the range's last member)
  T:d   hash: ``tid`` the thread id itself (refused on a mismatch), and per checkpoint ``m`` (its member):
        ``cp:m`` the checkpoint without its channel values, ``md:m`` its metadata, ``pa:m`` its parent's id,
        ``bl:m`` the blob fields of its channel values, ``wl:m`` the fields of its pending writes; and the
        channel values ``b:<ns>:<channel>:<version>`` (hex parts), each written once, by the checkpoint
        that gave its channel that version and shared by the checkpoints after it
  T:w   hash: the pending writes, ``m:<task id in hex>:<idx>`` → the write

Values go through the saver's ``serde`` (LangGraph's ``JsonPlusSerializer``: msgpack/JSON, no pickle unless
the caller passes a serializer that pickles), stored as ``<type>\\n<bytes>``. Every write (``aput``,
``aput_writes``, ``adelete_thread``) is one Lua script on the thread's three keys, so it is atomic and
Cluster-safe; a read is one script too (the checkpoint, its channel values and its pending writes in one
round trip). Bounded: ``adelete_thread`` deletes the thread's three keys, and ``ttl_s`` makes every write
(re)arm a TTL on them, so a thread left alone that long is gone. A write resent after a lost reply
(store/client.py retries) changes nothing: ``aput`` sets the same fields again, ``aput_writes`` adds only
the writes not there yet.

Use (``pip install '.[langgraph]'``)::

    handle = await open_redis(os.environ.get("REDIS_URL"), cluster=os.environ.get("REDIS_CLUSTER") == "1")
    graph = builder.compile(checkpointer=RedisCheckpointSaver(handle.client, ttl_s=7 * 86400))

Async only: LangGraph runs an async graph (``ainvoke``, ``astream``) on the async methods; the sync ones
raise ``NotImplementedError`` naming their async twin, as ``BaseCheckpointSaver`` allows.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from redis.commands.core import AsyncScript

from store.client import RedisClient
from store.pipelined import evalsha, pipelined

# Checkpoint ids are LangGraph's uuid6 strings; a caller-chosen one (time travel) is held to a safe shape, as
# ids are parts of field names and of the newline-separated lists the scripts keep
_CHECKPOINT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}", re.ASCII)
_FETCH_BATCH = 32  # checkpoints alist fetches in one round trip

_EXPIRE_FN = """
local function expire(ttl)
  if ttl > 0 then for _, k in ipairs(KEYS) do redis.call('PEXPIRE', k, ttl) end end
end
local function same_thread()
  local tid = redis.call('HGET', KEYS[2], 'tid')
  if tid and tid ~= ARGV[1] then return redis.error_reply('checkpoint keys belong to another thread') end
  return nil
end
"""

# KEYS: T:i T:d T:w; ARGV: thread id, member, ttl ms, checkpoint, metadata, parent id, blob fields, then
# pairs of blob field, value (the channels this checkpoint gave a new version)
_PUT = (
    _EXPIRE_FN
    + """
local refused = same_thread()
if refused then return refused end
local m = ARGV[2]
redis.call('HSET', KEYS[2], 'tid', ARGV[1], 'cp:' .. m, ARGV[4], 'md:' .. m, ARGV[5], 'pa:' .. m, ARGV[6],
           'bl:' .. m, ARGV[7])
for i = 8, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
redis.call('ZADD', KEYS[1], 0, m)
expire(tonumber(ARGV[3]))
return 1
"""
)

# KEYS: T:i T:d T:w; ARGV: thread id, member, ttl ms, then triples of field, write, '1' when it replaces an
# earlier one (LangGraph's special channels: error, interrupt, resume...) or '0' when the first one stays
_PUT_WRITES = (
    _EXPIRE_FN
    + """
local refused = same_thread()
if refused then return refused end
local added = {}
for i = 4, #ARGV, 3 do
  local f = ARGV[i]
  if redis.call('HSETNX', KEYS[3], f, ARGV[i + 1]) == 1 then added[#added + 1] = f
  elseif ARGV[i + 2] == '1' then redis.call('HSET', KEYS[3], f, ARGV[i + 1]) end
end
if #added > 0 then
  local wl = 'wl:' .. ARGV[2]
  redis.call('HSET', KEYS[2], wl, (redis.call('HGET', KEYS[2], wl) or '') .. table.concat(added, '\\n') .. '\\n')
end
redis.call('HSET', KEYS[2], 'tid', ARGV[1])
expire(tonumber(ARGV[3]))
return #added
"""
)

# KEYS: T:i T:d T:w; ARGV: thread id, namespace prefix, checkpoint id ('' the namespace's newest)
# → false, or {member, checkpoint, metadata, parent id, blob fields, {blobs}, {writes}}
_GET = """
local m
if ARGV[3] == '' then
  local last = redis.call('ZREVRANGEBYLEX', KEYS[1], '(' .. ARGV[2] .. ';', '[' .. ARGV[2] .. ':', 'LIMIT', 0, 1)
  if #last == 0 then return false end
  m = last[1]
else
  m = ARGV[2] .. ':' .. ARGV[3]
end
local row = redis.call('HMGET', KEYS[2], 'tid', 'cp:' .. m, 'md:' .. m, 'pa:' .. m, 'bl:' .. m, 'wl:' .. m)
if row[1] ~= ARGV[1] or not row[2] then return false end
local function fetch(key, list)
  local names, out = {}, {}
  for f in string.gmatch(list or '', '[^\\n]+') do names[#names + 1] = f end
  for i = 1, #names, 500 do
    local part = redis.call('HMGET', key, unpack(names, i, math.min(i + 499, #names)))
    for j = 1, #part do out[#out + 1] = part[j] or '' end
  end
  return out
end
return {m, row[2], row[3], row[4] or '', row[5] or '', fetch(KEYS[2], row[5]), fetch(KEYS[3], row[6])}
"""

_DELETE = "return redis.call('DEL', unpack(KEYS))"


class RedisCheckpointSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoints in a Redis/Valkey (Cluster or not) through the project's ``redis.asyncio`` client.

    ``ttl_s``: when set, every write (re)arms this TTL on the thread's keys (retention of idle threads).
    Async only: the sync methods raise ``NotImplementedError`` pointing at the async ones.
    """

    def __init__(
        self, redis: RedisClient, *, ttl_s: float | None = None, serde: SerializerProtocol | None = None
    ) -> None:
        super().__init__(serde=serde)
        if ttl_s is not None and ttl_s <= 0:
            raise ValueError("ttl_s must be positive (or None: keep until adelete_thread)")
        self.redis = redis
        self.ttl_ms = int(ttl_s * 1000) if ttl_s else 0
        self._put = redis.register_script(_PUT)
        self._put_writes = redis.register_script(_PUT_WRITES)
        self._get = redis.register_script(_GET)
        self._delete = redis.register_script(_DELETE)

    # -- keys ---------------------------------------------------------------------------------------------
    @staticmethod
    def thread_keys(thread_id: str) -> list[str]:
        """The thread's keys (index, data, writes): one hash tag from a digest, whatever the id holds."""
        tag = hashlib.sha256(str(thread_id).encode()).hexdigest()
        return [f"hitl:{{lg:{tag}}}:{part}" for part in ("i", "d", "w")]

    # -- reads --------------------------------------------------------------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``), or its namespace's newest; None if none."""
        thread_id, ns = _thread_and_ns(config)
        checkpoint_id = get_checkpoint_id(config)
        return await self._fetch(thread_id, ns, _checked_id(checkpoint_id) if checkpoint_id else "")

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Checkpoints newest first: of ``config``'s thread (and namespace, when it names one; all threads
        when ``config`` is None), those whose metadata holds every pair of ``filter``, older than ``before``'s
        checkpoint, at most ``limit``."""
        if limit is not None and limit <= 0:
            return
        threads = [_thread_and_ns(config)[0]] if config else [tid async for tid in self._thread_ids()]
        ns = config["configurable"].get("checkpoint_ns") if config else None
        only_id = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        for thread_id in threads:
            members = await self._members(thread_id, ns)
            members = [
                (n, c)
                for n, c in members
                if (not only_id or c == only_id) and (not before_id or c < before_id)
            ]
            if filter:
                members = await self._matching(thread_id, members, filter)
            if limit is not None:
                members = members[:limit]
            for start in range(0, len(members), _FETCH_BATCH):
                for item in await self._fetch_many(thread_id, members[start : start + _FETCH_BATCH]):
                    if item is not None:
                        if limit is not None:
                            limit -= 1
                        yield item
            if limit is not None and limit <= 0:
                return

    # -- writes -------------------------------------------------------------------------------------------
    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store ``checkpoint`` (child of ``config``'s checkpoint) with the values of the channels it gave a
        new version, in one atomic script; returns the config naming it."""
        thread_id, ns = _thread_and_ns(config)
        checkpoint_id = _checked_id(checkpoint["id"])
        parent = get_checkpoint_id(config) or ""
        body = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        values = checkpoint["channel_values"]
        blob_fields = [_blob_field(ns, ch, ver) for ch, ver in checkpoint["channel_versions"].items()]
        blobs: list[Any] = []
        for ch, ver in new_versions.items():
            if ch in values:
                blobs += [_blob_field(ns, ch, ver), self._dump(values[ch])]
        args = [
            str(thread_id),
            _member(ns, checkpoint_id),
            self.ttl_ms,
            self._dump(body),
            self._dump(get_checkpoint_metadata(config, metadata)),
            parent,
            "\n".join(blob_fields),
            *blobs,
        ]
        await self._run(self._put, keys=self.thread_keys(thread_id), args=args)
        return _config(thread_id, ns, checkpoint_id)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes against ``config``'s checkpoint, in one atomic script. A write already
        stored under the same (task, index) stays, except LangGraph's special channels, which replace."""
        thread_id, ns = _thread_and_ns(config)
        checkpoint_id = _checked_id(get_checkpoint_id(config))
        member = _member(ns, checkpoint_id)
        args: list[Any] = [str(thread_id), member, self.ttl_ms]
        for i, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, i)
            type_, data = self.serde.dumps_typed(value)
            head = json.dumps([task_id, channel, type_, task_path, idx]).encode()
            args += [f"{member}:{task_id.encode().hex()}:{idx}", head + b"\n" + data, "1" if idx < 0 else "0"]
        await self._run(self._put_writes, keys=self.thread_keys(thread_id), args=args)

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, channel value and pending write of the thread, in all its namespaces."""
        await self._run(self._delete, keys=self.thread_keys(thread_id), args=[])

    def get_next_version(self, current: str | int | float | None, channel: None) -> str:
        """``<counter>.<random>``: increasing, and two branches forked from one checkpoint never share a
        version (a channel value is stored once per version)."""
        counter = 0 if current is None else int(str(current).split(".")[0])
        return f"{counter + 1:032}.{random.random():016}"

    # -- sync API: not offered ----------------------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        raise NotImplementedError(_ASYNC_ONLY.format("aget_tuple"))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        raise NotImplementedError(_ASYNC_ONLY.format("alist"))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        raise NotImplementedError(_ASYNC_ONLY.format("aput"))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        raise NotImplementedError(_ASYNC_ONLY.format("aput_writes"))

    def delete_thread(self, thread_id: str) -> None:
        raise NotImplementedError(_ASYNC_ONLY.format("adelete_thread"))

    # -- inside -------------------------------------------------------------------------------------------
    async def _run(self, script: AsyncScript, *, keys: list[str], args: list[Any]) -> Any:
        # the store's way with scripts: EVALSHA, and on a cluster node that lacks it (a promoted replica) the
        # body on that slot's node (store/pipelined.py)
        (reply,) = await pipelined(self.redis, [evalsha(script, keys, args)], [script])
        return reply

    def _dump(self, value: Any) -> bytes:
        type_, data = self.serde.dumps_typed(value)
        return type_.encode() + b"\n" + data

    def _load(self, raw: bytes) -> Any:
        type_, _, data = raw.partition(b"\n")
        return self.serde.loads_typed((type_.decode(), data))

    async def _fetch(self, thread_id: str, ns: str, checkpoint_id: str) -> CheckpointTuple | None:
        """The checkpoint ``checkpoint_id`` ('': the namespace's newest) with its values and writes."""
        row = await self._run(
            self._get, keys=self.thread_keys(thread_id), args=_get_args(thread_id, ns, checkpoint_id)
        )
        return self._tuple(thread_id, ns, row) if row else None

    async def _fetch_many(self, thread_id: str, members: list[tuple[str, str]]) -> list[CheckpointTuple]:
        """Those of ``members`` (namespace, checkpoint id) still there, in one round trip on one server."""
        keys = self.thread_keys(thread_id)
        commands = [evalsha(self._get, keys, _get_args(thread_id, ns, c)) for ns, c in members]
        rows = await pipelined(self.redis, commands, [self._get])
        return [self._tuple(thread_id, ns, row) for (ns, _), row in zip(members, rows, strict=True) if row]

    def _tuple(self, thread_id: str, ns: str, row: list[Any]) -> CheckpointTuple:
        member, body, meta, parent, blob_fields, blobs, writes = row
        checkpoint_id = member.split(b":", 1)[1].decode()
        values = {}
        for field, raw in zip(blob_fields.split(b"\n") if blob_fields else [], blobs, strict=True):
            if raw:  # a channel whose version came with no value (emptied) has no blob
                values[bytes.fromhex(field.split(b":")[2].decode()).decode()] = self._load(raw)
        parent_id = parent.decode()
        return CheckpointTuple(
            config=_config(thread_id, ns, checkpoint_id),
            checkpoint={**self._load(body), "channel_values": values},
            metadata=self._load(meta),
            parent_config=_config(thread_id, ns, parent_id) if parent_id else None,
            pending_writes=self._pending_writes(writes),
        )

    def _pending_writes(self, raws: Sequence[bytes]) -> list[PendingWrite]:
        rows = []
        for raw in filter(None, raws):  # (a write gone meanwhile: none, as the thread was deleted)
            head, _, data = raw.partition(b"\n")
            task_id, channel, type_, task_path, idx = json.loads(head)
            rows.append((writes_sort_key(task_path, task_id, idx), (task_id, channel, type_, data)))
        rows.sort(key=lambda row: row[0])
        return [
            (task_id, channel, self.serde.loads_typed((type_, data)))
            for _, (task_id, channel, type_, data) in rows
        ]

    async def _members(self, thread_id: str, ns: str | None) -> list[tuple[str, str]]:
        """(namespace, checkpoint id) of the thread's checkpoints (in ``ns`` if given), newest first."""
        index = self.thread_keys(thread_id)[0]
        if ns is None:
            raw = await self.redis.zrange(index, 0, -1)
        else:
            prefix = ns.encode().hex()
            raw = await self.redis.zrangebylex(index, f"[{prefix}:", f"({prefix};")
        members = []
        for m in raw:
            hex_ns, _, checkpoint_id = m.decode().partition(":")
            members.append((bytes.fromhex(hex_ns).decode(), checkpoint_id))
        members.sort(key=lambda member: member[1], reverse=True)
        return members

    async def _matching(
        self, thread_id: str, members: list[tuple[str, str]], filter: dict[str, Any]
    ) -> list[tuple[str, str]]:
        """Those of ``members`` whose metadata holds every pair of ``filter`` (read in one HMGET)."""
        if not members:
            return []
        fields = [f"md:{_member(n, c)}" for n, c in members]
        metas = await self.redis.hmget(self.thread_keys(thread_id)[1], fields)
        return [
            member
            for member, raw in zip(members, metas, strict=True)
            if raw and all(self._load(raw).get(k) == v for k, v in filter.items())
        ]

    async def _thread_ids(self) -> AsyncIterator[str]:
        """Every thread with checkpoints here (a SCAN: for listing without a thread, not for a hot path)."""
        seen: set[bytes] = set()
        async for key in self.redis.scan_iter(match="hitl:{lg:*}:i", count=500):
            if key in seen:
                continue
            seen.add(key)
            tid = await self.redis.hget(key[:-1] + b"d", "tid")
            if tid is not None:
                yield tid.decode()


_ASYNC_ONLY = "RedisCheckpointSaver is async only: use {} (run the graph with ainvoke/astream)"


def _thread_and_ns(config: RunnableConfig) -> tuple[str, str]:
    configurable = config["configurable"]
    return str(configurable["thread_id"]), configurable.get("checkpoint_ns") or ""


def _checked_id(checkpoint_id: str | None) -> str:
    if not checkpoint_id or not _CHECKPOINT_ID.fullmatch(checkpoint_id):
        raise ValueError(f"not a checkpoint id: {checkpoint_id!r}")
    return checkpoint_id


def _get_args(thread_id: str, ns: str, checkpoint_id: str) -> list[str]:
    return [str(thread_id), ns.encode().hex(), checkpoint_id]


def _member(ns: str, checkpoint_id: str) -> str:
    return f"{ns.encode().hex()}:{checkpoint_id}"


def _blob_field(ns: str, channel: str, version: str | int | float) -> str:
    return f"b:{ns.encode().hex()}:{channel.encode().hex()}:{json.dumps(version).encode().hex()}"


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}
