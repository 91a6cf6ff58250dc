"""
The retrieval stage, one instance per Ray actor: a wave's questions -> the same questions, those without
`document_ids` given the `retriever_top_k` best documents of the corpus by BM25 (Haystack's
`InMemoryBM25Retriever` ranking, `qa_core.retrieval`), best first, with their scores. With `split_length` the
index holds passages of the documents (`workers.passages`): a retrieved passage is given as its source
document's id, with the passage's id and its character range there, which is what the reader reads.

Each actor memory-maps the index folder the driver saved (or `--index` named): the posting arrays are shared
through the page cache, never copied per task. An index on a remote filesystem is first copied once per node
into the local temporary folder.
"""

import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from jobs.bulk_qa.workers.passages import Passages
from jobs.bulk_qa.workers.storage import resolve_path
from jobs.bulk_qa.workers.tables import JOINED
from qa_core.hardware import PRECISIONS
from qa_core.retrieval.ann import ANN_KINDS, AnnSearch
from qa_core.retrieval.dense import DEFAULT_SIMILARITY, SIMILARITIES
from qa_core.retrieval.fusion import DEFAULT_JOIN_MODE, JOIN_MODES
from qa_core.retrieval.index import BM25Index
from qa_core.retrieval.scoring import DEFAULT_ALGORITHM, resolve_parameters
from qa_core.retrieval.topk import NO_POSITION, NO_SCORE, merge_top_k
from qa_core.settings import Settings, at_least

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
RETRIEVALS = ("bm25", "dense", "hybrid")
# The columns that describe a question's hits, one list entry per hit (the fields of `Hit`).
HIT_COLUMNS = ("document_ids", "passage_ids", "passage_starts", "passage_ends")


