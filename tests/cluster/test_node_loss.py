"""
The bulk job on a cluster of several nodes that loses some: a local cluster of a head with no CPUs and worker
nodes of one CPU each (`tests.cluster.nodes`), the job run with `--address` as a user runs it, nodes killed at once
(their processes SIGKILLed, as a machine that dies) while a stage runs on them. Every run must end with exit 0 and
the tables of the same job run in-process (scores to 1e-5), and print none of Ray's own noise without --verbose.
"""

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jobs.bulk_qa import main
from tests.cluster.nodes import LocalRayCluster, RayNode, node_env
from tests.jobs.bulk_qa.test_reliability import assert_same_tables
from tests.jobs.conftest import ROOT, TEXTS, wait_for_process, write_corpus

SETTINGS = ["--top-k", "2", "--max-seq-length", "64", "--stride", "16", "--context-window-size", "40"]
# 2 waves of 3 shards of 6 questions, actor batches of 16 sequences: a reader has many batches to lose.
SHARDING = ["--shard-size", "6", "--shards-per-wave", "3", "--sequences-per-actor-batch", "16"]
TIMEOUT_S = 420  # per job on a loaded 2-core machine; a job that waits for a node that never comes fails here
# Ray's C++ log lines (`core_worker.cc ... has constructor arguments in the object store`, the driver's own for each
# Ray Data actor; `... Attempting to recover N lost objects` after a lost node) are among them: `jobs.ray_logs`.
NOISE = ("Loading weights", "heartbeat", "marked dead", "(raylet)", "(MapWorker", "(_MapWorker", ".cc:", "lost objects")
READER, RETRIEVER, AGGREGATION = "ReadSequences", "RetrieveDocuments", "aggregate_shard"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRayCluster]:
    """A head of 0 CPUs and two worker nodes of 1 CPU, for the module; each test leaves it with two workers."""
    nodes = LocalRayCluster(cpus=1)
    try:
        nodes.start(workers=2)
        yield nodes
    finally:
        nodes.stop()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """36 questions over 20 documents: with their document_ids, and the same without (retrieved for by BM25)."""
    root = tmp_path_factory.mktemp("node-loss")
    documents = {f"d{i:02d}": TEXTS[i * 5][: 300 + 30 * i] for i in range(20)}
    queries = ["What does it return?", "Which arguments are optional?", "What is raised on error?"]
    listed = {f"q{k:03d}": (queries[k % 3], [f"d{k % 20:02d}", f"d{k * 7 % 20:02d}"]) for k in range(36)}
    unlisted = {key: (query, None) for key, (query, _) in listed.items()}
    return {
        "listed": write_corpus(root / "listed", documents, listed),
        "retrieved": write_corpus(root / "retrieved", documents, unlisted),
    }


def job_args(paths: dict[str, str], model: Path, output: Path, *extra: str) -> list[str]:
    return [
        "--questions", paths["questions"], "--documents", paths["documents"], "--model", str(model),
        "--output", str(output), *SETTINGS, *SHARDING, *extra,
    ]  # fmt: skip


def in_process(paths: dict[str, str], model: Path, output: Path, *extra: str) -> Path:
    """The reference: the same job in this process, without Ray."""
    assert main(job_args(paths, model, output, "--engine", "in-process", "--quiet", *extra)) == 0
    return output


def start_job(args: list[str], address: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.bulk_qa", *args, "--address", address],
        cwd=ROOT,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env={**node_env(), "PYTHONPATH": str(ROOT)},
    )


def node_running(cluster: LocalRayCluster, what: str, job: subprocess.Popen, ready: Callable[[], bool]) -> RayNode:
    """The worker node that runs `what` (an actor's class or a task's function) once `ready()`; fails if the job
    ends first."""
    deadline = time.monotonic() + TIMEOUT_S
    while job.poll() is None and time.monotonic() < deadline:
        if ready():
            for node in cluster.workers:
                if node.runs(what):
                    return node
        time.sleep(0.05)
    raise AssertionError(f"no node ran {what} before the job ended (exit {job.poll()})")


