"""
The passages an index holds, as a Ray Dataset read and split by Ray Data tasks: the documents with content in
table order (or, with `split_length`, their passages), numbered by corpus position. Whole documents also carry
their `page_number` and `file_path` where the documents table has them, for the shards' passage stores
(`qa_core.retrieval.store`); a shard of split passages is read with its source documents (`read_shard`), for its
source store (`jobs.passages`).
"""

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from jobs.passages import split_batch, split_window
from jobs.storage import parquet_dataset, resolve_path
from qa_core.retrieval.counted import COUNT_PART_DOCS
from qa_core.retrieval.store import STORED_DOCUMENT_FIELDS, store_schema

if TYPE_CHECKING:  # its module imports torch, which the tasks here do without (seconds per worker)
    from jobs.retrieval_settings import RetrievalSettings

# The columns of `indexed_passages`: `position`, `id` and `content`, and where the passage lies in its document
# (whole documents: then the `STORED_DOCUMENT_FIELDS` of the documents that have them, after these).
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
_READ_BATCH = 65536  # documents read at a time from a row group
# Passages a shard's part holds at least, where shards are cut into parts counted by tasks of their own
# (`shard_parts`): as many as one count holds at a time (`counted.COUNT_PART_DOCS`), so a part is one such count.
LEAST_PART = COUNT_PART_DOCS


def indexed_passages(documents: str, settings: "RetrievalSettings") -> Any:
    """
    What an index of the documents holds, in corpus order: each document with content (`id`, `content`) in table
    order, or with `settings.split_length` its passages, as `split_batch` makes them (`numbered_passages`).

    :param documents: The documents' Parquet file or folder (local path or URI) with `id` and `content`.
    :param settings: The splitting (`split_length`, `split_overlap`).
    :returns: A Ray Dataset of `PASSAGE_SCHEMA`, ordered by `position` (its `context` preserves the order).
    """
    return numbered_passages(documents, settings)[0]


def numbered_passages(documents: str, settings: "RetrievalSettings", first_position: int = 0) -> tuple[Any, int]:
    """
    `indexed_passages` numbered from `first_position` (passages added after an index's), and how many, streamed:
    each row group's passages counted first (`_row_groups`), then Ray Data tasks read, split and number a row
    group's passages from its first position. Nothing is held between the two: the object store holds only the
    blocks in flight, and the driver the row groups' counts.

    :returns: The passages (a streaming Ray Dataset of `PASSAGE_SCHEMA`, in corpus order) and how many.
    """
    import ray.data

    groups, counts = _row_groups(documents, settings, first_position)
    if not groups:
        return ray.data.from_arrow(PASSAGE_SCHEMA.empty_table()), 0
    items = ray.data.from_items(groups, override_num_blocks=len(groups))
    items.context.execution_options.preserve_order = True  # shared by the datasets made from it
    options = {"documents": documents, "split_length": settings.split_length, "split_overlap": settings.split_overlap}
    return items.map_batches(_row_group_passages, batch_size=1, batch_format="pyarrow", fn_kwargs=options), sum(counts)


def passage_shards(
    documents: str, settings: "RetrievalSettings", first_position: int = 0, cpus: int = 1
) -> tuple[Any, int]:
    """
    The shards of `numbered_passages` (`settings.shard_size` passages each, from `first_position` on), as what
    each reads (`_shard_items`), for a Ray Data task per shard that reads its passages itself (`read_shard`):
    a shard is then handled as soon as it is read, by the task that reads it, with no regrouping of blocks.
    Where the shards are fewer than `cpus` (a small corpus, or a small addition), each is cut into parts of at
    least `LEAST_PART` passages (`shard_parts`), a task each, so that every CPU counts.

    :returns: A Ray Dataset of one row per shard (or part of a shard), in corpus order, and how many passages in all.
    """
    groups, counts = _row_groups(documents, settings, first_position)
    size, end = settings.shard_size(sum(counts)), first_position + sum(counts)
    ranges = [(first, min(first + size, end)) for first in range(first_position, end, size)]
    return range_shards(documents, settings, (groups, counts), ranges, cpus), sum(counts)


