"""
The work rows that flow through the bulk job's Ray Data stages, as Arrow tables, and the one place each kind is
encoded and decoded. A row's `kind` says what it carries:

- `question`: one per question (query, document ids, question-level errors), joining the others just before
  aggregation;
- `pair`: one per (question, document) to read, joined with its document (a retrieved passage: its document,
  and the passage's range to read there); the tokenize stage turns each into sequences, or into a note carrying
  the reason it cannot be read in `error`, which reaches the aggregation through the run's folder
  (`ShardStore.write_pair_notes`), not through the reader actors;
- `sequence`: a tokenized window of a document with the text its answers are cut from (before the reader
  stage), then a note that it was read and by which actor;
- `candidate`: a span found by the reader, with its text, page and context;
- `replies`: a question's generator replies, joining the others just before aggregation.

Every row has the question's `shard` (a stable hash of its id), the unit that the aggregation stage commits.
This module imports only pyarrow and numpy, so that stages which need no model stay light.
"""

import zlib
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from jobs.retrieval.retrieve import RANKER_FIELD, RETRIEVER_FIELDS
from qa_core.answers import ExtractedAnswer
from qa_core.document import Document
from qa_core.selection import DocumentText
from qa_core.tokenization import Sequence

if TYPE_CHECKING:  # spans.py imports torch, which the stages without a model do without
    from qa_core.spans import SequenceSpans

QUESTION, PAIR, SEQUENCE, CANDIDATE, REPLIES = "question", "pair", "sequence", "candidate", "replies"

_COMMON = [
    ("shard", pa.int32()),
    ("question_id", pa.string()),
    ("kind", pa.string()),
    ("query", pa.string()),
    ("position", pa.int32()),  # the document's 0-based position in the question's document_ids
    ("document_id", pa.string()),
    ("error", pa.string()),
    # pairs: the character range of the document to read, a retrieved passage's (split_length); null: all of it
    ("passage_start", pa.int64()),
    ("passage_end", pa.int64()),
]
PAIRS_SCHEMA = pa.schema(_COMMON)
# The file a document came from (a documents table's optional `file_path`: jobs.ingest's), carried from the join to
# the sequences, candidates and answers.
FILE_PATH = ("file_path", pa.string())
DOCUMENT_COLUMNS = [("content", pa.string()), ("page_number", pa.int64()), FILE_PATH, ("known", pa.bool_())]
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
        FILE_PATH,
    ]
)
# What reaches the aggregation: question, replies, read-note and candidate rows (pair notes come from storage).
AGGREGATION_SCHEMA = pa.schema(
    _COMMON
    + [
        ("document_ids", pa.list_(pa.string())),  # question rows
        ("retrieval_scores", pa.list_(pa.float64())),  # question rows: the scores of retrieved document_ids
        ("passage_ids", pa.list_(pa.string())),  # question rows: the retrieved passages, when split (split_length)
        *RETRIEVER_FIELDS,  # question rows: dense and hybrid retrieval's per-retriever scores and ranks
        RANKER_FIELD,  # question rows: --ranker's scores
        ("replies", pa.list_(pa.string())),  # replies rows
        ("reply_meta", pa.list_(pa.string())),
        ("sequence_index", pa.int32()),
        ("rank", pa.int32()),  # the span's rank within its sequence
        ("score", pa.float64()),
        ("start", pa.int64()),
        ("end", pa.int64()),
        ("answer", pa.string()),
        ("answer_page_number", pa.int64()),
        FILE_PATH,  # candidates: their document's file (and question rows of --every-document)
        ("page_number", pa.int64()),  # question rows of --every-document: their document's page_number
        ("context", pa.string()),
        ("context_offset", pa.int64()),  # where the context starts in the document
        ("worker", pa.string()),  # read notes: which reader actor read the sequence
        ("null_logit", pa.float64()),  # read notes: the sequence's null (CLS) logit sum
        ("best_logit", pa.float64()),  # read notes: its best span's logit sum (-inf without a span)
    ]
)
_SEQUENCE_KEYS = ("shard", "question_id", "position", "document_id", "sequence_index")


def shard_of(question_id: str, num_shards: int) -> int:
    """A stable shard number for a question id (the same in every process and every run)."""
    return zlib.crc32(question_id.encode("utf-8")) % num_shards


