"""
The documents an index holds, read in this process batch by batch in table order (those with content), and split
into passages with `split_length`: for the in-process build, the fingerprint check of a given index, and the
in-process engine's embedding of the passages.
"""

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.indexing.record import stored_columns
from jobs.passages import split_batch
from jobs.retrieval_settings import RetrievalSettings
from jobs.storage import parquet_dataset

# Documents read per batch when building the index or fingerprinting the corpus.
_DOCUMENTS_PER_READ = 65536


def document_batches(documents: str, stored: bool = False) -> Iterator[pa.RecordBatch]:
    """
    The documents with content, batch by batch in table order: `id` and `content`, with `stored` also the columns
    of theirs that passage stores keep (`stored_columns`).
    """
    columns = ["id", "content", *(stored_columns(documents) if stored else [])]
    scanner = parquet_dataset(documents).scanner(
        columns=columns, filter=pc.field("content").is_valid(), batch_size=_DOCUMENTS_PER_READ
    )
    yield from scanner.to_batches()


def indexed_batch(batch: pa.RecordBatch, settings: RetrievalSettings) -> tuple[list[str], list[str], Any]:
    """
    What the index holds of a batch of documents with content: the documents (ids, texts, None), or with
    `split_length` their passages (ids, texts, and where they lie: `passage_columns`, `source` a row of the batch).
    """
    ids, texts = batch.column("id").to_pylist(), batch.column("content").to_pylist()
    if settings.split_length is None:
        return ids, texts, None
    return split_batch(ids, texts, settings.split_length, settings.split_overlap)


def indexed_texts(documents: str, settings: RetrievalSettings) -> Iterator[tuple[list[str], list[str], Any]]:
    """What the index holds (`indexed_batch`), batch by batch in table order."""
    for batch in document_batches(documents):
        yield indexed_batch(batch, settings)


def passage_tables(documents: str, settings: RetrievalSettings) -> Iterator[pa.Table]:
    """What the index holds (`indexed_texts`), read in the driver as tables of `position`, `id` and `content`."""
    position = 0
    for ids, texts, _ in indexed_texts(documents, settings):
        yield pa.table({"position": pa.array(range(position, position + len(ids)), pa.int64()), "id": ids,
                        "content": texts})  # fmt: skip
        position += len(ids)