def range_shards(
    documents: str,
    settings: "RetrievalSettings",
    row_groups: tuple[list[dict[str, Any]], list[int]],
    ranges: list[tuple[int, int]],
    cpus: int = 1,
    earlier: list[list[str]] | None = None,
) -> Any:
    """
    `passage_shards`' dataset of shards of the given ranges of corpus positions (`[first, stop)` each, in corpus
    order), read from the documents' `row_groups` (`_row_groups`' or `document_passages`'): the shards an update
    writes again between those it keeps (`jobs.indexing.update`).

    :param earlier: For each range, the folders of the shards of an earlier index that hold some of its passages,
        whose counts its counting task takes rather than tokenizing those passages again (`bm25.count_shards`).
    """
    import ray.data

    groups, counts = row_groups
    shards = []
    for shard, (first, stop) in enumerate(ranges):
        bounds = shard_parts(first, stop, math.ceil(cpus / len(ranges)))
        shards += [{**item, "shard": shard, "part": part, "parts": len(bounds) - 1}
                   for part, item in enumerate(_shard_items(groups, counts, bounds))]  # fmt: skip
    for shard in shards:
        shard.update(documents=documents, split_length=settings.split_length, split_overlap=settings.split_overlap,
                     earlier=[] if earlier is None else earlier[shard["shard"]])  # fmt: skip
    if not shards:
        return ray.data.from_arrow(pa.table({"first": pa.array([], pa.int64())}))
    return ray.data.from_items(shards, override_num_blocks=len(shards))