def in_wave(batch: pa.Table, num_shards: int, shards: frozenset[int]) -> tuple[pa.Table, list[int]]:
    """The batch's questions that belong to the wave's `shards`, and the shard of each."""
    found = [shard_of(question_id, num_shards) for question_id in batch["id"].to_pylist()]
    keep = [shard in shards for shard in found]
    return batch.filter(pa.array(keep, pa.bool_())), [shard for shard, kept in zip(found, keep, strict=True) if kept]


def wave_questions(batch: pa.Table, num_shards: int, shards: frozenset[int]) -> pa.Table:
    """The batch's questions that belong to the wave's `shards` (a `map_batches` function)."""
    return in_wave(batch, num_shards, shards)[0]


def table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows (dicts with any subset of the schema's columns) as a table of exactly that schema."""
    return pa.Table.from_pylist([{name: row.get(name) for name in schema.names} for row in rows], schema=schema)


def sequence_row(pair: dict[str, Any], sequence_index: int, sequence: Sequence, window: DocumentText) -> dict:
    """A `sequence` row: the pair's keys, the tokenized window, and the document text its answers are cut from."""
    return {
        **{name: pair[name] for name in ("shard", "question_id", "query", "position", "document_id")},
        "kind": SEQUENCE,
        "sequence_index": sequence_index,
        "input_ids": sequence.input_ids.astype(np.int32),
        "context_start": sequence.context_start,
        "context_end": sequence.context_end,
        "char_starts": sequence.char_starts,
        "char_ends": sequence.char_ends,
        "window_text": window.text,
        "window_offset": window.offset,
        "first_page": window.first_page,
        "file_path": pair.get("file_path"),
    }


def sequence_from_row(row: dict[str, Any], pair_index: int) -> tuple[Sequence, DocumentText]:
    """A `sequence` row back as the sequence to read and the text its answers are cut from."""
    sequence = Sequence(
        pair_index=pair_index,
        input_ids=np.asarray(row["input_ids"], dtype=np.int64),
        context_start=row["context_start"],
        context_end=row["context_end"],
        char_starts=np.asarray(row["char_starts"], dtype=np.int64),
        char_ends=np.asarray(row["char_ends"], dtype=np.int64),
    )
    document = Document(content=None, id=row["document_id"])
    return sequence, DocumentText(document, row["window_text"], row["window_offset"], row["first_page"])


def read_note(row: dict[str, Any], worker: str, spans: "SequenceSpans") -> dict[str, Any]:
    """The note that a `sequence` row was read, by which reader actor, with its null and best-span logit sums."""
    return {
        **{name: row[name] for name in _SEQUENCE_KEYS},
        "kind": SEQUENCE,
        "worker": worker,
        "null_logit": spans.null_logit,
        "best_logit": spans.best_logit,
    }


def candidate_row(sequence: dict[str, Any], rank: int, answer: ExtractedAnswer) -> dict[str, Any]:
    """A `candidate` row: a span answer of the sequence row it was read from, at its rank there."""
    context_offset = None
    if answer.context_offset is not None:
        context_offset = answer.document_offset.start - answer.context_offset.start
    return {
        **{name: sequence[name] for name in _SEQUENCE_KEYS},
        "kind": CANDIDATE,
        "rank": rank,
        "score": answer.score,
        "start": answer.document_offset.start,
        "end": answer.document_offset.end,
        "answer": answer.data,
        "answer_page_number": answer.meta.get("answer_page_number"),
        "file_path": sequence["file_path"],
        "context": answer.context,
        "context_offset": context_offset,
    }


def candidate_answer(query: str, row: dict[str, Any]) -> ExtractedAnswer:
    """A `candidate` row back as the answer it was made from."""
    context_offset = None
    if row["context_offset"] is not None:
        start = row["context_offset"]
        context_offset = ExtractedAnswer.Span(row["start"] - start, row["end"] - start)
    meta = {name: row[name] for name in ("answer_page_number", "file_path") if row[name] is not None}
    return ExtractedAnswer(
        query=query,
        score=row["score"],
        data=row["answer"],
        document=Document(content=None, id=row["document_id"]),
        context=row["context"],
        document_offset=ExtractedAnswer.Span(row["start"], row["end"]),
        context_offset=context_offset,
        meta=meta,
    )
