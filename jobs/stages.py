"""
The bulk job's Ray Data stages before aggregation: questions exploded into (question, document) pairs,
pairs tokenized in CPU tasks, sequences read by the reader actors. See `jobs.rows` for the rows they exchange.
Only the tokenize and reader stages import torch and transformers, and only when they run.
"""

import os
import socket
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa

from jobs.rows import (
    CANDIDATE,
    CANDIDATES_SCHEMA,
    DOCUMENT_COLUMNS,
    PAIR,
    PAIRS_SCHEMA,
    QUESTION,
    REPLIES,
    SEQUENCE,
    SEQUENCES_SCHEMA,
    shard_of,
    table,
)
from qa_core.answers import ExtractedAnswer
from qa_core.document import Document
from qa_core.selection import DocumentText, candidate_answers


def explode_questions(batch: pa.Table, num_shards: int, shards: frozenset[int], squad: bool) -> pa.Table:
    """
    Questions of `shards` -> one `question` row each plus one `pair` row per document to read (questions of other
    shards are dropped: another wave, or a resumed run's committed shards, answers them). SQuAD-style questions
    carry their document in `context`: their pair rows carry its content directly, with an id derived from the
    content as `Document` derives it.
    """
    rows: list[dict[str, Any]] = []
    for question in batch.to_pylist():
        question_id = question["id"]
        shard = shard_of(question_id, num_shards)
        if shard not in shards:
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
    return table(rows, schema)


def replies_rows(batch: pa.Table, num_shards: int, shards: frozenset[int]) -> pa.Table:
    """The replies of questions of `shards` -> `replies` work rows."""
    rows = []
    for reply in batch.to_pylist():
        shard = shard_of(reply["question_id"], num_shards)
        if shard in shards:
            rows.append(
                {
                    "shard": shard,
                    "question_id": reply["question_id"],
                    "kind": REPLIES,
                    "replies": reply["replies"],
                    "reply_meta": reply.get("meta"),
                }
            )
    return table(rows, CANDIDATES_SCHEMA)


def document_columns(batch: pa.Table) -> pa.Table:
    """Documents as the pairs join them: content, page_number (int64 or null) and a marker that the id is known."""
    page_number = batch["page_number"] if "page_number" in batch.column_names else pa.nulls(len(batch), pa.int64())
    return pa.table(
        {
            "id": batch["id"],
            "content": batch["content"],
            "page_number": page_number.cast(pa.int64()),
            "known": pa.array([True] * len(batch)),
        }
    )


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
    return table(rows, SEQUENCES_SCHEMA)


def _tokenize_each_pair(tokenizer, pairs: list[dict], max_seq_length: int, stride: int, notes: list) -> list:
    """Tokenizes all pairs at once; when that fails, pair by pair, turning each failing pair into a note."""
    from qa_core.tokenization import tokenize_pairs

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

        from qa_core.reader import ExtractiveReader

        gpu_ids = ray.get_gpu_ids() if ray.is_initialized() else []
        device = "cuda:0" if gpu_ids and torch.cuda.is_available() else "cpu"
        if device == "cpu" and cpu_threads:
            torch.set_num_threads(cpu_threads)
        self.reader = ExtractiveReader(**reader_parameters, device=device)
        self.reader.warm_up()
        self.worker = f"{socket.gethostname()}:{os.getpid()} gpus={','.join(map(str, gpu_ids)) or '-'} {device}"

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Reads the batch's sequence rows in one `predict_spans` call; passes every other row on unchanged."""
        from qa_core.tokenization import Sequence

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
        return table(out, CANDIDATES_SCHEMA)


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
