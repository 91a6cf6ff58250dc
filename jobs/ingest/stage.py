"""
The conversion stage, what runs in Ray's workers (or in the bulk job's process, on its in-process engine): a batch
of file paths in, a batch of document rows out (converted, cleaned and split with `qa_core.ingest`), the batch's
report rows written beside the output as one Parquet file per batch, named by the batch's paths, so that a retried
task replaces its file instead of adding to it. The input folder and the report folder are local paths or URIs.
"""

import codecs
import hashlib
import io
import json
import os
import uuid
from dataclasses import dataclass, field
from functools import partial

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from jobs.storage import resolve_path
from jobs.table_schema import described_schema
from qa_core.ingest import BadInput, CleanerSettings, RowColumns, Utf8Document, clean_documents, convert_files
from qa_core.ingest.limits import ConversionOptions
from qa_core.ingest.sources import ListingOpener
from qa_core.retrieval.splitter import split_documents
from qa_core.settings import Settings, at_least, setting

# The documents table the stage writes: the bulk job's contract (`id`, `content`, `page_number`) and the meta a
# user filters on as columns; `meta` holds the whole meta as JSON (a converter's own keys, a row's other columns).
DOCUMENTS_SCHEMA, DOCUMENTS_DESCRIPTIONS = described_schema(
    [
        (
            "id",
            pa.string(),
            "the document's id: a file's path relative to the input folder; a JSONL line's or CSV record's id "
            "column, else PATH#LINE; a passage's id as Haystack's DocumentSplitter gives it",
        ),
        ("content", pa.string(), "the document's text (a PDF's pages separated by form feeds)"),
        ("page_number", pa.int64(), "the page the document (or passage) starts on, from 1"),
        ("source_id", pa.string(), "the id of the document a passage was split from (a whole document's own id)"),
        ("file_path", pa.string(), "the file the document came from, relative to the input folder"),
        ("line", pa.int64(), "the 1-based line of a JSONL line or CSV record; null for a whole file"),
        ("format", pa.string(), "the file's format: txt, markdown, html, pdf, docx, jsonl or csv"),
        ("pages", pa.int64(), "pages of the text: form feeds + 1 (a PDF's page count)"),
        ("size_bytes", pa.int64(), "the file's size in bytes"),
        ("encoding", pa.string(), "the encoding a text format was decoded from; null for PDF, DOCX and HTML"),
        ("split_id", pa.int64(), "a passage's position in its source document, from 0; null unless split"),
        (
            "split_idx_start",
            pa.int64(),
            "character offset of a passage's start in its source document; null unless split",
        ),
        (
            "meta",
            pa.string(),
            "the whole meta as JSON: these columns' values, a converter's own keys, a row's other columns",
        ),
    ]
)
# How the documents table is written (`write_parquet`'s Parquet options): no dictionary and no statistics for
# `content`. Texts rarely repeat and a long text's min and max are not stored, yet both copy every text while its
# file is written: measured on one 40 MB text, 333 MB above the table by default, 90 MB without them.
PARQUET_OPTIONS = {
    "use_dictionary": [name for name in DOCUMENTS_SCHEMA.names if name != "content"],
    "write_statistics": [name for name in DOCUMENTS_SCHEMA.names if name != "content"],
}
REPORT_SCHEMA, REPORT_DESCRIPTIONS = described_schema(
    [
        ("path", pa.string(), "the file that gave no document (or the file of the row), relative to the input folder"),
        ("line", pa.int64(), "the 1-based line of a JSONL line or CSV record that gave no document; null for a file"),
        ("reason", pa.string(), "what was wrong, in words to act on"),
    ]
)


