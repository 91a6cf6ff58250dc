"""
The retrieval stage, one instance per Ray actor: a wave's questions -> the same questions, those without
`document_ids` given the `retriever_top_k` best documents of the corpus by BM25 (Haystack's
`InMemoryBM25Retriever` ranking, `qa_core.retrieval`), best first, with their scores. With `split_length` the
index holds passages of the documents (`jobs.passages`): a retrieved passage is given as its source
document's id, with the passage's id and its character range there, which is what the reader reads.

Each actor memory-maps the index folder the driver saved (or `--index` named), or some consecutive shards of it:
the posting arrays are shared through the page cache, never copied per task. An index on a remote filesystem is
first copied once per node into the local temporary folder.

A question's metadata filter (the run's `filters` ANDed with the question's own, the questions' `filters` column,
carried through the stages) is a mask over the shards' corpus positions, from the filter fields the index keeps
(`jobs.indexing.filter_fields`): the search gives the top k of the matching passages, with their unfiltered scores.
"""

import json
from bisect import bisect_right
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from jobs.indexing.filter_fields import shard_filter_columns
from jobs.passages import Passages
from jobs.retrieval_settings import JOINED
from jobs.storage import local_index_folder
from qa_core.retrieval.filter_fields import check_fields_held
from qa_core.retrieval.filters import matching_mask, question_filters
from qa_core.retrieval.index import BM25Index
from qa_core.retrieval.sharding import search_shards
from qa_core.retrieval.topk import NO_POSITION, NO_SCORE

# What the retrieval stage returns: the questions, with `document_ids` filled for the retrieved ones and their
# scores (null for questions that named their documents or could not be asked).
RETRIEVED_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("query", pa.string()),
        ("document_ids", pa.list_(pa.string())),  # a retrieved passage's source document
        ("retrieval_scores", pa.list_(pa.float64())),
        ("retrieved_positions", pa.list_(pa.int64())),  # the hits' corpus positions, for the next shard's merge
        # With split_length, each retrieved passage's id and character range in its document (else null).
        ("passage_ids", pa.list_(pa.string())),
        ("passage_starts", pa.list_(pa.int64())),
        ("passage_ends", pa.list_(pa.int64())),
    ]
)
# Dense and hybrid retrieval: each retriever's score and rank (1 = its best) of each retrieved hit, null where that
# retriever did not find it (null lists for questions not retrieved for, or retrieved by BM25 alone): (name, Arrow
# type, description) as the questions table declares its columns (`jobs.table_schema`).
RETRIEVER_COLUMNS = [
    (
        f"{name}_{kind}",
        pa.list_(pa.float64() if kind == "scores" else pa.int32()),
        f"{name} retrieval's {kind[:-1]} of each retrieved document, in retrieved_document_ids' order"
        + (" (1: its best)" if kind == "ranks" else "")
        + f"; an item is null where {name} did not find that document, the list null unless the run retrieved by "
        + ("dense or hybrid" if name == "dense" else "hybrid"),
    )
    for name in JOINED
    for kind in ("scores", "ranks")
]
RETRIEVER_FIELDS = [pa.field(name, kind) for name, kind, _ in RETRIEVER_COLUMNS]
# With --ranker (`jobs.bulk_qa.workers.rank`): the cross-encoder's score of each document kept, best first.
RANKER_COLUMN = (
    "ranker_scores",
    pa.list_(pa.float64()),
    "--ranker's score of each retrieved document, in retrieved_document_ids' order (the ranker's, best first); "
    "null unless the run ranked with --ranker and retrieved for the question",
)
RANKER_FIELD = pa.field(*RANKER_COLUMN[:2])
# The columns that describe a question's hits, one list entry per hit (the fields of `Hit`).
HIT_COLUMNS = ("document_ids", "passage_ids", "passage_starts", "passage_ends")
# The questions' column of each question's own filter (JSON, null: none), carried through the retrieval stages.
FILTERS = "filters"
# Distinct filters whose masks a retrieval actor keeps (`FilterMasks`).
CACHED_MASKS = 16


class Hit(NamedTuple):
    """A retrieved document, or a passage of one: the document's id and, for a passage, its id and range there."""

    document_id: str
    passage_id: str | None = None
    start: int | None = None
    end: int | None = None


def row_filters(batch: pa.Table, common: dict[str, Any] | None) -> list[dict[str, Any] | None]:
    """Each row's filter: `common` (the run's `filters`) ANDed with the row's `FILTERS` (checked before any work)."""
    own = batch[FILTERS].to_pylist() if FILTERS in batch.column_names else [None] * len(batch)
    return question_filters(batch["id"].to_pylist(), own, common)


