"""
The bulk job's Ray Data stages. Rows flow through them as Arrow tables of "work rows"; a row's `kind` says what
it carries:

- `question`: one per question (query, document ids, replies, question-level errors), passed through to the end;
- `pair`: one per (question, document) before tokenization; after it, only pairs that could not be read remain,
  as notes carrying the reason in `error`;
- `sequence`: a tokenized window of a document (before the reader stage), then a note that it was read;
- `candidate`: a span found by the reader, with its text, page and context;
- `replies`: a question's generator replies, joining the others just before aggregation.

Every row has the question's `shard` (a stable hash of its id), the unit that the aggregation stage commits.
"""

import json
import os
import socket
import zlib
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa

from qa_core.answers import ExtractedAnswer
from qa_core.document import Document
from qa_core.reader import ExtractiveReader
from qa_core.selection import DocumentText, candidate_answers
from qa_core.tokenization import Sequence, tokenize_pairs

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


def _table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows (dicts with any subset of the schema's columns) as a table of exactly that schema."""
    return pa.Table.from_pylist([{name: row.get(name) for name in schema.names} for row in rows], schema=schema)


def explode_questions(batch: pa.Table, num_shards: int, skip_shards: frozenset[int], squad: bool) -> pa.Table:
    """
    Questions -> one `question` row each plus one `pair` row per document to read. Questions of shards already
    committed (a resumed run) are dropped. SQuAD-style questions carry their document in `context`: their pair
    rows carry its content directly, with an id derived from the content as `Document` derives it.
    """
    rows: list[dict[str, Any]] = []
    for question in batch.to_pylist():
        question_id = question["id"]
        shard = shard_of(question_id, num_shards)
        if shard in skip_shards:
            continue
        query = question["query"]
        error = None
        if query is None:
            error = "the query is null"
        elif not query.strip():
            error = "the query is empty"
        if squad:
            context = question.get("context")
            documents = [] if context is None else [Document(content=context)]
            document_ids = [document.id for document in documents]
        else:
            document_ids = question.get("document_ids") or []
        common = {"shard": shard, "question_id": question_id, "query": query}
        rows.append(
            {
                **common,
                "kind": QUESTION,
                "error": error,
                "document_ids": document_ids,
            }
        )
        if error is not None:
            continue
        for position, document_id in enumerate(document_ids):
            pair = {**common, "kind": PAIR, "position": position, "document_id": document_id}
            if squad:
                pair.update(content=documents[position].content, known=True)
            rows.append(pair)
    schema = pa.schema(list(PAIRS_SCHEMA) + DOCUMENT_COLUMNS) if squad else PAIRS_SCHEMA
    return _table(rows, schema)


def replies_rows(batch: pa.Table, num_shards: int, skip_shards: frozenset[int]) -> pa.Table:
    """The replies table -> `replies` work rows (questions of committed shards dropped)."""
    rows = []
    for reply in batch.to_pylist():
        shard = shard_of(reply["question_id"], num_shards)
        if shard not in skip_shards:
            rows.append(
                {
                    "shard": shard,
                    "question_id": reply["question_id"],
                    "kind": REPLIES,
                    "replies": reply["replies"],
                    "reply_meta": reply.get("meta"),
                }
            )
    return _table(rows, CANDIDATES_SCHEMA)


@lru_cache(maxsize=2)
def _load_tokenizer(model: str, trust_remote_code: bool):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)


def tokenize(
    batch: pa.Table,
    model: str,
    max_seq_length: int,
    stride: int,
    context_window_size: int | None,
    trust_remote_code: bool = False,
) -> pa.Table:
    """
    Pairs joined with their documents -> `sequence` rows (each carrying the text window its answers are cut from),
    or a `pair` note with the reason when the document is unknown or the pair cannot be tokenized.
    Documents with null content are skipped, as the reader skips them. Other rows pass through.
    """
    tokenizer = _load_tokenizer(model, trust_remote_code)
    rows: list[dict[str, Any]] = []
    to_read: list[dict[str, Any]] = []
    for row in batch.to_pylist():
        if row["kind"] != PAIR:
            rows.append(row)
        elif not row.get("known"):
            rows.append({**row, "error": f"unknown document id {row['document_id']!r}"})
        elif row.get("content") is not None:
            to_read.append(row)
    sequences = _tokenize_each_pair(tokenizer, to_read, max_seq_length, stride, rows)
    margin = (context_window_size or 0) + 1  # the context's word-boundary search looks one character beyond it
    sequence_index = 0
    for position, sequence in enumerate(sequences):
        pair = to_read[sequence.pair_index]
        previous = sequences[position - 1].pair_index if position else None
        sequence_index = sequence_index + 1 if previous == sequence.pair_index else 0
        content = pair["content"]
        if sequence.context_end > sequence.context_start:
            first_char = int(sequence.char_starts[sequence.context_start])
            last_char = int(sequence.char_ends[sequence.context_end - 1])
        else:
            first_char = last_char = 0
        window_offset = max(0, first_char - margin)
        page_number = pair.get("page_number")
        rows.append(
            {
                **{name: pair[name] for name in ("shard", "question_id", "query", "position", "document_id")},
                "kind": SEQUENCE,
                "sequence_index": sequence_index,
                "input_ids": sequence.input_ids.astype(np.int32),
                "context_start": sequence.context_start,
                "context_end": sequence.context_end,
                "char_starts": sequence.char_starts,
                "char_ends": sequence.char_ends,
                "window_text": content[window_offset : last_char + margin],
                "window_offset": window_offset,
                "first_page": None if page_number is None else page_number + content.count("\f", 0, window_offset),
            }
        )
    return _table(rows, SEQUENCES_SCHEMA)