@dataclass(frozen=True)
class IngestSettings(Settings):
    """Ingestion: how a folder of files becomes documents (`python -m jobs.ingest`, or the bulk job's --documents)."""

    strict: bool = setting(
        False, "any report row (a file or row that gave no document) stops the run with exit status 2"
    )
    content_column: str = setting("content", "JSONL/CSV column holding a document's text")
    id_column: str = setting("id", "JSONL/CSV column holding a document's id, where a row has one")
    files_per_task: int = setting(
        256, "most files one conversion task converts (fewer in a small folder: 4 tasks per CPU)"
    )
    bytes_per_task: int = setting(64 * 2**20, "most bytes of files one conversion task converts (a larger file: alone)")
    cpus_per_task: float = setting(1.0, "CPUs a conversion task reserves")
    timeout_per_file: float = setting(
        300.0, "seconds one file's conversion may take; past them it is killed (0: no limit)"
    )
    memory_per_file: int = setting(3 * 2**30, "address space of the converter process, bytes (RLIMIT_AS; 0: no limit)")
    max_document_bytes: int = setting(
        256 * 2**20, "most bytes of UTF-8 text in one document (file, JSONL line, CSV record)"
    )
    max_unzipped_bytes: int = setting(
        512 * 2**20, "most bytes a DOCX may decompress to, all its parts together (zip bombs)"
    )
    encoding: str | None = setting(
        None, "the .txt/.md/.jsonl/.csv files' encoding (e.g. cp1252), not UTF-8 then detection"
    )
    follow_symlinks: bool = setting(
        False, "follow symbolic links to targets inside the input folder (else: report rows)"
    )

    def problems(self) -> list[str]:
        problems = at_least("files_per_task", self.files_per_task, 1) + at_least(
            "bytes_per_task", self.bytes_per_task, 1
        )
        problems += at_least("timeout_per_file", self.timeout_per_file, 0)
        problems += at_least("memory_per_file", self.memory_per_file, 0)
        problems += at_least("max_document_bytes", self.max_document_bytes, 1)
        problems += at_least("max_unzipped_bytes", self.max_unzipped_bytes, 1)
        if not self.cpus_per_task > 0:
            problems.append(f"cpus_per_task must be > 0, not {self.cpus_per_task}")
        if self.encoding is not None:
            try:
                codecs.lookup(self.encoding)
            except LookupError:
                problems.append(f"encoding {self.encoding!r} is not an encoding Python knows")
        return problems

    def conversion(self) -> ConversionOptions:
        """What each file's conversion may do (`qa_core.ingest.limits`)."""
        return ConversionOptions(
            encoding=self.encoding,
            timeout_s=self.timeout_per_file or None,
            memory_bytes=self.memory_per_file or None,
            max_document_bytes=self.max_document_bytes,
            max_unzipped_bytes=self.max_unzipped_bytes,
            follow_symlinks=self.follow_symlinks,
        )

    @property
    def columns(self) -> RowColumns:
        """The JSONL/CSV columns to read."""
        return RowColumns(self.content_column, self.id_column)


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
    Everything a conversion task needs: where the files are and where report rows go (local paths or URIs), the
    encoding and limits of each file's conversion (`options`), the size above which a PDF's text goes to its row
    as UTF-8, never a `str` (`utf8_above` bytes of file, or `None`; only where nothing cleans or splits it), and
    how to read rows, clean and split.
    """

    root: str
    report_dir: str
    options: ConversionOptions = field(default_factory=ConversionOptions)
    utf8_above: int | None = None
    columns: RowColumns = field(default_factory=RowColumns)
    cleaner: CleanerSettings = field(default_factory=CleanerSettings)
    split: SplitSettings = field(default_factory=SplitSettings)


def convert_batch(batch: pa.Table, settings: StageSettings) -> pa.Table:
    """
    `map_batches` function (pyarrow batches): a batch with a `path` column (relative to `settings.root`; for a
    local folder, a `raw_path` column too: the paths' own bytes, `qa_core.ingest.listing`) -> its documents' rows
    (`DOCUMENTS_SCHEMA`), converted, cleaned, then split; its report rows go to `settings.report_dir`.
    """
    paths = batch["path"].to_pylist()
    filesystem, root = resolve_path(settings.root)
    # A local folder is read by qa_core's own opener, by the paths' bytes; another filesystem's files through pyarrow.
    if isinstance(filesystem, pafs.LocalFileSystem):
        raw = batch["raw_path"].to_pylist() if "raw_path" in batch.column_names else [os.fsencode(p) for p in paths]
        opener = ListingOpener(root, dict(zip(paths, raw, strict=True)), settings.options.follow_symlinks)
    else:
        opener = partial(_open_file, filesystem, root)
    split = settings.split
    whole = not settings.cleaner.active and split.split_length is None  # the texts go to the rows as they are
    utf8_above = settings.utf8_above if whole else None
    converted = convert_files(root, paths, settings.columns, settings.options, opener, utf8_above)
    write_report(settings.report_dir, paths, converted.report)
    documents = converted.documents
    if settings.cleaner.active:
        documents = clean_documents(documents, settings.cleaner)
    for doc in documents:
        doc.meta["source_id"] = doc.id  # the passages' `source_id`, as the splitter sets it
    if split.split_length is not None:
        documents = split_documents(
            documents, split.split_length, split.split_overlap, split.split_threshold, split.split_by
        )
    return _rows(documents)


def _open_file(filesystem: pafs.FileSystem, root: str, relative_path: str) -> io.BytesIO:
    """
    A file from a folder on any filesystem, read whole into memory (pypdf's many small reads would each be a
    request to an object store); `BadInput` when it cannot be read.
    """
    try:
        with filesystem.open_input_stream(f"{root.rstrip('/')}/{relative_path}") as stream:
            return io.BytesIO(stream.read())
    except OSError as error:
        raise BadInput(f"cannot read the file: {error}") from error


def write_report(report_dir: str, paths: list[str], rows) -> None:
    """The batch's report rows as one Parquet file named by its paths, written atomically (a retry replaces it)."""
    if not rows:
        return
    filesystem, folder = resolve_path(report_dir)
    name = hashlib.sha256("\n".join(paths).encode("utf-8")).hexdigest()[:32] + ".parquet"
    table = pa.Table.from_pylist([row.to_dict() for row in rows], schema=REPORT_SCHEMA)
    target = f"{folder.rstrip('/')}/{name}"
    staging = f"{target}.{uuid.uuid4().hex}.tmp"
    with filesystem.open_output_stream(staging) as stream:
        pq.write_table(table, stream)
    filesystem.move(staging, target)


def _rows(documents) -> pa.Table:
    """
    The documents as `DOCUMENTS_SCHEMA` rows; a whole document's `page_number` is 1 (it starts on page 1). A
    `Utf8Document`'s text becomes its row's `content` without a copy (its own chunk of the column).
    """
    columns = {name: [] for name in DOCUMENTS_SCHEMA.names if name != "content"}
    chunks, texts = [], []
    for doc in documents:
        if isinstance(doc, Utf8Document):
            chunks += [pa.array(texts, pa.string()), _utf8_array(doc)] if texts else [_utf8_array(doc)]
            texts = []
        else:
            texts.append(doc.content)
        meta = doc.meta
        values = {
            "id": doc.id,
            "page_number": meta.get("page_number", 1),
            "source_id": meta["source_id"],
            "meta": json.dumps(meta, ensure_ascii=False, default=str, sort_keys=True),
        }
        for name in columns:
            columns[name].append(values[name] if name in values else meta.get(name))
    if texts or not chunks:
        chunks.append(pa.array(texts, pa.string()))
    columns["content"] = pa.chunked_array(chunks, pa.string())
    return pa.table(columns, schema=DOCUMENTS_SCHEMA)


def _utf8_array(doc: Utf8Document) -> pa.Array:
    """A one-row string array on the document's UTF-8 buffer (no copy), checked valid UTF-8 as Arrow needs it."""
    size = len(doc.content)
    if size >= 2**31:
        raise ValueError(f"{doc.meta['file_path']}: its text is {size:,} bytes of UTF-8, over a row's 2 GiB")
    offsets = pa.array([0, size], pa.int32()).buffers()[1]
    array = pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(doc.content)])
    try:
        array.validate(full=True)
    except pa.ArrowInvalid as error:  # lone surrogates from a broken font map: a `str` would not convert either
        raise ValueError(f"{doc.meta['file_path']}: its text is not valid UTF-8 ({error})") from error
    return array


__all__ = [
    "DOCUMENTS_SCHEMA", "PARQUET_OPTIONS", "REPORT_SCHEMA", "IngestSettings", "SplitSettings", "StageSettings",
    "convert_batch", "write_report",
]  # fmt: skip
