"""The embedded Valkey server and open_redis (DESIGN §9), against real valkey-server processes."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import redis.asyncio as redis_asyncio

from store.client import RedisHandle, open_redis, ping
from store.embedded import DataDirInUse, EmbeddedServerError, EmbeddedValkey

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCAL_REDIS_URL = "redis://127.0.0.1:6379/15"


def _process_alive(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie may linger if PID 1 does not reap)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


async def _wait_until_gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not _process_alive(pid):
            return True
        await asyncio.sleep(0.02)
    return False


def _socket_path(url: str) -> Path:
    assert url.startswith("unix://")
    return Path(url.removeprefix("unix://"))


async def test_start_serves_a_private_unix_socket_and_stop_removes_it(tmp_data_dir: Path) -> None:
    server = EmbeddedValkey(tmp_data_dir)
    url = await server.start()
    socket_path = _socket_path(url)
    try:
        assert url == server.url
        assert stat.S_IMODE(socket_path.stat().st_mode) == 0o700
        client = redis_asyncio.Redis.from_url(url)
        try:
            assert await client.ping() is True
            assert await client.config_get("port") == {"port": "0"}  # no TCP listener
            assert await client.config_get("appendonly") == {"appendonly": "yes"}
        finally:
            await client.aclose()
        pid = server.pid
        assert pid is not None and _process_alive(pid)
    finally:
        await server.stop()
    assert not socket_path.exists()
    assert await _wait_until_gone(pid)
    assert not server.running
    with pytest.raises(EmbeddedServerError, match="not running"):
        _ = server.url


async def test_data_survives_a_restart_in_the_same_data_dir(tmp_data_dir: Path) -> None:
    async with EmbeddedValkey(tmp_data_dir) as first:
        client = redis_asyncio.Redis.from_url(first.url)
        await client.set(b"parked:turn-1", b"state")
        await client.aclose()

    async with EmbeddedValkey(tmp_data_dir) as second:
        client = redis_asyncio.Redis.from_url(second.url)
        assert await client.get(b"parked:turn-1") == b"state"
        await client.aclose()
    assert (tmp_data_dir / "appendonlydir").is_dir()


async def test_second_server_on_a_busy_data_dir_is_refused_with_a_clear_error(tmp_data_dir: Path) -> None:
    async with EmbeddedValkey(tmp_data_dir):
        with pytest.raises(DataDirInUse) as refused:
            await EmbeddedValkey(tmp_data_dir).start()
    assert str(refused.value) == (
        f"Redis data directory {tmp_data_dir} is already in use by another bot process "
        f"(pid {os.getpid()}); stop it or set REDIS_URL"
    )
    assert refused.value.pid == os.getpid()
    # Once the first one stopped, the directory is free again.
    async with EmbeddedValkey(tmp_data_dir) as again:
        client = redis_asyncio.Redis.from_url(again.url)
        assert await ping(client)
        await client.aclose()


async def test_deep_data_dir_puts_the_socket_in_a_short_tempdir(tmp_path: Path) -> None:
    deep_dir = tmp_path.joinpath(*(["a-rather-long-directory-name"] * 5))
    assert len(os.fsencode(deep_dir / "valkey.sock")) > 107
    async with EmbeddedValkey(deep_dir) as server:
        socket_path = _socket_path(server.url)
        assert len(os.fsencode(socket_path)) <= 107
        client = redis_asyncio.Redis.from_url(server.url)
        await client.set(b"k", b"v")
        await client.aclose()
    assert not socket_path.parent.exists()  # the tempdir is cleaned up
    assert (deep_dir / "appendonlydir").is_dir()  # the data itself stays in the data dir


async def test_unstartable_server_raises_with_the_log_tail(tmp_data_dir: Path) -> None:
    aof_dir = tmp_data_dir / "appendonlydir"
    aof_dir.mkdir()
    (aof_dir / "appendonly.aof.manifest").write_text("this is not a manifest\n")
    server = EmbeddedValkey(tmp_data_dir)
    with pytest.raises(EmbeddedServerError, match="(?s)exited with code .*manifest") as failed:
        await server.start()
    assert not isinstance(failed.value, DataDirInUse)
    assert not server.running
    # The failed attempt released the lock: a repaired directory starts fine.
    (aof_dir / "appendonly.aof.manifest").unlink()
    async with EmbeddedValkey(tmp_data_dir) as repaired:
        assert repaired.running


_CHILD_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from store.embedded import EmbeddedValkey

    async def main():
        server = EmbeddedValkey(Path(sys.argv[1]))
        await server.start()
        print(server.pid, flush=True)
        if sys.argv[2] == "hang":
            await asyncio.sleep(60)
        # "exit": return without stop(); atexit must not leave the server behind

    asyncio.run(main())
    """
)


