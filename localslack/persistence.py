"""The local workspace on disk: ``<data dir>/localslack.json``, so a restart shows the same Slack.

Saved: teams, Grid orgs, people, channels (with archive state), every message and thread, ephemerals,
views (App Home tabs and open modals), response_urls, tokens (installs and their scopes, revoked ones) and
the message clock. Not saved: trigger_ids (they live 3 s), Socket Mode connections, delivery and call logs.

Durable before acknowledged: every HTTP answer (Web API, UI, response_url) waits for ``Persister.durable()``,
so a message Slack said ``ok`` to survives a ``kill -9`` the next instant. Writes are group commits (one
write covers every change made while the previous one ran, however many callers wait), done off the event
loop, and atomic (a temp file in the same directory, fsync, ``os.replace``), so a crash leaves the previous
or the new file, never half of one. Changes made outside a request (in-process helpers) are saved
``save_delay_s`` after the first one, and on stop.
On load the saved state wins; what the seed has and the file lacks (a person added to the seed later) is
kept. A file that cannot be read is moved aside (``localslack.json.unreadable-<time>``) and the seed used.
``reset(data_dir)`` (``python -m localslack reset``) deletes the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from localslack.credentials import Auth, RefreshToken, ResponseUrl
from localslack.models import AssistantThread, Channel, Enterprise, Ephemeral, Message, Team, User, View
from localslack.workspace import Workspace

log = logging.getLogger(__name__)

STATE_FILE = "localslack.json"
STATE_VERSION = 1
DEFAULT_SAVE_DELAY_S = 0.5


def state_path(data_dir: str | Path) -> Path:
    return Path(data_dir) / STATE_FILE


def dump(ws: Workspace) -> dict[str, Any]:
    return {
        "version": STATE_VERSION,
        "saved_at": time.time(),
        "enterprises": [e.model_dump(mode="json") for e in ws.enterprises.values()],
        "teams": [t.model_dump(mode="json") for t in ws.teams.values()],
        "users": [u.model_dump(mode="json") for u in ws.users.values()],
        "channels": [c.model_dump(mode="json") for c in ws.channels.values()],
        "history": {cid: [m.model_dump(mode="json") for m in msgs] for cid, msgs in ws.history.items()},
        "ephemerals": [e.model_dump(mode="json") for e in ws.ephemerals],
        "views": [v.model_dump(mode="json") for v in ws.views.values()],
        "home_views": [[team, user, view] for (team, user), view in ws.home_views.items()],
        "modal_stacks": {user: list(stack) for user, stack in ws.modal_stacks.items()},  # a copy: see _snapshot
        "response_urls": {hook: asdict(ctx) for hook, ctx in ws.response_urls.items()},
        "tokens": [a.to_state() for a in ws.tokens.values()],
        "revoked_tokens": sorted(ws.revoked_tokens),
        "refresh_tokens": {token: issued.installation_id for token, issued in ws.rotation.refresh_tokens.items()},
        "clock_us": ws.clock._last_us,
        "assistant_threads": [t.model_dump(mode="json") for t in ws.assistant_threads.values()],
    }


def restore(ws: Workspace, state: dict[str, Any]) -> None:
    """Put a saved state into a workspace built from its seed (saved entries replace seeded ones)."""
    if state.get("version") != STATE_VERSION:
        raise ValueError(f"unknown state version {state.get('version')!r}")
    for raw in state.get("enterprises", []):
        org = Enterprise.model_validate(raw)
        ws.enterprises[org.id] = org
    for raw in state.get("teams", []):
        team = Team.model_validate(raw)
        ws.teams[team.id] = team
    for raw in state.get("users", []):
        user = User.model_validate(raw)
        ws.users[user.id] = user
    for raw in state.get("channels", []):
        channel = Channel.model_validate(raw)
        ws.channels[channel.id] = channel
        ws.history.setdefault(channel.id, [])
    for channel_id, messages in state.get("history", {}).items():
        ws.history[channel_id] = [Message.model_validate(m) for m in messages]
    ws.ephemerals = [Ephemeral.model_validate(e) for e in state.get("ephemerals", [])]
    ws.views = {v.id: v for v in (View.model_validate(raw) for raw in state.get("views", []))}
    ws.home_views = {(team, user): view for team, user, view in state.get("home_views", [])}
    ws.modal_stacks = {user: list(stack) for user, stack in state.get("modal_stacks", {}).items()}
    ws.response_urls = {hook: ResponseUrl(**ctx) for hook, ctx in state.get("response_urls", {}).items()}
    ws.revoked_tokens = set(state.get("revoked_tokens", []))
    ws.tokens = {t: a for t, a in ws.tokens.items() if t not in ws.revoked_tokens}
    for raw in state.get("tokens", []):
        auth = Auth(**raw)
        ws.tokens[auth.token] = auth
    ws.rotation.refresh_tokens = {t: RefreshToken(i) for t, i in (state.get("refresh_tokens") or {}).items()}
    ws.clock._last_us = max(ws.clock._last_us, int(state.get("clock_us") or 0))
    for raw in state.get("assistant_threads", []):  # the AI split view's titles, prompts and contexts
        thread = AssistantThread.model_validate(raw)
        ws.assistant_threads[f"{thread.channel}:{thread.thread_ts}"] = thread


class Persister:
    """Keeps ``<data_dir>/localslack.json`` in step with the workspace: loads it, saves after changes."""

    def __init__(self, ws: Workspace, data_dir: str | Path, *, save_delay_s: float = DEFAULT_SAVE_DELAY_S) -> None:
        self.ws = ws
        self.path = state_path(data_dir)
        self.save_delay_s = save_delay_s
        self.saves = 0
        self._dirty = False
        self._handle: asyncio.TimerHandle | None = None
        self._writing: asyncio.Future[None] | None = None  # the group commit running now
        self._timer_tasks: set[asyncio.Future[None]] = set()
        self._seq = itertools.count(1)  # snapshot order: a slow older write never replaces a newer file
        self._on_disk = 0
        self._lock = threading.Lock()
        ws.on_change.append(self.schedule)

    def load(self) -> bool:
        """Read the saved workspace, if any; True when one was loaded."""
        self._keep_private()
        try:
            state = json.loads(self.path.read_text())
            restore(self.ws, state)
        except FileNotFoundError:
            return False
        except (ValueError, TypeError, KeyError) as exc:
            aside = self.path.with_name(f"{self.path.name}.unreadable-{int(time.time())}")
            os.replace(self.path, aside)
            log.warning("could not read %s (%s); moved it to %s and started from the seed", self.path, exc, aside)
            return False
        log.info("local Slack workspace restored from %s", self.path)
        return True

    def _keep_private(self) -> None:
        """Close to other users a file an older version left open (people's messages are in it)."""
        with contextlib.suppress(FileNotFoundError):
            if self.path.stat().st_mode & 0o077:
                self.path.chmod(0o600)

    def schedule(self) -> None:
        """Called on every change: save once, ``save_delay_s`` after the first unsaved change (a request's
        answer does not wait for this timer: it awaits ``durable()``)."""
        self._dirty = True
        if self._handle is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop yet (building the workspace): the next change or stop() saves
        self._handle = loop.call_later(self.save_delay_s, self._flush)

    def _flush(self) -> None:
        self._handle = None
        if self._dirty:
            task = asyncio.ensure_future(self.durable())
            self._timer_tasks.add(task)
            task.add_done_callback(self._timer_tasks.discard)

    async def durable(self) -> None:
        """Return once every change made before the call is on disk. A write already running may have
        snapshotted before our change, so wait for it and write again while anything is unsaved."""
        while self._dirty or self._writing is not None:
            if self._writing is None:
                self._writing = asyncio.ensure_future(self._write_async())
                self._writing.add_done_callback(self._written)
            writing = self._writing
            try:
                await asyncio.shield(writing)
            except Exception:  # noqa: BLE001 - logged by _written; a broken disk must not hang every answer
                return
            if self._writing is writing:
                # finished, its callback maybe still queued: awaiting a finished future does not yield, so
                # looping on it would never let that callback run (the event loop frozen)
                self._writing = None
            if not self._dirty:
                return

    def _written(self, task: asyncio.Future[None]) -> None:
        if self._writing is task:
            self._writing = None
        if not task.cancelled() and task.exception() is not None:
            self._dirty = True  # not on disk: the next caller tries again
            log.error("could not save %s: %s", self.path, task.exception())

    async def _write_async(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        seq, state = self._snapshot()
        await asyncio.to_thread(self._write, seq, state)  # JSON and fsync off the loop: the UI stays live

    def _snapshot(self) -> tuple[int, dict[str, Any]]:
        """The state, taken on the loop so it is one consistent moment; clears the dirty flag. ``dump``
        builds new containers throughout (model_dump, asdict, copies), so encoding it on another thread
        cannot see a later change."""
        self._dirty = False
        return next(self._seq), dump(self.ws)

    def _write(self, seq: int, state: dict[str, Any]) -> None:
        """Atomically: temp file in the same directory, fsync, rename; never an older snapshot over a newer."""
        with self._lock:
            if seq <= self._on_disk:
                return
            data = json.dumps(state, separators=(",", ":"))
            for folder in reversed([p for p in [self.path.parent, *self.path.parent.parents] if not p.exists()]):
                folder.mkdir(mode=0o700, exist_ok=True)  # people's messages: this user's alone
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()  # a killed write's leftover: created afresh below, at 0600
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with open(fd, "w", encoding="utf-8") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
            self._on_disk = seq
            self.saves += 1

    def save(self) -> None:
        """Write now, on this thread (stop, tests)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._write(*self._snapshot())


def reset(data_dir: str | Path) -> bool:
    """Forget the local workspace kept in ``data_dir``; True when there was one to forget."""
    path = state_path(data_dir)
    existed = path.exists()
    path.unlink(missing_ok=True)
    for leftover in path.parent.glob(f".{path.name}.*.tmp") if path.parent.exists() else []:
        leftover.unlink(missing_ok=True)
    return existed


def reset_command(data_dir: str | Path) -> int:
    """What ``python -m localslack reset`` (and the bot's ``reset-local``) run: 0 either way."""
    path = state_path(data_dir)
    if reset(data_dir):
        print(f"forgot the local Slack workspace ({path}); the next start begins from the seed")
    else:
        print(f"nothing to forget: no local Slack workspace at {path}")
    return 0