def committed(output: Path) -> int:
    return len(list((output / "_shards").glob("*.json")))


def finish(job: subprocess.Popen, log: Path) -> str:
    """Waits for the job; returns its output (stdout and stderr) after checking its exit status 0."""
    try:
        status = wait_for_process(job, TIMEOUT_S, log)
    finally:
        job.kill()
    text = log.read_text()
    assert status == 0, text[-4000:]
    return text


def assert_quiet(text: str) -> None:
    """The job's own lines only: no model-loading bars, no Ray notices, no workers' logs."""
    noisy = [line for line in text.splitlines() if any(noise in line for noise in NOISE)]
    assert noisy == [], noisy


def test_the_readers_node_lost_then_replaced_then_lost_without_replacement(
    cluster: LocalRayCluster, corpus: dict, tiny_bert_model: Path, tmp_path: Path
) -> None:
    """
    Two losses in one run: the reader's node is lost and a new node joins; later the reader's node (the restarted
    reader's) is lost again and nothing replaces it: the run goes on on the one node of 1 CPU left (its tasks
    reserve what a node leaves beside the reader actor).
    """
    expected = in_process(corpus["listed"], tiny_bert_model, tmp_path / "expected")
    output, log = tmp_path / "out", tmp_path / "job.log"
    job = start_job(job_args(corpus["listed"], tiny_bert_model, output), cluster.address, log)
    cluster.lose(node_running(cluster, READER, job, lambda: committed(output) >= 1))
    cluster.add_worker()
    cluster.lose(node_running(cluster, READER, job, lambda: committed(output) >= 3))  # in the second wave
    text = finish(job, log)
    cluster.add_worker()  # the module's cluster has two workers again
    assert_same_tables(output, expected)
    assert "6/6 committed (0 from an earlier run)" in text
    assert_quiet(text)


def test_nodes_lost_during_retrieval_and_during_aggregation(
    cluster: LocalRayCluster, corpus: dict, tiny_bert_model: Path, tmp_path: Path
) -> None:
    """The retrieval actor's node is lost while it retrieves, then a node running a shard's aggregation; a node
    replaces each."""
    expected = in_process(corpus["retrieved"], tiny_bert_model, tmp_path / "expected")
    output, log = tmp_path / "out", tmp_path / "job.log"
    job = start_job(job_args(corpus["retrieved"], tiny_bert_model, output), cluster.address, log)
    cluster.lose(node_running(cluster, RETRIEVER, job, lambda: True))
    cluster.add_worker()
    cluster.lose(node_running(cluster, AGGREGATION, job, lambda: True))
    cluster.add_worker()
    text = finish(job, log)
    assert_same_tables(output, expected)
    assert_quiet(text)


def test_an_error_in_a_reader_actor_still_reaches_the_user(
    cluster: LocalRayCluster, corpus: dict, tiny_bert_model: Path, tmp_path: Path
) -> None:
    """Workers' logs are not forwarded, but a reader that cannot load its model (weights cut short: the driver's
    check sees only that they exist) ends the run with exit 1 and the actor's error in one line."""
    model = tmp_path / "model"
    model.mkdir()
    for path in tiny_bert_model.iterdir():
        (model / path.name).write_bytes(path.read_bytes()[:100] if path.suffix == ".safetensors" else path.read_bytes())
    log = tmp_path / "job.log"
    job = start_job(job_args(corpus["listed"], model, tmp_path / "out"), cluster.address, log)
    assert wait_for_process(job, TIMEOUT_S, log) == 1
    text = log.read_text()
    errors = [line for line in text.splitlines() if line.startswith("bulk-qa: error:")]
    assert len(errors) == 1 and "ReadSequences" in errors[0] and "run the same command again" in errors[0], errors
    assert "core_worker.cc" not in text  # the driver's C++ log line on the reader actor
