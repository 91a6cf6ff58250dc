"""
Embedded means embedded: with no `--address`, the job runs on a Ray of its own even when someone else's
`ray start --head` runs on the machine, or has died and left its address file behind.

The foreign head writes its address file where a plain `ray.init()` of the job would look for it: the job runs
with `RAY_TMPDIR` set to the head's private base folder, so that its default Ray folder (`$RAY_TMPDIR/ray`) is the
head's `--temp-dir`, as `/tmp/ray` is shared on a real machine. The head runs in its own process group, with ports
the operating system chose, and is stopped by killing that group only (never `ray stop`).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from tests.cluster.cluster_testing import VENV_BIN, explain, free_port, run_command
from tests.jobs.conftest import TEXTS, write_corpus

SETTINGS = ["--top-k", "2", "--max-seq-length", "64", "--stride", "16"]
TIMEOUT_S = 300  # per job: a job that waits for a dead cluster fails here instead of hanging
PORT_IN_USE = re.compile(r"already in use|address in use|failed to bind", re.I)  # as Ray's processes say it


class ForeignHead:
    """
    Someone else's single-node Ray, started with `ray start --head --block` in its own process group, with its
    `--temp-dir` at `BASE/ray` (BASE a private folder) and no dashboard.
    """

    def __init__(self) -> None:
        # Short: Ray puts Unix sockets under it, and their paths are limited to about 100 characters.
        self.base = Path(tempfile.mkdtemp(prefix="rqf-", dir="/tmp"))
        self.temp_dir = self.base / "ray"
        self.address_file = self.temp_dir / "ray_current_cluster"
        self.session_dir: Path | None = None  # the head's session folder, once it runs
        self._process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 180.0, attempts: int = 3) -> None:
        """
        Starts the head and waits for its address file; raises RuntimeError with its output if it fails. A port
        chosen free may be taken by another process before the head binds it: then it starts again on new ports.
        """
        for attempt in range(attempts):
            try:
                return self._start_once(timeout_s)
            except RuntimeError as error:
                self.kill()
                if attempt + 1 == attempts or not PORT_IN_USE.search(str(error)):
                    raise

    def _start_once(self, timeout_s: float) -> None:
        ports = ("--port", "--dashboard-port", "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
                 "--runtime-env-agent-port", "--metrics-export-port", "--node-manager-port", "--object-manager-port",
                 "--ray-client-server-port")  # fmt: skip
        command = [
            str(VENV_BIN / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
            "--include-dashboard=false", "--num-cpus=1", "--num-gpus=0", f"--object-store-memory={256 * 1024**2}",
            f"--temp-dir={self.temp_dir}", "--disable-usage-stats", *(f"{flag}={free_port()}" for flag in ports),
        ]  # fmt: skip
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        env.pop("RAY_ADDRESS", None)
        with (self.base / "ray-start.log").open("wb") as log:
            self._process = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"ray start exited with {self._process.returncode}:\n{self.output()}")
            if self.address_file.exists() and self.address_file.read_text().strip():
                self.session_dir = (self.temp_dir / "session_latest").resolve()  # later Rays here move the link
                return
            time.sleep(0.5)
        raise RuntimeError(f"the foreign head wrote no address file in {timeout_s:.0f} s:\n{self.output()}")

    @property
    def address(self) -> str:
        """The GCS address the head wrote to its address file (where `ray.init()` would find it)."""
        return self.address_file.read_text().strip()

    def drivers(self) -> list[str]:
        """The log files of the drivers that connected to the head (each driver writes one in its session)."""
        return sorted(path.name for path in (self.session_dir / "logs").glob("python-core-driver-*"))

    def output(self) -> str:
        path = self.base / "ray-start.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill(self) -> None:
        """Kills every process of the head (its process group) at once, as a crash would: no clean-up runs."""
        if self._process is None:
            return
        group = self._process.pid  # start_new_session: the group's id is the leader's pid
        try:
            os.killpg(group, signal.SIGKILL)  # also when `ray start` itself exited and left its children
        except ProcessLookupError:
            pass  # every process of the group has exited
        self._process.wait()
        members = [p for p in psutil.process_iter(["pid"]) if _group_of(p) == group]
        psutil.wait_procs(members, timeout=10)

    def remove(self) -> None:
        """Kills the head if it runs, then removes its folder."""
        self.kill()
        shutil.rmtree(self.base, ignore_errors=True)


def _group_of(process: psutil.Process) -> int | None:
    try:
        return os.getpgid(process.pid)
    except (ProcessLookupError, PermissionError):
        return None


@pytest.fixture(scope="module")
def foreign_head():
    head = ForeignHead()
    try:
        head.start()
        yield head
    finally:
        head.remove()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    documents = {f"d{i}": TEXTS[i * 5][:400] for i in range(3)}
    questions = {
        "q1": ("What does it return?", ["d0", "d1"]),
        "q2": ("Which arguments are optional?", ["d2"]),
        "q3": ("What is raised on error?", ["d1", "d2"]),
    }
    return write_corpus(tmp_path_factory.mktemp("foreign"), documents, questions)


def run_job_beside(head: ForeignHead, corpus: dict[str, str], model: Path, output: Path, engine: str = "ray"):
    """
    The job as a user runs it, with no --address, on a machine whose default Ray folder is the head's (on Ray:
    these three questions would run in-process by default).
    """
    args = ["-m", "jobs.bulk_qa", "--questions", corpus["questions"], "--documents", corpus["documents"],
            "--model", str(model), "--output", str(output), "--engine", engine, *SETTINGS]  # fmt: skip
    return run_command(args, env={"RAY_TMPDIR": str(head.base), "RAY_AUTH_MODE": None}, timeout_s=TIMEOUT_S)


def check_own_ray(result, output: Path, foreign_address: str) -> None:
    """The job succeeded on a Ray it started, not on the foreign cluster."""
    assert result.returncode == 0, explain(result)
    # stdout holds only the summary: no Ray warning (such as the raylet's count of worker processes) above it.
    assert result.stdout.lstrip().startswith("bulk-qa: done"), explain(result)
    assert "WARNING" not in result.stdout, explain(result)
    # Ray's own notice that it enabled token authentication (RAY_AUTH_MODE unset) shows with --verbose only.
    assert "Token authentication" not in result.stderr, explain(result)
    cluster = json.loads((output / "manifest.json").read_text())["cluster"]
    assert cluster["started_by_job"] is True
    assert cluster["address"] != foreign_address
    assert "running on the Ray cluster at" not in result.stderr


def test_a_running_foreign_cluster_is_not_joined(
    foreign_head: ForeignHead, corpus: dict[str, str], tiny_bert_model: Path, tmp_path: Path
) -> None:
    foreign = foreign_head.address  # what a plain `ray.init()` of the job would join
    result = run_job_beside(foreign_head, corpus, tiny_bert_model, tmp_path / "out")
    check_own_ray(result, tmp_path / "out", foreign)
    assert foreign_head.drivers() == [], "the foreign cluster saw a driver"


def test_a_dead_foreign_cluster_with_its_address_file_left_is_not_waited_for(
    foreign_head: ForeignHead, corpus: dict[str, str], tiny_bert_model: Path, tmp_path: Path
) -> None:
    foreign = foreign_head.address
    foreign_head.kill()
    assert foreign_head.address_file.exists(), "killed without clean-up, the head leaves its address file"
    result = run_job_beside(foreign_head, corpus, tiny_bert_model, tmp_path / "out")
    check_own_ray(result, tmp_path / "out", foreign)


def test_an_in_process_run_beside_a_dead_foreign_cluster_uses_no_ray(
    foreign_head: ForeignHead, corpus: dict[str, str], tiny_bert_model: Path, tmp_path: Path
) -> None:
    """A small job runs in-process by default and never reaches Ray, which would find the address file and wait."""
    foreign_head.kill()
    assert foreign_head.address_file.exists()
    result = run_job_beside(foreign_head, corpus, tiny_bert_model, tmp_path / "out", engine="auto")
    assert result.returncode == 0, explain(result)
    assert result.stdout.lstrip().startswith("bulk-qa: done"), explain(result)
    assert "in-process, no Ray" in result.stdout
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["cluster"]["engine"] == "in-process"
