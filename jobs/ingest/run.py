"""
One ingestion, on either of the bulk job's engines (Ray Data, or its in-process dataset): an input folder's files
converted by the stage (`jobs.ingest.stage.convert_batch`) into an output folder, local or at a URI:
`documents/` (the bulk job's documents table), `report.parquet` (path, line, reason: every file or row that gave no
document) and `manifest.json`, written last (counts that reconcile: files in = files converted + files rejected).
The documents are staged in `_staging/` and moved out only once the ids are checked unique and `strict` allows
them; used by `python -m jobs.ingest` and by the bulk job for a `--documents` folder of files.
"""

import json
import math
import time
from dataclasses import asdict
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from jobs.ingest.folder import InputFolder
from jobs.ingest.stage import (
    DOCUMENTS_SCHEMA,
    PARQUET_OPTIONS,
    REPORT_SCHEMA,
    IngestSettings,
    SplitSettings,
    StageSettings,
    convert_batch,
    write_report,
)
from jobs.storage import redact, resolve_path
from qa_core.ingest import CleanerSettings

DOCUMENTS_DIR = "documents"
REPORT_FILE = "report.parquet"
MANIFEST_FILE = "manifest.json"
# Where the stage streams documents and report parts before the id check and `strict` allow them out.
STAGING_DIR = "_staging"
WRITTEN = "written"  # the manifest's status when the documents were written
# Conversion tasks per task slot (CPUs / cpus_per_task) a folder is cut into, at most: enough for the slots to
# share the work evenly, few enough that small files do not pay a task each.
TASKS_PER_SLOT = 4


class IngestError(Exception):
    """Unusable input or options, or a corpus that cannot be written; the message names the file or option."""


def ingest(
    folder: InputFolder,
    output: str,
    settings: IngestSettings,
    cleaner: CleanerSettings,
    split: SplitSettings,
    engine: Any,
    cpus: float,
    timings: dict[str, float] | None = None,
) -> dict[str, Any]:
    """
    Converts `folder`'s files into `output` (which should hold nothing of an earlier ingestion) with `engine`
    (`jobs.engines`: its Ray, already started, or this process), whose `cpus` the tasks share
    (`plan_tasks`). `timings` (seconds by name, e.g. the Ray start before it) join the manifest's own.

    :returns: The manifest (also written as `manifest.json`); its `status` is `written`, or says why the documents
        were not (`strict` and report rows).
    :raises IngestError: When two documents have one id (the manifest is written first), naming both sources.
    """
    started = time.perf_counter()
    filesystem, root = resolve_path(output)
    root = root.rstrip("/")
    staging = f"{root}/{STAGING_DIR}"
    filesystem.create_dir(f"{staging}/report", recursive=True)
    report_dir = f"{output.rstrip('/')}/{STAGING_DIR}/report"
    write_report(report_dir, ["(listing)"], folder.skipped)  # the entries the listing skipped, and why
    stage = StageSettings(
        folder.location,
        report_dir,
        settings.conversion(),
        settings.bytes_per_task,  # a larger file is alone in its task (`plan_tasks`): its text goes as UTF-8
        settings.columns,
        cleaner,
        split,
    )
    tasks = plan_tasks(folder, settings, max(1, math.floor(cpus / settings.cpus_per_task)))
    if tasks:
        # ordered: the documents' files are named in the tasks' order, so the table lists the documents in the
        # folder's order whatever task ends first (the corpus order, which breaks the retrieval's score ties)
        raw = None if folder.raw_paths is None else dict(zip(folder.paths, folder.raw_paths, strict=True))
        dataset = engine.from_arrow([_task_table(paths, raw) for paths in tasks], ordered=True).map_batches(
            convert_batch,
            fn_kwargs={"settings": stage},
            batch_size=None,  # a block is a task's files
            batch_format="pyarrow",
            num_cpus=settings.cpus_per_task,
        )
        dataset.write_parquet(f"{staging}/{DOCUMENTS_DIR}", filesystem=filesystem, **PARQUET_OPTIONS)
    convert_s = time.perf_counter() - started
    sources = _sources(filesystem, f"{staging}/{DOCUMENTS_DIR}")
    report = _read_report(filesystem, f"{staging}/report")
    with filesystem.open_output_stream(f"{root}/{REPORT_FILE}") as stream:
        pq.write_table(report, stream)
    manifest = _manifest(folder, sources, report, settings, cleaner, split)
    manifest["timings"] = {**(timings or {}), "convert_s": round(convert_s, 3)}
    duplicate = _duplicate_id(sources)
    if duplicate:
        manifest["status"] = "refused: duplicate id"
        manifest["error"] = duplicate
    elif settings.strict and report.num_rows:
        manifest["status"] = "refused: strict and report rows"
    else:
        manifest["status"] = WRITTEN
        _publish(filesystem, f"{staging}/{DOCUMENTS_DIR}", f"{root}/{DOCUMENTS_DIR}", sources is not None)
    filesystem.delete_dir(staging)
    with filesystem.open_output_stream(f"{root}/{MANIFEST_FILE}") as stream:
        stream.write((json.dumps(manifest, indent=2) + "\n").encode("utf-8"))
    if duplicate:
        raise IngestError(duplicate)
    return manifest