def _spawn_bot_process(data_dir: Path, mode: str) -> tuple[subprocess.Popen[str], int]:
    bot = subprocess.Popen(
        [sys.executable, "-c", _CHILD_SCRIPT, str(data_dir), mode],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert bot.stdout is not None
    line = bot.stdout.readline()
    assert line.strip().isdigit(), f"bot process did not start its server (got {line!r})"
    return bot, int(line)


async def test_server_does_not_outlive_a_program_that_exits_without_stop(tmp_data_dir: Path) -> None:
    bot, server_pid = _spawn_bot_process(tmp_data_dir, "exit")
    assert bot.wait(timeout=10) == 0
    assert await _wait_until_gone(server_pid)
    async with EmbeddedValkey(tmp_data_dir) as next_server:
        assert next_server.running


async def test_kill_9_of_the_bot_stops_its_server_and_frees_the_data_dir(tmp_data_dir: Path) -> None:
    bot, server_pid = _spawn_bot_process(tmp_data_dir, "hang")
    try:
        with pytest.raises(DataDirInUse, match=f"pid {bot.pid}"):
            await EmbeddedValkey(tmp_data_dir).start()
        bot.send_signal(signal.SIGKILL)
        bot.wait(timeout=5)
        assert await _wait_until_gone(server_pid), "valkey-server was orphaned by kill -9 of its parent"
        async with EmbeddedValkey(tmp_data_dir) as next_server:
            assert next_server.running
    finally:
        if bot.poll() is None:
            bot.kill()
            bot.wait()


async def test_open_redis_without_url_starts_and_owns_an_embedded_server(tmp_data_dir: Path) -> None:
    handle = await open_redis(None, data_dir=tmp_data_dir)
    try:
        assert isinstance(handle, RedisHandle)
        assert handle.server is not None and handle.url == handle.server.url
        await handle.client.set(b"k", b"v")
        assert await handle.client.get(b"k") == b"v"  # bytes: decode_responses=False
        assert await ping(handle.client)
    finally:
        await handle.close()
    assert not handle.server.running
    assert not _socket_path(handle.url).exists()


async def test_open_redis_with_a_unix_url_uses_that_server_and_leaves_it_running(tmp_data_dir: Path) -> None:
    async with EmbeddedValkey(tmp_data_dir) as server:
        handle = await open_redis(server.url)
        assert handle.server is None
        await handle.client.set(b"k", b"shared")
        await handle.close()
        assert server.running
        client = redis_asyncio.Redis.from_url(server.url)
        assert await client.get(b"k") == b"shared"
        await client.aclose()


async def test_join_uses_the_server_a_running_bot_shares_and_leaves_it_running(tmp_data_dir: Path) -> None:
    async with EmbeddedValkey(tmp_data_dir, shared=True) as bot_server:
        handle = await open_redis(None, data_dir=tmp_data_dir, join=True)
        try:
            assert handle.server is None and handle.url == bot_server.url and handle.owner_pid == os.getpid()
            await handle.client.set(b"k", b"seen by the bot")
        finally:
            await handle.close()
        assert bot_server.running
        client = redis_asyncio.Redis.from_url(bot_server.url)
        assert await client.get(b"k") == b"seen by the bot"
        await client.aclose()
        with pytest.raises(DataDirInUse):  # without join=True a second process is refused, as before
            await open_redis(None, data_dir=tmp_data_dir)


async def test_join_refuses_a_server_that_is_not_shared(tmp_data_dir: Path) -> None:
    """A CLI command's own server stops when the command ends: another command must not lean on it."""
    async with EmbeddedValkey(tmp_data_dir):
        with pytest.raises(DataDirInUse):
            await open_redis(None, data_dir=tmp_data_dir, join=True)
    handle = await open_redis(None, data_dir=tmp_data_dir, join=True)  # free again: our own server
    try:
        assert handle.server is not None and handle.owner_pid is None
    finally:
        await handle.close()


async def test_open_redis_with_the_session_server_url(redis_url: str) -> None:
    handle = await open_redis(redis_url)
    try:
        assert handle.server is None and handle.url == redis_url
        assert await ping(handle.client)
    finally:
        await handle.close()


async def test_open_redis_on_local_tcp_redis_db_15() -> None:
    probe = redis_asyncio.Redis.from_url(LOCAL_REDIS_URL, socket_connect_timeout=0.5)
    reachable = await ping(probe, within_s=1.0)
    await probe.aclose()
    if not reachable:
        pytest.skip(f"no Redis answers on {LOCAL_REDIS_URL}")
    handle = await open_redis(LOCAL_REDIS_URL)
    try:
        key = f"test-store-embedded:{os.getpid()}".encode()
        await handle.client.set(key, b"v", ex=10)
        assert await handle.client.get(key) == b"v"
        await handle.client.delete(key)
        assert (await handle.client.connection_pool.get_connection()).db == 15
    finally:
        await handle.close()


@pytest.mark.parametrize(
    "bad_url",
    [
        "http://127.0.0.1:6379",
        "127.0.0.1:6379",
        "redis://",
        "redis://127.0.0.1:notaport/0",
        "unix://",
        "valkey://127.0.0.1:6379",
    ],
)
async def test_open_redis_rejects_a_wrong_url_naming_redis_url(bad_url: str) -> None:
    with pytest.raises(ValueError, match="REDIS_URL"):
        await open_redis(bad_url)


async def test_wrong_url_error_does_not_leak_the_password() -> None:
    with pytest.raises(ValueError, match="REDIS_URL") as rejected:
        await open_redis("http://user:hunter2@127.0.0.1:6379")
    assert "hunter2" not in str(rejected.value)


async def test_cluster_needs_a_tcp_url() -> None:
    with pytest.raises(ValueError, match="REDIS_URL"):
        await open_redis(None, cluster=True)
    with pytest.raises(ValueError, match="REDIS_URL"):
        await open_redis("unix:///tmp/valkey.sock", cluster=True)


async def test_ping_is_false_for_a_server_that_is_not_there(tmp_path: Path) -> None:
    client = redis_asyncio.Redis(unix_socket_path=str(tmp_path / "nobody-listens.sock"))
    try:
        started = time.monotonic()
        assert await ping(client, within_s=0.3) is False
        assert time.monotonic() - started < 1.0
    finally:
        await client.aclose()


def _hold_lock(data_dir: Path, recorded_pid: int, seconds: float) -> subprocess.Popen:
    """A process that holds the data directory's lock for ``seconds`` with ``recorded_pid`` written in it,
    as a crashed bot's server child (an AOF rewrite fork) does for a moment after the bot died."""
    code = textwrap.dedent(f"""
        import fcntl, sys, time
        f = open({str(data_dir / ".lock")!r}, "a+")
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        f.seek(0); f.truncate(); f.write("{recorded_pid}\\n"); f.flush()
        print("held", flush=True)
        time.sleep({seconds})
    """)
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


async def test_a_restart_after_a_crash_waits_for_a_lock_only_the_dead_bots_leftovers_hold(tmp_data_dir: Path) -> None:
    tmp_data_dir.mkdir(parents=True, exist_ok=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    holder = _hold_lock(tmp_data_dir, dead.pid, 0.5)
    try:
        async with EmbeddedValkey(tmp_data_dir) as server:
            assert server.running
    finally:
        holder.wait()


async def test_a_lock_held_for_a_live_process_is_refused_at_once(tmp_data_dir: Path) -> None:
    tmp_data_dir.mkdir(parents=True, exist_ok=True)
    holder = _hold_lock(tmp_data_dir, os.getpid(), 30.0)  # a live pid: a real conflict, never waited out
    try:
        with pytest.raises(DataDirInUse, match=f"pid {os.getpid()}"):
            await EmbeddedValkey(tmp_data_dir).start()
        assert holder.poll() is None
    finally:
        holder.kill()
        holder.wait()
