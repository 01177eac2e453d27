"""Responses real model servers sent, kept in tests/data/model_responses/, each file naming its public source.

A file is a few ``# name: value`` header lines (``source``, ``provider``, ``shows``, ``status``,
``content-type``, any number of ``header: Name: value``, an optional ``note``), a blank line, then the body
exactly as the server sent it (an SSE stream or a JSON document).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

FOLDER = Path(__file__).resolve().parents[1] / "data" / "model_responses"


@dataclass(frozen=True)
class Recorded:
    name: str
    source: str
    provider: str
    status: int
    content_type: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    def response(self) -> web.Response:
        headers = {"Content-Type": self.content_type, **self.headers}
        return web.Response(status=self.status, body=self.body, headers=headers)


def recorded(name: str) -> Recorded:
    raw = (FOLDER / name).read_bytes()
    head, _, body = raw.partition(b"\n\n")
    meta: dict[str, str] = {}
    headers: dict[str, str] = {}
    for line in head.decode().splitlines():
        key, _, value = line.removeprefix("# ").partition(": ")
        if key == "header":
            header, _, header_value = value.partition(": ")
            headers[header] = header_value
        else:
            meta[key] = value
    return Recorded(
        name=name,
        source=meta["source"],
        provider=meta["provider"],
        status=int(meta["status"]),
        content_type=meta["content-type"],
        body=body,
        headers=headers,
    )


def all_recorded() -> list[str]:
    return sorted(p.name for p in FOLDER.iterdir() if p.suffix in (".sse", ".json"))
