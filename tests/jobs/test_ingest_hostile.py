"""
A folder of hostile and messy files beside good ones through the ingestion (`jobs.ingest.run.ingest`, in-process
engine, the limits small through the settings the flags set): every good file converted, every hostile one converted
safely or reported with the right reason, nothing from outside the folder read, the counts reconciled. And
`python -m jobs.ingest` and `python -m jobs.index` print only their own lines without `--verbose`.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs.bench.files import write_docx_bomb
from jobs.engines import InProcessEngine
from jobs.ingest.folder import list_folder
from jobs.ingest.run import ingest
from jobs.ingest.stage import IngestSettings, SplitSettings
from qa_core.ingest import CleanerSettings
from tests.jobs.conftest import communicate_within
from tests.qa_core.ingest.files import docx_with_entity, slow_html, write_corpus

ROOT = Path(__file__).resolve().parents[2]
NOT_FOLLOWED = (
    "symbolic link not followed (--follow-symlinks follows links to files and folders inside the input folder)"
)
SECRET = "root-secret-hostname-4242"
FRENCH = "Le café de la gare ferme à minuit."


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """The good corpus plus one file or entry of each hostile case; returns the folder and the good files."""
    (tmp_path / "secret").write_text(SECRET + "\n")  # stands for /etc/hostname
    root = tmp_path / "in"
    good = write_corpus(root)
    (root / "french.txt").write_bytes(FRENCH.encode("latin-1"))
    (root / os.fsdecode(b"na\xefve.txt")).write_bytes(b"A name in Latin-1.\n")
    os.symlink(tmp_path / "secret", root / "hostname.txt")
    os.symlink("..", root / "docs" / "loop")
    os.mkfifo(root / "pipe.txt")
    (root / "slow.html").write_bytes(slow_html(200_000))
    write_docx_bomb(root / "bomb.docx", 64 * 2**20)
    (root / "entity.docx").write_bytes(docx_with_entity("Before, ", "xxe", " after."))
    (root / "node.html").write_bytes(b"<html><body><p>" + b"word " * 2_100_000 + b"</p></body></html>")
    (root / "long.txt").write_text("x" * 300_000)
    return root, good


def test_every_hostile_file_is_safe_or_reported_and_the_counts_reconcile(hostile, tmp_path) -> None:
    root, good = hostile
    settings = IngestSettings(
        timeout_per_file=1.5, memory_per_file=2 * 2**30, max_document_bytes=200_000, max_unzipped_bytes=16 * 2**20
    )
    folder = list_folder(str(root), settings.follow_symlinks)
    out = tmp_path / "out"
    manifest = ingest(folder, str(out), settings, CleanerSettings(), SplitSettings(), InProcessEngine(), 1.0)

    rows = pq.read_table(out / "documents").to_pylist()
    converted = {row["file_path"] for row in rows}
    assert converted == {*good, "french.txt", "na\\xefve.txt"}
    by_id = {row["id"]: row for row in rows}
    assert (by_id["french.txt"]["content"], by_id["french.txt"]["encoding"]) == (FRENCH, "cp1252")
    assert by_id["na\\xefve.txt"]["content"] == "A name in Latin-1.\n"

    report = {row["path"]: row["reason"] for row in pq.read_table(out / "report.parquet").to_pylist()}
    assert {path: reason.split(": ")[0] for path, reason in report.items()} == {
        "bomb.docx": "zip package (DOCX) that declares 67,930,583 bytes decompressed, over the limit of 16,777,216 "
        "bytes (--max-unzipped-bytes)",
        "docs/loop": "symbolic link not followed (--follow-symlinks follows links to files and folders inside the "
        "input folder)",
        "entity.docx": "DOCX whose text holds the XML entity reference &xxe;",
        "hostname.txt": "symbolic link not followed (--follow-symlinks follows links to files and folders inside "
        "the input folder)",
        "long.txt": "text over the limit of 200,000 bytes for one document (--max-document-bytes)",
        "node.html": "HTML with a text node too large",
        "pipe.txt": "not a regular file (a FIFO, socket or device)",
        "slow.html": "conversion took longer than the limit of 1.5 s (--timeout-per-file)",
    }
    assert SECRET not in (out / "report.parquet").read_bytes().decode("latin-1")
    assert all(SECRET not in row["content"] for row in rows)

    files = len(good) + 7  # french, naïve, slow, bomb, entity, node, long (the links and the FIFO: skipped)
    assert {key: manifest[key] for key in ("files", "files_converted", "files_rejected", "entries_skipped",
                                           "reconciles", "status")} == {
        "files": files, "files_converted": len(good) + 2, "files_rejected": 5, "entries_skipped": 3,
        "reconciles": True, "status": "written",
    }  # fmt: skip


def _start(module: str, *args: str) -> subprocess.Popen:
    """`python -m module args` on a Ray of its own (no RAY_ADDRESS, Ray's default authentication), output captured."""
    env = {key: value for key, value in os.environ.items() if key not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    command = [sys.executable, "-m", module, *args]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_ingest_and_index_print_only_their_own_lines(tmp_path) -> None:
    """
    On the sample folder (plus a link out of it and an HTML page past the time limit, converted in Ray's workers)
    and the sample documents, each on a Ray of its own, both at once: no Ray Data log line, no progress bar, no
    Ray notice (each shows with --verbose), only the commands' own lines, the report rows among them.
    """
    folder = tmp_path / "files"
    shutil.copytree(ROOT / "data" / "sample" / "files", folder)
    (tmp_path / "secret").write_text(SECRET + "\n")
    os.symlink(tmp_path / "secret", folder / "hostname.txt")
    (folder / "slow.html").write_bytes(slow_html(200_000))
    output = str(tmp_path / "docs")
    runs = {
        "jobs.ingest": _start("jobs.ingest", "--input", str(folder), "--output", output, "--timeout-per-file", "1.5"),
        "jobs.index": _start(
            "jobs.index", "--documents", "data/sample/documents.parquet", "--output", str(tmp_path / "index")
        ),
    }
    printed = {}
    for name, run in runs.items():
        stdout, stderr = communicate_within(run, 300)
        assert run.returncode == 0, stderr
        printed[name] = (stderr + stdout).splitlines()  # the report rows (stderr), then the summary
        assert printed[name] and all(line.startswith(f"{name}: ") for line in printed[name]), printed[name]
    assert printed["jobs.ingest"][:2] == [
        f"jobs.ingest: hostname.txt: {NOT_FOLLOWED}",
        "jobs.ingest: slow.html: conversion took longer than the limit of 1.5 s (--timeout-per-file): stopped",
    ]
    assert printed["jobs.ingest"][2].startswith("jobs.ingest: 16 files: 15 converted into 34 documents in ")
    assert len(printed["jobs.ingest"]) == 3
