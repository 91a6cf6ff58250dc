"""
A multi-node Ray cluster on this machine, as a fixed cluster of separate machines behaves: a head with no CPUs
(it schedules nothing) and worker nodes of 1 CPU each, every node `ray start --block` in its own process group
(its own session), so that a test can lose one node at once (SIGKILL to its group, as a machine that dies) and add
another. The head has a private `--temp-dir`, explicit free ports and no dashboard; no command touches any other
Ray on the machine (never `ray stop`), and `stop` kills only the groups it started.

A worker node may have a disk of its own (`LocalRayCluster(local_folder=...)`, as root): it then runs in its own
mount namespace (`unshare -m`) with a tmpfs over that folder, so that what the driver's machine holds there is not
what the node sees, as on two machines with local disks. The tmpfs goes with the node's last process.
"""

import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from tests.cluster.cluster_testing import VENV_BIN, free_port

# Ray's own processes on a node, by the ports each listens on.
_NODE_PORTS = ("--object-manager-port", "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
               "--runtime-env-agent-port", "--metrics-export-port")  # fmt: skip
# What `ray start` prints when its raylet has not registered with the head within Ray's fixed 30 s.
_STARTUP_TIMEOUT = "The current node timed out during startup"


class RayNode:
    """
    One `ray start --block` node in its own process group; `kill` loses it as a crash would. Its raylet listens on
    `node_manager_port`, which names it in the head's node table.
    """

    def __init__(
        self, command: list[str], log: Path, node_manager_port: int, env: dict[str, str] | None = None
    ) -> None:
        self.log, self.node_manager_port = log, node_manager_port
        with log.open("wb") as out:
            self._process = subprocess.Popen(
                command, env=node_env(env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.group = self._process.pid  # start_new_session: the group's id is the leader's pid

    def in_its_mounts(self, *command: str) -> None:
        """Runs `command` in the node's mount namespace (e.g. to copy files onto its own disk); fails if it does."""
        subprocess.run(["nsenter", f"--target={self.group}", "--mount", *command], check=True)

    def alive(self) -> bool:
        return self._process.poll() is None

    def processes(self) -> list[psutil.Process]:
        """
        Every live process of the node: its group (`ray start`, the raylet, its agents) and their children (the
        raylet starts its workers and actors in process groups of their own).
        """
        found: dict[int, psutil.Process] = {}
        for process in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(process.pid) == self.group:
                    found[process.pid] = process
                    found.update((child.pid, child) for child in process.children(recursive=True))
            except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
                continue
        return list(found.values())

    def runs(self, text: str) -> bool:
        """Whether a process of the node has `text` in its command line (Ray titles a worker by its task)."""
        for process in self.processes():
            try:
                if text in " ".join(process.cmdline()):
                    return True
            except psutil.NoSuchProcess:
                continue
        return False

    def kill(self) -> None:
        """SIGKILL to every process of the node at once: no clean-up runs, as when a machine is lost."""
        members = self.processes()
        try:
            os.killpg(self.group, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for process in members:  # the workers, outside the group
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        self._process.wait()
        psutil.wait_procs(members, timeout=10)


def node_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """
    A node's environment: this virtual environment's Python, no usage stats, no token authentication, and `extra`
    (e.g. object storage's endpoint and credentials).
    """
    env = {
        **os.environ,
        **(extra or {}),
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
        # A lost node is declared dead after 3 missed health checks a second apart (Ray: 5, 3 s apart).
        "RAY_health_check_period_ms": "1000",
        "RAY_health_check_failure_threshold": "3",
    }
    env.pop("RAY_ADDRESS", None)
    return env


class LocalRayCluster:
    """
    A head of 0 CPUs and `add_worker()` nodes of `cpus` CPUs each.

    Usage:
        cluster = LocalRayCluster()
        cluster.start(workers=2)
        try:
            ...  # run drivers with --address cluster.address; cluster.workers[0].kill(); cluster.add_worker()
        finally:
            cluster.stop()
    """

    def __init__(
        self,
        cpus: int = 1,
        object_store_mib: int = 200,
        local_folder: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        """
        :param local_folder: A folder that each worker node sees on a disk of its own (a tmpfs in its own mount
            namespace, empty when the node starts; needs root): the head and the drivers see this machine's.
        :param env: Added to every node's environment.
        """
        self.cpus, self.object_store_mib = cpus, object_store_mib
        self.local_folder, self.env = local_folder, env
        # Short: Ray puts Unix sockets under it, and their paths are limited to about 100 characters.
        self.base = Path(tempfile.mkdtemp(prefix="rqc-", dir="/tmp"))
        self.head: RayNode | None = None
        self.workers: list[RayNode] = []
        self._nodes: list[RayNode] = []  # every node started, lost ones included
        self._state = None  # a reader of the head's GCS tables, once the head runs

    @property
    def address(self) -> str:
        """The head's GCS address (`--address` of a driver)."""
        return (self.base / "ray" / "ray_current_cluster").read_text().strip()

    def _common(self) -> list[str]:
        return [str(VENV_BIN / "ray"), "start", "--block", "--node-ip-address=127.0.0.1", "--num-gpus=0",
                f"--object-store-memory={self.object_store_mib * 1024**2}", "--disable-usage-stats",
                *(f"{flag}={free_port()}" for flag in _NODE_PORTS)]  # fmt: skip

    def start(self, workers: int, timeout_s: float = 120.0) -> None:
        """Starts the head and `workers` worker nodes; waits until all have joined."""
        command = [*self._common(), "--head", "--num-cpus=0", "--include-dashboard=false",
                   f"--temp-dir={self.base / 'ray'}", f"--port={free_port()}",
                   f"--ray-client-server-port={free_port()}"]  # fmt: skip
        self.head = self._start(command, "head")
        deadline = time.monotonic() + timeout_s
        address_file = self.base / "ray" / "ray_current_cluster"
        while not (address_file.exists() and address_file.read_text().strip()):
            if not self.head.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the head did not start:\n{self.head.log.read_text(errors='replace')}")
            time.sleep(0.3)
        for _ in range(workers):  # one after the other: nodes starting together on one machine time out
            self.add_worker()

    def _start(self, command: list[str], name: str, local_folder: Path | None = None) -> RayNode:
        port = free_port()
        command = [*command, f"--node-manager-port={port}"]
        if local_folder:
            # unshare and sh exec in place: the node's process group stays the one `kill` ends.
            mount = f"mount -t tmpfs -o size=64m tmpfs {shlex.quote(str(local_folder))} && exec {shlex.join(command)}"
            command = ["unshare", "-m", "--propagation", "private", "sh", "-c", mount]
        node = RayNode(command, self.base / f"{name}-{len(self._nodes)}.log", port, self.env)
        self._nodes.append(node)
        return node

    def add_worker(self) -> RayNode:
        """A new worker node of `cpus` CPUs joined to the head (a replacement machine)."""
        node = self._start_worker()
        self.wait_for_workers()
        return node

    def _start_worker(self) -> RayNode:
        node = self._start(
            [*self._common(), f"--address={self.address}", f"--num-cpus={self.cpus}"], "worker", self.local_folder
        )
        self.workers.append(node)
        return node

    def lose(self, node: RayNode) -> None:
        """Kills a worker node at once and leaves it out of the cluster's workers."""
        node.kill()
        self.workers.remove(node)

    def joined(self) -> set[int]:
        """The node manager ports of the nodes the head's GCS counts as alive."""
        if self._state is None:  # the GCS's tables only: this process joins no node as a driver would
            from ray._private.state import GlobalState
            from ray._raylet import GcsClientOptions

            self._state = GlobalState()
            options = GcsClientOptions.create(
                self.address, None, allow_cluster_id_nil=True, fetch_cluster_id_if_nil=False
            )
            self._state._initialize_global_state(options)
        return {node["NodeManagerPort"] for node in self._state.node_table() if node["Alive"]}

    def wait_for_workers(self, timeout_s: float = 120.0, restarts: int = 2) -> None:
        """
        Until every started worker node has joined (each has registered its raylet with the head). A node whose
        `ray start` gave up waiting for its raylet to register (Ray waits 30 s, a fixed limit that a loaded 2-core
        machine can pass) is started again, as a replacement machine would be, at most `restarts` times; a node
        that ends any other way fails at once.
        """
        deadline = time.monotonic() + timeout_s
        while not {node.node_manager_port for node in self.workers} <= self.joined():
            dead = [node for node in self.workers if not node.alive()]
            if dead and restarts > 0 and all(_STARTUP_TIMEOUT in node.log.read_text(errors="replace") for node in dead):
                for node in dead:
                    self.lose(node)  # its raylet may have started: the whole group goes
                    self._start_worker()
                restarts -= 1
                continue
            if dead or time.monotonic() > deadline:
                logs = "\n".join(node.log.read_text(errors="replace") for node in dead or self.workers)
                raise RuntimeError(f"worker nodes did not join:\n{logs}")
            time.sleep(0.5)

    def stop(self) -> None:
        """Kills every node this cluster started (their groups only) and removes its folder."""
        for node in reversed(self._nodes):
            node.kill()
        shutil.rmtree(self.base, ignore_errors=True)
