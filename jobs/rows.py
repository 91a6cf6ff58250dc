"""
The work rows that flow through the bulk job's Ray Data stages, as Arrow tables. A row's `kind` says what it
carries:

- `question`: one per question (query, document ids, question-level errors), passed through to the end;
- `pair`: one per (question, document) before tokenization; after it, only pairs that could not be read remain,
  as notes carrying the reason in `error`;
- `sequence`: a tokenized window of a document (before the reader stage), then a note that it was read;
- `candidate`: a span found by the reader, with its text, page and context;
- `replies`: a question's generator replies, joining the others just before aggregation.

Every row has the question's `shard` (a stable hash of its id), the unit that the aggregation stage commits.
This module imports only pyarrow, so that stages which need no model stay light.
"""

import zlib
from typing import Any

import pyarrow as pa

QUESTION, PAIR, SEQUENCE, CANDIDATE, REPLIES = "question", "pair", "sequence", "candidate", "replies"

_COMMON = [
    ("shard", pa.int32()),
    ("question_id", pa.string()),
    ("kind", pa.string()),
    ("query", pa.string()),
    ("position", pa.int32()),  # the document's 0-based position in the question's document_ids
    ("document_id", pa.string()),
    ("error", pa.string()),
    ("document_ids", pa.list_(pa.string())),
    ("replies", pa.list_(pa.string())),
    ("reply_meta", pa.list_(pa.string())),
]
PAIRS_SCHEMA = pa.schema(_COMMON)
DOCUMENT_COLUMNS = [("content", pa.string()), ("page_number", pa.int64()), ("known", pa.bool_())]
SEQUENCES_SCHEMA = pa.schema(
    _COMMON
    + [
        ("sequence_index", pa.int32()),
        ("input_ids", pa.list_(pa.int32())),
        ("context_start", pa.int32()),
        ("context_end", pa.int32()),
        ("char_starts", pa.list_(pa.int64())),
        ("char_ends", pa.list_(pa.int64())),
        ("window_text", pa.string()),  # the document text the sequence's answers and contexts are cut from
        ("window_offset", pa.int64()),
        ("first_page", pa.int64()),  # page at window_offset, when the document is paged
    ]
)
CANDIDATES_SCHEMA = pa.schema(
    _COMMON
    + [
        ("sequence_index", pa.int32()),
        ("rank", pa.int32()),  # the span's rank within its sequence
        ("score", pa.float64()),
        ("start", pa.int64()),
        ("end", pa.int64()),
        ("answer", pa.string()),
        ("answer_page_number", pa.int64()),
        ("context", pa.string()),
        ("context_start", pa.int64()),  # where the context starts in the document
        ("worker", pa.string()),  # which reader actor read the sequence
    ]
)


def shard_of(question_id: str, num_shards: int) -> int:
    """A stable shard number for a question id (the same in every process and every run)."""
    return zlib.crc32(question_id.encode("utf-8")) % num_shards


def table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows (dicts with any subset of the schema's columns) as a table of exactly that schema."""
    return pa.Table.from_pylist([{name: row.get(name) for name in schema.names} for row in rows], schema=schema)
