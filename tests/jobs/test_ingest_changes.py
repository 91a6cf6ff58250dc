"""
An ingestion run again over its earlier output (`jobs.ingest.run.ingest`, in-process engine, no Ray): only new and
changed files converted (the conversions counted), touched files with the same bytes not, deleted files' rows
gone, the table equal to a fresh ingestion's; other conversion settings refused; a run killed midway leaves the
earlier output as it was and the next run resumes it.
"""

import json
import os
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import jobs.ingest.run
import jobs.ingest.stage
from jobs.engines import InProcessEngine
from jobs.ingest import main, merge
from jobs.ingest.folder import list_folder
from jobs.ingest.run import IngestError, check_earlier, ingest
from jobs.ingest.stage import DOCUMENTS_SCHEMA, IngestSettings, SplitSettings
from qa_core.ingest import CleanerSettings

# converted in this process (no converter process), a file per task
SETTINGS = IngestSettings(timeout_per_file=0, memory_per_file=0, files_per_task=1)
COUNTS = ("files_new", "files_changed", "files_unchanged", "files_deleted")


class Killed(Exception):
    """Stands for the run being killed."""


@pytest.fixture
def converted(monkeypatch) -> list[str]:
    """The files each conversion task converts, in order (the stage's `convert_files`, wrapped)."""
    paths: list[str] = []
    convert_files = jobs.ingest.stage.convert_files

    def counted(root, relative_paths, *args, **kwargs):
        paths.extend(relative_paths)
        return convert_files(root, relative_paths, *args, **kwargs)

    monkeypatch.setattr(jobs.ingest.stage, "convert_files", counted)
    return paths


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "in"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("Alpha is the first letter.\n")
    (root / "b.txt").write_text("Beta comes second.\n")
    (root / "c.jsonl").write_text('{"content": "Gamma row one."}\n{"content": "Gamma row two."}\n{broken\n')
    (root / "d.md").write_text("# Delta\n\nThe fourth letter.\n")
    (root / "image.png").write_bytes(b"\x89PNG")
    (root / "sub" / "e.txt").write_text("Epsilon, in a folder.\n")
    return root


def _ingest(root: Path, out: Path, split: SplitSettings = SplitSettings()) -> dict:
    return ingest(list_folder(str(root)), str(out), SETTINGS, CleanerSettings(), split, InProcessEngine(), 1.0)


def _output(out: Path) -> tuple:
    """The documents table, report and manifest's counts of an output."""
    manifest = json.loads((out / "manifest.json").read_text())
    counts = {key: manifest[key] for key in ("files", "files_converted", "files_rejected", "documents", "reconciles")}
    return pq.read_table(out / "documents"), pq.read_table(out / "report.parquet"), counts


def _later(path: Path) -> None:
    """The file's modification time a second later, its bytes as they were (touched)."""
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


def test_a_second_run_converts_only_new_and_changed_files_and_equals_a_fresh_one(folder, tmp_path, converted) -> None:
    out = tmp_path / "out"
    split = SplitSettings("word", 3, 1)
    first = _ingest(folder, out, split)
    assert sorted(converted) == ["a.txt", "b.txt", "c.jsonl", "d.md", "image.png", "sub/e.txt"]
    assert [first[key] for key in COUNTS] == [6, 0, 0, 0]
    before = pq.read_table(out / "documents").to_pylist()
    converted.clear()
    (folder / "b.txt").write_text("Beta comes second, and now third words too.\n")  # changed
    (folder / "c.jsonl").write_text('{"content": "Gamma row one."}\n{"content": "Gamma row two."}\n')  # fixed
    (folder / "image.png").unlink()  # deleted: its report row goes
    (folder / "d.md").unlink()  # deleted: its rows go
    (folder / "ab.txt").write_text("Between alpha and beta.\n")  # new, between two kept files
    (folder / "sub" / "f.txt").write_text("Zeta.\n")  # new, last
    second = _ingest(folder, out, split)
    assert sorted(converted) == ["ab.txt", "b.txt", "c.jsonl", "sub/f.txt"]
    assert [second[key] for key in COUNTS] == [2, 2, 2, 2]
    rows = pq.read_table(out / "documents").to_pylist()
    kept = [row for row in before if row["file_path"] in ("a.txt", "sub/e.txt")]
    assert [row for row in rows if row["file_path"] in ("a.txt", "sub/e.txt")] == kept  # as they were
    assert not [row for row in rows if row["file_path"] in ("d.md", "image.png")]
    fresh = tmp_path / "fresh"
    _ingest(folder, fresh, split)
    documents, report, counts = _output(out)
    assert (documents.to_pylist(), report.to_pylist(), counts) == (
        _output(fresh)[0].to_pylist(), _output(fresh)[1].to_pylist(), _output(fresh)[2]
    )
    assert report.to_pylist() == []  # the broken line's row went with the change that fixed it


def test_touched_files_with_the_same_bytes_are_not_converted_again(folder, tmp_path, converted) -> None:
    out = tmp_path / "out"
    _ingest(folder, out)
    before = _output(out)
    converted.clear()
    _later(folder / "a.txt")
    _later(folder / "image.png")  # a rejected file: its report row kept
    (folder / "b.txt").write_text((folder / "b.txt").read_text())  # rewritten, the same bytes
    _later(folder / "b.txt")
    second = _ingest(folder, out)
    assert converted == []
    assert [second[key] for key in COUNTS] == [0, 0, 6, 0]
    assert _output(out)[0].equals(before[0]) and _output(out)[1].equals(before[1])
    records = {row["path"]: row["mtime_ns"] for row in pq.read_table(out / "files.parquet").to_pylist()}
    assert records["a.txt"] == (folder / "a.txt").stat().st_mtime_ns  # recorded as touched: not hashed again


