"""
Reliability of the bulk job on one local Ray for the module: every question accounted for exactly once, a reader
actor killed mid-run, a driver killed mid-run and resumed, changed settings or inputs refused, and safety (custom
model code, secrets, pickles, paths outside the output folder).

The fault tests start the job as a subprocess joined to the module's Ray with `--address`, so that the test can
kill the driver, or a reader actor's process, while the job runs.
"""

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.bulk_qa.config import JobConfig
from jobs.bulk_qa.output import OutputFolder
from jobs.storage import redact
from tests.jobs.conftest import (
    ROOT,
    TEXTS,
    kill_at_first_commit,
    read_output,
    run_job,
    wait_for_process,
    write_corpus,
    write_table,
)

REPO = ROOT
SETTINGS = ["--top-k", "3", "--max-seq-length", "64", "--stride", "16", "--context-window-size", "40"]
NUM_SHARDS, SHARD_SIZE = 12, 4
TIMEOUT_S = 600  # per subprocess job: generous, the machine may be loaded


def ids_filling_every_shard(num_shards: int, per_shard: int) -> list[str]:
    """Question ids that put exactly `per_shard` questions in each of `num_shards` shards (none is empty)."""
    buckets: dict[int, list[str]] = {shard: [] for shard in range(num_shards)}
    index = 0
    while any(len(bucket) < per_shard for bucket in buckets.values()):
        question_id = f"q{index:04d}"
        bucket = buckets[zlib.crc32(question_id.encode()) % num_shards]
        if len(bucket) < per_shard:
            bucket.append(question_id)
        index += 1
    return sorted(question_id for bucket in buckets.values() for question_id in bucket)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """48 questions over 30 real-text documents, in 12 shards of 4, with one question of each problem status."""
    root = tmp_path_factory.mktemp("reliability")
    documents = {f"d{i:02d}": TEXTS[i * 7][: 300 + 40 * i] for i in range(30)}
    documents["no-content"] = None
    queries = ["What does it return?", "Which arguments are optional?", "What is raised on error?", "Where is it?"]
    ids = ids_filling_every_shard(NUM_SHARDS, SHARD_SIZE)
    questions = {}
    for k, question_id in enumerate(ids):
        questions[question_id] = (queries[k % 4], [f"d{k % 30:02d}", f"d{k * 7 % 30:02d}", f"d{k * 11 % 30:02d}"])
    problems = {
        ids[0]: ("  ", ["d01"]),  # error: the query is empty
        ids[1]: ("Which one?", ["d02", "missing"]),  # error: an unknown document id (the known one is read)
        ids[2]: ("Anything?", []),  # no_documents
        ids[3]: ("Anything?", ["no-content"]),  # no_documents: the only document has no content
    }
    questions.update(problems)
    paths = write_corpus(root, documents, questions)
    return {"root": root, "paths": paths, "questions": questions, "problems": list(problems)}


def job_args(corpus: dict, model: Path, output: Path, *extra: str) -> list[str]:
    """The corpus run: its 12 shards in one wave (each wave costs a pipeline start) unless `extra` says otherwise."""
    return [
        "--questions", corpus["paths"]["questions"], "--documents", corpus["paths"]["documents"],
        "--model", str(model), "--output", str(output), *SETTINGS, "--shard-size", str(SHARD_SIZE),
        "--shards-per-wave", str(NUM_SHARDS), *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def clean_output(local_ray, corpus: dict, tiny_bert_model: Path) -> Path:
    """A fault-free run: what every faulty or resumed run must end up equal to."""
    output = corpus["root"] / "clean"
    assert run_job(*job_args(corpus, tiny_bert_model, output)) == 0
    return output


@pytest.fixture(scope="module")
def gcs_address(local_ray) -> str:
    return local_ray.get_runtime_context().gcs_address


def start_job(args: list[str], address: str, log: Path, env: dict | None = None) -> subprocess.Popen:
    """The job as a separate driver joined to the module's Ray, so that the test can kill it."""
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.bulk_qa", *map(str, args), "--address", address],
        cwd=REPO,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )


