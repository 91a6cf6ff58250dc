"""
The driver counts a shard committed only once it has read the shard's marker and tables itself (no Ray: a task that
commits onto a disk the driver does not see is played by an in-process run whose commits land in another folder).
"""

from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

from jobs.bulk_qa import driver, main
from jobs.run_settings import RunSettings
from jobs.storage import ShardNotVisible, ShardStore
from tests.cluster.cluster_testing import SAMPLE

MARKER = {"questions": 2, "answers": 1, "statuses": {"answered": 2}}
TABLES = {"questions": pa.table({"question_id": ["q1", "q2"]}), "answers": pa.table({"question_id": ["q1"]})}
FIX = (
    "so shard 0 cannot count as committed: the driver counts a shard only once it reads its files there. The output "
    "folder must be the same on every node: use object storage (s3://..., gs://...) or a shared mount that every "
    "node sees at this path, then run the same command again to resume."
)


def test_a_commit_is_read_back_marker_and_tables(tmp_path: Path) -> None:
    store = ShardStore(str(tmp_path))
    store.commit_shard(0, TABLES, MARKER)
    assert store.read_commit(0, {**MARKER, "shard": 0}, ("questions", "answers")) == {**MARKER, "shard": 0}


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("_shards/shard-00000.json", "_shards/shard-00000.json: not found"),
        ("answers/shard-00000.parquet", "answers/shard-00000.parquet: not found"),
    ],
)
def test_a_commit_the_driver_cannot_read_names_the_shard_and_file(tmp_path: Path, damage: str, problem: str) -> None:
    store = ShardStore(str(tmp_path))
    store.commit_shard(0, TABLES, MARKER)
    (tmp_path / damage).unlink()
    with pytest.raises(ShardNotVisible) as raised:
        store.read_commit(0, {**MARKER, "shard": 0}, ("questions", "answers"))
    assert str(raised.value) == f"{tmp_path}/{problem}, {FIX}"


def test_a_commit_counts_the_rows_its_tables_hold_and_needs_the_marker_reported(tmp_path: Path) -> None:
    """The reconciliation adds up what the driver reads: a table's rows, whatever its marker says."""
    store = ShardStore(str(tmp_path))
    store.commit_shard(0, {**TABLES, "answers": pa.table({"question_id": ["q1", "q2", "q3"]})}, MARKER)
    read = store.read_commit(0, {**MARKER, "shard": 0}, ("questions", "answers"))
    assert read == {**MARKER, "shard": 0, "answers": 3}
    with pytest.raises(ShardNotVisible) as raised:
        store.read_commit(0, {**MARKER, "shard": 0, "answers": 2}, ("questions", "answers"))
    assert str(raised.value) == (
        f"{tmp_path}/_shards/shard-00000.json: holds another marker than the shard's task committed, {FIX}"
    )


def test_a_run_whose_shards_land_where_the_driver_cannot_see_exits_2_not_0(
    tmp_path: Path, tiny_bert_model: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """
    The aggregation commits every shard onto another disk (as a task on a node with a local --output would): the
    run stops at the first shard with one line naming it, exit 2, and writes no manifest or results.
    """
    node_disk, output = tmp_path / "node-disk", tmp_path / "out"
    commit = ShardStore.commit_shard
    monkeypatch.setattr(ShardStore, "commit_shard", lambda self, *args: commit(ShardStore(str(node_disk)), *args))
    status = main(
        ["--questions", str(SAMPLE / "questions.parquet"), "--documents", str(SAMPLE / "documents.parquet"),
         "--model", str(tiny_bert_model), "--output", str(output), "--engine", "in-process", "--quiet",
         "--max-seq-length", "64", "--stride", "16"]
    )  # fmt: skip
    assert status == 2
    # the job's lines (in-process, the model's loading bars share stderr)
    assert [line for line in capsys.readouterr().err.splitlines() if line.startswith("bulk-qa")] == [
        f"bulk-qa: error: {output}/_shards/shard-00000.json: not found, {FIX}"
    ]
    assert (node_disk / "_shards" / "shard-00000.json").exists()  # answered, on the disk the driver does not see
    written = {path.name for path in output.iterdir()}  # the run's own record and its working folders only
    assert written - {"_pair_notes", "_tmp"} == {"_job.json"}, written


def test_a_task_that_misses_a_file_on_its_node_ends_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """
    A node that joined after the start's check and lacks a local input: its task's FileNotFoundError, as Ray raises
    it in the driver (here behind another error, as Ray Data may chain it), ends the run with one line, exit 1.
    """
    from ray.exceptions import RayTaskError

    missing = RayTaskError(
        "ray::ReadParquet",
        "ray::ReadParquet() (pid=4242, ip=10.0.0.7)\n  File ...\n"
        "FileNotFoundError: [Errno 2] Failed to open local file '/data/documents.parquet'",
        FileNotFoundError(2, "No such file or directory"),
    ).as_instanceof_cause()

    def run(config: None) -> int:
        try:
            raise missing
        except FileNotFoundError as error:
            raise RuntimeError("the dataset's execution failed") from error

    monkeypatch.setattr(driver, "load_config", lambda argv: None)
    monkeypatch.setattr(driver, "run", run)
    assert driver.main([]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "bulk-qa: error: a task of the job could not find a file on its node: ray::ReadParquet(): FileNotFoundError: "
        "[Errno 2] Failed to open local file '/data/documents.parquet'. A node that joined the cluster after the "
        "run's start (when every node was checked) may not hold a local path of the run: put it in object storage "
        "or on a shared mount. Shards committed so far are kept: run the same command again to resume."
    ]


def test_the_shared_paths_are_checked_again_before_each_wave_but_the_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node that joined since the start's check is checked before the next wave gives it work (`before_wave`)."""
    events: list[str] = []
    monkeypatch.setattr(driver, "answer_wave", lambda config, inputs, shards, *rest: events.append(f"{sorted(shards)}"))
    config = driver.JobConfig(run=RunSettings(shards_per_wave=2, quiet=True))
    inputs = SimpleNamespace(engine=driver.InProcessEngine(), every_document=None)
    expected, resumed = {shard: 1 for shard in range(5)}, {1: {}}  # shard 1 committed before: 4 shards, 2 waves
    driver.answer_pending_shards(config, inputs, expected, resumed, None, None, (), lambda: events.append("check"))
    assert events == ["[0, 2]", "check", "[3, 4]"]
