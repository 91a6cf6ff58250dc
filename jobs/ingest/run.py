"""
One ingestion, on either of the bulk job's engines (Ray Data, or its in-process dataset): an input folder's files
converted by the stage (`jobs.ingest.stage.convert_batch`) into an output folder, local or at a URI:
`documents/` (the bulk job's documents table), `report.parquet` (path, line, reason: every file or row that gave no
document), `files.parquet` (each file's size, modification time and content hash, as converted) and
`manifest.json` (counts that reconcile: files in = files converted + files rejected; and what changed).

A folder that holds an earlier ingestion's output (made with the same conversion settings: `check_earlier`) is
updated: only the files new or changed since are converted (`jobs.ingest.changes`); the others' rows are kept as
they are, the deleted files' dropped; the table is the one an ingestion into an empty folder would write.

Everything is written under `_staging/` first: the tasks' parts (kept until the output is published, so that a
run killed midway resumes with the parts its tasks finished), then the new table, report, records and manifest,
then a marker saying they are complete; only then are they moved into place (`finish_publish`, which the next run
also calls, so that a publication killed midway is finished). Until then the earlier output is left as it was.
Used by `python -m jobs.ingest` and by the bulk job for a `--documents` folder of files.
"""

import dataclasses
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

from jobs.ingest.changes import CHANGED, DELETED, NEW, UNCHANGED, Settled, read_records, settle
from jobs.ingest.folder import InputFolder
from jobs.ingest.merge import RowSource, write_merged
from jobs.ingest.stage import (
    DOCUMENTS_SCHEMA,
    RECORD_SCHEMA,
    REPORT_SCHEMA,
    SCHEDULING_SETTINGS,
    IngestSettings,
    Part,
    SplitSettings,
    StageSettings,
    convert_batch,
    read_part,
)
from jobs.storage import redact, resolve_path
from qa_core.ingest import CleanerSettings, ReportRow

DOCUMENTS_DIR = "documents"
REPORT_FILE = "report.parquet"
RECORDS_FILE = "files.parquet"
MANIFEST_FILE = "manifest.json"
# Where the tasks' parts, then the new output, are written before the output is published.
STAGING_DIR = "_staging"
PARTS_DIR = "parts"  # in STAGING_DIR: the conversion tasks' parts
SETTINGS_FILE = "settings.json"  # in STAGING_DIR: the conversion settings the parts were made with
PUBLISH_FILE = "publish.json"  # in STAGING_DIR: the staged output is complete, and whether it has documents
WRITTEN = "written"  # the manifest's status when the documents were written
# Conversion tasks per task slot (CPUs / cpus_per_task) a folder is cut into, at most: enough for the slots to
# share the work evenly, few enough that small files do not pay a task each.
TASKS_PER_SLOT = 4


class IngestError(Exception):
    """Unusable input or options, or a corpus that cannot be written; the message names the file or option."""


def conversion_settings(settings: IngestSettings, cleaner: CleanerSettings, split: SplitSettings) -> dict[str, Any]:
    """The settings an output's rows depend on, by name, as the manifest records them (JSON's values)."""
    ingest = {name: value for name, value in settings.as_dict().items() if name not in SCHEDULING_SETTINGS}
    return json.loads(json.dumps({**ingest, "cleaner": cleaner.as_dict(), "split": asdict(split)}))


