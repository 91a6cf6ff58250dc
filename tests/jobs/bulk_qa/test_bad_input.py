"""
Bad input: unusable input or configuration stops the job before any worker starts (wherever a check can run
there) with exit status 2, a message naming the file, the column and the offending ids, and no output folder.
Problems of single rows do not stop the job: they become `error` rows with the reason.
"""

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from transformers import AutoTokenizer

from jobs.bulk_qa import main
from qa_core.tokenization import TokenizationSettings, tokenize_each_pair
from tests.jobs.conftest import TEXTS, read_output, write_table

SETTINGS = ["--top-k", "3", "--max-seq-length", "64", "--stride", "16", "--context-window-size", "40"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A valid questions and documents table, to break one thing at a time."""
    root = tmp_path_factory.mktemp("valid")
    return {
        "documents": write_table(root / "documents.parquet", {"id": ["d1", "d2"], "content": TEXTS[:2]}),
        "questions": write_table(
            root / "questions.parquet",
            {"id": ["q1", "q2"], "query": ["What is it?", "Where?"], "document_ids": [["d1"], ["d1", "d2"]]},
        ),
    }


def fails_with_input_error(capsys: pytest.CaptureFixture, output: Path, *args: str) -> str:
    """Runs the job, checks exit status 2, a one-message error and no output; returns the message."""
    status = main([str(arg) for arg in args] + ["--output", str(output)])
    captured = capsys.readouterr()
    assert status == 2, captured.err
    assert captured.err.startswith("bulk-qa: error: "), captured.err
    assert "Traceback" not in captured.err
    assert not output.exists(), "no partial output for unusable input"
    return captured.err


def fails_with_table(
    capsys: pytest.CaptureFixture, tmp_path: Path, inputs: dict, model: Path, table: str, columns: dict
) -> tuple[str, str]:
    """Runs the job on the good inputs with `table` replaced by `columns`; returns that table's path and the error."""
    paths = {**inputs, table: write_table(tmp_path / f"{table}.parquet", columns)}
    args = ["--questions", paths["questions"], "--documents", paths["documents"], "--model", model]
    if table == "replies":
        args += ["--replies", paths["replies"]]
    return paths[table], fails_with_input_error(capsys, tmp_path / "out", *args)


# --- Configuration ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("top_kk: 3\n", r"job.yaml: unknown configuration keys ['top_kk']"),
        ("top_k: three\n", "job.yaml: top_k must be int, not str ('three')"),
        ("top_k: 0\n", "top_k must be >= 1, not 0"),
        ("max_seq_length: 64\nstride: 64\n", "stride (64) must be >= 0 and < max_seq_length (64)"),
        ("overlap_threshold: 1.5\n", "overlap_threshold must be within [0, 1], not 1.5"),
        ("overlap_threshold: -0.1\n", "overlap_threshold must be within [0, 1], not -0.1"),
        ("calibration_factor: 0\n", "calibration_factor must be > 0, not 0.0"),
        ("answer_pattern: 'A: (\\w+) (\\w+)'\n", "answer_pattern: Pattern 'A: (\\w+) (\\w+)' contains 2 capture"),
        ("answer_pattern: 'A: (\\w+'\n", "answer_pattern: Pattern 'A: (\\w+' is not a valid regular expression"),
        ("reference_pattern: '\\[(\\d+'\n", "reference_pattern: Pattern '\\[(\\d+' is not a valid regular expression"),
        ("reference_pattern: '\\[(\\d+)(x)?\\]'\n", "reference_pattern: Pattern '\\[(\\d+)(x)?\\]' contains 2 capture"),
        ("model_kwargs: [1, 2]\n", "job.yaml: model_kwargs must be dict, not list"),
        ("model_kwargs: {trust_remote_code: 'yes'}\n", "model_kwargs.trust_remote_code must be true or false"),
        ("engine: spark\n", "engine must be one of auto, ray, in-process, not 'spark'"),
        ("engine: in-process\naddress: auto\n", "engine in-process runs without Ray: it cannot join --address auto"),
        ("engine: in-process\nnum_actors: 2\n", "engine in-process reads with one reader: num_actors must be 1, not 2"),
    ],
)
def test_configuration_errors(
    capsys: pytest.CaptureFixture, tmp_path: Path, inputs: dict, yaml_text: str, message: str
) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(yaml_text)
    error = fails_with_input_error(
        capsys, tmp_path / "out", "--config", config, "--questions", inputs["questions"],
        "--documents", inputs["documents"],
    )  # fmt: skip
    assert message in error