def filter_groups(filters: list[dict[str, Any] | None], rows: list[int]) -> dict[str, list[int]]:
    """`rows` grouped by their filter (as canonical JSON; `null` for none), each group searched with one mask."""
    groups: dict[str, list[int]] = {}
    for row in rows:
        groups.setdefault(json.dumps(filters[row], sort_keys=True), []).append(row)
    return groups


class FilterMasks:
    """
    The masks of filters over the corpus positions `[offset, offset + n_docs)` of some shards, by corpus position
    (`sharding.search_shards`' `allowed`: False before `offset`), from their ids and filter fields; the last
    `CACHED_MASKS` kept.
    """

    def __init__(self, columns: Mapping[str, Any], offset: int, n_docs: int) -> None:
        """:param columns: The shards' `id` and filter fields (`meta.<name>`), one value per passage, in order."""
        self.columns, self.offset, self.n_docs = columns, offset, n_docs
        self._masks: dict[str, np.ndarray | None] = {}

    @classmethod
    def of_shards(cls, folders: list[Any], ids: list[pa.Array], offset: int) -> "FilterMasks":
        """The masks of consecutive shards (their local folders and ids, in corpus order) from `offset` on."""
        kept = [shard_filter_columns(folder) for folder in folders]
        columns = {name: pa.chunked_array([part[name] for part in kept]) for name in (kept[0] if kept else {})}
        n_docs = sum(map(len, ids))
        return cls({"id": pa.chunked_array(ids, pa.string()), **columns}, offset, n_docs)

    def mask(self, key: str) -> np.ndarray | None:
        """The mask of a filter (`filter_groups`' key), by corpus position; None for no filter (every passage)."""
        if key not in self._masks:
            filters = json.loads(key)
            if filters is None:
                return None
            if len(self._masks) >= CACHED_MASKS:
                self._masks.pop(next(iter(self._masks)))
            check_fields_held(filters, self.columns)  # checked before the run; a shard without them fails here
            allowed = np.zeros(self.offset + self.n_docs, bool)
            allowed[self.offset :] = matching_mask(filters, self.columns, self.n_docs)
            self._masks[key] = allowed
        return self._masks[key]


