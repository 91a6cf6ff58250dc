"""
`--documents` as a folder of files: converted once per run into `_corpus/` of the output folder (kept for a resume,
refused when the folder or the ingestion settings changed), its report counted in the manifest and the summary,
`--strict` refusing bad files, and the answers equal to those of the same documents given as a Parquet table, each
naming the file it came from (`file_path`) and, in a PDF, its page. In-process (the tiny model), then once on Ray.
"""

import json
from pathlib import Path

import pyarrow as pa
import pytest

from qa_core.ingest import convert_folder
from tests.jobs.conftest import assert_same_outputs, read_output, run_job, write_table
from tests.qa_core.ingest.files import pdf_bytes, write_corpus

QUERIES = ["What is on page three?", "Who wrote the quoted row?", "What does the extractive reader find?"]
TABLES = ("answers", "questions")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    """Every format's good file and three bad ones (a corrupt PDF, a malformed JSONL line, an unknown extension)."""
    root = tmp_path_factory.mktemp("corpus")
    folder = root / "files"
    write_corpus(folder)
    (folder / "bad.pdf").write_bytes(pdf_bytes(["x"])[:120])
    (folder / "rows.jsonl").write_text((folder / "rows.jsonl").read_text() + "{broken\n")
    (folder / "image.png").write_bytes(b"\x89PNG")
    questions = write_table(root / "questions.parquet", {"id": ["q1", "q2", "q3"], "query": QUERIES})
    return {"folder": folder, "questions": Path(questions), "root": root}


@pytest.fixture(scope="module")
def in_process_run(corpus, tiny_bert_model, tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("files-run") / "out"
    args = ["--questions", corpus["questions"], "--documents", corpus["folder"], "--output", output]
    assert run_job(*args, "--model", tiny_bert_model, "--engine", "in-process", "--quiet") == 0
    return output


def test_a_folder_of_files_is_answered_as_its_converted_table(in_process_run, corpus, tiny_bert_model, capsys):
    documents = convert_folder(str(corpus["folder"])).documents
    table = write_table(
        corpus["root"] / "converted.parquet",
        {
            "id": [doc.id for doc in documents],
            "content": [doc.content for doc in documents],
            "page_number": pa.array([1] * len(documents), pa.int64()),
            "file_path": [doc.meta["file_path"] for doc in documents],
        },
    )
    expected = corpus["root"] / "expected"
    args = ["--questions", corpus["questions"], "--documents", table, "--output", expected, "--quiet"]
    assert run_job(*args, "--model", tiny_bert_model, "--engine", "in-process") == 0
    assert_same_outputs(in_process_run, expected, TABLES)

    answers = [row for row in read_output(in_process_run, "answers") if row["answer"] is not None]
    files = {doc.id: doc.meta["file_path"] for doc in documents}
    assert all(row["file_path"] == files[row["document_id"]] for row in answers)
    assert {row["file_path"] for row in answers} >= {"report.pdf", "rows.jsonl"}  # a row's file, not its id
    content = {doc.id: doc.content for doc in documents}
    pdf_pages = [row["answer_page_number"] for row in answers if row["file_path"] == "report.pdf"]
    assert pdf_pages == [
        1 + content["report.pdf"][: row["document_start"]].count("\f")
        for row in answers
        if row["file_path"] == "report.pdf"
    ]

    manifest = json.loads((in_process_run / "manifest.json").read_text())
    assert manifest["ingestion"] == {
        "files": 11, "files_converted": 9, "files_rejected": 2, "entries_skipped": 0, "reconciles": True,
        "files_new": 11, "files_changed": 0, "files_unchanged": 0, "files_deleted": 0, "documents": 11,
        "report_rows": 3, "report_rows_for_files_converted": 1, "source": "converted",
        "report": str(in_process_run / "_corpus" / "report.parquet"),
        "convert_s": manifest["ingestion"]["convert_s"],
    }  # fmt: skip
    assert manifest["config"]["documents"] == str(corpus["folder"])


def test_a_resume_keeps_the_conversion_and_a_changed_folder_or_setting_is_refused(
    in_process_run, corpus, tiny_bert_model, capsys
):
    args = ["--questions", corpus["questions"], "--documents", corpus["folder"], "--output", in_process_run]
    args += ["--model", tiny_bert_model, "--engine", "in-process", "--quiet"]
    capsys.readouterr()
    assert run_job(*args) == 0
    manifest = json.loads((in_process_run / "manifest.json").read_text())
    assert manifest["ingestion"]["source"] == "resumed"
    out = capsys.readouterr().out
    kept = "(kept from the run this one resumes)"
    assert f"  corpus      11 files {kept}: 9 converted into 11 documents, 2 rejected; 3 report rows in" in out

    assert run_job(*args, "--remove-extra-whitespaces") == 2
    assert "holds the output of a run with other settings (remove_extra_whitespaces)" in capsys.readouterr().err
    (corpus["folder"] / "notes.txt").write_text("First line.\nSecond line, changed.\n")
    try:
        assert run_job(*args) == 2
        assert "holds the output of a run with other input files" in capsys.readouterr().err
        assert run_job(*args, "--overwrite") == 0  # the conversion updated: the changed file alone converted
        ingestion = json.loads((in_process_run / "manifest.json").read_text())["ingestion"]
        changes = [ingestion[f"files_{change}"] for change in ("new", "changed", "unchanged", "deleted")]
        assert (ingestion["source"], changes, ingestion["documents"]) == ("converted", [0, 1, 10, 0], 11)
    finally:
        (corpus["folder"] / "notes.txt").write_bytes("First line.\nSecond line, café.\n".encode())
        assert run_job(*args, "--overwrite") == 0  # as it was, for the module's other tests


def test_strict_refuses_a_folder_with_bad_files_naming_them(corpus, tiny_bert_model, tmp_path, capsys):
    output = tmp_path / "out"
    args = ["--questions", corpus["questions"], "--documents", corpus["folder"], "--output", output, "--strict"]
    assert run_job(*args, "--model", tiny_bert_model, "--engine", "in-process", "--quiet") == 2
    err = capsys.readouterr().err
    assert f"--documents {corpus['folder']}: strict, and 3 files or rows gave no document (bad.pdf: PDF" in err
    assert f"all in {output / '_corpus' / 'report.parquet'}" in err
    assert not (output / "answers").exists()


def test_the_ray_engine_converts_and_answers_the_same(local_ray, in_process_run, corpus, tiny_bert_model, tmp_path):
    output = tmp_path / "out"
    args = ["--questions", corpus["questions"], "--documents", corpus["folder"], "--output", output]
    assert run_job(*args, "--model", tiny_bert_model, "--engine", "ray", "--quiet", "--cpus-per-task", "0.25") == 0
    assert_same_outputs(output, in_process_run, TABLES)
    assert json.loads((output / "manifest.json").read_text())["ingestion"]["documents"] == 11
