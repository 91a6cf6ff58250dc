"""
A `--documents` folder of files (local or at a URI): converted once per run, on the run's engine, by the ingestion
stage of `python -m jobs.ingest` (`jobs.ingest.run.ingest`, with the run's `ingest` and `cleaning` settings) into
`_corpus/` in the output folder (`documents/`, `report.parquet`, `files.parquet`, `manifest.json`), whose
`documents/` the run then reads as it reads any documents table. A resumed run keeps it, as it keeps its index: a
run resumes only with the same identity, which holds the folder's fingerprint (every file's path, size and
modification time, as for any input) and the ingestion and cleaning settings; a run with a changed folder or
settings is refused, or, with `--overwrite`, starts afresh with the conversion updated: only the files new or
changed since are converted (all of them when the conversion settings changed). Passages are the retrieval
settings' (`split_length`), not the ingestion's: the documents stay whole, so that answers name their source
documents.
"""

import json
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from jobs.ingest.folder import InputFolder
from jobs.ingest.run import (
    DOCUMENTS_DIR,
    MANIFEST_FILE,
    REPORT_FILE,
    WRITTEN,
    IngestError,
    check_earlier,
    finish_publish,
    ingest,
    where,
)
from jobs.ingest.stage import IngestSettings, SplitSettings
from jobs.storage import InputError, redact, resolve_path
from qa_core.ingest import CleanerSettings
from qa_core.ingest.convert import missing_libraries

CORPUS_FOLDER = "_corpus"  # the converted documents, inside the run's output folder
# Report rows a --strict refusal names (all of them are in the report file).
SHOWN_REPORT_ROWS = 3
# What the manifest's `ingestion` keeps of the ingestion's own manifest.
_RECORDED = (
    "files", "files_converted", "files_rejected", "entries_skipped", "reconciles", "files_new", "files_changed",
    "files_unchanged", "files_deleted", "documents", "report_rows", "report_rows_for_files_converted",
)  # fmt: skip


@dataclass(frozen=True)
class ConvertedCorpus:
    """
    The run's converted documents.

    :param documents: The documents table (`_corpus/documents`, local path or URI).
    :param record: The manifest's `ingestion`: files in, converted and rejected, whether they reconcile, files new,
        changed, unchanged and deleted since an earlier conversion, documents, report rows and where the report
        is, the seconds the conversion took, and `source`: `converted` (by this run: all files, or those changed
        since the conversion an earlier run left) or `resumed` (kept from the run this one resumes).
    """

    documents: str
    record: dict[str, Any]


def convert_corpus(
    folder: InputFolder,
    output: str,
    settings: IngestSettings,
    cleaner: CleanerSettings,
    engine: Any,
    cpus: float,
    resuming: bool,
) -> ConvertedCorpus:
    """
    The run's documents from `folder`: converted into `output`'s `_corpus/` on `engine` (its Ray started, with
    `cpus`), or with `resuming` kept from the run this one resumes when that run converted them. A conversion an
    earlier run left there is updated (only the files new or changed since are converted), or, made with other
    conversion settings, replaced.

    :raises InputError: For missing libraries of the `files` extra, two documents with one id, or with
        `settings.strict` any report row, naming the folder and the first report rows.
    """
    location = f"{output.rstrip('/')}/{CORPUS_FOLDER}"
    shown = redact(folder.location)
    finish_publish(location)  # a conversion whose publication was killed midway
    manifest = _read_manifest(location) if resuming else None
    source = "resumed"
    if manifest is None or manifest.get("status") != WRITTEN:
        missing = missing_libraries()
        if missing:
            raise InputError(
                f"--documents {shown} is a folder of files to convert, which needs the libraries "
                f"{', '.join(missing)}: install the files extra (pip install 'ray-extractive-qa[files]')."
            )
        try:
            check_earlier(location, settings, cleaner, SplitSettings())
        except IngestError:  # an earlier conversion with other settings: converted again
            _delete(location)
        try:
            manifest = ingest(folder, location, settings, cleaner, SplitSettings(), engine, cpus)
        except IngestError as error:
            raise InputError(f"--documents {shown}: {error}") from None
        source = "converted"
    report = f"{location}/{REPORT_FILE}"
    if manifest["status"] != WRITTEN:
        raise InputError(
            f"--documents {shown}: strict, and {manifest['report_rows']} files or rows gave no document "
            f"({_first_rows(report)}); all in {redact(report)}. Fix them, or run without --strict to answer from "
            "the others."
        )
    record = {key: manifest[key] for key in _RECORDED}
    record.update(report=redact(report), convert_s=manifest["timings"]["convert_s"], source=source)
    return ConvertedCorpus(f"{location}/{DOCUMENTS_DIR}", record)


def _first_rows(report: str) -> str:
    """The report's first rows, for a message."""
    filesystem, path = resolve_path(report)
    with filesystem.open_input_file(path) as file:
        rows = pq.read_table(file).slice(0, SHOWN_REPORT_ROWS).to_pylist()
    return "; ".join(f"{where(row)}: {row['reason']}" for row in rows)


def _read_manifest(location: str) -> dict[str, Any] | None:
    """A conversion's manifest, or None when there is none (never converted, or interrupted)."""
    filesystem, folder = resolve_path(location)
    try:
        with filesystem.open_input_stream(f"{folder}/{MANIFEST_FILE}") as stream:
            manifest = json.loads(stream.read().decode("utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def _delete(location: str) -> None:
    filesystem, folder = resolve_path(location)
    if filesystem.get_file_info(folder).type == pafs.FileType.Directory:
        filesystem.delete_dir(folder)


__all__ = ["CORPUS_FOLDER", "ConvertedCorpus", "convert_corpus"]
