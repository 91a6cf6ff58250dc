"""python -m jobs.ingest on a small generated folder, on one local Ray for the module (fractional CPUs per task)."""

import json

import pyarrow.parquet as pq
import pytest

from jobs.ingest import main
from jobs.ingest.folder import InputFolder
from jobs.ingest.run import plan_tasks
from jobs.ingest.stage import IngestSettings
from jobs.tables import DOCUMENTS, table_schema
from qa_core.ingest import convert_folder
from qa_core.retrieval import split_documents
from tests.jobs.conftest import own_local_ray
from tests.qa_core.ingest.files import pdf_bytes, write_corpus

FAST = ["--files-per-task", "3", "--cpus-per-task", "0.25"]


@pytest.fixture(scope="module")
def ray_for_ingest():
    """One local Ray for the module: 1 CPU, tasks reserving a quarter each."""
    with own_local_ray(num_cpus=1) as ray:
        yield ray


@pytest.fixture
def folder(tmp_path):
    """Every format's good file, and three bad ones (a corrupt PDF, a malformed JSONL line, an unknown extension)."""
    root = tmp_path / "in"
    write_corpus(root)
    (root / "bad.pdf").write_bytes(pdf_bytes(["x"])[:120])
    # A malformed line 3: the file's other lines still convert.
    (root / "rows.jsonl").write_text((root / "rows.jsonl").read_text() + "{broken\n")
    (root / "image.png").write_bytes(b"\x89PNG")
    return root


def test_writes_documents_report_and_a_manifest_that_reconciles(ray_for_ingest, folder, tmp_path) -> None:
    out = tmp_path / "out"
    # a PDF over --bytes-per-task: alone in its task, its text written from UTF-8 (`StageSettings.utf8_above`)
    large = str((folder / "report.pdf").stat().st_size - 1)
    assert main(["--input", str(folder), "--output", str(out), *FAST, "--bytes-per-task", large]) == 0
    rows = pq.read_table(out / "documents").to_pylist()
    expected = convert_folder(str(folder)).documents
    # in the folder's order, as one process converts it, whichever of the tasks ends first
    assert [(row["id"], row["content"], json.loads(row["meta"])) for row in rows] == [
        (doc.id, doc.content, {**doc.meta, "source_id": doc.id}) for doc in expected
    ]
    assert {row["id"]: row["page_number"] for row in rows}["report.pdf"] == 1
    table_schema(str(out / "documents"), DOCUMENTS)  # the bulk job's --documents contract holds
    assert {row["id"]: (row["pages"], row["format"]) for row in rows}["report.pdf"] == (3, "pdf")
    report = pq.read_table(out / "report.parquet").to_pylist()
    assert [(row["path"], row["line"]) for row in report] == [("bad.pdf", None), ("image.png", None), ("rows.jsonl", 3)]
    manifest = json.loads((out / "manifest.json").read_text())
    assert {key: manifest[key] for key in ("files", "files_converted", "files_rejected", "reconciles", "documents",
                                           "report_rows", "status")} == {
        "files": 11, "files_converted": 9, "files_rejected": 2, "reconciles": True, "documents": 11,
        "report_rows": 3, "status": "written",
    }  # fmt: skip


