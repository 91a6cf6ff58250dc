"""Fixtures for the job tests: one local Ray per test module, small real-text inputs, and a job runner."""

import json
import os
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.bulk_qa import main
from qa_core.local_models import TEXT_FILE

ROOT = Path(__file__).resolve().parents[2]
TEXTS = [json.loads(line)["text"] for line in TEXT_FILE.read_text().splitlines()]


@contextmanager
def own_local_ray(**resources):
    """
    A Ray instance of this process's own (`address="local"`, `RAY_ADDRESS` cleared meanwhile): never a cluster
    someone else started on the machine, alive or dead. It runs without token authentication (it listens on this
    machine only): Ray keeps the mode it first read in the process, which an earlier test may have set otherwise.
    """
    import ray

    saved = {name: os.environ.pop(name, None) for name in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    os.environ["RAY_AUTH_MODE"] = "disabled"
    try:
        ray.init(address="local", include_dashboard=False, log_to_driver=False, **resources)
        ray.data.DataContext.get_current().enable_progress_bars = False
        yield ray
    finally:
        ray.shutdown()
        for name, value in saved.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray instance shared by the tests of one module (2 CPUs, as on the project's machines)."""
    with own_local_ray(num_cpus=2) as ray:
        yield ray


def write_table(path: Path, columns: dict, schema: pa.Schema | None = None) -> str:
    """Writes a Parquet file and returns its path as a string."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns, schema=schema), path)
    return str(path)


def write_corpus(root: Path, documents: dict, questions: dict) -> dict[str, str]:
    """A documents table (id -> content) and a questions table (id -> (query, document ids or None)) under `root`."""
    return {
        "documents": write_table(
            root / "documents.parquet", {"id": list(documents), "content": list(documents.values())}
        ),
        "questions": write_table(
            root / "questions.parquet",
            {
                "id": list(questions),
                "query": [query for query, _ in questions.values()],
                "document_ids": pa.array([ids for _, ids in questions.values()], pa.list_(pa.string())),
            },
        ),
    }


def read_output(output: Path, table: str) -> list[dict]:
    """An output table's rows (nulls as None), sorted by question and then rank or reply."""
    rows = pq.read_table(output / table).to_pylist()
    keys = [key for key in ("question_id", "rank", "reply_index") if rows and key in rows[0]]
    return sorted(rows, key=lambda row: [row[key] for key in keys])


def assert_rows_match(rows: list[dict], expected: list[dict], what: str, tolerance: float = 1e-6) -> None:
    """
    Rows equal the expected ones: every value equal, floats (and lists of floats) within `tolerance` (a batch's
    other sequences change the last bits of a score).
    """
    assert len(rows) == len(expected), what
    for row, expected_row in zip(rows, expected, strict=True):
        floats = {key for key, value in expected_row.items() if _is_float(value)}
        assert {key: row[key] for key in row if key not in floats} == {
            key: value for key, value in expected_row.items() if key not in floats
        }, what
        for key in sorted(floats):
            assert row[key] == pytest.approx(expected_row[key], abs=tolerance), (what, key)


def _is_float(value) -> bool:
    return isinstance(value, float) or (isinstance(value, list) and any(isinstance(item, float) for item in value))


def assert_same_outputs(output: Path, expected: Path, tables: tuple[str, ...]) -> None:
    """Two runs' output tables hold the same rows (see `assert_rows_match`)."""
    for table in tables:
        assert read_output(expected, table), table
        assert_rows_match(read_output(output, table), read_output(expected, table), table)


def by_question(rows: list[dict]) -> dict[str, list[dict]]:
    """Rows grouped by question id, in order."""
    grouped: dict[str, list[dict]] = {}
    for row in rows:
        grouped.setdefault(row["question_id"], []).append(row)
    return grouped


def run_job(*args: str) -> int:
    """
    Runs the job in-process (it joins the module's Ray) and returns its exit status. A run that does not end fails
    its test at pytest-timeout's limit, with the test's captured output (the job's).
    """
    return main([str(arg) for arg in args])


def kill_at_first_commit(job: subprocess.Popen, output: Path, timeout_s: float) -> None:
    """
    Kills a job's driver (SIGKILL) as soon as it has committed its first shard (or ended, or `timeout_s` passed), and
    checks that it was killed, not finished.
    """
    try:
        deadline = time.monotonic() + timeout_s
        while not list((output / "_shards").glob("*.json")) and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        job.send_signal(signal.SIGKILL)
        job.wait(timeout=60)
    finally:
        job.kill()
    assert job.returncode == -signal.SIGKILL, "the driver was killed, not finished"


def run_process(command: list, timeout_s: float, **options) -> subprocess.CompletedProcess:
    """
    `command` (a job, or a script, as a user runs it), its stdout and stderr captured as text. One still running
    after `timeout_s` is killed and fails the test with the end of its output, instead of holding the suite.
    """
    try:
        return subprocess.run(
            [str(part) for part in command], capture_output=True, text=True, timeout=timeout_s, **options
        )
    except subprocess.TimeoutExpired as expired:  # run() killed it; the output so far is bytes
        fail_after(timeout_s, command, _text(expired.stdout) + _text(expired.stderr))


def wait_for_process(process: subprocess.Popen, timeout_s: float, log: Path) -> int:
    """
    The exit status of `process` (a job started with its output written to `log`). One still running after
    `timeout_s` is killed and fails the test with the end of its log, instead of holding the suite.
    """
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        fail_after(timeout_s, process.args, log.read_text(errors="replace"))


def communicate_within(process: subprocess.Popen, timeout_s: float) -> tuple[str, str]:
    """
    The stdout and stderr of `process` (started with both piped, as text) once it ends. One still running after
    `timeout_s` is killed and fails the test with the end of its output, instead of holding the suite.
    """
    try:
        return process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        fail_after(timeout_s, process.args, stdout + stderr)


def fail_after(timeout_s: float, command: list, output: str) -> None:
    """Fails the test: `command` ran past `timeout_s`; the last 6,000 characters of its output."""
    pytest.fail(
        f"still running after {timeout_s:g} s, killed: {' '.join(map(str, command))}\n{output[-6000:]}",
        pytrace=False,
    )


def _text(output: bytes | str | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""
