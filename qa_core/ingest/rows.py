"""
JSONL and CSV files: one document per JSON line or CSV record, its text in a content column, its id from an
optional id column, every other column in its meta. A bad line or record becomes a report row; the others convert.
"""

import csv
import json
from dataclasses import dataclass
from typing import BinaryIO

from qa_core.document import Document
from qa_core.ingest.report import ReportRow
from qa_core.ingest.sources import open_text, row_id
from qa_core.ingest.text import encoding_meta


@dataclass(frozen=True)
class RowColumns:
    """
    Which columns of a JSONL or CSV file hold what.

    :param content: The column holding the document's text (required in every row).
    :param id: The column holding the document's id, used where a row has it (not null, not empty); a row without
        it gets `path#LINE`.
    """

    content: str = "content"
    id: str = "id"


def convert_jsonl(
    stream: BinaryIO, path: str, meta: dict, columns: RowColumns, encoding: str | None = None
) -> tuple[list[Document], list[ReportRow]]:
    """
    One document per line holding a JSON object, as Haystack's `JSONConverter(content_key=..., extra_meta_fields="*")`
    converts each line: `meta` plus the object's other fields and `line` (1-based). Blank lines are skipped.

    :param stream: The file, open for reading bytes (decoded as `utf-8-sig` line by line, or whole in the encoding
        charset-normalizer detects: `sources.open_text`).
    :param path: The file's path relative to the input root, for ids and report rows.
    :param meta: The meta every document of the file starts with.
    :param columns: The content and id columns.
    :param encoding: The encoding the user gave (`--encoding`), used instead of UTF-8 then detection.
    :returns: The documents and the report rows of the lines that gave none.
    :raises BadInput: For binary data, or bytes in no detectable encoding.
    """
    # Lines end at "\n" only: `str.splitlines` would also end one inside a JSON string at a form feed or U+2028.
    lines, decoded = open_text(stream, "utf-8-sig", newline="\n", given=encoding)
    documents, report = [], []
    for line, raw in enumerate(lines, start=1):
        raw = raw.removesuffix("\n")  # as `text.split("\n")` gives it: JSON's messages count lines and columns
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as error:
            report.append(ReportRow(path, line, f"malformed JSON: {error}"))
            continue
        if not isinstance(record, dict):
            report.append(ReportRow(path, line, f"a JSON {type(record).__name__}, not an object"))
            continue
        fields = {key: value for key, value in record.items() if key != columns.content}
        problem = _content_problem(record.get(columns.content), columns.content, columns.content in record)
        if problem:
            report.append(ReportRow(path, line, problem))
            continue
        row_meta = {**meta, **encoding_meta(decoded), "line": line, "pages": _pages(record[columns.content])}
        row_meta = _merge(row_meta, fields, "json_")
        documents.append(Document(content=record[columns.content], id=_id(fields, columns, path, line), meta=row_meta))
    return documents, report


def convert_csv(
    stream: BinaryIO, path: str, meta: dict, columns: RowColumns, encoding: str | None = None
) -> tuple[list[Document], list[ReportRow]]:
    """
    One document per CSV record, as Haystack's `CSVToDocument(conversion_mode="row")` converts each: `meta` plus
    `row_number` (0-based, among the records), every other column as a string, and `line` (the 1-based line the
    record starts on). A record with more or fewer fields than the header is reported (Haystack keeps it, surplus
    values under `extra_columns`, missing ones as empty strings).

    :param stream: The file, open for reading bytes (decoded as `utf-8-sig` as it is read, or whole in the encoding
        charset-normalizer detects: `sources.open_text`).
    :param path: The file's path relative to the input root, for ids and report rows.
    :param meta: The meta every document of the file starts with.
    :param columns: The content and id columns.
    :param encoding: The encoding the user gave (`--encoding`), used instead of UTF-8 then detection.
    :returns: The documents and the report rows of the records that gave none.
    :raises BadInput: For binary data, bytes in no detectable encoding, or a header without the content column.
    """
    from qa_core.ingest.report import BadInput

    text, decoded = open_text(stream, "utf-8-sig", newline="", given=encoding)
    reader = csv.reader(text)
    try:
        header = next(reader)
    except (StopIteration, csv.Error) as error:
        raise BadInput(f"CSV without a readable header: {error}") from error
    if columns.content not in header:
        raise BadInput(f"CSV without the content column {columns.content!r} in its header {header}")
    documents, report = [], []
    row_number, line = 0, reader.line_num + 1
    while True:
        try:
            values = next(reader)
        except StopIteration:
            break
        except csv.Error as error:
            report.append(ReportRow(path, line, f"malformed CSV record, the rest of the file not read: {error}"))
            break
        start, line = line, reader.line_num + 1
        if not values:  # a blank line
            continue
        if len(values) != len(header):
            reason = f"malformed CSV record: {len(values)} fields, the header has {len(header)}"
            report.append(ReportRow(path, start, reason))
            row_number += 1
            continue
        record = dict(zip(header, values, strict=True))
        problem = _content_problem(record[columns.content], columns.content, True)
        if problem:
            report.append(ReportRow(path, start, problem))
            row_number += 1
            continue
        fields = {key: value for key, value in record.items() if key != columns.content}
        content = record[columns.content]
        row_meta = {**meta, **encoding_meta(decoded), "row_number": row_number, "line": start, "pages": _pages(content)}
        row_meta = _merge(row_meta, fields, "csv_")
        documents.append(Document(content=record[columns.content], id=_id(fields, columns, path, start), meta=row_meta))
        row_number += 1
    return documents, report


def _pages(content: str) -> int:
    """Pages a text spans: its form feeds plus one."""
    return content.count("\f") + 1


def _merge(meta: dict, fields: dict, prefix: str) -> dict:
    """
    The row's fields added to `meta`; a field named like a meta key goes under `prefix + name` (then `_1`, `_2`...),
    as `CSVToDocument` stores a column named like its own meta (`csv_file_path`).
    """
    merged = dict(meta)
    for key, value in fields.items():
        name, suffix = key, 1
        if name in merged:
            name = base = prefix + key
            while name in merged:
                name, suffix = f"{base}_{suffix}", suffix + 1
        merged[name] = value
    return merged


def _content_problem(content, column: str, present: bool) -> str | None:
    """Why a row's content cannot make a document, or `None`."""
    if not present:
        return f"no content column {column!r}"
    if not isinstance(content, str):
        return f"content column {column!r} holds {type(content).__name__}, not text"
    if not content.strip():
        return f"empty content in column {column!r}"
    return None


def _id(fields: dict, columns: RowColumns, path: str, line: int) -> str:
    value = fields.get(columns.id)
    if value is None or value == "":
        return row_id(path, line)
    return str(value)


__all__ = ["RowColumns", "convert_csv", "convert_jsonl"]
