"""
The passages an index holds, as a Ray Dataset read and split by Ray Data tasks: the documents with content in
table order (or, with `split_length`, their passages), numbered by corpus position.
"""

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.bulk_qa.workers.passages import split_batch
from jobs.bulk_qa.workers.storage import resolve_path

if TYPE_CHECKING:  # its module imports torch, which the tasks here do without (seconds per worker)
    from jobs.bulk_qa.workers.retrieve import RetrievalSettings

# The columns of `indexed_passages`: `position`, `id` and `content`, and where the passage lies in its document.
PASSAGE_SCHEMA = pa.schema(
    [
        ("position", pa.int64()),  # corpus position 0, 1, ...: contiguous, in table order
        ("id", pa.string()),  # the passage's id (Haystack's DocumentSplitter's), or the document's
        ("content", pa.string()),
        ("source_id", pa.string()),  # the document the passage comes from (itself when not split)
        ("start", pa.int64()),  # the passage's character range [start, end) in the document's content
        ("end", pa.int64()),
    ]
)

_SPLIT_SCHEMA = pa.schema([field for field in PASSAGE_SCHEMA if field.name != "position"])  # before numbering


def indexed_passages(documents: str, settings: "RetrievalSettings") -> Any:
    """
    What an index of the documents holds (`read_passages`), numbered by corpus position.

    :param documents: The documents' Parquet file or folder (local path or URI) with `id` and `content`.
    :param settings: The splitting (`split_length`, `split_overlap`).
    :returns: A Ray Dataset of `PASSAGE_SCHEMA`, ordered by `position` (its `context` preserves the order).
    """
    import ray.data

    passages = read_passages(documents, settings)
    n_passages = passages.count()
    if n_passages == 0:  # blocks without rows may lack the columns
        return ray.data.from_arrow(PASSAGE_SCHEMA.empty_table())
    numbers = ray.data.range(n_passages).rename_columns({"id": "position"})
    with warnings.catch_warnings():
        # Ray 2.60 warns that `zip` goes in 2.64 and relies on a deterministic order: the order is preserved here.
        warnings.simplefilter("ignore", DeprecationWarning)
        numbered = passages.zip(numbers)
    return numbered.select_columns(PASSAGE_SCHEMA.names)


def read_passages(documents: str, settings: "RetrievalSettings") -> Any:
    """
    What an index of the documents holds, in corpus order: each document with content (`id`, `content`) in table
    order, or with `settings.split_length` its passages, as `split_batch` makes them.

    The documents are read and split by Ray Data tasks and kept in the object store (spilled to disk when they
    do not fit), so that they can be counted and cut at any corpus position (`split_at_indices`) without being
    read again: the driver holds references and row counts only.

    :param documents: The documents' Parquet file or folder (local path or URI) with `id` and `content`.
    :param settings: The splitting (`split_length`, `split_overlap`).
    :returns: A materialized Ray Dataset of `PASSAGE_SCHEMA` without `position`, in corpus order (its `context`
        preserves the order).
    """
    import ray.data

    filesystem, inner = resolve_path(documents)
    read = ray.data.read_parquet(inner, filesystem=filesystem, columns=["id", "content"])
    read.context.execution_options.preserve_order = True  # shared by the datasets made from it
    return read.map_batches(
        _passages_of_batch,
        batch_format="pyarrow",
        batch_size=None,  # whole blocks as read, not cut into batches
        fn_kwargs={"split_length": settings.split_length, "split_overlap": settings.split_overlap},
    ).materialize()


def _passages_of_batch(batch: pa.Table, split_length: int | None, split_overlap: int) -> pa.Table:
    """A batch of documents -> its documents with content, or their passages (`PASSAGE_SCHEMA` without position)."""
    batch = batch.filter(pc.is_valid(batch["content"]))
    if split_length is None:  # each document is its own passage, all of its content: no Python strings made
        ids, texts = batch["id"].cast(pa.string()), batch["content"].cast(pa.string())
        ends = pc.utf8_length(texts).cast(pa.int64())  # in characters, as Python's len
        columns = [ids, texts, ids, pa.array(np.zeros(batch.num_rows, np.int64)), ends]
        return pa.Table.from_arrays(columns, schema=_SPLIT_SCHEMA)
    documents = batch["id"].to_pylist(), batch["content"].to_pylist()
    ids, texts, passages = split_batch(*documents, split_length, split_overlap)
    values = (ids, texts, passages.source_ids, passages.starts, passages.ends)
    columns = [pa.array(column, field.type) for column, field in zip(values, _SPLIT_SCHEMA, strict=True)]
    return pa.Table.from_arrays(columns, schema=_SPLIT_SCHEMA)
