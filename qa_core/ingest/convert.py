"""
A file into documents, in this process: the converter for each extension, the ids, and the report of what could not
be converted. `qa_core.ingest.files` converts files and folders within their time and memory limits, in the converter
process where a limit needs one.

Usage example:
```python
result = convert_in_process("corpus/", "notes/page.html")
for row in result.report:
    print(row.path, row.line, row.reason)
```
"""

import io
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import PurePosixPath
from typing import BinaryIO

from qa_core.document import Document
from qa_core.ingest.limits import ConversionOptions, too_large, utf8_size_over
from qa_core.ingest.pdf import pdf_utf8
from qa_core.ingest.report import BadInput, DuplicateIdError, ReportRow
from qa_core.ingest.rows import RowColumns, convert_csv, convert_jsonl
from qa_core.ingest.sources import WIDE_BOMS, base_meta, file_id, open_file
from qa_core.ingest.text import convert_markdown, convert_text
from qa_core.ingest.utf8 import decode
from qa_core.ingest.web import convert_html
from qa_core.ingest.word import convert_docx

# Extension (lower case) -> format name, as recorded in `meta["format"]`.
FORMATS = {
    ".txt": "txt",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
    ".jsonl": "jsonl",
    ".csv": "csv",
}

# Formats whose file is one document: (bytes, options) -> (text, format-specific meta).
_FILE_CONVERTERS: dict[str, Callable[[bytes, ConversionOptions], tuple[str, dict]]] = {
    "txt": convert_text,
    "markdown": convert_markdown,
    "html": convert_html,
    "docx": convert_docx,
}
# Formats whose file is one document, read from the open file as the converter needs it (a large PDF never whole
# in memory): seekable binary stream -> (text as UTF-8 (`utf8.Utf8Buffer`'s view), never blank; format-specific
# meta, `pages` among it); the converter stops reading past `max_document_bytes` of text.
_STREAM_CONVERTERS: dict[str, Callable[[BinaryIO, int | None], tuple[memoryview, dict]]] = {"pdf": pdf_utf8}
# Formats whose file holds one document per row, read from the open file line by line.
_ROW_CONVERTERS = {"jsonl": convert_jsonl, "csv": convert_csv}


@dataclass
class Utf8Document:
    """
    A document whose text stays UTF-8, as its converter wrote it (see `convert_in_process`'s `utf8_above`): a large
    file's text, for a caller that stores it as it is, so that it never exists as a `str` too.

    :param id: The document's id.
    :param content: Its text as UTF-8 (`utf8.Utf8Buffer`'s view: lone surrogates as "surrogatepass" writes them).
    :param meta: Its meta, as a `Document`'s.
    """

    id: str
    content: memoryview
    meta: dict


@dataclass
class Converted:
    """
    What some files gave.

    :param documents: The documents, file by file in the order given, rows in file order (a `Utf8Document` for a
        large file, where asked for).
    :param report: One row per file, JSONL line or CSV record that gave no document.
    :param files: The files read (relative paths).
    """

    documents: list[Document | Utf8Document] = field(default_factory=list)
    report: list[ReportRow] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    def extend(self, other: "Converted") -> None:
        self.documents += other.documents
        self.report += other.report
        self.files += other.files


# The libraries the converters and the sentence splitter import (the `files` extra), by import name.
LIBRARIES = (
    "pypdf", "docx", "trafilatura", "lxml_html_clean", "markdown_it", "mdit_plain", "charset_normalizer", "nltk",
    "punkt",
)  # fmt: skip


def missing_libraries() -> list[str]:
    """The libraries of the `files` extra that are not installed (import names)."""
    from importlib.util import find_spec

    return [name for name in LIBRARIES if find_spec(name) is None]


def file_format(relative_path: str) -> str | None:
    """The format of a file by its extension (case-insensitive), or `None` for an unknown one."""
    return FORMATS.get(PurePosixPath(relative_path).suffix.lower())


# Opens a file by its path relative to the input root, for reading bytes, seekable; raises `BadInput` when it cannot.
Opener = Callable[[str], BinaryIO]


def convert_in_process(
    root: str,
    relative_path: str,
    columns: RowColumns | None = None,
    options: ConversionOptions | None = None,
    open_input: Opener | None = None,
    utf8_above: int | None = None,
) -> Converted:
    """
    One file's documents, converted in this process, or the report rows saying why it gave none (never an exception
    for bad input).

    Each document's meta has `file_path` (relative to `root`), `format`, `size_bytes`, `pages` (form feeds + 1,
    the PDF's page count for a PDF), `encoding` and `encoding_confidence` for text formats, and the format's own
    keys (see each converter).

    :param root: The input folder.
    :param relative_path: The file, relative to `root`, POSIX separators.
    :param columns: The content and id columns of JSONL and CSV files.
    :param options: The encoding and size limits (`limits.ConversionOptions`); its time and memory limits are not
        applied here (`files.convert_file` applies them, converting in the converter process). Default: no limits.
    :param open_input: What opens the file (a folder on another filesystem); default: `root` is a local folder.
    :param utf8_above: A file of a format converted from the open file (PDF) larger than this many bytes gives a
        `Utf8Document` (its text never decoded); `None`: always a `Document`.
    :returns: The file's documents and report rows.
    :raises MemoryError: When the file needs more memory than this process has.
    """
    options = options or ConversionOptions()
    result = Converted(files=[relative_path])
    opener = open_input or partial(open_file, root, follow_symlinks=options.follow_symlinks)
    try:
        _convert(relative_path, columns, result, opener, utf8_above, options)
    except BadInput as error:
        if isinstance(error.__cause__, MemoryError):  # a library's error caught as a broken file's
            raise error.__cause__ from None
        result.documents, result.report = [], [ReportRow(relative_path, None, str(error))]
    return result