def test_strict_refuses_to_write_documents_on_any_report_row(ray_for_ingest, folder, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    (out / "documents").mkdir(parents=True)  # an earlier run's output, replaced with --overwrite
    (out / "manifest.json").write_text("{}")
    assert main(["--input", str(folder), "--output", str(out), "--strict", "--overwrite", *FAST]) == 2
    assert not (out / "documents").exists()
    assert pq.read_table(out / "report.parquet").num_rows == 3
    err = capsys.readouterr().err
    assert "jobs.ingest: bad.pdf: PDF that pypdf cannot read (corrupt or truncated?)" in err
    assert "jobs.ingest: rows.jsonl line 3: malformed JSON" in err
    assert "jobs.ingest: error: --strict: 3 report rows" in err


def test_split_and_cleaned_passages_equal_the_core_splitters(ray_for_ingest, folder, tmp_path) -> None:
    out = tmp_path / "out"
    args = ["--split-by", "sentence", "--split-length", "2", "--split-overlap", "1", "--remove-extra-whitespaces"]
    assert main(["--input", str(folder), "--output", str(out), *args, *FAST]) == 0
    rows = pq.read_table(out / "documents").to_pylist()
    from qa_core.ingest import CleanerSettings, clean_documents

    sources = clean_documents(convert_folder(str(folder)).documents, CleanerSettings(remove_extra_whitespaces=True))
    for doc in sources:
        doc.meta["source_id"] = doc.id
    expected = split_documents(sources, 2, 1, split_by="sentence")
    assert sorted((row["id"], row["content"], row["page_number"], row["split_idx_start"]) for row in rows) == sorted(
        (doc.id, doc.content, doc.meta["page_number"], doc.meta["split_idx_start"]) for doc in expected
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["documents"], manifest["rows_written"]) == (11, len(expected))


def test_two_files_giving_one_id_exit_2_naming_both(ray_for_ingest, tmp_path, capsys) -> None:
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.jsonl").write_text('{"id": "x", "content": "one"}\n')
    (root / "b.csv").write_text("id,content\nx,two\n")
    out = tmp_path / "out"
    assert main(["--input", str(root), "--output", str(out), *FAST]) == 2
    message = "jobs.ingest: error: Two documents have the id 'x': a.jsonl line 1 and b.csv line 2."
    assert message in capsys.readouterr().err
    assert not (out / "documents").exists()


def test_missing_libraries_exit_2_naming_them_and_the_extra(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr("jobs.ingest.cli.missing_libraries", lambda: ["pypdf", "nltk"])
    assert main(["--input", str(tmp_path), "--output", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        "jobs.ingest: error: missing libraries pypdf, nltk: install the files extra "
        "(pip install 'ray-extractive-qa[files]').\n"
    )


def test_bad_options_and_folders_exit_2_before_ray_work(tmp_path, capsys) -> None:
    assert main(["--input", str(tmp_path / "nope"), "--output", str(tmp_path / "o1")]) == 2
    assert f"--input {tmp_path / 'nope'}: no such folder." in capsys.readouterr().err
    (tmp_path / "o2").mkdir()
    (tmp_path / "o2" / "x").write_text("keep")
    assert main(["--input", str(tmp_path), "--output", str(tmp_path / "o2")]) == 2
    assert "the folder is not empty; pass --overwrite" in capsys.readouterr().err
    assert main(["--input", str(tmp_path), "--output", str(tmp_path / "o2"), "--overwrite"]) == 2
    assert "holds files but no manifest.json: it is not an earlier ingestion's output" in capsys.readouterr().err
    assert (tmp_path / "o2" / "x").read_text() == "keep"
    assert main(["--input", str(tmp_path), "--output", str(tmp_path / "o3"), "--split-length", "2",
                 "--split-overlap", "2"]) == 2  # fmt: skip
    assert "--split-overlap at least 0 and less than it" in capsys.readouterr().err


def test_files_are_cut_into_tasks_by_count_and_bytes() -> None:
    """Four tasks per slot, each of at most files_per_task files and bytes_per_task bytes; a larger file alone."""
    folder = InputFolder("in", [f"f{i}" for i in range(10)], [10] * 4 + [500] + [10] * 5)
    settings = IngestSettings(files_per_task=3, bytes_per_task=100)
    by_three = [["f0", "f1", "f2"], ["f3"], ["f4"], ["f5", "f6", "f7"], ["f8", "f9"]]
    assert plan_tasks(folder, settings, slots=1) == by_three  # 3 files, 100 bytes at most
    by_two = [["f0", "f1"], ["f2", "f3"], ["f4"], ["f5", "f6"], ["f7", "f8"], ["f9"]]
    assert plan_tasks(folder, settings, slots=2) == by_two  # 8 tasks wanted: ceil(10 / 8) = 2 files each
    assert plan_tasks(InputFolder("in", [], []), settings, slots=1) == []