def check_earlier(output: str, settings: IngestSettings, cleaner: CleanerSettings, split: SplitSettings) -> None:
    """
    Checks that an ingestion with these settings may update `output` (nothing to check where it holds no earlier
    output with documents).

    :raises IngestError: Naming the first conversion setting that differs from the earlier output's, or an
        earlier output without file records.
    """
    filesystem, root = resolve_path(output)
    manifest = _read_json(filesystem, f"{root.rstrip('/')}/{MANIFEST_FILE}")
    if manifest is None or manifest.get("status") != WRITTEN:
        return
    shown = redact(output)
    if filesystem.get_file_info(f"{root.rstrip('/')}/{RECORDS_FILE}").type != pafs.FileType.File:
        raise IngestError(
            f"--output {shown}: an earlier ingestion's output without {RECORDS_FILE} (each file's size, time and "
            "hash), which an update needs; pass --overwrite to convert every file again."
        )
    recorded = manifest.get("settings", {})
    for group, name, value in _flat(conversion_settings(settings, cleaner, split)):
        earlier = (recorded.get(group) or {}).get(name) if group else recorded.get(name)
        if earlier != value:
            flag = "--" + name.replace("_", "-")
            raise IngestError(
                f"--output {shown}: made with {flag} {_shown(earlier)}, not {_shown(value)}; pass --overwrite to "
                "convert every file again, or choose another --output."
            )


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
    Converts `folder`'s files into `output` with `engine` (`jobs.engines`: its Ray, already started, or this
    process), whose `cpus` the tasks share (`plan_tasks`). `output` is empty, or holds an earlier ingestion's
    output made with the same conversion settings (`check_earlier`), which is updated: only new and changed files
    are converted. `timings` (seconds by name, e.g. the Ray start before it) join the manifest's own.

    :returns: The manifest (also written as `manifest.json`); its `status` is `written`, or says why the documents
        were not (`strict` and report rows, or two documents with one id: then no documents are left in `output`).
    :raises IngestError: When two documents have one id (the manifest is written first), naming both sources.
    """
    started = time.perf_counter()
    filesystem, root = resolve_path(output)
    root = root.rstrip("/")
    staging = f"{root}/{STAGING_DIR}"
    finish_publish(output)  # a publication a killed run left half-done
    earlier = _earlier_records(filesystem, root)
    _prepare_staging(filesystem, staging, conversion_settings(settings, cleaner, split))
    settled = settle(folder, earlier, _read_parts(filesystem, f"{staging}/{PARTS_DIR}"))
    if settled.pending:
        stage = StageSettings(
            folder.location,
            f"{output.rstrip('/')}/{STAGING_DIR}/{PARTS_DIR}",
            settings.conversion(),
            settings.bytes_per_task,  # a larger file is alone in its task (`plan_tasks`): its text goes as UTF-8
            settings.columns,
            cleaner,
            split,
        )
        _convert(folder, settled, stage, settings, engine, cpus)
        settled = settle(folder, earlier, _read_parts(filesystem, f"{staging}/{PARTS_DIR}"))
        if settled.pending:  # a task's part was not written, or was deleted meanwhile
            raise IngestError(f"no conversion of {folder.paths[settled.pending[0][0]]} was written; run again.")
    convert_s = time.perf_counter() - started
    positions = {path: position for position, path in enumerate(folder.paths)}
    sources = [RowSource(_parquet_files(filesystem, f"{root}/{DOCUMENTS_DIR}"), _positions(settled.earlier, positions))]
    sources += [RowSource([part.path], _positions(files, positions)) for part, files in settled.parts.values()]
    write_merged(filesystem, sources, f"{staging}/{DOCUMENTS_DIR}")
    report = _report(filesystem, root, folder, settled)
    _write_table(filesystem, f"{staging}/{REPORT_FILE}", report)
    _write_table(filesystem, f"{staging}/{RECORDS_FILE}", settled.records_table())
    written = _sources(filesystem, f"{staging}/{DOCUMENTS_DIR}")
    manifest = _manifest(folder, written, report, settled, settings, cleaner, split)
    manifest["timings"] = {
        **(timings or {}),
        "convert_s": round(convert_s, 3),
        "write_s": round(time.perf_counter() - started - convert_s, 3),
    }
    duplicate = _duplicate_id(written)
    if duplicate:
        manifest["status"] = "refused: duplicate id"
        manifest["error"] = duplicate
    elif settings.strict and report.num_rows:
        manifest["status"] = "refused: strict and report rows"
    else:
        manifest["status"] = WRITTEN
    _write_bytes(filesystem, f"{staging}/{MANIFEST_FILE}", json.dumps(manifest, indent=2) + "\n")
    _write_bytes(filesystem, f"{staging}/{PUBLISH_FILE}", json.dumps({"documents": manifest["status"] == WRITTEN}))
    finish_publish(output)
    if duplicate:
        raise IngestError(duplicate)
    return manifest


def finish_publish(output: str) -> None:
    """
    Moves a complete staged output (one with its marker) into `output`'s place, the manifest last: the documents,
    report and records, or, for a refused run, the report alone (the documents and records are deleted; the
    staged parts are kept, for the next run). Each step can be repeated, so a publication killed midway is finished
    by the next call. Nothing to do without a marker.
    """
    filesystem, root = resolve_path(output)
    staging = f"{root.rstrip('/')}/{STAGING_DIR}"
    marker = _read_json(filesystem, f"{staging}/{PUBLISH_FILE}")
    if marker is None:
        return
    published = (DOCUMENTS_DIR, RECORDS_FILE) if marker["documents"] else ()
    for name in (DOCUMENTS_DIR, RECORDS_FILE):
        if name not in published:
            _delete(filesystem, f"{staging}/{name}")
            _delete(filesystem, f"{root.rstrip('/')}/{name}")
    for name in (*published, REPORT_FILE, MANIFEST_FILE):
        _replace(filesystem, f"{staging}/{name}", f"{root.rstrip('/')}/{name}")
    if marker["documents"]:
        filesystem.delete_dir(staging)
    else:
        filesystem.delete_file(f"{staging}/{PUBLISH_FILE}")


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


def _convert(
    folder: InputFolder, settled: Settled, stage: StageSettings, settings: IngestSettings, engine: Any, cpus: float
) -> None:
    """The pending files converted by tasks on `engine`, each writing its part."""
    known = {folder.paths[position]: sha256 for position, sha256 in settled.pending}
    pending = [position for position, _ in settled.pending]
    todo = dataclasses.replace(
        folder,
        paths=[folder.paths[i] for i in pending],
        sizes=[folder.sizes[i] for i in pending],
        mtimes_ns=[folder.mtimes_ns[i] for i in pending],
        raw_paths=None if folder.raw_paths is None else [folder.raw_paths[i] for i in pending],
    )
    listed = {
        path: (size, mtime, None if todo.raw_paths is None else todo.raw_paths[i])
        for i, (path, size, mtime) in enumerate(zip(todo.paths, todo.sizes, todo.mtimes_ns, strict=True))
    }
    tasks = plan_tasks(todo, settings, max(1, math.floor(cpus / settings.cpus_per_task)))
    engine.from_arrow([_task_table(paths, listed, known) for paths in tasks]).map_batches(
        convert_batch,
        fn_kwargs={"settings": stage},
        batch_size=None,  # a block is a task's files
        batch_format="pyarrow",
        num_cpus=settings.cpus_per_task,
    ).materialize()


def _task_table(paths: list[str], listed: dict[str, tuple], known: dict[str, str | None]) -> pa.Table:
    """
    A task's files (`RECORD_SCHEMA`: `sha256` their earlier conversion's), and for a local folder `raw_path`
    (the paths' bytes, to open them by).
    """
    columns = {
        "path": paths,
        "size": [listed[path][0] for path in paths],
        "mtime_ns": [listed[path][1] for path in paths],
        "sha256": [known[path] for path in paths],
    }
    table = pa.table(columns, schema=RECORD_SCHEMA)
    if listed[paths[0]][2] is None:
        return table
    return table.append_column("raw_path", pa.array([listed[path][2] for path in paths], pa.binary()))


def _earlier_records(filesystem: pafs.FileSystem, root: str) -> dict:
    """The records of the earlier output's files (`changes.Record`s by path); none without written documents."""
    manifest = _read_json(filesystem, f"{root}/{MANIFEST_FILE}")
    records = f"{root}/{RECORDS_FILE}"
    if manifest is None or manifest.get("status") != WRITTEN:
        return {}
    if filesystem.get_file_info(records).type != pafs.FileType.File:
        return {}
    with filesystem.open_input_file(records) as file:
        return read_records(pq.read_table(file))


def _prepare_staging(filesystem: pafs.FileSystem, staging: str, conversion: dict[str, Any]) -> None:
    """
    The staging folder, ready: the parts of a killed run kept when made with `conversion` (else deleted), the rest
    of what it staged deleted.
    """
    if _read_json(filesystem, f"{staging}/{SETTINGS_FILE}") != conversion:
        _delete(filesystem, staging)
    _delete(filesystem, f"{staging}/{DOCUMENTS_DIR}")
    filesystem.create_dir(f"{staging}/{PARTS_DIR}", recursive=True)
    _write_bytes(filesystem, f"{staging}/{SETTINGS_FILE}", json.dumps(conversion))


def _read_parts(filesystem: pafs.FileSystem, folder: str) -> list[Part]:
    """The parts the conversion tasks wrote (complete ones: a part is renamed into place once written)."""
    return [read_part(filesystem, path) for path in _parquet_files(filesystem, folder)]


def _parquet_files(filesystem: pafs.FileSystem, folder: str) -> list[str]:
    """A folder's Parquet files, sorted (none where it does not exist)."""
    if filesystem.get_file_info(folder).type != pafs.FileType.Directory:
        return []
    selector = pafs.FileSelector(folder, recursive=True)
    return sorted(info.path for info in filesystem.get_file_info(selector) if info.path.endswith(".parquet"))


def _positions(paths: set[str], positions: dict[str, int]) -> dict[str, int]:
    return {path: positions[path] for path in paths}


def _report(filesystem: pafs.FileSystem, root: str, folder: InputFolder, settled: Settled) -> pa.Table:
    """
    The output's report rows: the earlier report's of the files kept, the parts' of the files converted, and the
    listing's, sorted by path and line.
    """
    rows = [row.to_dict() for row in folder.skipped]
    for part, files in settled.parts.values():
        rows += [row.to_dict() for row in part.report if row.path in files]
    table = pa.Table.from_pylist(rows, schema=REPORT_SCHEMA)
    earlier = f"{root}/{REPORT_FILE}"
    if settled.earlier and filesystem.get_file_info(earlier).type == pafs.FileType.File:
        with filesystem.open_input_file(earlier) as file:
            kept = pq.read_table(file, schema=REPORT_SCHEMA)
        kept = kept.filter(pc.is_in(kept["path"], pa.array(sorted(settled.earlier), pa.string())))
        table = pa.concat_tables([table, kept])
    return table.sort_by([("path", "ascending"), ("line", "ascending")])


def _sources(filesystem: pafs.FileSystem, documents: str) -> pa.Table:
    """Each document's (source_id, file_path, line), read from the written table's columns only."""
    parts = _parquet_files(filesystem, documents)
    dataset = pads.dataset(parts, filesystem=filesystem, format="parquet", schema=DOCUMENTS_SCHEMA)
    return dataset.to_table(columns=["source_id", "file_path", "line"])


def _duplicate_id(sources: pa.Table) -> str | None:
    """A message naming an id that two sources gave, with both, or `None`."""
    if sources.num_rows == 0:
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


def _manifest(
    folder: InputFolder,
    sources: pa.Table,
    report: pa.Table,
    settled: Settled,
    settings: IngestSettings,
    cleaner: CleanerSettings,
    split: SplitSettings,
) -> dict[str, Any]:
    paths = folder.paths
    converted = set(sources["file_path"].to_pylist())
    rejected = sorted(set(paths) - converted)
    reported_files = set(report["path"].to_pylist())
    counts = settled.counts
    return {
        "input": redact(folder.location),
        "files": len(paths),
        "files_converted": len(converted),
        "files_rejected": len(rejected),
        "entries_skipped": len(folder.skipped),
        "reconciles": len(paths) == len(converted) + len(rejected) and set(rejected) <= reported_files,
        # since the earlier output: files converted (new, changed), kept (unchanged) and dropped (deleted)
        **{f"files_{change}": counts[change] for change in (NEW, CHANGED, UNCHANGED, DELETED)},
        "documents": len(set(sources["source_id"].to_pylist())),
        "rows_written": sources.num_rows,
        "report_rows": report.num_rows,
        "report_rows_for_files_converted": sum(1 for path in report["path"].to_pylist() if path in converted),
        "settings": {**settings.as_dict(), "cleaner": cleaner.as_dict(), "split": asdict(split)},
    }


def _flat(settings: dict[str, Any]) -> list[tuple[str | None, str, Any]]:
    """(group, name, value) of each setting: `cleaner` and `split` are groups, the others are in none."""
    flat = []
    for name, value in settings.items():
        if isinstance(value, dict):
            flat += [(name, inner, inner_value) for inner, inner_value in value.items()]
        else:
            flat.append((None, name, value))
    return flat


def _shown(value: Any) -> str:
    """A setting's value in a message, as it is written on the command line."""
    return "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _read_json(filesystem: pafs.FileSystem, path: str) -> Any:
    """A JSON file's value, or None when there is no such file (or it is not JSON: written by something else)."""
    try:
        with filesystem.open_input_stream(path) as stream:
            return json.loads(stream.read().decode("utf-8"))
    except (FileNotFoundError, ValueError):
        return None


def _write_bytes(filesystem: pafs.FileSystem, path: str, text: str) -> None:
    with filesystem.open_output_stream(path) as stream:
        stream.write(text.encode("utf-8"))


def _write_table(filesystem: pafs.FileSystem, path: str, table: pa.Table) -> None:
    with filesystem.open_output_stream(path) as stream:
        pq.write_table(table, stream)


def _delete(filesystem: pafs.FileSystem, path: str) -> None:
    """A file or folder deleted, if there is one."""
    kind = filesystem.get_file_info(path).type
    if kind == pafs.FileType.Directory:
        filesystem.delete_dir(path)
    elif kind == pafs.FileType.File:
        filesystem.delete_file(path)


def _replace(filesystem: pafs.FileSystem, staged: str, target: str) -> None:
    """
    A staged file or folder moved to `target`, replacing what is there (copied, then deleted, on a filesystem
    without renames); nothing to do when it was moved already.
    """
    kind = filesystem.get_file_info(staged).type
    if kind == pafs.FileType.NotFound:
        return
    _delete(filesystem, target)
    if isinstance(filesystem, pafs.LocalFileSystem):
        filesystem.move(staged, target)
        return
    if kind == pafs.FileType.Directory:
        pafs.copy_files(staged, target, source_filesystem=filesystem, destination_filesystem=filesystem)
    else:
        filesystem.copy_file(staged, target)
    _delete(filesystem, staged)


__all__ = [
    "DOCUMENTS_DIR", "MANIFEST_FILE", "RECORDS_FILE", "REPORT_FILE", "STAGING_DIR", "WRITTEN", "IngestError",
    "check_earlier", "conversion_settings", "finish_publish", "ingest", "plan_tasks", "where",
]  # fmt: skip
