"""Logging: human-readable by default, one JSON object per line with ``LOG_FORMAT=json``.

- **Ids ride along.** Where a turn is driven, an answer settled or an event delivered, the session,
  turn, request and workspace ids are put in a context variable (:func:`bound`, :func:`bind`); every
  log line written meanwhile — ours or a library's — carries them (JSON fields; not in the text format,
  which stays as it was).
- **No secrets.** Every line passes :func:`redact` last: Slack tokens (``xoxb-``, ``xapp-``…), bearer
  credentials, OpenAI-style keys and the configured secrets themselves (signing secret, API key, client
  secret; :func:`add_secrets`) become ``***``. A safety net: log calls should not pass secrets at all.
- **No message text** unless ``LOG_CONTENT=1``: call sites that would show what people or the model
  wrote pass it through :func:`content`, which shows only its length otherwise.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from contextlib import AbstractContextManager
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

ID_FIELDS = ("session_id", "turn_id", "request_id", "team_id")
_NO_IDS: Mapping[str, str] = MappingProxyType({})
_ids: ContextVar[Mapping[str, str]] = ContextVar("hitl_log_ids", default=_NO_IDS)
_log_content = False
_secrets: set[str] = set()
_TOKEN_PATTERNS = re.compile(
    r"\bxox[abeoprs]-[A-Za-z0-9-]{6,}"  # Slack bot/user/config tokens
    r"|\bxapp-[A-Za-z0-9-]{6,}"  # Slack app-level tokens
    r"|\bsk-[A-Za-z0-9_-]{16,}"  # OpenAI-style API keys
    r"|(?<=Bearer )[A-Za-z0-9._~+/=-]{8,}",  # Authorization headers
)


# --- ids of what is being worked on --------------------------------------------------------------


def bound(**ids: str | None) -> AbstractContextManager[None]:
    """Log lines inside carry these ids (None ones are left out); whatever :func:`bind` adds inside is
    undone on the way out too."""
    return _Bound(ids)


class _Bound(AbstractContextManager[None]):
    # a class, not @contextmanager: entered for every event delivered, where a generator-based one costs ~3 ×
    def __init__(self, ids: Mapping[str, str | None]) -> None:
        self.ids = ids

    def __enter__(self) -> None:
        self.token = _ids.set(_merged(self.ids))

    def __exit__(self, *exc: object) -> None:
        _ids.reset(self.token)


def bind(**ids: str | None) -> None:
    """Add ids for the rest of the enclosing :func:`bound` block (or of the current task)."""
    _ids.set(_merged(ids))


def current_ids() -> Mapping[str, str]:
    return _ids.get()


def _merged(ids: Mapping[str, str | None]) -> Mapping[str, str]:
    return MappingProxyType({**_ids.get(), **{k: v for k, v in ids.items() if v}})


# --- what may be shown ---------------------------------------------------------------------------


def content(text: object) -> str:
    """``text`` when ``LOG_CONTENT=1``, else only how long it is: what people and the model write stays
    out of logs by default."""
    if _log_content:
        return str(text)
    return f"[{len(str(text))} chars hidden]"


def content_logged() -> bool:
    return _log_content


def show_content(on: bool) -> None:
    """``LOG_CONTENT``: whether :func:`content` shows text (set by :func:`configure`)."""
    global _log_content
    _log_content = on


def add_secrets(*values: str | None) -> None:
    """Exact values never to be shown (those without a recognisable shape, like a signing secret)."""
    _secrets.update(v for v in values if v and len(v) >= 6)


def redact(text: str) -> str:
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, "***")
    return _TOKEN_PATTERNS.sub("***", text)


def redact_url(url: str) -> str:
    """``url`` fit for a log line: no user or password, every query value ``***`` (a key often rides there)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return redact(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    host = f"{host}:{port}" if port is not None else host
    query = "&".join(f"{name}=***" if value else name for name, value in parse_qsl(parts.query, keep_blank_values=True))
    return redact(urlunsplit((parts.scheme, host, parts.path, query, "")))


def redact_value(value: Any) -> Any:
    """``value`` (JSON-like) with every secret redacted in its strings and keys: what a connection's API
    answers, before the model or a log line sees it (an API may quote the credential back)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [redact_value(v) for v in value]
    if isinstance(value, dict):
        return {redact(str(k)): redact_value(v) for k, v in value.items()}
    return value


# --- formats -------------------------------------------------------------------------------------

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class TextFormatter(logging.Formatter):
    """The human-readable format the bot always had, with secrets redacted."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the ids known, and the exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        entry.update(current_ids())
        for name in ("event", *ID_FIELDS):  # ids passed as ``extra=`` win over the context's
            value = getattr(record, name, None)
            if isinstance(value, str) and value:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        elif record.exc_text:
            entry["exception"] = redact(record.exc_text)
        if record.stack_info:
            entry["stack"] = redact(self.formatStack(record.stack_info))
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure(log_format: str = "text", *, log_content: bool = False, level: int = logging.INFO) -> None:
    """Set up the root logger for ``python -m bot``: one handler on stderr. Like ``logging.basicConfig``
    it leaves a root logger that already has handlers alone (an embedding program's, pytest's)."""
    show_content(log_content)
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level)


class EffectiveLevel(logging.LoggerAdapter):
    """A library's logger whose ``level`` is the level it logs at. slack_sdk writes each request and response
    (a card's whole Block Kit) into its debug line whenever ``logger.level <= DEBUG``, and a logger's own
    ``level`` is NOTSET (0) unless set on it: without this, every Slack call built that line to drop it."""

    def __init__(self, name: str) -> None:
        super().__init__(logging.getLogger(name), {})

    @property
    def level(self) -> int:
        return self.logger.getEffectiveLevel()

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return msg, kwargs  # the record as the logger itself would make it


# --- what the process waits on -------------------------------------------------------------------


def awaiting(task: Any) -> list[str]:
    """Where an asyncio task is suspended: each coroutine of its await chain, outermost first, as
    ``file:line in function`` (``Task.get_stack`` gives only the outermost frame of a suspended one)."""
    where: list[str] = []
    step: Any = task.get_coro()
    for _ in range(100):  # (a chain is short; a cycle would be a bug of its own)
        frame = getattr(step, "cr_frame", None) or getattr(step, "gi_frame", None)
        if frame is None:
            if step is not None:  # what the innermost coroutine awaits: I/O, a sleep, an event, a lock…
                where.append("waiting on a future" if type(step).__name__ == "FutureIter"
                             else f"waiting on {type(step).__name__}")
            break
        where.append(f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_qualname}")
        step = getattr(step, "cr_await", None) or getattr(step, "gi_yieldfrom", None)
    return where


def log_waits() -> None:
    """Log every asyncio task of this process and where it waits (``kill -USR1 <pid>``: a turn or a
    delivery that seems stuck shows what it is waiting on)."""
    import asyncio

    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    lines = [f"{len(tasks)} tasks:"]
    for task in tasks:
        lines.append(f"- {task.get_name()}:")
        lines += [f"    {place}" for place in awaiting(task)]
    logging.getLogger("bot.waits").warning("\n".join(lines))