def test_every_configuration_problem_is_reported_at_once(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    error = fails_with_input_error(
        capsys, tmp_path / "out", "--questions", "q.parquet", "--top-k", "0", "--calibration-factor", "-1",
        "--overlap-threshold", "2",
    )  # fmt: skip
    assert "top_k must be >= 1" in error
    assert "calibration_factor must be > 0" in error
    assert "overlap_threshold must be within [0, 1]" in error


def test_missing_configuration_file(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    error = fails_with_input_error(capsys, tmp_path / "out", "--config", tmp_path / "nowhere.yaml")
    assert f"{tmp_path / 'nowhere.yaml'}: the configuration file does not exist." in error


# --- Input tables (checked from Parquet metadata, before Ray starts) -------------------------------------------


def test_missing_questions_file(capsys: pytest.CaptureFixture, tmp_path: Path, inputs: dict, tiny_bert_model) -> None:
    missing = tmp_path / "missing.parquet"
    error = fails_with_input_error(
        capsys, tmp_path / "out", "--questions", missing, "--documents", inputs["documents"],
        "--model", tiny_bert_model,
    )  # fmt: skip
    assert f"{missing}: the questions file does not exist." in error


def test_documents_file_that_is_not_parquet(
    capsys: pytest.CaptureFixture, tmp_path: Path, inputs: dict, tiny_bert_model
) -> None:
    not_parquet = tmp_path / "documents.csv"
    not_parquet.write_text("id,content\nd1,hello\n")
    error = fails_with_input_error(
        capsys, tmp_path / "out", "--questions", inputs["questions"], "--documents", not_parquet,
        "--model", tiny_bert_model,
    )  # fmt: skip
    assert f"{not_parquet}: the documents file is not readable Parquet" in error


def test_documents_folder_without_parquet_files(
    capsys: pytest.CaptureFixture, tmp_path: Path, inputs: dict, tiny_bert_model
) -> None:
    # Only files that Parquet readers skip (a writer's _SUCCESS marker, a hidden file): no Parquet file at all.
    folder = tmp_path / "documents"
    folder.mkdir()
    (folder / "_SUCCESS").write_text("")
    (folder / ".DS_Store").write_bytes(b"\0")
    args = ["--questions", inputs["questions"], "--documents", folder, "--model", tiny_bert_model]
    error = fails_with_input_error(capsys, tmp_path / "out", *args)
    assert f"{folder}: the documents folder holds no Parquet files." in error
    # A file of a format that is neither Parquet nor one the job converts (a folder of .csv, .pdf, ... files is a
    # corpus to convert: test_corpus_files.py) is named as not Parquet.
    (folder / "documents.xlsx").write_bytes(b"PK\x03\x04")
    error = fails_with_input_error(capsys, tmp_path / "out", *args)
    assert f"{folder}: the documents file is not readable Parquet: " in error and "documents.xlsx" in error


def test_empty_questions_table(capsys: pytest.CaptureFixture, tmp_path: Path, inputs: dict, tiny_bert_model) -> None:
    schema = pa.schema([("id", pa.string()), ("query", pa.string()), ("document_ids", pa.list_(pa.string()))])
    empty = write_table(tmp_path / "empty.parquet", {"id": [], "query": [], "document_ids": []}, schema)
    error = fails_with_input_error(
        capsys, tmp_path / "out", "--questions", empty, "--documents", inputs["documents"], "--model", tiny_bert_model
    )
    assert f"{empty}: the questions table has no rows" in error


@pytest.mark.parametrize(
    ("table", "columns", "message"),
    [
        ("questions", {"id": ["q1"], "document_ids": [["d1"]]}, "the questions table has no column 'query'"),
        ("documents", {"id": ["d1"], "text": ["x"]}, "the documents table has no column 'content'"),
        ("replies", {"question_id": ["q1"], "reply": ["x"]}, "the replies table has no column 'replies'"),
    ],
)
def test_missing_required_column(
    capsys: pytest.CaptureFixture, tmp_path: Path, inputs: dict, tiny_bert_model, table: str, columns, message
) -> None:
    path, error = fails_with_table(capsys, tmp_path, inputs, tiny_bert_model, table, columns)
    assert f"{path}: {message}" in error


def test_squad_style_questions_with_documents_are_refused_rather_than_the_documents_ignored(
    capsys: pytest.CaptureFixture, tmp_path: Path, inputs: dict, tiny_bert_model
) -> None:
    columns = {"id": ["q1"], "query": ["Who?"], "context": ["Guido van Rossum wrote Python."]}
    path, error = fails_with_table(capsys, tmp_path, inputs, tiny_bert_model, "questions", columns)
    assert error == (
        f"bulk-qa: error: {path}: the questions carry their document in 'context' (SQuAD-style), so --documents "
        f"{inputs['documents']} would not be read: leave it out, or name document_ids.\n"
    )


@pytest.mark.parametrize(
    ("table", "columns", "message"),
    [
        (
            "questions",
            {"id": ["q1"], "query": [42], "document_ids": [["d1"]]},
            "column 'query' of the questions table must be string, not int64",
        ),
        (
            "questions",
            {"id": [1], "query": ["Who?"], "document_ids": [["d1"]]},
            "column 'id' of the questions table must be string, not int64",
        ),
        (
            "questions",
            {"id": ["q1"], "query": ["Who?"], "document_ids": [[1, 2]]},
            "column 'document_ids' of the questions table must be list<string>, not list<element: int64>",
        ),
        (
            "questions",
            {"id": ["q1"], "query": ["Who?"], "document_ids": ["d1"]},
            "column 'document_ids' of the questions table must be list<string>, not string",
        ),
        (
            "documents",
            {"id": ["d1"], "content": ["x"], "page_number": ["one"]},
            "column 'page_number' of the documents table must be integer, not string",
        ),
    ],
)
def test_wrong_column_type(
    capsys: pytest.CaptureFixture, tmp_path: Path, inputs: dict, tiny_bert_model, table: str, columns, message
) -> None:
    path, error = fails_with_table(capsys, tmp_path, inputs, tiny_bert_model, table, columns)
    assert f"{path}: {message}" in error


# --- Model (checked in the driver, before any worker starts) ---------------------------------------------------


def test_model_folder_that_does_not_exist(capsys: pytest.CaptureFixture, tmp_path: Path, inputs: dict) -> None:
    error = fails_with_input_error(
        capsys, tmp_path / "out", "--questions", inputs["questions"], "--documents", inputs["documents"],
        "--model", tmp_path / "no-model",
    )  # fmt: skip
    assert f"--model {tmp_path / 'no-model'}: the folder does not exist." in error


def _model_folder(root: Path, config: dict, copy_from: Path | None = None, files: dict | None = None) -> Path:
    folder = root / "model"
    if copy_from is not None:
        shutil.copytree(copy_from, folder)
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    for name, text in (files or {}).items():
        (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("not-qa", "a 'vit' model has no question-answering head in transformers."),
        ("no-weights", "the folder holds no model weights"),
        ("no-tokenizer", "the folder holds no tokenizer"),
        ("empty", "cannot load its configuration"),
        ("custom-code", "contains custom code which must be executed"),
    ],
)
def test_model_that_is_not_a_usable_question_answering_model(
    capsys: pytest.CaptureFixture, tmp_path: Path, inputs: dict, tiny_bert_model: Path, kind: str, message: str
) -> None:
    bert = json.loads((tiny_bert_model / "config.json").read_text())
    sentinel = tmp_path / "custom-code-ran"
    if kind == "not-qa":
        model = _model_folder(tmp_path, {"model_type": "vit"})
    elif kind == "no-weights":
        model = _model_folder(tmp_path, bert, tiny_bert_model)
        (model / "model.safetensors").unlink()
    elif kind == "no-tokenizer":
        model = _model_folder(tmp_path, bert, tiny_bert_model)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (model / name).unlink()
    elif kind == "empty":
        model = tmp_path / "model"
        model.mkdir()
    else:
        code = f"import pathlib\npathlib.Path({str(sentinel)!r}).write_text('ran')\n"
        model = _model_folder(
            tmp_path,
            {"model_type": "evil-qa", "auto_map": {"AutoConfig": "evil.EvilConfig"}},
            files={"evil.py": code + "from transformers import PretrainedConfig\nclass EvilConfig(PretrainedConfig):\n"
                   "    model_type = 'evil-qa'\n"},
        )  # fmt: skip
    error = fails_with_input_error(
        capsys, tmp_path / "out", "--questions", inputs["questions"], "--documents", inputs["documents"],
        "--model", model,
    )  # fmt: skip
    assert f"--model {model}: " in error
    assert message in error
    assert not sentinel.exists(), "a model's custom code ran without trust_remote_code"


# --- Ids (checked by one shuffle on Ray, before the reader actors start) ---------------------------------------


@pytest.mark.parametrize(
    ("table", "columns", "message"),
    [
        (
            "questions",
            {"id": ["q1", "q2", "q1"], "query": ["a?", "b?", "c?"], "document_ids": [["d1"]] * 3},
            "column 'id' of the questions table has duplicate value 'q1' (2 rows)",
        ),
        (
            "documents",
            {"id": ["d1", "d2", "d2", "d2", ""], "content": ["x", "y", "z", "w", "v"]},
            "column 'id' of the documents table has duplicate value 'd2' (3 rows)|"
            "column 'id' of the documents table has an empty value (1 rows)",
        ),
        (
            "questions",
            {"id": ["q1", None], "query": ["a?", "b?"], "document_ids": [["d1"]] * 2},
            "column 'id' of the questions table has a null value (1 rows)",
        ),
        (
            "replies",
            {"question_id": ["q1", "q1", None, "", "q2"], "replies": [["a"], ["b"], ["c"], ["d"], ["e"]]},
            "column 'question_id' of the replies table has duplicate value 'q1' (2 rows)|"
            "column 'question_id' of the replies table has a null value (1 rows)|"
            "column 'question_id' of the replies table has an empty value (1 rows)",
        ),
    ],
)
def test_duplicate_or_null_ids(
    local_ray, capsys: pytest.CaptureFixture, tmp_path: Path, inputs: dict, tiny_bert_model, table, columns, message
) -> None:
    path, error = fails_with_table(capsys, tmp_path, inputs, tiny_bert_model, table, columns)
    for line in message.split("|"):  # every problem is reported, each on its own line
        assert f"  - {path}: {line}\n" in error + "\n"


def test_large_id_columns_are_checked_on_the_cluster_with_the_same_messages(
    local_ray, capsys: pytest.CaptureFixture, tmp_path: Path, inputs: dict, tiny_bert_model, monkeypatch
) -> None:
    """Above `DRIVER_CHECK_MAX_ROWS` ids the check is one Ray Data shuffle (here: every table, the limit at 0)."""
    monkeypatch.setattr("jobs.bulk_qa.driver.DRIVER_CHECK_MAX_ROWS", 0)
    documents = write_table(tmp_path / "documents.parquet", {"id": ["d1", "d2", "d2", ""], "content": list("abcd")})
    replies = write_table(tmp_path / "replies.parquet", {"question_id": ["q1", None], "replies": [["a"], ["b"]]})
    error = fails_with_input_error(
        capsys, tmp_path / "out", "--questions", inputs["questions"], "--documents", documents,
        "--replies", replies, "--model", tiny_bert_model,
    )  # fmt: skip
    lines = sorted(error.splitlines()[1:])
    assert lines == [
        f"  - {documents}: column 'id' of the documents table has an empty value (1 rows)",
        f"  - {documents}: column 'id' of the documents table has duplicate value 'd2' (2 rows)",
        f"  - {replies}: column 'question_id' of the replies table has a null value (1 rows)",
    ]


# --- Rows: errors in the questions table, the job goes on -------------------------------------------------------


def test_row_problems_become_error_rows_and_huge_documents_are_split(
    local_ray, tmp_path: Path, tiny_bert_model: Path
) -> None:
    huge = (" ".join(TEXTS) * 40)[:2_000_000]  # 2 MB of real text
    documents = write_table(
        tmp_path / "documents.parquet",
        {"id": ["d1", "d2", "huge", "null-content"], "content": [TEXTS[5], TEXTS[9], huge, None]},
    )
    rows = {
        "null-query": (None, ["d1"]),
        "empty-query": (" \t", ["d1"]),
        "unknown-docs": ("What does it return?", ["nope", "d1", "gone", "d2"]),
        "only-unknown": ("What does it return?", ["nope"]),
        "null-content": ("What is there?", ["null-content"]),
        "some-null-content": ("What is there?", ["null-content", "d2"]),
        "huge": ("Which module is it?", ["huge"]),
        "fine": ("What is returned?", ["d1", "d2"]),
        "long-query": ("Which " + "very " * 300 + "long question?", ["d1"]),  # more than max_seq_length tokens
    }
    questions = write_table(
        tmp_path / "questions.parquet",
        {"id": list(rows), "query": [q for q, _ in rows.values()], "document_ids": [d for _, d in rows.values()]},
    )
    output = tmp_path / "out"
    status = main(
        ["--questions", questions, "--documents", documents, "--output", str(output), "--model", str(tiny_bert_model),
         "--top-k", "3", "--max-seq-length", "256", "--stride", "32", "--context-window-size", "40",
         "--answers-per-seq", "2", "--shard-size", "4"]
    )  # fmt: skip
    assert status == 0
    result = {row["question_id"]: row for row in read_output(output, "questions")}
    assert sorted(result) == sorted(rows)
    assert (result["null-query"]["status"], result["null-query"]["error"]) == ("error", "the query is null")
    assert (result["empty-query"]["status"], result["empty-query"]["error"]) == ("error", "the query is empty")
    unknown = result["unknown-docs"]
    assert unknown["status"] == "error"
    assert unknown["error"] == "unknown document ids: 'nope', 'gone' (the known documents were read)"  # their order
    assert unknown["n_documents"] == 2, "the known documents are still read"
    assert result["only-unknown"]["error"] == "unknown document ids: 'nope' (the known documents were read)"
    # A document without content is skipped, as ExtractiveReader skips it: not an error.
    assert (result["null-content"]["status"], result["null-content"]["error"]) == ("no_documents", None)
    assert result["some-null-content"]["status"] == "answered"  # the seeded model's best span beats its no-answer
    assert result["some-null-content"]["n_documents"] == 1
    assert result["huge"]["status"] == "answered"
    assert result["huge"]["n_sequences"] == 2837  # 256-token windows over 2 MB, overlapping by 32 tokens
    assert result["fine"]["status"] == "answered"
    # A query too long for max_seq_length: an error row naming the way out, the other questions answered.
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_model)
    _, failures = tokenize_each_pair(tokenizer, [rows["long-query"][0]], [TEXTS[5]], TokenizationSettings(256, 32))
    assert failures[0].endswith(". Shorten the query or raise max_seq_length.")
    assert (result["long-query"]["status"], result["long-query"]["error"]) == ("error", failures[0])
    answers = [row for row in read_output(output, "answers") if row["question_id"] == "huge"]
    assert len(answers) == 4
    assert all(huge[row["document_start"] : row["document_end"]] == row["answer"] for row in answers if row["answer"])
    manifest = json.loads((output / "manifest.json").read_text())
    assert manifest["reconciled"] is True
    assert manifest["outputs"]["statuses"]["error"] == 5