@dataclass(frozen=True)
class RetrievalSettings(Settings):
    """How questions without document_ids get documents from --documents: by BM25, embeddings, or both joined."""

    retrieval: str = "bm25"  # bm25, dense (embedding model) or hybrid (both, joined as Haystack's DocumentJoiner)
    retriever_top_k: int = 10  # documents retrieved for each question without document_ids (Haystack's top_k)
    bm25_algorithm: str = DEFAULT_ALGORITHM  # BM25L (Haystack's default), BM25Okapi, BM25Plus, or Lucene
    bm25_parameters: dict[str, float] = field(default_factory=dict)  # some of k1, b, delta or epsilon (Haystack's)
    index: str | None = None  # index folder from `python -m jobs.index` to search instead of building one
    index_shards: int = 1  # shards of the index the run builds, each searched by its own actor (merged exactly)
    # The shard size bounds the build's memory per task; documents added to an index later make new shards of it.
    index_shard_size: int | None = None  # passages per shard of the index built, the last fewer; None: index_shards
    # Documents split into passages of words before indexing, as Haystack's DocumentSplitter(split_by="word"):
    # retrieval finds passages and the reader reads them; answers point into the documents.
    split_length: int | None = None  # words per indexed passage (DocumentSplitter's); None: whole documents
    split_overlap: int = 0  # words consecutive passages of a document share (with split_length; less than it)
    embedding_model: str | None = None  # sentence-transformers model (hub id or local folder) for dense and hybrid
    embedding_similarity: str = DEFAULT_SIMILARITY  # dot_product (InMemoryDocumentStore's default) or cosine
    embedding_precision: str = "fp32"  # the embedding model's: fp32, bf16, or auto (bf16 where fast)
    # The exact search's screening product: fp32, bf16 or auto; the same hits and scores, bf16 faster on CPUs
    # with native bf16 (qa_core.retrieval.dense), holding a bf16 copy of the vectors in the retrieval actor.
    embedding_search_precision: str = "fp32"
    # An approximate index (FAISS, the `ann` extra) built with the dense vectors; a run whose index holds one
    # searches it instead of searching exactly (qa_core.retrieval.ann), its hits rescored exactly.
    ann: str | None = None  # None (exact search only), hnsw (a graph) or ivf (lists of 4-bit codes)
    ann_ef_search: int = AnnSearch.ef_search  # hnsw: candidates kept per query while searching (FAISS's efSearch)
    ann_nprobe: int = AnnSearch.nprobe  # ivf: lists scanned per query
    ann_candidates: int = AnnSearch.candidates  # ivf: the codes' best hits rescored exactly per query
    join_mode: str = DEFAULT_JOIN_MODE  # hybrid: DocumentJoiner's join_mode (reciprocal_rank_fusion, ...)
    join_weights: dict[str, float] = field(default_factory=dict)  # hybrid: {bm25: w, dense: w}; empty: equal

    @property
    def dense(self) -> bool:
        """Whether the retrieval embeds (dense or hybrid)."""
        return self.retrieval in ("dense", "hybrid")

    def problems(self) -> list[str]:
        problems = at_least("retriever_top_k", self.retriever_top_k, 1) + at_least("index_shards", self.index_shards, 1)
        problems += at_least("index_shard_size", self.index_shard_size, 1, optional=True)
        if self.index_shard_size is not None and self.index_shards != 1:
            problems.append(f"index_shards {self.index_shards} and index_shard_size: set one of them, not both")
        problems += self._dense_problems()
        problems += self._split_problems()
        if not isinstance(self.bm25_parameters, dict):
            return problems + [f"bm25_parameters must be a mapping, not {type(self.bm25_parameters).__name__}"]
        try:
            resolve_parameters(self.bm25_algorithm, self.bm25_parameters)
        except ValueError as error:
            problems.append(str(error).rstrip("."))
        return problems

    def parameters(self) -> dict[str, float]:
        """All of the algorithm's parameters, the defaults filled in (`scoring.resolve_parameters`)."""
        return resolve_parameters(self.bm25_algorithm, self.bm25_parameters)

    def shard_size(self, n_docs: int) -> int:
        """Passages per shard of an index of `n_docs` (`index_shard_size`, or `n_docs` over `index_shards`)."""
        return self.index_shard_size or max(1, -(-n_docs // self.index_shards))

    def _dense_problems(self) -> list[str]:
        """The retrieval and its embedding and joining settings."""
        if self.retrieval not in RETRIEVALS:
            return [f"retrieval must be one of {', '.join(RETRIEVALS)}, not {self.retrieval!r}"]
        problems = []
        if self.dense and not self.embedding_model:
            problems.append(f"retrieval {self.retrieval} needs an embedding_model")
        if self.embedding_similarity not in SIMILARITIES:
            problems.append(
                f"embedding_similarity must be one of {', '.join(SIMILARITIES)}, not {self.embedding_similarity!r}"
            )
        for name in ("embedding_precision", "embedding_search_precision"):
            if getattr(self, name) not in PRECISIONS:
                problems.append(f"{name} must be one of {', '.join(PRECISIONS)}, not {getattr(self, name)!r}")
        if self.ann is not None and (self.ann not in ANN_KINDS or not self.dense):
            problems.append(
                f"ann must be one of {', '.join(ANN_KINDS)} with retrieval dense or hybrid, not {self.ann!r}"
            )
        for name in ("ann_ef_search", "ann_nprobe", "ann_candidates"):
            problems += at_least(name, getattr(self, name), 1)
        if self.join_mode not in JOIN_MODES:
            problems.append(f"join_mode must be one of {', '.join(JOIN_MODES)}, not {self.join_mode!r}")
        weights = self.join_weights
        if not isinstance(weights, dict) or (weights and sorted(weights) != sorted(JOINED)):
            problems.append(f"join_weights must name both of {', '.join(JOINED)} or be empty, not {weights!r}")
        elif weights and (
            any(not isinstance(w, int | float) or w < 0 for w in weights.values()) or not sum(weights.values())
        ):
            problems.append(f"join_weights must be numbers >= 0 that do not sum to 0, not {weights!r}")
        return problems

    def ann_search(self) -> AnnSearch:
        """How the approximate index is searched (and its recall measured when built)."""
        return AnnSearch(ef_search=self.ann_ef_search, nprobe=self.ann_nprobe, candidates=self.ann_candidates)

    def fusion_weights(self) -> list[float] | None:
        """`join_weights` in the order the retrievers' hits are joined (`JOINED`), or None (equal)."""
        return [float(self.join_weights[name]) for name in JOINED] if self.join_weights else None

    def _split_problems(self) -> list[str]:
        """`split_documents`' rules: split_length >= 1, 0 <= split_overlap < split_length (no overlap unsplit)."""
        problems = at_least("split_length", self.split_length, 1, optional=True)
        problems += at_least("split_overlap", self.split_overlap, 0)
        if problems:
            return problems
        if self.split_length is None and self.split_overlap:
            return [f"split_overlap must be 0 without split_length, not {self.split_overlap}"]
        if self.split_length is not None and self.split_overlap >= self.split_length:
            return [f"split_overlap must be less than split_length {self.split_length}, not {self.split_overlap}"]
        return []


def local_index_folder(location: str) -> Path:
    """
    A local folder holding the index at `location`: the folder itself when it is local, else a copy in the node's
    temporary folder (made once per node and location, renamed into place when complete).
    """
    if "://" not in location or location.startswith("file://"):
        return Path(resolve_path(location)[1])
    filesystem, inner = resolve_path(location)
    cache = Path(tempfile.gettempdir()) / "bulk-qa-index" / uuid.uuid5(uuid.NAMESPACE_URL, location).hex
    if not (cache / "index.json").exists():
        partial = cache.with_name(f"{cache.name}.{uuid.uuid4().hex}")
        pafs.copy_files(
            inner, str(partial), source_filesystem=filesystem, destination_filesystem=pafs.LocalFileSystem()
        )
        try:
            partial.rename(cache)
        except OSError:  # another actor of this node finished first
            shutil.rmtree(partial, ignore_errors=True)
    return cache


class Hit(NamedTuple):
    """A retrieved document, or a passage of one: the document's id and, for a passage, its id and range there."""

    document_id: str
    passage_id: str | None = None
    start: int | None = None
    end: int | None = None


class RetrieveDocuments:
    """
    Holds one memory-mapped `BM25Index` (a whole corpus, or one shard of it) and retrieves for the questions of
    each batch that have no `document_ids` (a null value, or no such column), in one `search` call. A question
    with an empty query is left alone: it becomes an `error` row, as without retrieval; one whose query has no
    indexed term gets no documents. An index of passages (`split_length`) gives each hit as its source document
    with the passage's id and range (`HIT_COLUMNS`).

    Shards are chained, one stage each: the first finds the questions to retrieve for, each later one merges its
    own hits into those carried in the rows (`merge_top_k`: exact, ties in corpus order), so that after the last
    the rows hold the corpus's top k.
    """

    def __init__(self, location: str, retriever_top_k: int) -> None:
        """
        :param location: The index (or shard) folder, a local path or URI.
        :param retriever_top_k: Documents to retrieve per question.
        :raises ValueError: If the folder's passages do not match its index.
        """
        folder = local_index_folder(location)
        self.index = BM25Index.load(folder, mmap=True)
        self.passages = Passages.load(folder)  # None: the index holds whole documents
        if self.passages is not None and len(self.passages) != len(self.index.doc_ids):
            raise ValueError(f"{location}: {len(self.passages)} passages for {len(self.index.doc_ids)} documents.")
        self.top_k = retriever_top_k

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
        if asked:
            found = self.index.search([queries[row] for row in asked], self.top_k)  # (asked, k) positions, scores
            before = (
                np.array([_padded(carried[row] or [], NO_POSITION, self.top_k) for row in asked], np.int64),
                np.array([_padded(scores[row] or [], NO_SCORE, self.top_k) for row in asked], np.float64),
            )
            positions, hit_scores = merge_top_k([before, found], self.top_k)  # (asked, k)
            for row, row_positions, row_scores in zip(asked, positions, hit_scores, strict=True):
                known = dict(zip(carried[row] or [], row_hits(hits, row), strict=True))
                kept = row_positions[row_positions != NO_POSITION].tolist()
                found_hits = [known.get(position) or self._hit(position) for position in kept]
                set_row_hits(hits, row, found_hits, self.passages is not None)
                scores[row] = row_scores[: len(kept)].tolist()
                carried[row] = kept
        return retrieved_table(batch, scores, carried, hits)

    def _hit(self, position: int) -> Hit:
        """The document (or passage) of this index at corpus `position`."""
        index = position - self.index.doc_offset
        if self.passages is None:
            return Hit(self.index.doc_ids[index])
        passages = self.passages
        return Hit(passages.source_ids[index], self.index.doc_ids[index], passages.starts[index], passages.ends[index])


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
    `HIT_COLUMNS` (null for the rows not retrieved for) and the stage's `more` columns, in `schema`'s order.
    """
    return pa.table(
        {
            "id": batch["id"],
            "query": batch["query"],
            "retrieval_scores": pa.array(scores, pa.list_(pa.float64())),
            "retrieved_positions": pa.array(positions, pa.list_(pa.int64())),
            **{name: pa.array(values, RETRIEVED_SCHEMA.field(name).type) for name, values in hits.items()},
            **(more or {}),
        }
    ).select(schema.names)


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