def plan_tasks(folder: InputFolder, settings: IngestSettings, slots: int) -> list[list[str]]:
    """
    The folder's files cut into conversion tasks, in order: as many files each as make `TASKS_PER_SLOT` tasks per
    task slot (`slots` tasks run at once), but at most `files_per_task` files and `bytes_per_task` bytes (a larger
    file goes alone), so that a task's memory stays bounded whatever the files, and small files share a task's
    overhead (Ray's scheduling, the task's output block and its Parquet file).
    """
    per_task = min(settings.files_per_task, max(1, math.ceil(len(folder.paths) / (TASKS_PER_SLOT * slots))))
    tasks: list[list[str]] = []
    current: list[str] = []
    size = 0
    for path, file_size in zip(folder.paths, folder.sizes, strict=True):
        if current and (len(current) == per_task or size + file_size > settings.bytes_per_task):
            tasks.append(current)
            current, size = [], 0
        current.append(path)
        size += file_size
    return tasks + [current] if current else tasks


def _task_table(paths: list[str], raw: dict[str, bytes] | None) -> pa.Table:
    """A task's files: `path`, and for a local folder `raw_path` (the paths' bytes, to open them by)."""
    if raw is None:
        return pa.table({"path": paths})
    return pa.table({"path": paths, "raw_path": pa.array([raw[path] for path in paths], pa.binary())})


def _publish(filesystem: pafs.FileSystem, staged: str, target: str, written: bool) -> None:
    """
    The staged documents moved to `target` (copied on a filesystem without folder renames); no documents: one
    empty table, so that the folder is a documents table all the same.
    """
    if not written:
        filesystem.create_dir(target, recursive=True)
        with filesystem.open_output_stream(f"{target}/empty.parquet") as stream:
            pq.write_table(DOCUMENTS_SCHEMA.empty_table(), stream)
    elif isinstance(filesystem, pafs.LocalFileSystem):
        filesystem.move(staged, target)
    else:
        pafs.copy_files(staged, target, source_filesystem=filesystem, destination_filesystem=filesystem)


def _sources(filesystem: pafs.FileSystem, documents: str) -> pa.Table | None:
    """Each document's (source_id, file_path, line), read from the written table's columns only; None: no table."""
    if filesystem.get_file_info(documents).type != pafs.FileType.Directory:
        return None
    parts = [
        info.path
        for info in filesystem.get_file_info(pafs.FileSelector(documents, recursive=True))
        if info.path.endswith(".parquet")
    ]
    if not parts:
        return None
    dataset = pads.dataset(parts, filesystem=filesystem, format="parquet", schema=DOCUMENTS_SCHEMA)
    return dataset.to_table(columns=["source_id", "file_path", "line"])


def _duplicate_id(sources: pa.Table | None) -> str | None:
    """A message naming an id that two sources gave, with both, or `None`."""
    if sources is None or sources.num_rows == 0:
        return None
    distinct = sources.group_by(["source_id", "file_path", "line"]).aggregate([])
    counts = distinct.group_by("source_id").aggregate([("file_path", "count")])
    repeated = counts.filter(pc.greater(counts["file_path_count"], 1))
    if repeated.num_rows == 0:
        return None
    doc_id = repeated["source_id"][0].as_py()
    rows = distinct.filter(pc.equal(distinct["source_id"], doc_id))
    rows = rows.sort_by([("file_path", "ascending"), ("line", "ascending")])
    first, second = [where(row) for row in rows.to_pylist()[:2]]
    return f"Two documents have the id {doc_id!r}: {first} and {second}."


def where(row: dict) -> str:
    """A report row's or a document's source, for messages: its file, and its line where it has one."""
    return row["file_path" if "file_path" in row else "path"] + ("" if row["line"] is None else f" line {row['line']}")


def _read_report(filesystem: pafs.FileSystem, folder: str) -> pa.Table:
    parts = sorted(
        info.path for info in filesystem.get_file_info(pafs.FileSelector(folder)) if info.path.endswith(".parquet")
    )
    if not parts:
        return REPORT_SCHEMA.empty_table()
    table = pads.dataset(parts, filesystem=filesystem, format="parquet", schema=REPORT_SCHEMA).to_table()
    return table.sort_by([("path", "ascending"), ("line", "ascending")])


def _manifest(
    folder: InputFolder,
    sources: pa.Table | None,
    report: pa.Table,
    settings: IngestSettings,
    cleaner: CleanerSettings,
    split: SplitSettings,
) -> dict[str, Any]:
    paths = folder.paths
    converted = set() if sources is None else set(sources["file_path"].to_pylist())
    source_ids = 0 if sources is None else len(set(sources["source_id"].to_pylist()))
    rejected = sorted(set(paths) - converted)
    reported_files = set(report["path"].to_pylist())
    return {
        "input": redact(folder.location),
        "files": len(paths),
        "files_converted": len(converted),
        "files_rejected": len(rejected),
        "entries_skipped": len(folder.skipped),
        "reconciles": len(paths) == len(converted) + len(rejected) and set(rejected) <= reported_files,
        "documents": source_ids,
        "rows_written": 0 if sources is None else sources.num_rows,
        "report_rows": report.num_rows,
        "report_rows_for_files_converted": sum(1 for path in report["path"].to_pylist() if path in converted),
        "settings": {**settings.as_dict(), "cleaner": cleaner.as_dict(), "split": asdict(split)},
    }


__all__ = [
    "DOCUMENTS_DIR", "MANIFEST_FILE", "REPORT_FILE", "STAGING_DIR", "WRITTEN", "IngestError", "ingest", "plan_tasks",
    "where",
]  # fmt: skip