# --- Reader actors that cannot start ------------------------------------------------------------------------------


def test_reader_actor_failing_in_its_constructor_fails_the_run_at_once(
    local_ray, capsys: pytest.CaptureFixture, tmp_path: Path, inputs: dict, tiny_bert_model: Path
) -> None:
    """
    Weights that pass the driver's check (the file is there) but cannot be loaded: the reader actor's constructor
    fails, and the run stops at once (Ray Data does not restart an actor that failed in its constructor) with
    exit status 1 and one line naming the actor and the cause; no shard is committed.
    """
    model = tmp_path / "model"
    shutil.copytree(tiny_bert_model, model)
    (model / "model.safetensors").write_bytes(b"not a safetensors file")
    output = tmp_path / "out"
    args = ["--questions", inputs["questions"], "--documents", inputs["documents"], "--model", str(model)]
    assert main([*args, "--output", str(output)]) == 1
    error = [line for line in capsys.readouterr().err.splitlines() if line.startswith("bulk-qa: error:")]
    assert len(error) == 1
    assert (
        error[0].startswith("bulk-qa: error: a Ray actor of the job could not run: ray::")
        and "ReadSequences" in error[0]
    )
    assert "SafetensorError: Error while deserializing header" in error[0]
    assert error[0].endswith("fix the cause and run the same command again to resume.")
    assert not (output / "manifest.json").exists() and list((output / "_shards").glob("*.json")) == []