def assert_same_tables(output: Path, expected: Path) -> None:
    """Same rows in the questions and answers tables; scores equal to 1e-5 (actor batches pad differently)."""
    for table in ("questions", "answers"):
        rows, expected_rows = read_output(output, table), read_output(expected, table)
        assert len(rows) == len(expected_rows), table
        for row, expected_row in zip(rows, expected_rows, strict=True):
            assert row.keys() == expected_row.keys()
            for key, value in expected_row.items():
                if isinstance(value, float):
                    assert row[key] == pytest.approx(value, abs=1e-5), (table, row["question_id"], key)
                else:
                    assert row[key] == value, (table, row["question_id"], key)


def markers(output: Path) -> dict[str, tuple[bytes, int]]:
    """Each completion marker's content and modification time, by file name."""
    return {path.name: (path.read_bytes(), path.stat().st_mtime_ns) for path in (output / "_shards").glob("*.json")}


# --- 1. Accounting ----------------------------------------------------------------------------------------------


def test_every_question_is_accounted_for_exactly_once(clean_output: Path, corpus: dict) -> None:
    rows = read_output(clean_output, "questions")
    assert [row["question_id"] for row in rows] == sorted(corpus["questions"]), "each question exactly once"
    statuses = {row["question_id"]: row["status"] for row in rows}
    errors = {row["question_id"]: row["error"] for row in rows}
    empty, unknown, no_ids, no_content = corpus["problems"]
    assert (statuses[empty], errors[empty]) == ("error", "the query is empty")
    assert (statuses[unknown], errors[unknown]) == (
        "error",
        "unknown document ids: 'missing' (the known documents were read)",
    )
    assert (statuses[no_ids], statuses[no_content]) == ("no_documents", "no_documents")
    others = [question_id for question_id in statuses if question_id not in corpus["problems"]]
    # The seeded model's best span outscores the no-answer entry for each of the 44 other questions.
    assert [statuses[question_id] for question_id in others] == ["answered"] * 44
    assert [errors[question_id] for question_id in others] == [None] * 44

    manifest = json.loads((clean_output / "manifest.json").read_text())
    assert manifest["reconciled"] is True
    assert manifest["inputs"]["questions"] == manifest["outputs"]["questions"] == len(corpus["questions"])
    counts = {status: list(statuses.values()).count(status) for status in manifest["outputs"]["statuses"]}
    assert manifest["outputs"]["statuses"] == counts, "the manifest's counts per status are the table's"
    assert counts == {"answered": 44, "refused": 0, "no_documents": 2, "error": 2}
    assert manifest["shards"] == {"total": NUM_SHARDS, "committed": NUM_SHARDS, "resumed": 0}