class RetrieveDocuments:
    """
    Holds memory-mapped `BM25Index`es (a whole corpus, or consecutive shards of one) and retrieves for the
    questions of each batch that have no `document_ids` (a null value, or no such column), searching its shards
    one after the other (`sharding.search_shards`). A question with an empty query is left alone: it becomes an
    `error` row, as without retrieval; one whose query has no indexed term gets no documents. An index of
    passages (`split_length`) gives each hit as its source document with the passage's id and range
    (`HIT_COLUMNS`).

    Stages of shards are chained: the first finds the questions to retrieve for, each later one searches for what
    beats the k-th best hit carried in the rows (its floor: fewer documents to score) and merges its own hits into
    those (`merge_top_k`: exact, ties in corpus order), so that after the last the rows hold the corpus's top k.
    Within a stage each shard's floor is likewise the k-th best of the shards before it.
    """

    def __init__(self, locations: list[str], retriever_top_k: int, filters: dict[str, Any] | None = None) -> None:
        """
        :param locations: The index folder, or consecutive shard folders of one in corpus order, local paths or
            URIs.
        :param retriever_top_k: Documents to retrieve per question.
        :param filters: The run's filter for every question (ANDed with each question's own), or None.
        :raises ValueError: If a folder's passages do not match its index.
        """
        self.shards: list[BM25Index] = []
        self.passages: list[Passages | None] = []  # each shard's; None: the index holds whole documents
        folders = []
        for location in locations:
            folder = local_index_folder(location)
            shard, passages = BM25Index.load(folder, mmap=True), Passages.load(folder)
            if passages is not None and len(passages) != len(shard.doc_ids):
                raise ValueError(f"{location}: {len(passages)} passages for {len(shard.doc_ids)} documents.")
            self.shards.append(shard)
            self.passages.append(passages)
            folders.append(folder)
        self._offsets = [shard.doc_offset for shard in self.shards]
        self.top_k = retriever_top_k
        self.filters = filters
        ids = [shard.doc_ids.arrow() for shard in self.shards]
        self.masks = FilterMasks.of_shards(folders, ids, self._offsets[0] if self.shards else 0)

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Questions (`id`, `query`, optional `document_ids`, or an earlier shard's rows) -> `RETRIEVED_SCHEMA` rows."""
        queries = batch["query"].to_pylist()
        hits = hit_columns(batch)
        if "retrieved_positions" in batch.column_names:  # an earlier shard chose the questions and found hits
            carried = batch["retrieved_positions"].to_pylist()
            scores = batch["retrieval_scores"].to_pylist()
            asked = [row for row, positions in enumerate(carried) if positions is not None]
        else:
            carried, scores = [None] * len(batch), [None] * len(batch)
            asked = asked_rows(queries, hits["document_ids"])
        filters = row_filters(batch, self.filters)
        for key, group in filter_groups(filters, asked).items():  # the questions of a filter searched at once
            before = (
                np.array([_padded(carried[row] or [], NO_POSITION, self.top_k) for row in group], np.int64),
                np.array([_padded(scores[row] or [], NO_SCORE, self.top_k) for row in group], np.float64),
            )
            # (group, k) positions, scores: the earlier stages' hits merged with what beats them here
            group_queries = [queries[row] for row in group]
            allowed = self.masks.mask(key)
            positions, hit_scores = search_shards(self.shards, group_queries, self.top_k, best=before, allowed=allowed)
            for row, row_positions, row_scores in zip(group, positions, hit_scores, strict=True):
                known = dict(zip(carried[row] or [], row_hits(hits, row), strict=True))
                kept = row_positions[row_positions != NO_POSITION].tolist()
                found_hits = [known.get(position) or self._hit(position) for position in kept]
                set_row_hits(hits, row, found_hits, self.passages[0] is not None)
                scores[row] = row_scores[: len(kept)].tolist()
                carried[row] = kept
        return retrieved_table(batch, scores, carried, hits)

    def _hit(self, position: int) -> Hit:
        """The document (or passage) of these shards at corpus `position`."""
        at = bisect_right(self._offsets, position) - 1
        shard, passages, index = self.shards[at], self.passages[at], position - self._offsets[at]
        if passages is None:
            return Hit(shard.doc_ids[index])
        source_id, start, end = passages.hit(index)
        return Hit(source_id, shard.doc_ids[index], start, end)


def retrieved_table(
    batch: pa.Table,
    scores: list[list[float] | None],
    positions: list[list[int] | None],
    hits: dict[str, list],
    more: dict[str, pa.Array] | None = None,
    schema: pa.Schema = RETRIEVED_SCHEMA,
) -> pa.Table:
    """
    A retrieval stage's output: the batch's `id` and `query`, each row's hits' scores, corpus positions and
    `HIT_COLUMNS` (null for the rows not retrieved for) and the stage's `more` columns, in `schema`'s order, then
    the batch's `FILTERS` where it has them (for the next stages).
    """
    found = pa.table(
        {
            "id": batch["id"],
            "query": batch["query"],
            "retrieval_scores": pa.array(scores, pa.list_(pa.float64())),
            "retrieved_positions": pa.array(positions, pa.list_(pa.int64())),
            **{name: pa.array(values, RETRIEVED_SCHEMA.field(name).type) for name, values in hits.items()},
            **(more or {}),
        }
    ).select(schema.names)
    return found.append_column(FILTERS, batch[FILTERS]) if FILTERS in batch.column_names else found


def asked_rows(queries: list[str | None], document_ids: list[list[str] | None]) -> list[int]:
    """The rows to retrieve for: no `document_ids` and a query that is not empty."""
    return [
        row for row, (query, ids) in enumerate(zip(queries, document_ids, strict=True))
        if ids is None and query is not None and query.strip()
    ]  # fmt: skip


def hit_columns(batch: pa.Table) -> dict[str, list]:
    """Each row's hits, column by column (`HIT_COLUMNS`; null where the batch has no such column)."""
    return {name: _column(batch, name) for name in HIT_COLUMNS}


def _column(batch: pa.Table, name: str) -> list:
    """A column's values, or nulls when the batch has no such column."""
    return batch[name].to_pylist() if name in batch.column_names else [None] * len(batch)


def row_hits(hits: dict[str, list], row: int) -> list[Hit]:
    """The hits a row carries (an earlier shard's), as `Hit`s."""
    ids = hits["document_ids"][row] or []
    columns = [hits[name][row] or [None] * len(ids) for name in HIT_COLUMNS[1:]]
    return [Hit(*values) for values in zip(ids, *columns, strict=True)]


def set_row_hits(hits: dict[str, list], row: int, found: list[Hit], passages: bool) -> None:
    """Sets a row's hits, column by column; without `passages` (whole documents) the passage columns stay null."""
    columns = list(zip(*found, strict=True)) if found else [()] * len(HIT_COLUMNS)
    for name, values in zip(HIT_COLUMNS, columns, strict=True):
        hits[name][row] = list(values) if passages or name == "document_ids" else None


def _padded(values: list, padding: float, k: int) -> list:
    """`values` padded to `k` entries."""
    return list(values) + [padding] * (k - len(values))
