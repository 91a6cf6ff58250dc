"""
The stages that turn input tables into work rows: a wave's questions into `question` rows and into one `pair` row
per document to read, replies into `replies` rows, documents into the columns the pairs join, and the joins: with
the whole documents table when every task can hold it, else with the one part of it (`DocumentParts`) that holds
a group of pairs' documents.
Questions and replies of other shards are dropped: another wave, or a resumed run's committed shards, answer them.
"""

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.bulk_qa.workers.rows import (
    AGGREGATION_SCHEMA,
    DOCUMENT_COLUMNS,
    PAIR,
    PAIRS_SCHEMA,
    QUESTION,
    REPLIES,
    in_wave,
    shard_of,
    table,
)
from jobs.retrieval.retrieve import RANKER_FIELD, RETRIEVER_FIELDS
from jobs.storage import ShardStore, parquet_dataset
from qa_core.document import Document


def query_error(query: str | None) -> str | None:
    """Why a query cannot be asked, or None."""
    if query is None:
        return "the query is null"
    if not query.strip():
        return "the query is empty"
    return None


def _wave_questions(batch: pa.Table, num_shards: int, shards: frozenset[int]) -> list[tuple[int, dict[str, Any]]]:
    """The batch's questions that belong to the wave's shards, each with its shard."""
    questions, found = in_wave(batch, num_shards, shards)
    return list(zip(found, questions.to_pylist(), strict=True))


def _document_ids(question: dict[str, Any], squad: bool) -> list[str]:
    """The ids of a question's documents, in order; a SQuAD-style context's id is derived from its text."""
    if squad:
        context = question.get("context")
        return [] if context is None else [Document(content=context).id]
    return question.get("document_ids") or []


def _passage_range(question: dict[str, Any], position: int) -> dict[str, int]:
    """The range of a question's `position`-th document to read when it is a retrieved passage; else nothing."""
    starts = question.get("passage_starts")
    if starts is None:
        return {}
    return {"passage_start": starts[position], "passage_end": question["passage_ends"][position]}


def question_rows(batch: pa.Table, num_shards: int, shards: frozenset[int], squad: bool) -> pa.Table:
    """The wave's questions -> one `question` row each (query, document ids, a question-level error)."""
    rows = [
        {
            "shard": shard,
            "question_id": question["id"],
            "kind": QUESTION,
            "query": question["query"],
            "error": query_error(question["query"]),
            "document_ids": _document_ids(question, squad),
            "retrieval_scores": question.get("retrieval_scores"),  # retrieved questions only
            "passage_ids": question.get("passage_ids"),  # retrieved passages only (split_length)
            **{field.name: question.get(field.name) for field in RETRIEVER_FIELDS},  # dense and hybrid only
            RANKER_FIELD.name: question.get(RANKER_FIELD.name),  # --ranker only
        }
        for shard, question in _wave_questions(batch, num_shards, shards)
    ]
    return table(rows, AGGREGATION_SCHEMA)


def explode_pairs(
    batch: pa.Table, num_shards: int, shards: frozenset[int], squad: bool, stored: bool = False
) -> pa.Table:
    """
    The wave's questions that can be asked -> one `pair` row per document to read (a retrieved passage: its
    document and the passage's range there). SQuAD-style questions carry their document in `context`, and with
    `stored` the questions their documents' texts, page numbers and files and whether each is known
    (`workers.fetch`): their pairs carry them directly.
    """
    rows: list[dict[str, Any]] = []
    for shard, question in _wave_questions(batch, num_shards, shards):
        if query_error(question["query"]) is not None:
            continue
        common = {"shard": shard, "question_id": question["id"], "kind": PAIR, "query": question["query"]}
        for position, document_id in enumerate(_document_ids(question, squad)):
            pair = {**common, "position": position, "document_id": document_id, **_passage_range(question, position)}
            if squad:
                pair.update(content=question["context"], known=True)
            elif stored:
                pair.update(
                    content=question["passage_contents"][position],
                    page_number=question["passage_page_numbers"][position],
                    file_path=question["passage_file_paths"][position],
                    known=question["passage_known"][position],
                )
            rows.append(pair)
    schema = pa.schema(list(PAIRS_SCHEMA) + DOCUMENT_COLUMNS) if squad or stored else PAIRS_SCHEMA
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
    return table(rows, AGGREGATION_SCHEMA)


