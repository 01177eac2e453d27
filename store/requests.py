"""A parked request's record in Redis (``P:req:<rid>`` and its approvals ``P:req:<rid>:ok``): its fields
and how they are read. The turns write records (store/turns.py); the turns and the delivery read them.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from bot.protocol import RequestRecord, UnknownRequest
from store.session_keys import SessionRedis

RECENT_REQUESTS = 1024  # records this process parked or read last, kept for the next click on one
# records validated lately, by their exact stored bytes: a cycle reads the settled record twice (the settle's
# lease read, then the delivery pass's read for the card's edit) and validates it once
VALIDATED_RECORDS = 256


class RequestReads(SessionRedis):
    """Reading stored request records with who approved so far; and the records this process parked or read
    last (bounded), so that a click on one needs no read before its settle: the settle checks the record's
    revision and refuses a changed one (``RequestChanged``), so a stale copy never decides an answer."""

    _recent: OrderedDict[str, RequestRecord]

    def remember(self, *records: RequestRecord) -> None:
        if not hasattr(self, "_recent"):
            self._recent = OrderedDict()
        for record in records:
            self._recent[record.request_id] = record
            self._recent.move_to_end(record.request_id)
        while len(self._recent) > RECENT_REQUESTS:
            self._recent.popitem(last=False)

    def forget(self, request_id: str) -> None:
        """This process changed it (a settle, a mark): the copy is old."""
        getattr(self, "_recent", {}).pop(request_id, None)

    def recent_request(self, request_id: str) -> RequestRecord | None:
        """The record as this process parked or last read it (no I/O; maybe stale: for a settle, which
        checks its revision), or None."""
        record = getattr(self, "_recent", {}).get(request_id)
        return record.model_copy() if record is not None else None

    async def ping(self) -> None:
        """One PING: is the store there (a click that read nothing first asks when its settle is slow)."""
        await self.redis.ping()

    async def get_request(self, request_id: str) -> RequestRecord:
        """The stored record with its approvers; UnknownRequest if there is none."""
        key = self.request_key(request_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(key)
        pipe.smembers(f"{key}:ok")
        fields, oks = await pipe.execute()
        if not fields:
            raise UnknownRequest(request_id)
        record = record_from_fields(fields)
        record.approvals = sorted(o.decode() for o in oks)
        self.remember(record)
        return record

    async def get_requests(self, request_ids: Sequence[str]) -> list[RequestRecord]:
        if not request_ids:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for rid in request_ids:
            key = self.request_key(rid)
            pipe.hgetall(key)
            pipe.smembers(f"{key}:ok")
        found = await pipe.execute()
        records = []
        for fields, oks in zip(found[::2], found[1::2], strict=True):
            if fields:
                record = record_from_fields(fields)
                record.approvals = sorted(o.decode() for o in oks)
                records.append(record)
        self.remember(*records)
        return records


# Lua: a request's record (``HGETALL``'s flat list) and its approvals (``SMEMBERS`` of ``:ok``) as one JSON
# text, ``[fields, approvals]`` (an empty one ``{}``): a script's reply that the client parses as one value
# instead of two dozen (each costs redis-py's parser ~3 µs). Read by :func:`record_from_packed`.
PACK_RECORD_FN = """
local function pack_record(key)
  return cjson.encode({redis.call('HGETALL', key), redis.call('SMEMBERS', key .. ':ok')})
end
"""


def records_read_in_script(flat: list[Any]) -> dict[str, RequestRecord]:
    """Request records a script read for its caller, as ``{request id, pack_record's text, …}``, by id (the
    lease's read, a delivery pass's begin); ids with no record are left out."""
    records = {}
    for rid, packed in zip(flat[::2], flat[1::2], strict=True):
        if (record := record_from_packed(packed)) is not None:
            records[rid.decode()] = record
    return records


def record_from_packed(packed: bytes) -> RequestRecord | None:
    """A record with its approvals from ``PACK_RECORD_FN``'s text; None when there is no record. Validated
    once per exact text, as :func:`record_from_fields`; each call returns its own copy."""
    record = _validated_packed(packed)
    return record.model_copy() if record is not None else None


@lru_cache(maxsize=VALIDATED_RECORDS)
def _validated_packed(packed: bytes) -> RequestRecord | None:
    fields, oks = json.loads(packed)
    if not fields:
        return None
    record = _record_from(dict(zip(fields[::2], fields[1::2], strict=True)))
    record.approvals = sorted(oks)
    return record


def record_fields(record: RequestRecord) -> dict[str, str]:
    return {
        "request": record.request.model_dump_json(exclude_none=True),
        "session_id": record.session_id,
        "turn_id": record.turn_id,
        "team_id": record.team_id or "",
        "channel": json.dumps(record.channel, separators=(",", ":")),
        "session_info": json.dumps(record.session_info, separators=(",", ":")),
        "approval_key": record.approval_key or "",
        "grant_on_approve": "1" if record.grant_on_approve else "0",
        "status": record.status,
        "batch": json.dumps(record.batch),
        "rev": "1",  # a new record's (only new ones are written whole); every change counts it up
    }


def as_parked(fields: dict[str, str]) -> RequestRecord:
    """A new record as a read of it right after its park returns it, from the ``record_fields`` the park wrote
    (made once, for both)."""
    return record_from_fields({k.encode(): v.encode() for k, v in fields.items()})


def record_from_fields(fields: dict[bytes, bytes]) -> RequestRecord:
    """A record as stored (``HGETALL``), validated: the same bytes read again give an equal record without
    validating them again. Each call returns its own copy (no approvals: the caller sets them); its nested
    values are shared with other reads of the same bytes, so they are replaced (``model_copy(update=…)``),
    never changed in place."""
    return _validated(tuple(fields.items())).model_copy()


@lru_cache(maxsize=VALIDATED_RECORDS)
def _validated(fields: tuple[tuple[bytes, bytes], ...]) -> RequestRecord:
    """Keyed by the exact bytes, so a hit returns what validating them would: a changed field is a new key,
    and bytes that fail validation raise every time (nothing is kept for them)."""
    return _record_from({k.decode(): v.decode() for k, v in fields})


def _record_from(f: dict[str, str]) -> RequestRecord:
    request = json.loads(f["request"])
    if f.get("responders"):  # described again since it was made (an approver list changed)
        request["responders"] = json.loads(f["responders"])
    return RequestRecord.model_validate(
        {
            "request": request,
            "session_id": f["session_id"],
            "turn_id": f["turn_id"],
            "team_id": f.get("team_id") or None,
            "channel": json.loads(f.get("channel") or "{}"),
            "session_info": json.loads(f.get("session_info") or "{}"),
            "approval_key": f.get("approval_key") or None,
            "grant_on_approve": f.get("grant_on_approve", "1") != "0",  # records from before it: once() only
            "status": f.get("status", "open"),
            "outcome": f.get("outcome") or None,
            "response": json.loads(f["response"]) if f.get("response") else None,
            "responder": json.loads(f["responder"]) if f.get("responder") else None,
            "note": f.get("note") or None,
            "settled_at": f.get("settled_at") or None,
            "batch": json.loads(f.get("batch") or "[]"),
            "undeliverable": f.get("undeliverable") or None,
            "escalated_to": json.loads(f.get("escalated_to") or "[]"),
            "rev": int(f.get("rev") or 0),
        }
    )