def shard_parts(first: int, stop: int, parts: int) -> list[int]:
    """
    The bounds of a shard's passages `[first, stop)` cut into at most `parts` parts of nearly equal sizes, none
    under `LEAST_PART` passages (one part, the shard, where it holds fewer than twice as many).
    """
    parts = max(1, min(parts, (stop - first) // LEAST_PART))
    return [first + part * (stop - first) // parts for part in range(parts + 1)]


def read_shard(shard: dict[str, Any]) -> tuple[pa.Table, pa.Table | None]:
    """
    A shard's (or part's) passages (`PASSAGE_SCHEMA`, in corpus order), read from its row groups (a row of
    `passage_shards`), and, for split passages, their source documents (`id`, `content` and the documents' stored
    columns), the passages' `source` column their rows there (None for whole documents).
    """
    first, stop = shard["first"], shard["stop"]
    options = (shard["documents"], shard["split_length"], shard["split_overlap"])
    split = shard["split_length"] is not None
    tables, sources = [], []
    for path, row_group, position in zip(shard["paths"], shard["row_groups"], shard["firsts"], strict=True):
        for passages, documents in _numbered_passages(path, row_group, position, *options):
            if not passages.num_rows or passages["position"][-1].as_py() < first:
                continue
            start = passages["position"][0].as_py()
            if start >= stop:  # the rest of the row group lies in the next shards
                break
            window = (max(first - start, 0), min(stop - start, passages.num_rows))
            if split:
                passages, documents = split_window(passages, documents, *window, sum(map(len, sources)))
                tables.append(passages)
                sources.append(documents)
            else:
                tables.append(passages.slice(window[0], window[1] - window[0]))
    passages = pa.concat_tables(tables, promote_options="default") if tables else PASSAGE_SCHEMA.empty_table()
    return passages, (pa.concat_tables(sources, promote_options="default") if sources else None) if split else None


def _row_groups(
    documents: str, settings: "RetrievalSettings", first_position: int
) -> tuple[list[dict[str, Any]], list[int]]:
    """
    The documents' row groups in the order the in-process build reads them (`index`, `path`, `row_group` and
    `first`, the corpus position of its first passage) and how many passages each holds: unsplit documents
    counted from the Parquet footers' statistics (rows less the `content` column's nulls), split ones (or where
    a footer lacks them) by Ray Data tasks reading a row group each.
    """
    groups, metadata = _listed_row_groups(documents)
    counts = _counts_in_footers(metadata) if settings.split_length is None and groups else None
    if counts is None:  # passages split, or a footer without the statistics: the row groups read
        counts = [int(group.sum()) for group in _passages_per_document(documents, settings, groups)]
    return _numbered_groups(groups, counts, first_position), counts


def document_passages(
    documents: str, settings: "RetrievalSettings"
) -> tuple[tuple[list[dict[str, Any]], list[int]], np.ndarray]:
    """
    The documents' row groups and their passages (`_row_groups`, numbered from 0), and how many passages each
    document with content makes, in table order (whole documents: one each; split ones counted by Ray Data tasks
    reading a row group each): where each document's passages lie in the corpus.
    """
    if settings.split_length is None:
        groups, counts = _row_groups(documents, settings, 0)
        return (groups, counts), np.ones(sum(counts), np.int64)
    groups, _ = _listed_row_groups(documents)
    per_document = _passages_per_document(documents, settings, groups)
    counts = [int(group.sum()) for group in per_document]
    joined = np.concatenate(per_document) if per_document else np.zeros(0, np.int64)
    return (_numbered_groups(groups, counts, 0), counts), joined


def _listed_row_groups(documents: str) -> tuple[list[dict[str, Any]], list[pq.RowGroupMetaData]]:
    """The documents' row groups (`index`, `path`, `row_group`), in table order, and their footers' metadata."""
    row_groups = [
        (fragment.path, group, fragment.metadata.row_group(group))
        for fragment in parquet_dataset(documents).get_fragments()
        for group in range(fragment.metadata.num_row_groups)
    ]
    groups = [{"index": index, "path": path, "row_group": group} for index, (path, group, _) in enumerate(row_groups)]
    return groups, [metadata for _, _, metadata in row_groups]


def _passages_per_document(
    documents: str, settings: "RetrievalSettings", groups: list[dict[str, Any]]
) -> list[np.ndarray]:
    """Each row group's passages per document with content, by Ray Data tasks reading a row group each."""
    import ray.data

    if not groups:
        return []
    options = {"documents": documents, "split_length": settings.split_length, "split_overlap": settings.split_overlap}
    listed = ray.data.from_items(groups, override_num_blocks=len(groups))
    counted = listed.map_batches(_count_row_group, batch_size=1, fn_kwargs=options).take_all()
    return [np.asarray(row["passages"], np.int64) for row in sorted(counted, key=lambda row: row["index"])]


def _numbered_groups(groups: list[dict[str, Any]], counts: list[int], first_position: int) -> list[dict[str, Any]]:
    """The row groups with `first`: the corpus position of their first passage, counted from `first_position`."""
    firsts = np.cumsum([first_position] + counts[:-1]).tolist()
    return [{**group, "first": first} for group, first in zip(groups, firsts, strict=True)]


def _shard_items(row_groups: list[dict[str, Any]], counts: list[int], bounds: list[int]) -> list[dict[str, Any]]:
    """
    What each range of corpus positions `[bounds[i], bounds[i + 1])` reads: its `first` and `stop` positions and
    the row groups they lie in (`paths`, `row_groups` and their first positions, `firsts`), from `_row_groups`.
    """
    items = []
    for first, stop in zip(bounds[:-1], bounds[1:], strict=True):
        inside = [group for group, count in zip(row_groups, counts, strict=True)
                  if count and group["first"] < stop and group["first"] + count > first]  # fmt: skip
        items.append({
            "first": first, "stop": stop, "paths": [group["path"] for group in inside],
            "row_groups": [group["row_group"] for group in inside], "firsts": [group["first"] for group in inside],
        })  # fmt: skip
    return items


def _counts_in_footers(row_groups: list[pq.RowGroupMetaData]) -> list[int] | None:
    """
    Each row group's documents with content (rows less the `content` column's nulls), from the Parquet footers'
    statistics, without reading the row groups; None if a row group's footer lacks the column's null count.
    """
    counts = []
    for row_group in row_groups:
        columns = (row_group.column(i) for i in range(row_group.num_columns))
        statistics = next((column.statistics for column in columns if column.path_in_schema == "content"), None)
        if statistics is None or not statistics.has_null_count:
            return None
        counts.append(row_group.num_rows - statistics.null_count)
    return counts


def _row_group_batches(path: str, row_group: int, documents: str, stored: bool = False) -> Iterator[pa.RecordBatch]:
    """
    The `id` and `content` of a row group of a documents file, in batches, with `stored` also the
    `STORED_DOCUMENT_FIELDS` the file has.
    """
    filesystem, _ = resolve_path(documents)
    with filesystem.open_input_file(path) as file:
        parquet = pq.ParquetFile(file)
        names = parquet.schema_arrow.names
        kept = [field.name for field in STORED_DOCUMENT_FIELDS if stored and field.name in names]
        yield from parquet.iter_batches(_READ_BATCH, row_groups=[row_group], columns=["id", "content", *kept])


def _count_row_group(
    item: dict[str, Any], documents: str, split_length: int | None, split_overlap: int
) -> dict[str, Any]:
    """A row group -> how many passages each of its documents with content makes."""
    path, row_group = str(item["path"][0]), int(item["row_group"][0])
    counts = []
    for batch in _row_group_batches(path, row_group, documents):
        if split_length is None:
            counts.append(np.ones(batch.num_rows - batch.column("content").null_count, np.int64))
        else:
            passages, sources = _passages_of_batch(pa.Table.from_batches([batch]), split_length, split_overlap)
            counts.append(np.bincount(passages["source"].to_numpy(), minlength=sources.num_rows))
    return {"index": item["index"], "passages": [np.concatenate(counts).tolist() if counts else []]}


def _row_group_passages(
    item: pa.Table, documents: str, split_length: int | None, split_overlap: int
) -> Iterator[pa.Table]:
    """A row group -> its passages (`PASSAGE_SCHEMA`), numbered from its first position, batch by batch."""
    path, row_group, position = item["path"][0].as_py(), item["row_group"][0].as_py(), item["first"][0].as_py()
    for passages, _ in _numbered_passages(path, row_group, position, documents, split_length, split_overlap):
        yield passages.drop_columns(["source"]) if split_length is not None else passages


def _numbered_passages(
    path: str, row_group: int, position: int, documents: str, split_length: int | None, split_overlap: int
) -> Iterator[tuple[pa.Table, pa.Table]]:
    """A row group's passages (`_passages_of_batch`), numbered from `position`, and their documents, batch by batch."""
    for batch in _row_group_batches(path, row_group, documents, stored=True):
        passages, sources = _passages_of_batch(pa.Table.from_batches([batch]), split_length, split_overlap)
        numbers = pa.array(np.arange(position, position + passages.num_rows, dtype=np.int64))
        position += passages.num_rows
        yield passages.add_column(0, "position", numbers), sources


def _passages_of_batch(batch: pa.Table, split_length: int | None, split_overlap: int) -> tuple[pa.Table, pa.Table]:
    """
    A batch of documents -> its passages: its documents with content (and their `STORED_DOCUMENT_FIELDS` the batch
    has), or their passages (`PASSAGE_SCHEMA` without position, and `source`: each passage's row among the
    documents); and those documents (`id`, `content` and the stored fields).
    """
    batch = batch.filter(pc.is_valid(batch["content"]))
    kept = [field for field in STORED_DOCUMENT_FIELDS if field.name in batch.column_names]
    ids, texts = batch["id"].cast(pa.string()), batch["content"].cast(pa.string())
    stored = [batch[field.name].cast(field.type) for field in kept]
    documents = pa.Table.from_arrays([ids, texts, *stored], schema=store_schema(batch.column_names))
    if split_length is None:  # each document is its own passage, all of its content: no Python strings made
        ends = pc.utf8_length(texts).cast(pa.int64())  # in characters, as Python's len
        columns = [ids, texts, ids, pa.array(np.zeros(batch.num_rows, np.int64)), ends]
        columns += stored
        return pa.Table.from_arrays(columns, schema=pa.schema([*_SPLIT_SCHEMA, *kept])), documents
    passage_ids, passage_texts, where = split_batch(ids.to_pylist(), texts.to_pylist(), split_length, split_overlap)
    where = where.append_column("source_id", ids.take(where["source"].combine_chunks()))
    columns = [pa.array(passage_ids, pa.string()), pa.array(passage_texts, pa.string()),
               *(where[name].combine_chunks() for name in ("source_id", "start", "end", "source"))]  # fmt: skip
    return pa.Table.from_arrays(columns, schema=_SPLIT_SCHEMA.append(pa.field("source", pa.int64()))), documents
