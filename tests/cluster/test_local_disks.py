"""
The bulk job on a cluster whose nodes do not share a disk: a local cluster of a head (0 CPUs, the drivers' machine)
and a worker node in its own mount namespace with a tmpfs over one folder (`tests.cluster.nodes`, as root), i.e.
two machines with local disks. Each run with a path in that folder ends in a correct run or in exit 2 with one line
before any work; with everything in object storage (moto), the tables equal an in-process run's.
"""

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from jobs.bulk_qa import main
from jobs.indexing.build import build_index, write_index
from jobs.retrieval_settings import RetrievalSettings
from tests.cluster.cluster_testing import SAMPLE
from tests.cluster.nodes import LocalRayCluster, node_env
from tests.cluster.test_object_storage import s3_filesystem
from tests.jobs.bulk_qa.test_reliability import assert_same_tables
from tests.jobs.conftest import ROOT, TEXTS, run_process, write_corpus

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None,
    reason="node-local disks need root (unshare -m, mount -t tmpfs)",
)

SETTINGS = ["--top-k", "2", "--max-seq-length", "64", "--stride", "16", "--context-window-size", "40",
            "--shard-size", "6"]  # fmt: skip
TIMEOUT_S = 300


def not_shared(program: str) -> re.Pattern:
    """The one line of a path that the cluster's one worker node does not see as the driver does."""
    return re.compile(
        rf"{re.escape(program)}: error: (?P<option>--\w+) (?P<path>\S+): not the same (folder|path) on every node of "
        r"the cluster: [0-9a-f]{8} \([0-9.]+\) \(1 of 1 node with CPUs\) does not see it as the driver does, and "
        rf"{re.escape(program)}'s tasks (write|read) it on whichever node runs them\. Use object storage "
        r"\(s3://\.\.\., gs://\.\.\.\) or a shared mount that every node sees at this path\."
    )


