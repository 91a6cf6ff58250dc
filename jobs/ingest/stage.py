"""
The conversion stage, what runs in Ray's workers: a batch of file paths in, a batch of document rows out (converted,
cleaned and split with `qa_core.ingest`), the batch's report rows written beside the output as one Parquet file per
batch, named by the batch's paths, so that a retried task replaces its file instead of adding to it.
"""

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from qa_core.ingest import CleanerSettings, RowColumns, clean_documents, convert_files
from qa_core.retrieval.splitter import split_documents

# The documents table the stage writes: the bulk job's contract (`id`, `content`, `page_number`) and the meta a
# user filters on as columns; `meta` holds the whole meta as JSON (a converter's own keys, a row's other columns).
DOCUMENTS_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("content", pa.string()),
        ("page_number", pa.int64()),
        ("source_id", pa.string()),
        ("file_path", pa.string()),
        ("line", pa.int64()),
        ("format", pa.string()),
        ("pages", pa.int64()),
        ("size_bytes", pa.int64()),
        ("encoding", pa.string()),
        ("split_id", pa.int64()),
        ("split_idx_start", pa.int64()),
        ("meta", pa.string()),
    ]
)
REPORT_SCHEMA = pa.schema([("path", pa.string()), ("line", pa.int64()), ("reason", pa.string())])


@dataclass(frozen=True)
class SplitSettings:
    """
    How documents are split into passages (`qa_core.retrieval.split_documents`); none when `split_length` is `None`.

    :param split_by: "word", "sentence", "passage", "page" or "line".
    :param split_length: Units per passage, or `None` to keep documents whole.
    :param split_overlap: Units shared by consecutive passages.
    :param split_threshold: A trailing passage of fewer units joins the previous one.
    """

    split_by: str = "word"
    split_length: int | None = None
    split_overlap: int = 0
    split_threshold: int = 0


@dataclass(frozen=True)
class StageSettings:
    """
    Everything a conversion task needs: where the files are, how to read rows, clean and split, and how long one
    file's conversion may take (`timeout_s` seconds, or `None`).
    """

    root: str
    report_dir: str
    timeout_s: float | None = None
    columns: RowColumns = field(default_factory=RowColumns)
    cleaner: CleanerSettings = field(default_factory=CleanerSettings)
    split: SplitSettings = field(default_factory=SplitSettings)


def convert_batch(batch: dict, settings: StageSettings) -> pa.Table:
    """
    `map_batches` function: a batch with a `path` column (relative to `settings.root`) -> its documents' rows
    (`DOCUMENTS_SCHEMA`), converted, cleaned, then split; its report rows go to `settings.report_dir`.
    """
    paths = [str(path) for path in batch["path"]]
    converted = convert_files(settings.root, paths, settings.columns, settings.timeout_s)
    _write_report(settings.report_dir, paths, converted.report)
    documents = converted.documents
    if settings.cleaner.active:
        documents = clean_documents(documents, settings.cleaner)
    for doc in documents:
        doc.meta["source_id"] = doc.id  # the passages' `source_id`, as the splitter sets it
    split = settings.split
    if split.split_length is not None:
        documents = split_documents(
            documents, split.split_length, split.split_overlap, split.split_threshold, split.split_by
        )
    return _rows(documents)


def _write_report(report_dir: str, paths: list[str], rows) -> None:
    """The batch's report rows as one Parquet file named by its paths, written atomically (a retry replaces it)."""
    if not rows:
        return
    name = hashlib.sha256("\n".join(paths).encode("utf-8")).hexdigest()[:32] + ".parquet"
    table = pa.Table.from_pylist([row.to_dict() for row in rows], schema=REPORT_SCHEMA)
    target = Path(report_dir) / name
    staging = target.with_suffix(f".{os.getpid()}.tmp")
    pq.write_table(table, staging)
    os.replace(staging, target)


def _rows(documents) -> pa.Table:
    """The documents as `DOCUMENTS_SCHEMA` rows; a whole document's `page_number` is 1 (it starts on page 1)."""
    columns = {name: [] for name in DOCUMENTS_SCHEMA.names}
    for doc in documents:
        meta = doc.meta
        values = {
            "id": doc.id,
            "content": doc.content,
            "page_number": meta.get("page_number", 1),
            "source_id": meta["source_id"],
            "meta": json.dumps(meta, ensure_ascii=False, default=str, sort_keys=True),
        }
        for name in DOCUMENTS_SCHEMA.names:
            columns[name].append(values[name] if name in values else meta.get(name))
    return pa.table(columns, schema=DOCUMENTS_SCHEMA)


__all__ = ["DOCUMENTS_SCHEMA", "REPORT_SCHEMA", "SplitSettings", "StageSettings", "convert_batch"]
