"""
Helpers of the cluster tests: commands run as a user runs them, and a real Ray head on 127.0.0.1.

The head is isolated from every other Ray instance on the machine.

`ray start --head --block` runs in its own session with a private `--temp-dir` and explicit free ports, so:

- `ray.init()` in other tests never finds it (the "latest cluster" file lives in the private temp dir),
- it never clashes with the default ports of an in-process cluster started elsewhere,
- stopping it touches only its own processes: SIGTERM to the blocking `ray start`, which shuts down
  everything it launched, then SIGKILL to any survivor whose command line names the private temp dir.
  (`ray stop` would stop every Ray instance on the machine, including other engineers' test runs.)
"""

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import psutil
import pyarrow.parquet as pq

from jobs.bulk_qa.workers.tables import ANSWERS_SCHEMA, QUESTIONS_SCHEMA
from tests.jobs.conftest import run_process

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample"
VENV_BIN = Path(sys.executable).parent


def run_command(args: list[str], env: dict[str, str | None], timeout_s: float) -> subprocess.CompletedProcess:
    """
    Runs `python ARGS` from the project root with this interpreter; stdout and stderr are captured.

    :param env: Changes to this process's environment: a value, or None to remove the variable.
    """
    full_env = dict(os.environ)
    full_env.pop("RAY_ADDRESS", None)
    for name, value in env.items():
        if value is None:
            full_env.pop(name, None)
        else:
            full_env[name] = value
    return run_process([sys.executable, *args], timeout_s, cwd=ROOT, env=full_env)


_PORTS_GIVEN: set[int] = set()  # every port `free_port` returned in this process


def free_port() -> int:
    """
    A TCP port on 127.0.0.1 that nothing listens on right now and that this process was not given before: the
    operating system may offer a port again once its probe closed, and Ray refuses to start when two of its
    components are given the same port. Another process may still take it before the caller listens on it: a
    caller retries with fresh ports when it finds it taken (see `LocalRayHead.start`).
    """
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _PORTS_GIVEN:
            _PORTS_GIVEN.add(port)
            return port


# A job of the sample's size takes about a minute on 2 idle cores, several on a loaded machine.
JOB_TIMEOUT_S = 900


def submit(head, job_args: list[str], env: dict[str, str] | None = None):
    """`python -m jobs.submit --address HEAD --no-install -- JOB_ARGS`, run to the job's end."""
    return run_command(
        ["-m", "jobs.submit", "--address", head.dashboard_url, "--no-install", "--", *job_args],
        env={**head.client_env, **(env or {})},
        timeout_s=JOB_TIMEOUT_S,
    )


def submission_id(result) -> str:
    found = re.search(r"submitted (\S+) to", result.stderr)
    assert found, result.stderr
    return found.group(1)


def explain(result) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout[-6000:]}\n--- stderr\n{result.stderr[-4000:]}"


def input_ids(path: Path) -> set[str]:
    return set(pq.read_table(path, columns=["id"]).column("id").to_pylist())


# What the sample job (data/sample/job.yaml) gives with the seeded tiny BERT model: each question's status, and
# its answer rows: top_k=3 spans and the no-answer entry for each question with documents (q09's known documents
# are read although it names an unknown one).
SAMPLE_STATUSES = {**{f"q{i:02d}": "answered" for i in range(1, 9)},
                   "q09": "error", "q10": "no_documents", "q11": "no_documents", "q12": "error"}  # fmt: skip
SAMPLE_ANSWER_ROWS = {f"q{i:02d}": 4 for i in range(1, 10)}


def check_answer_tables(output: str, questions: set[str], filesystem=None) -> dict:
    """
    The sample job's output folder holds its tables, with their schemas, one questions row per input question
    with the sample's statuses, the sample's answer rows, and its manifest; returns the manifest.
    """
    table = pq.read_table(f"{output}/questions", filesystem=filesystem)
    assert table.schema.names == QUESTIONS_SCHEMA.names
    assert sorted(table.column("question_id").to_pylist()) == sorted(questions) == sorted(SAMPLE_STATUSES)
    statuses = dict(zip(table.column("question_id").to_pylist(), table.column("status").to_pylist(), strict=True))
    assert statuses == SAMPLE_STATUSES
    answers = pq.read_table(f"{output}/answers", filesystem=filesystem)
    assert answers.schema.names == ANSWERS_SCHEMA.names
    assert Counter(answers.column("question_id").to_pylist()) == SAMPLE_ANSWER_ROWS
    no_answer = Counter(answers.filter(answers["is_no_answer"]).column("question_id").to_pylist())
    assert no_answer == dict.fromkeys(SAMPLE_ANSWER_ROWS, 1)
    if filesystem is None:
        manifest = json.loads(Path(output, "manifest.json").read_text())
    else:
        with filesystem.open_input_stream(f"{output}/manifest.json") as stream:
            manifest = json.loads(stream.read())
    assert manifest["outputs"]["questions"] == len(questions)
    assert manifest["outputs"]["answers"] == answers.num_rows
    assert manifest["reconciled"] is True
    return manifest


# How Ray's processes report a port that another process holds (gRPC, Python's socket, aiohttp).
_PORT_IN_USE = re.compile(r"already in use|address in use|failed to bind", re.I)


class _PortTaken(Exception):
    """`ray start` found one of its ports taken; the message is its output."""