def _convert(
    relative_path: str,
    columns: RowColumns | None,
    result: Converted,
    open_input: Opener,
    utf8_above: int | None,
    options: ConversionOptions,
) -> None:
    """Fills `result` with the file's documents and its rows' report rows; raises `BadInput` for the whole file."""
    fmt = file_format(relative_path)
    if fmt is None:
        raise BadInput(f"unknown file extension (known: {', '.join(sorted(FORMATS))})")
    limit = options.max_document_bytes
    with open_input(relative_path) as stream:
        size = _size(stream)
        if not size:
            raise BadInput("empty file")
        meta = base_meta(relative_path, fmt, size)
        if fmt in _ROW_CONVERTERS:
            columns = columns or RowColumns()
            documents, report = _ROW_CONVERTERS[fmt](stream, relative_path, meta, columns, options.encoding)
            for doc in documents:
                over = utf8_size_over(doc.content, limit)
                if over is None:
                    result.documents.append(doc)
                else:
                    report.append(ReportRow(relative_path, doc.meta["line"], too_large(over, limit)))
            result.report += sorted(report, key=lambda row: row.line)
            if not documents and not report:
                raise BadInput("no rows: the file holds only blank lines or a header")
        elif fmt in _STREAM_CONVERTERS:
            utf8, format_meta = _STREAM_CONVERTERS[fmt](stream, limit)
            if utf8_above is not None and size > utf8_above:
                meta = {**meta, **format_meta}
                result.documents.append(Utf8Document(file_id(relative_path), utf8, meta))
            else:
                _add_document(result, relative_path, meta, decode(utf8), format_meta, limit)
        else:
            data = _read(stream, _read_limit(fmt, options))
            _add_document(result, relative_path, meta, *_FILE_CONVERTERS[fmt](data, options), limit)


def _read_limit(fmt: str, options: ConversionOptions) -> int | None:
    """
    The bytes of a file read whole that are worth reading: a text file's UTF-8 is at least as long as its bytes (in
    UTF-8 or any single-byte encoding), so past `max_document_bytes` it is not read on (`_read`).
    """
    return options.max_document_bytes if fmt == "txt" else None


def _add_document(
    result: Converted, relative_path: str, meta: dict, text: str, format_meta: dict, limit: int | None
) -> None:
    """The file's document (its text, `meta` and the converter's own meta), unless its text is blank or too large."""
    if not text or text.isspace():  # neither copies a large text, as `strip` would
        raise BadInput("no text: the file converts to blank text")
    over = utf8_size_over(text, limit)
    if over is not None:
        raise BadInput(too_large(over, limit))
    meta = {**meta, "pages": text.count("\f") + 1, **format_meta}
    result.documents.append(Document(content=text, id=file_id(relative_path), meta=meta))


def _size(stream: BinaryIO) -> int:
    """The open file's size in bytes, its position left at the start."""
    try:
        size = stream.seek(0, io.SEEK_END)
        stream.seek(0)
    except OSError as error:
        raise BadInput(f"cannot read the file: {error.strerror or error}") from error
    return size


def _read(stream: BinaryIO, limit: int | None = None) -> bytes:
    """
    The open file's bytes; `BadInput` when they cannot be read, or when there are more than `limit` (only
    `limit + 1` are read: the rest of the file is not), unless they start with a UTF-16 or UTF-32 byte order mark
    (whose text may take fewer bytes as UTF-8: read whole, its text checked).
    """
    try:
        data = stream.read() if limit is None else stream.read(limit + 1)
        if limit is not None and len(data) > limit and data.startswith(WIDE_BOMS):  # UTF-16/32: fewer UTF-8 bytes
            data += stream.read()
            limit = None
    except OSError as error:
        raise BadInput(f"cannot read the file: {error.strerror or error}") from error
    if limit is not None and len(data) > limit:
        raise BadInput(
            f"text over the limit of {limit:,} bytes for one document (--max-document-bytes): the rest of the "
            "file not read"
        )
    return data


def source_of(doc: Document) -> str:
    """Where a document came from, for messages: its file, and its line for a JSONL or CSV row."""
    line = doc.meta.get("line")
    return doc.meta["file_path"] if line is None else f"{doc.meta['file_path']} line {line}"


def check_unique_ids(ids_and_sources: Iterable[tuple[str, str]]) -> None:
    """
    Checks that no id is given twice.

    :param ids_and_sources: (id, where it came from) pairs.
    :raises DuplicateIdError: Naming the id and both of its sources.
    """
    seen: dict[str, str] = {}
    for doc_id, source in ids_and_sources:
        if doc_id in seen:
            raise DuplicateIdError(f"Two documents have the id {doc_id!r}: {seen[doc_id]} and {source}.")
        seen[doc_id] = source


__all__ = [
    "FORMATS",
    "LIBRARIES",
    "Converted",
    "Opener",
    "Utf8Document",
    "check_unique_ids",
    "convert_in_process",
    "file_format",
    "missing_libraries",
]