def test_output_that_does_not_reconcile_exits_non_zero(
    clean_output: Path, corpus: dict, tiny_bert_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """
    A shard that lost a question (here: a row of its questions table) makes the run incomplete: exit 1, no
    manifest. The driver counts the rows the shard's table holds, whatever its marker says.
    """
    output = tmp_path / "lost-a-question"
    shutil.copytree(clean_output, output)
    (output / "manifest.json").unlink()
    table_path = sorted((output / "questions").glob("*.parquet"))[0]
    pq.write_table(pq.read_table(table_path).slice(1), table_path)
    assert run_job(*job_args(corpus, tiny_bert_model, output)) == 1
    assert "INCOMPLETE: questions in and out differ" in capsys.readouterr().out
    assert not (output / "manifest.json").exists()


def test_shards_without_questions_still_reconcile_and_report_their_replies(
    local_ray, tmp_path: Path, tiny_bert_model: Path, capsys: pytest.CaptureFixture
) -> None:
    documents = write_table(tmp_path / "documents.parquet", {"id": ["d1"], "content": [TEXTS[1][:400]]})
    ids = ["q01", "q02", "q03"]  # all three hash to shard 0 of 2
    assert {zlib.crc32(question_id.encode()) % 2 for question_id in ids} == {0}
    document_ids = [["d1"], ["d1"], ["d1", "nope"]]
    questions = write_table(
        tmp_path / "questions.parquet", {"id": ids, "query": ["What is it?"] * 3, "document_ids": document_ids}
    )
    # Replies to two questions that do not exist: "d" hashes to shard 0, "a" to shard 1, which has no question.
    # q03's reply meta is not a JSON object: its error joins the one it already has.
    assert [zlib.crc32(question_id.encode()) % 2 for question_id in ("d", "a")] == [0, 1]
    replies = {
        "question_id": ["q01", "q03", "d", "a"],
        "replies": [["It is [1]"]] * 4,
        "meta": [["{}"], ["[1]"], None, None],
    }
    replies = write_table(tmp_path / "replies.parquet", replies)
    output = tmp_path / "out"
    status = run_job(
        "--questions", questions, "--documents", documents, "--replies", replies, "--model", tiny_bert_model,
        "--output", output, *SETTINGS, "--shard-size", "2",
    )  # fmt: skip
    assert status == 0
    rows = read_output(output, "questions")
    assert [(row["question_id"], row["status"] == "error") for row in rows] == [
        ("q01", False), ("q02", False), ("q03", True)
    ]  # fmt: skip
    assert rows[2]["error"] == (
        "unknown document ids: 'nope' (the known documents were read); replies: each reply meta must be a JSON object"
    )
    assert [row["question_id"] for row in read_output(output, "generated_answers")] == ["q01"]
    manifest = json.loads((output / "manifest.json").read_text())
    assert manifest["replies_without_question"] == ["a", "d"]
    assert manifest["shards"] == {"total": 2, "committed": 2, "resumed": 0}
    summary = capsys.readouterr().out
    assert "\n  warning     replies for unknown question ids: ['a', 'd']\n" in summary
    assert "\n  shards      2/2 committed (0 from an earlier run)\n" in summary


# --- 2. Worker faults -------------------------------------------------------------------------------------------


def _busy_reader_actor(deadline: float) -> tuple[str, int]:
    """(actor id, pid) of a live reader actor (there is one: the job's), once it is reading a batch."""
    import ray

    while time.monotonic() < deadline:
        # The GCS actor table: ray.util.state needs the dashboard, which the module's Ray does not start.
        for actor_id, actor in ray._private.state.actors().items():
            if actor["State"] != "ALIVE" or "ReadSequences" not in actor["ActorClassName"]:
                continue
            try:
                title = Path(f"/proc/{actor['Pid']}/cmdline").read_bytes()
            except OSError:
                continue
            if b".submit" in title:  # the actor's process title while it runs a batch
                return actor_id, actor["Pid"]
        time.sleep(0.02)
    raise AssertionError("no reader actor started reading before the deadline")


def test_reader_actor_killed_mid_run_changes_nothing(
    gcs_address: str, clean_output: Path, corpus: dict, tiny_bert_model: Path, tmp_path: Path
) -> None:
    import ray

    output = tmp_path / "actor-killed"
    args = job_args(corpus, tiny_bert_model, output, "--num-actors", "1", "--sequences-per-actor-batch", "8")
    job = start_job(args, gcs_address, tmp_path / "job.log")
    try:
        actor_id, pid = _busy_reader_actor(time.monotonic() + TIMEOUT_S)
        os.kill(pid, signal.SIGKILL)
        assert wait_for_process(job, TIMEOUT_S, tmp_path / "job.log") == 0, (tmp_path / "job.log").read_text()[-3000:]
    finally:
        job.kill()
    assert ray._private.state.actors()[actor_id]["NumRestarts"] >= 1, "the killed actor was restarted"
    manifest = json.loads((output / "manifest.json").read_text())
    assert manifest["reconciled"] is True
    pids = {int(worker.split(" ")[0].rsplit(":", 1)[1]) for worker in manifest["workers"]}
    assert pids - {pid}, f"the restarted actor read the rest: {manifest['workers']}"
    assert_same_tables(output, clean_output)


# --- 3. Driver faults and resume --------------------------------------------------------------------------------


def _busy_workers(job_id: str) -> list[str]:
    """
    The worker processes of a job (its live workers in the worker table of the module's Ray) that run a task or
    an actor: Ray titles a worker `ray::IDLE` while it waits for work, and after what it runs
    otherwise (`ray::MapWorker(...)`). The module's own driver keeps Ray Data's actors (`ray::_StatsActor`) alive.
    """
    import psutil
    from ray._private.state import state
    from ray.core.generated import common_pb2, gcs_pb2

    busy = []
    for worker in map(gcs_pb2.WorkerTableData.FromString, state._connect_and_get_accessor().get_worker_table()):
        if not worker.is_alive or worker.worker_type != common_pb2.WORKER:
            continue
        if worker.job_id.hex() != job_id:
            continue
        try:
            title = " ".join(psutil.Process(worker.pid).cmdline())
        except psutil.NoSuchProcess:
            continue
        if not title.startswith("ray::IDLE"):
            busy.append(f"{worker.pid}: {title[:80]}")
    return busy


def _wait_for_the_end_of_its_work(driver_pid: int, timeout_s: float = TIMEOUT_S) -> None:
    """
    Waits on the killed driver's own evidence: Ray holds its job dead, and none of that job's workers runs
    anything any more. The shards are committed by the job's tasks and actors, which may still be finishing a
    commit when the driver dies, and which Ray then ends: after that no marker can appear.
    """
    from ray._private.state import state

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dead = [job["JobID"] for job in state.job_table() if job["DriverPid"] == driver_pid and job["IsDead"]]
        if dead and not _busy_workers(dead[0]):
            return
        time.sleep(0.1)
    raise AssertionError(f"workers still busy {timeout_s} s after the driver (pid {driver_pid}) died")


def test_driver_killed_mid_run_resumes_without_recomputing_or_duplicating(
    gcs_address: str, clean_output: Path, corpus: dict, tiny_bert_model: Path, tmp_path: Path, capsys
) -> None:
    output = tmp_path / "driver-killed"
    # Two waves of 6 shards: the driver is killed while the first wave commits, before the second starts.
    args = job_args(corpus, tiny_bert_model, output, "--num-actors", "1", "--shards-per-wave", "6")
    job = start_job(args, gcs_address, tmp_path / "job.log")
    kill_at_first_commit(job, output, TIMEOUT_S)
    _wait_for_the_end_of_its_work(job.pid)
    before = markers(output)
    committed = {int(name[6:11]) for name in before}
    assert committed and committed <= set(range(6)), f"killed in the first wave: committed {sorted(committed)}"
    assert not (output / "manifest.json").exists()
    # A half-written table of a shard without a marker, and a stray temporary file: neither may count.
    pending = sorted(set(range(NUM_SHARDS)) - committed)
    (output / "answers").mkdir(exist_ok=True)
    (output / "answers" / f"shard-{pending[0]:05d}.parquet").write_bytes(b"PAR1 half-written")
    (output / "_tmp").mkdir(exist_ok=True)
    (output / "_tmp" / "0123-shard-00000.parquet").write_bytes(b"PAR1 half-written")
    tables_before = {name: (output / "questions" / name.replace(".json", ".parquet")).stat().st_mtime_ns
                     for name in before}  # fmt: skip

    # The same command again, with other execution-only settings (a resumed run may change them): accepted.
    capsys.readouterr()
    resumed = ["--num-actors", "2", "--shards-per-wave", "4", "--sequences-per-actor-batch", "8"]
    assert run_job(*args, *resumed, "--address", gcs_address) == 0
    summary = capsys.readouterr().out
    assert f"  shards      {NUM_SHARDS}/{NUM_SHARDS} committed ({len(before)} from an earlier run)\n" in summary
    manifest = json.loads((output / "manifest.json").read_text())
    assert (manifest["config"]["num_actors"], manifest["config"]["shards_per_wave"]) == (2, 4)
    assert manifest["reconciled"] is True
    assert manifest["shards"] == {"total": NUM_SHARDS, "committed": NUM_SHARDS, "resumed": len(before)}
    after = markers(output)
    assert {name: after[name] for name in before} == before, "committed shards are kept as they were"
    for name, mtime in tables_before.items():
        assert (output / "questions" / name.replace(".json", ".parquet")).stat().st_mtime_ns == mtime
    questions = read_output(output, "questions")
    assert len({row["question_id"] for row in questions}) == len(questions) == len(corpus["questions"])
    assert_same_tables(output, clean_output)


def test_changed_settings_or_inputs_are_refused_unless_overwrite(
    local_ray, tmp_path: Path, tiny_bert_model: Path, capsys: pytest.CaptureFixture
) -> None:
    ids = ids_filling_every_shard(2, 3)
    documents = write_table(tmp_path / "documents.parquet", {"id": ["d1", "d2"], "content": [TEXTS[2], TEXTS[4]]})
    questions_path = tmp_path / "questions.parquet"

    def write_questions(first_query: str) -> None:
        queries = [first_query] + ["What does it return?"] * 5
        write_table(questions_path, {"id": ids, "query": queries, "document_ids": [["d1", "d2"]] * 6})

    write_questions("Which module is it?")
    output = tmp_path / "out"
    args = ["--questions", questions_path, "--documents", documents, "--model", tiny_bert_model, "--output", output,
            *SETTINGS, "--shard-size", "3"]  # fmt: skip
    assert run_job(*args) == 0
    (output / "notes.txt").write_text("the user's own file")
    committed = markers(output)
    capsys.readouterr()

    assert run_job(*args, "--top-k", "2") == 2
    assert f"{output}: holds the output of a run with other settings (top_k)" in capsys.readouterr().err
    written = questions_path.stat()
    write_questions("Which class is it?")
    # A rewritten file's modification time, set explicitly: a second later than the first file's (the same
    # nanosecond on a coarse clock would otherwise be possible).
    os.utime(questions_path, ns=(written.st_atime_ns, written.st_mtime_ns + 1_000_000_000))
    assert run_job(*args) == 2
    assert "other input files (questions). Pass --overwrite to replace it" in capsys.readouterr().err
    assert markers(output) == committed, "a refused run leaves the output as it was"

    assert run_job(*args, "--overwrite") == 0
    questions = {row["question_id"]: row["query"] for row in read_output(output, "questions")}
    assert questions[ids[0]] == "Which class is it?", "no shard of the old input is left"
    assert len(questions) == 6
    assert json.loads((output / "manifest.json").read_text())["shards"]["resumed"] == 0
    assert (output / "notes.txt").read_text() == "the user's own file", "--overwrite deletes only the job's files"


# --- 5. Safety --------------------------------------------------------------------------------------------------

SECRET = "hf_reliability_test_token_3f9a"


@pytest.fixture(scope="module")
def safety_run(gcs_address: str, tmp_path_factory: pytest.TempPathFactory, tiny_bert_model: Path) -> dict:
    """
    One run, as its own driver with a hub token in its environment, of a model that ships custom code (an
    `auto_map` to a module that would leave a file behind when imported).
    """
    root = tmp_path_factory.mktemp("safety")
    model = root / "model"
    shutil.copytree(tiny_bert_model, model)
    sentinel = root / "custom-code-ran"
    (model / "evil.py").write_text(f"import pathlib\npathlib.Path({str(sentinel)!r}).write_text('ran')\n")
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoModelForQuestionAnswering": "evil.Model", "AutoConfig": "evil.Config"}
    (model / "config.json").write_text(json.dumps(config))
    documents = write_table(root / "documents.parquet", {"id": ["d1"], "content": [TEXTS[3][:500]]})
    questions = write_table(
        root / "questions.parquet", {"id": ["q1", "q2"], "query": ["What is it?", "Why?"], "document_ids": [["d1"]] * 2}
    )
    output = root / "out"
    log = root / "job.log"
    args = ["--questions", questions, "--documents", documents, "--model", model, "--output", output, *SETTINGS]
    job = start_job(args, gcs_address, log, env={"HF_TOKEN": SECRET, "HF_API_TOKEN": SECRET})
    try:
        status = wait_for_process(job, TIMEOUT_S, log)
    finally:
        job.kill()
    return {"status": status, "output": output, "log": log, "sentinel": sentinel}


def test_model_custom_code_never_runs_unless_trusted(safety_run: dict) -> None:
    assert safety_run["status"] == 0, safety_run["log"].read_text()[-3000:]
    assert not safety_run["sentinel"].exists(), "the model's custom code ran without trust_remote_code"


def test_secrets_never_reach_the_manifest_logs_or_outputs(
    safety_run: dict, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    assert safety_run["status"] == 0
    files = [path for path in safety_run["output"].rglob("*") if path.is_file()] + [safety_run["log"]]
    assert sorted(str(path.relative_to(safety_run["output"].parent)) for path in files) == [
        "job.log", "out/_job.json", "out/_shards/shard-00000.json", "out/annotated.squad.json",
        "out/answers/shard-00000.parquet", "out/label_studio.json", "out/label_studio.xml", "out/manifest.json",
        "out/na_probs.json", "out/predictions.json", "out/questions/shard-00000.parquet", "out/report.html",
    ]  # every file the job writes, and its log  # fmt: skip
    assert [path for path in files if SECRET.encode() in path.read_bytes()] == []

    # A token passed in model_kwargs would be written to the manifest and sent to every worker: refused, unechoed.
    status = run_job("--questions", "q.parquet", "--output", tmp_path / "out", "--model-kwargs", f"{{token: {SECRET}}}")
    error = capsys.readouterr().err
    assert status == 2
    assert "model_kwargs must not hold credentials (token)" in error and "HF_TOKEN" in error
    assert SECRET not in error
    assert not (tmp_path / "out").exists()

    # Credentials written into a storage URI are masked wherever the configuration or the output path is shown.
    config = JobConfig.from_values(
        {"questions": "s3://AKIA123:wJalrSECRET@bucket/q", "output": "s3://bucket/out?secret_key=wJalrSECRET"}
    )
    assert "wJalrSECRET" not in json.dumps(config.to_dict())
    assert config.to_dict()["questions"] == "s3://***@bucket/q"
    assert redact("gs://bucket/out?region=eu&access_key=AK&secret_key=SK") == (
        "gs://bucket/out?region=eu&access_key=***&secret_key=***"
    )


@pytest.mark.parametrize("table", ["replies", "documents"])
def test_input_data_is_never_unpickled(
    table: str, tmp_path: Path, tiny_bert_model: Path, capsys: pytest.CaptureFixture
) -> None:
    from ray.data.extensions import ArrowPythonObjectType

    sentinel = tmp_path / "unpickled"
    payload = pickle.dumps(sentinel.touch)  # unpickling it creates the file
    pickled = pa.ExtensionArray.from_storage(ArrowPythonObjectType(), pa.array([payload], pa.large_binary()))
    documents = {"id": ["d1"], "content": ["text"]}
    if table == "documents":
        documents["meta"] = pickled
    paths = {
        "questions": write_table(
            tmp_path / "questions.parquet", {"id": ["q1"], "query": ["What?"], "document_ids": [["d1"]]}
        ),
        "documents": write_table(tmp_path / "documents.parquet", documents),
        "replies": write_table(
            tmp_path / "replies.parquet", {"question_id": ["q1"], "replies": [["an answer"]], "extra": pickled}
        ),
    }
    output = tmp_path / "out"
    status = run_job(
        "--questions", paths["questions"], "--documents", paths["documents"], "--replies", paths["replies"],
        "--model", tiny_bert_model, "--output", output,
    )  # fmt: skip
    error = capsys.readouterr().err
    assert status == 2
    column = "meta" if table == "documents" else "extra"
    assert f"{paths[table]}: column '{column}' of the {table} table holds pickled Python objects" in error
    assert not sentinel.exists()
    assert not output.exists()


def test_output_is_never_written_outside_the_output_folder(
    local_ray, clean_output: Path, corpus: dict, tiny_bert_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = OutputFolder(str(tmp_path / "out"))
    for parts in [("..", "x.json"), ("answers", "../../x.parquet"), ("/etc",), ("",), ("answers", "a\\..\\b")]:
        with pytest.raises(ValueError, match="outside the output folder"):
            folder._path(*parts)
    with pytest.raises(ValueError, match="outside the output folder"):
        folder.commit_shard(0, {"../escaped": pa.table({"a": [1]})}, {})
    assert not (tmp_path / "escaped").exists()

    # A folder holding files with the job's names that no run of the job wrote is never cleared.
    users = tmp_path / "users-folder"
    (users / "questions").mkdir(parents=True)
    (users / "questions" / "mine.parquet").write_bytes(b"the user's data")
    assert run_job(*job_args(corpus, tiny_bert_model, users)) == 2
    assert "holds questions but no _job.json, so it is not the output of a bulk-qa run" in capsys.readouterr().err
    assert (users / "questions" / "mine.parquet").read_bytes() == b"the user's data"
    assert sorted(path.name for path in users.iterdir()) == ["questions"]
    assert run_job(*job_args(corpus, tiny_bert_model, users), "--overwrite") == 2  # not even with --overwrite
    assert "holds questions but no _job.json, so it is not the output of a bulk-qa run" in capsys.readouterr().err
    assert (users / "questions" / "mine.parquet").read_bytes() == b"the user's data"
    assert sorted(path.name for path in users.iterdir()) == ["questions"]