def test_other_conversion_settings_are_refused_naming_the_setting(folder, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    _ingest(folder, out)
    args = ["--input", str(folder), "--output", str(out), "--timeout-per-file", "0", "--memory-per-file", "0"]
    assert main([*args, "--split-length", "50"]) == 2  # refused before Ray starts
    assert capsys.readouterr().err == (
        f"jobs.ingest: error: --output {out}: made with --split-length none, not 50; pass --overwrite to convert "
        "every file again, or choose another --output.\n"
    )
    with pytest.raises(IngestError, match=r"made with --remove-empty-lines false, not true;"):
        check_earlier(str(out), SETTINGS, CleanerSettings(remove_empty_lines=True), SplitSettings())
    with pytest.raises(IngestError, match=r"made with --encoding none, not cp1252;"):
        check_earlier(str(out), replace(SETTINGS, encoding="cp1252"), CleanerSettings(), SplitSettings())
    # how many tasks run, or --strict, changes no row: the output is updated
    check_earlier(str(out), replace(SETTINGS, files_per_task=7, strict=True), CleanerSettings(), SplitSettings())


def test_a_run_killed_midway_leaves_the_earlier_output_and_the_next_one_resumes(
    folder, tmp_path, converted, monkeypatch
) -> None:
    out = tmp_path / "out"
    _ingest(folder, out)
    manifest = (out / "manifest.json").read_bytes()
    before = _output(out)
    for name in ("a.txt", "b.txt", "d.md"):
        (folder / name).write_text(f"{name} changed.\n")
    converted.clear()
    counted = jobs.ingest.stage.convert_files

    def killed_at_the_third(root, relative_paths, *args, **kwargs):
        if len(converted) == 2:
            raise Killed
        return counted(root, relative_paths, *args, **kwargs)

    monkeypatch.setattr(jobs.ingest.stage, "convert_files", killed_at_the_third)
    with pytest.raises(Killed):
        _ingest(folder, out)
    assert (out / "manifest.json").read_bytes() == manifest  # the earlier output, as it was
    assert _output(out)[0].equals(before[0]) and _output(out)[1].equals(before[1])
    monkeypatch.setattr(jobs.ingest.stage, "convert_files", counted)
    done = list(converted)
    converted.clear()
    resumed = _ingest(folder, out)
    assert sorted(done + converted) == ["a.txt", "b.txt", "d.md"]  # each converted once: the finished parts kept
    assert len(converted) == 1 and [resumed[key] for key in COUNTS] == [0, 3, 3, 0]
    _ingest(folder, tmp_path / "fresh")
    assert _output(out)[0].equals(_output(tmp_path / "fresh")[0])


def test_a_publication_killed_midway_is_finished_by_the_next_run(folder, tmp_path, converted, monkeypatch) -> None:
    out = tmp_path / "out"
    _ingest(folder, out)
    (folder / "a.txt").write_text("Alpha, changed.\n")
    replace = jobs.ingest.run._replace
    moved: list[str] = []

    def killed_after_the_documents(filesystem, staged, target):
        if moved:
            raise Killed
        moved.append(target)
        replace(filesystem, staged, target)

    monkeypatch.setattr(jobs.ingest.run, "_replace", killed_after_the_documents)
    with pytest.raises(Killed):
        _ingest(folder, out)
    assert moved == [str(out / "documents")]
    monkeypatch.setattr(jobs.ingest.run, "_replace", replace)
    converted.clear()
    finished = _ingest(folder, out)
    assert converted == [] and [finished[key] for key in COUNTS] == [0, 0, 6, 0]
    _ingest(folder, tmp_path / "fresh")
    assert _output(out)[0].equals(_output(tmp_path / "fresh")[0])
    assert _output(out)[1:] == _output(tmp_path / "fresh")[1:]
    assert not (out / "_staging").exists()


def test_merged_sources_keep_the_folder_order_across_row_groups_and_files(tmp_path, monkeypatch) -> None:
    """Two sources interleaved file by file, read a row group at a time, written in several small files."""
    monkeypatch.setattr(merge, "ROW_GROUP_BYTES", 1)  # a row group per piece added
    monkeypatch.setattr(merge, "PART_BYTES", 2_000)
    files = [f"f{i:02d}" for i in range(12)]  # f00..f11: three rows each, even ones in `a`, odd ones in `b`

    def rows(paths: list[str]) -> pa.Table:
        names = [(path, line) for path in paths for line in range(3)]
        columns = {name: [None] * len(names) for name in DOCUMENTS_SCHEMA.names}
        columns.update(id=[f"{p}#{line}" for p, line in names], file_path=[p for p, _ in names])
        return pa.table(columns, schema=DOCUMENTS_SCHEMA)

    written = {}
    for name, paths in (("a", files[0::2]), ("b", files[1::2])):
        written[name] = str(tmp_path / f"{name}.parquet")
        pq.write_table(rows(paths), written[name], row_group_size=4)  # groups cut across files
    positions = {path: i for i, path in enumerate(files)}
    dropped = {"f04", "f07"}  # rows not taken from their source
    sources = [
        merge.RowSource([written[name]], {p: positions[p] for p in files[start::2] if p not in dropped})
        for name, start in (("a", 0), ("b", 1))
    ]
    out = tmp_path / "merged"
    assert merge.write_merged(pafs.LocalFileSystem(), sources, str(out)) == 30
    assert len(list(out.iterdir())) > 1
    expected = rows([path for path in files if path not in dropped])
    assert pq.read_table(out).equals(expected)