def _tokenize_each_pair(tokenizer, pairs: list[dict], max_seq_length: int, stride: int, notes: list) -> list[Sequence]:
    """Tokenizes all pairs at once; when that fails, pair by pair, turning each failing pair into a note."""
    try:
        return tokenize_pairs(
            tokenizer, [p["query"] for p in pairs], [p["content"] for p in pairs], max_seq_length, stride
        )
    except Exception:  # noqa: BLE001 - find the failing pairs one by one
        sequences = []
        for index, pair in enumerate(pairs):
            try:
                found = tokenize_pairs(tokenizer, [pair["query"]], [pair["content"]], max_seq_length, stride)
            except ValueError as error:
                notes.append({**pair, "error": str(error)})
                continue
            for sequence in found:
                sequence.pair_index = index
            sequences.extend(found)
        return sequences


class ReadSequences:
    """
    The reader stage, one instance per Ray actor: holds one warmed `ExtractiveReader` on the actor's GPU
    (or on the CPU) and turns `sequence` rows into `candidate` rows plus a `sequence` note each.
    """

    def __init__(self, reader_parameters: dict[str, Any], cpu_threads: int | None = None) -> None:
        import ray
        import torch

        gpu_ids = ray.get_gpu_ids()
        device = "cuda:0" if gpu_ids and torch.cuda.is_available() else "cpu"
        if device == "cpu" and cpu_threads:
            torch.set_num_threads(cpu_threads)
        self.reader = ExtractiveReader(**reader_parameters, device=device)
        self.reader.warm_up()
        self.worker = f"{socket.gethostname()}:{os.getpid()} gpus={','.join(map(str, gpu_ids)) or '-'} {device}"

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.to_pylist()
        passed = [row for row in rows if row["kind"] != SEQUENCE]
        sequence_rows = [row for row in rows if row["kind"] == SEQUENCE]
        sequences = [
            Sequence(
                pair_index=index,
                input_ids=np.asarray(row["input_ids"], dtype=np.int64),
                context_start=row["context_start"],
                context_end=row["context_end"],
                char_starts=np.asarray(row["char_starts"], dtype=np.int64),
                char_ends=np.asarray(row["char_ends"], dtype=np.int64),
            )
            for index, row in enumerate(sequence_rows)
        ]
        out = [{name: row[name] for name in PAIRS_SCHEMA.names} for row in passed]
        for row, spans in zip(sequence_rows, self.reader.predict(sequences), strict=True):
            keys = {name: row[name] for name in ("shard", "question_id", "position", "document_id", "sequence_index")}
            out.append({**keys, "kind": SEQUENCE, "worker": self.worker})
            source = DocumentText(
                Document(content=None, id=row["document_id"]),
                row["window_text"],
                row["window_offset"],
                row["first_page"],
            )
            found = candidate_answers(row["query"], source, spans, self.reader.context_window_size)
            for rank, answer in enumerate(found):
                out.append({**keys, "kind": CANDIDATE, "rank": rank, **candidate_columns(answer)})
        return _table(out, CANDIDATES_SCHEMA)


def candidate_columns(answer: ExtractedAnswer) -> dict[str, Any]:
    """The candidate columns of a span answer."""
    context_start = None
    if answer.context_offset is not None:
        context_start = answer.document_offset.start - answer.context_offset.start
    return {
        "score": answer.score,
        "start": answer.document_offset.start,
        "end": answer.document_offset.end,
        "answer": answer.data,
        "answer_page_number": answer.meta.get("answer_page_number"),
        "context": answer.context,
        "context_start": context_start,
    }


def candidate_answer(query: str, row: dict[str, Any]) -> ExtractedAnswer:
    """A candidate row back as the answer it was made from."""
    context_offset = None
    if row["context_start"] is not None:
        context_offset = ExtractedAnswer.Span(row["start"] - row["context_start"], row["end"] - row["context_start"])
    page = row["answer_page_number"]
    return ExtractedAnswer(
        query=query,
        score=row["score"],
        data=row["answer"],
        document=Document(content=None, id=row["document_id"]),
        context=row["context"],
        document_offset=ExtractedAnswer.Span(row["start"], row["end"]),
        context_offset=context_offset,
        meta={} if page is None else {"answer_page_number": page},
    )


def parse_reply_meta(values: list[str] | None) -> list[dict[str, Any]] | None:
    """Reply meta JSON strings as dicts (never evaluated otherwise). `None` when absent."""
    if values is None:
        return None
    parsed = [json.loads(value) if value else {} for value in values]
    if any(not isinstance(value, dict) for value in parsed):
        raise ValueError("each reply meta must be a JSON object")
    return parsed