@pytest.fixture(scope="module")
def node_local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder that the worker node sees on a disk of its own (this machine's copy is the drivers')."""
    return tmp_path_factory.mktemp("node-local")


@pytest.fixture(scope="module")
def cluster(node_local: Path, s3_server) -> Iterator[LocalRayCluster]:
    """A head of 0 CPUs and one worker node of 2 CPUs with its own `node_local`, for the module."""
    nodes = LocalRayCluster(cpus=2, local_folder=node_local, env=s3_server.env)
    try:
        nodes.start(workers=1)
        yield nodes
    finally:
        nodes.stop()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """On the shared disk: 18 questions over 8 documents with their document_ids, and the same retrieved for."""
    root = tmp_path_factory.mktemp("shared")
    documents = {f"d{i}": TEXTS[i * 5][: 300 + 30 * i] for i in range(8)}
    queries = ["What does it return?", "Which arguments are optional?", "What is raised on error?"]
    listed = {f"q{k:02d}": (queries[k % 3], [f"d{k % 8}", f"d{k * 3 % 8}"]) for k in range(18)}
    return {
        "listed": write_corpus(root / "listed", documents, listed),
        "retrieved": write_corpus(
            root / "retrieved", documents, {key: (query, None) for key, (query, _) in listed.items()}
        ),
    }


def job(
    args: list[str], cluster: LocalRayCluster, env: dict[str, str], module: str = "jobs.bulk_qa"
) -> subprocess.CompletedProcess:
    """The job (or `module`'s) run as a user runs it, with --address the head."""
    settings = SETTINGS if module == "jobs.bulk_qa" else []
    return run_process(
        [sys.executable, "-m", module, *args, *settings, "--address", cluster.address], TIMEOUT_S,
        cwd=ROOT, env={**node_env(env), "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


def reference(paths: dict[str, str], model: Path, output: Path, *extra: str) -> Path:
    """The same job in this process, without Ray."""
    args = ["--questions", paths["questions"], "--documents", paths["documents"], "--model", str(model)]
    assert main([*args, "--output", str(output), *SETTINGS, *extra, "--engine", "in-process", "--quiet"]) == 0
    return output


def assert_stopped_before_work(
    result: subprocess.CompletedProcess, option: str, path: Path, output: Path, program: str = "bulk-qa"
) -> None:
    """Exit 2, one line naming the option and path, and nothing of the run in its output folder."""
    assert result.returncode == 2, result.stdout + result.stderr
    notice, line = result.stderr.splitlines()  # the notice of the cluster joined (jobs.index's too), then the error
    assert notice.startswith("bulk-qa: running on the Ray cluster at "), notice
    match = not_shared(program).fullmatch(line)
    assert match and (match["option"], match["path"]) == (option, str(path)), line
    assert result.stdout == ""
    assert not output.exists() or list(output.iterdir()) == []


def test_an_output_folder_only_the_driver_has_stops_the_run_before_any_work(
    cluster: LocalRayCluster, corpus: dict, node_local: Path, tiny_bert_model: Path
) -> None:
    output = node_local / "out"
    paths = corpus["listed"]
    args = ["--questions", paths["questions"], "--documents", paths["documents"], "--model", str(tiny_bert_model)]
    result = job([*args, "--output", str(output)], cluster, {})
    assert_stopped_before_work(result, "--output", output, output)
    assert not any(output.iterdir())  # the probe's token file is gone too
    # Converting files into such a folder stops the same way (jobs.ingest prints no notice of the cluster).
    ingested = node_local / "ingested"
    result = job(["--input", str(SAMPLE / "files" / "txt"), "--output", str(ingested)], cluster, {}, "jobs.ingest")
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("jobs.ingest")]  # Ray's INFO lines too
    match = not_shared("jobs.ingest").fullmatch(line)
    assert match and (match["option"], match["path"]) == ("--output", str(ingested)), line
    assert not ingested.exists() or not any(ingested.iterdir())


def test_documents_only_the_driver_has_stop_the_run_and_a_copy_on_every_node_passes(
    cluster: LocalRayCluster, corpus: dict, node_local: Path, tiny_bert_model: Path, tmp_path: Path
) -> None:
    paths = corpus["listed"]
    documents = node_local / "documents" / "documents.parquet"
    documents.parent.mkdir()
    shutil.copy(paths["documents"], documents)
    args = ["--questions", paths["questions"], "--documents", str(documents), "--model", str(tiny_bert_model)]
    result = job([*args, "--output", str(tmp_path / "out")], cluster, {})
    assert_stopped_before_work(result, "--documents", documents, tmp_path / "out")
    # The same file on the worker's own disk too: the same path and the same fingerprint on every node. The check
    # alone, from a driver of its own (a whole run costs a minute here): what it costs a run's start.
    [worker] = cluster.workers
    worker.in_its_mounts("sh", "-c", f"mkdir -p {documents.parent} && cp {paths['documents']} {documents}")
    # The target is under 5 s (a worker process started on each node, at once); a loaded 2-core machine takes more.
    seconds = check_from_a_driver(
        cluster, ["--documents", str(documents)], ["--output", str(tmp_path / "out")], node_local / "blind-out"
    )
    assert seconds < 10
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == []  # the token file was deleted


def check_from_a_driver(cluster: LocalRayCluster, read: list[str], written: list[str], blind: Path) -> float:
    """
    The seconds `check_shared` takes in a driver joined to the cluster, for an option and path read and written.
    Then, in the same driver, a folder the worker does not see (`blind`): not checked again on the nodes checked
    before (as the job's check before each wave, for the nodes that joined since), refused by a check of them all.
    """
    script = (
        "import ray\n"
        "from jobs.shared_paths import NotShared, SharedPath, check_shared\n"
        f"ray.init(address={cluster.address!r}, log_to_driver=False)\n"
        "probed = set()\n"
        f"seconds = check_shared([SharedPath(*{read!r}), SharedPath(*{written!r}, written=True)], probed=probed)\n"
        "assert len(probed) == 1, probed  # the worker: the head of 0 CPUs runs nothing\n"
        f"blind = [SharedPath('--output', {str(blind)!r}, written=True)]\n"
        "assert check_shared(blind, probed=probed) == 0.0  # every node checked before\n"
        "try:\n"
        "    check_shared(blind)\n"
        "    raise SystemExit('a folder the worker does not see passed')\n"
        "except NotShared:\n"
        "    pass\n"
        "print(seconds)\n"
    )
    result = run_process(
        [sys.executable, "-c", script], TIMEOUT_S, cwd=ROOT, env={**node_env(), "PYTHONPATH": str(ROOT)}
    )
    assert result.returncode == 0, result.stderr
    seconds = float(result.stdout.split()[-1])
    print(f"shared paths checked in {seconds} s")  # what the check adds to a run's start (pytest -s shows it)
    return seconds


def test_an_index_only_the_driver_has_or_builds_stops_the_run_before_any_work(
    cluster: LocalRayCluster, corpus: dict, node_local: Path, tiny_bert_model: Path, tmp_path: Path
) -> None:
    paths = corpus["retrieved"]
    index = node_local / "index"
    write_index(build_index(RetrievalSettings(), paths["documents"]), str(index))
    args = ["--questions", paths["questions"], "--documents", paths["documents"], "--model", str(tiny_bert_model)]
    result = job([*args, "--index", str(index), "--output", str(tmp_path / "out")], cluster, {})
    assert_stopped_before_work(result, "--index", index, tmp_path / "out")
    # Building an index into such a folder stops the same way.
    built = node_local / "built-index"
    result = job(["--documents", paths["documents"], "--output", str(built)], cluster, {}, "jobs.index")
    assert_stopped_before_work(result, "--output", built, built, "jobs.index")


def test_everything_in_object_storage_runs_as_in_process(
    cluster: LocalRayCluster, corpus: dict, s3_server, tiny_bert_model: Path, tmp_path: Path
) -> None:
    """Questions, documents, index and output in the bucket (the model on the disk every node shares)."""
    paths = corpus["retrieved"]
    index = tmp_path / "index"
    write_index(build_index(RetrievalSettings(), paths["documents"]), str(index))
    filesystem = s3_filesystem(s3_server)
    bucket = f"{s3_server.bucket}/local-disks"
    for name in ("questions", "documents"):
        pafs.copy_files(paths[name], f"{bucket}/{name}.parquet", destination_filesystem=filesystem)
    pafs.copy_files(str(index), f"{bucket}/index", destination_filesystem=filesystem)
    uri = f"s3://{bucket}"
    args = ["--questions", f"{uri}/questions.parquet", "--documents", f"{uri}/documents.parquet",
            "--index", f"{uri}/index", "--model", str(tiny_bert_model), "--output", f"{uri}/out",
            "--quiet"]  # fmt: skip
    result = job(args, cluster, s3_server.env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "18 in, 18 out" in result.stdout
    output = tmp_path / "out"
    for table in ("questions", "answers"):
        (output / table).mkdir(parents=True)
        pafs.copy_files(f"{bucket}/out/{table}", str(output / table), source_filesystem=filesystem)
    expected = reference(paths, tiny_bert_model, tmp_path / "expected", "--index", str(index))
    assert_same_tables(output, expected)