DOCUMENTS_SCHEMA = pa.schema([("id", pa.string()), *DOCUMENT_COLUMNS])
# The columns of a documents table the pairs' join reads, where present (`id` and `content` always are).
JOINED_DOCUMENT_COLUMNS = ("id", "content", "page_number", "file_path")
# The column that names a document's part (`DocumentParts`), on documents and on pairs.
PART = "document_part"


def document_columns(batch: pa.Table) -> pa.Table:
    """
    Documents as the pairs join them: content, page_number (int64 or null), file_path (or null) and a marker that
    the id is known.
    """
    page_number = batch["page_number"] if "page_number" in batch.column_names else pa.nulls(len(batch), pa.int64())
    file_path = batch["file_path"] if "file_path" in batch.column_names else pa.nulls(len(batch), pa.string())
    return pa.table(
        {
            "id": batch["id"].cast(pa.string()),
            "content": batch["content"],
            "page_number": page_number.cast(pa.int64()),
            "file_path": file_path.cast(pa.string()),
            "known": pa.array([True] * len(batch)),
        },
        schema=DOCUMENTS_SCHEMA,
    )


def read_document_columns(path: str) -> pa.Table:
    """The documents' columns the pairs join (`document_columns`), read whole with pyarrow (a broadcast join's)."""
    dataset = parquet_dataset(path)
    columns = [name for name in JOINED_DOCUMENT_COLUMNS if name in dataset.schema.names]
    return document_columns(dataset.to_table(columns=columns))


def _join(pairs: pa.Table, documents: pa.Table) -> pa.Table:
    """The rows a left-outer join of pairs and documents on the document id gives (unknown: null content)."""
    wanted = documents.filter(pc.is_in(documents["id"], value_set=pairs["document_id"]))
    return pairs.join(wanted, keys="document_id", right_keys="id", join_type="left outer")


def join_documents(pairs: pa.Table, documents: Any) -> pa.Table:
    """
    Pairs joined with their documents' columns held whole (unknown ids: null content, `known` null), without a
    shuffle.

    :param documents: `read_document_columns`' table, or on Ray a reference to it, read zero-copy from the object
        store.
    """
    if not isinstance(documents, pa.Table):
        import ray

        documents = ray.get(documents)
    return _join(pairs, documents)


def with_document_part(batch: pa.Table, column: str, n_parts: int) -> pa.Table:
    """The batch with a `PART` column: the part of `DocumentParts` that holds the document named in `column`."""
    parts = [shard_of(document_id, n_parts) for document_id in batch[column].to_pylist()]
    return batch.append_column(PART, pa.array(parts, pa.int64()))


def write_document_part(group: pa.Table, output: str) -> pa.Table:
    """Writes one part's documents (a `with_document_part` group) into the run's folder; returns its size."""
    part = group[PART][0].as_py()
    ShardStore(output).write_document_part(part, group.drop_columns([PART]))
    return pa.table({"part": [part], "documents": [len(group)]})


def join_document_part(pairs: pa.Table, output: str) -> pa.Table:
    """
    A group of pairs whose documents lie in one part (`with_document_part`) joined with that part, read from the
    run's folder (no part file: none of its documents exist): the rows of a left-outer join on the document id.
    """
    part = ShardStore(output).read_document_part(pairs[PART][0].as_py())
    return _join(pairs.drop_columns([PART]), DOCUMENTS_SCHEMA.empty_table() if part is None else part)