class LocalRayHead:
    """
    A single-node Ray cluster started with `ray start --head`, with its dashboard (the Job Submission API).

    Usage:
        head = LocalRayHead(num_cpus=4, env={"SOME": "value"})
        head.start()
        try:
            ...  # submit to head.dashboard_url, connect drivers to head.gcs_address
        finally:
            head.stop()

    The head runs with token authentication (`RAY_AUTH_MODE=token`, the default of coming Ray releases) and its
    own token file; a client reaches it with the environment in `client_env`.

    :param num_cpus: Logical CPUs the head advertises.
    :param env: Extra environment for the head's processes (and so for the jobs it runs).
    """

    def __init__(self, num_cpus: int = 4, env: dict[str, str] | None = None):
        self.num_cpus = num_cpus
        self.env = dict(env or {})
        self.temp_dir: str | None = None
        self.gcs_port = 0
        self.dashboard_port = 0
        self._process: subprocess.Popen | None = None
        self._log_path: Path | None = None

    @property
    def gcs_address(self) -> str:
        """The address `ray.init(address=...)` connects a driver to, as the head itself reports it."""
        return (Path(self.temp_dir) / "ray_current_cluster").read_text().strip()

    @property
    def client_env(self) -> dict[str, str]:
        """The environment a client (job submission, driver) needs to authenticate to this head."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(Path(self.temp_dir) / "auth_token")}

    @property
    def dashboard_url(self) -> str:
        """The address of the Job Submission API."""
        return f"http://127.0.0.1:{self.dashboard_port}"

    def start(self, timeout_s: float = 90.0, attempts: int = 3) -> None:
        """Starts the head and waits until the Job Submission API answers.

        `ray start` takes the ports it is given, found free just before: when one was taken meanwhile by another
        process, the head exits or reports the port in use, and is started again on fresh ports, up to `attempts`
        times in all.

        :raises RuntimeError: if the head exits or does not answer within `timeout_s` for another reason, or the
            last attempt finds a port taken; the message holds its output.
        """
        for attempt in range(1, attempts + 1):
            try:
                self._start_once(timeout_s)
                return
            except _PortTaken as taken:
                if attempt == attempts:
                    raise RuntimeError(f"ray start found a port taken {attempts} times:\n{taken}") from None

    def _start_once(self, timeout_s: float) -> None:
        # Short: Ray puts Unix sockets under it, and their paths are limited to about 100 characters.
        self.temp_dir = tempfile.mkdtemp(prefix="rayqa-", dir="/tmp")
        (Path(self.temp_dir) / "auth_token").write_text(secrets.token_hex(32))
        self.gcs_port, self.dashboard_port = free_port(), free_port()
        ports = {
            "--port": self.gcs_port,
            "--dashboard-port": self.dashboard_port,
            "--dashboard-agent-listen-port": free_port(),
            "--dashboard-agent-grpc-port": free_port(),
            "--runtime-env-agent-port": free_port(),
            "--metrics-export-port": free_port(),
            "--node-manager-port": free_port(),
            "--object-manager-port": free_port(),
        }
        command = [
            str(VENV_BIN / "ray"),
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            "--dashboard-host=127.0.0.1",
            "--include-dashboard=true",
            f"--num-cpus={self.num_cpus}",
            "--num-gpus=0",
            f"--object-store-memory={512 * 1024**2}",
            f"--temp-dir={self.temp_dir}",
            "--disable-usage-stats",
            *(f"{flag}={port}" for flag, port in ports.items()),
        ]
        env = {
            **os.environ,
            # Jobs run `python ...`: it must be this virtual environment's interpreter.
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "RAY_USAGE_STATS_ENABLED": "0",
            # No draining on SIGTERM: shut down at once.
            "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
            **self.client_env,
            **self.env,
        }
        env.pop("RAY_ADDRESS", None)
        self._log_path = Path(self.temp_dir) / "ray-start.log"
        with self._log_path.open("wb") as log:
            self._process = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            output = self.output()
            if self._process.poll() is not None or _PORT_IN_USE.search(output):
                self.stop()
                if _PORT_IN_USE.search(output):
                    raise _PortTaken(output)
                raise RuntimeError(f"ray start exited with {self._process.returncode}:\n{output}")
            if self._answers() and (Path(self.temp_dir) / "ray_current_cluster").exists():
                return
            time.sleep(0.5)
        output = self.output()
        self.stop()
        raise RuntimeError(f"the Ray head did not answer at {self.dashboard_url} in {timeout_s:.0f} s:\n{output}")

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.dashboard_url}/api/version", timeout=2):
                return True
        except urllib.error.HTTPError:  # 401 without a token: the API is up
            return True
        except OSError:
            return False

    def get(self, path: str, method: str = "GET") -> dict | list:
        """Calls `path` of the dashboard's REST API (e.g. `/api/jobs/ID`) with this head's token; returns the JSON."""
        token = (Path(self.temp_dir) / "auth_token").read_text().strip()
        request = urllib.request.Request(
            f"{self.dashboard_url}{path}", method=method, headers={"authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def output(self) -> str:
        """What `ray start` printed so far."""
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(errors="replace")

    def _own_processes(self) -> list[psutil.Process]:
        """Every live process whose command line names this head's private temp dir."""
        found = []
        for process in psutil.process_iter(["cmdline"]):
            try:
                if any(self.temp_dir in part for part in process.info["cmdline"] or ()):
                    found.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stops this head and every process it started; removes its temp dir."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self.temp_dir is not None:
            survivors = self._own_processes()
            for process in survivors:
                try:
                    process.kill()
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(survivors, timeout=10)
            shutil.rmtree(self.temp_dir, ignore_errors=True)
