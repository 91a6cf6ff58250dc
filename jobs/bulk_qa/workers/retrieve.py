"""
The retrieval stage, one instance per Ray actor: a wave's questions -> the same questions, those without
`document_ids` given the `retriever_top_k` best documents of the corpus by BM25 (Haystack's
`InMemoryBM25Retriever` ranking, `qa_core.retrieval`), best first, with their scores.

Each actor memory-maps the index folder the driver saved (or `--index` named): the posting arrays are shared
through the page cache, never copied per task. An index on a remote filesystem is first copied once per node
into the local temporary folder.
"""

import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from jobs.bulk_qa.workers.rows import shard_of
from jobs.bulk_qa.workers.storage import resolve_path
from qa_core.retrieval.index import BM25Index
from qa_core.retrieval.scoring import resolve_parameters
from qa_core.retrieval.topk import NO_POSITION, NO_SCORE, merge_top_k
from qa_core.settings import Settings, at_least

# What the retrieval stage returns: the questions, with `document_ids` filled for the retrieved ones and their
# scores (null for questions that named their documents or could not be asked).
RETRIEVED_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("query", pa.string()),
        ("document_ids", pa.list_(pa.string())),
        ("retrieval_scores", pa.list_(pa.float64())),
        ("retrieved_positions", pa.list_(pa.int64())),  # the hits' corpus positions, for the next shard's merge
    ]
)


@dataclass(frozen=True)
class RetrievalSettings(Settings):
    """How questions without document_ids get documents: BM25 over --documents, as Haystack's InMemoryBM25Retriever."""

    retriever_top_k: int = 10  # documents retrieved for each question without document_ids (Haystack's top_k)
    bm25_algorithm: str = "BM25L"  # BM25L (Haystack's default), BM25Okapi, BM25Plus, or Lucene
    bm25_parameters: dict[str, float] = field(default_factory=dict)  # some of k1, b, delta or epsilon (Haystack's)
    index: str | None = None  # index folder from `python -m jobs.index` to search instead of building one
    index_shards: int = 1  # shards of the index the run builds, each searched by its own actor (merged exactly)

    def problems(self) -> list[str]:
        problems = at_least("retriever_top_k", self.retriever_top_k, 1) + at_least("index_shards", self.index_shards, 1)
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


def wave_questions(batch: pa.Table, num_shards: int, shards: frozenset[int]) -> pa.Table:
    """The batch's questions that belong to the wave's shards."""
    keep = [shard_of(question_id, num_shards) in shards for question_id in batch["id"].to_pylist()]
    return batch.filter(pa.array(keep, pa.bool_()))


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


class RetrieveDocuments:
    """
    Holds one memory-mapped `BM25Index` (a whole corpus, or one shard of it) and retrieves for the questions of
    each batch that have no `document_ids` (a null value, or no such column), in one `search` call. A question
    with an empty query is left alone: it becomes an `error` row, as without retrieval; one whose query has no
    indexed term gets no documents.

    Shards are chained, one stage each: the first finds the questions to retrieve for, each later one merges its
    own hits into those carried in the rows (`merge_top_k`: exact, ties in corpus order), so that after the last
    the rows hold the corpus's top k.
    """

    def __init__(self, location: str, retriever_top_k: int) -> None:
        """
        :param location: The index (or shard) folder, a local path or URI.
        :param retriever_top_k: Documents to retrieve per question.
        """
        self.index = BM25Index.load(local_index_folder(location), mmap=True)
        self.top_k = retriever_top_k

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Questions (`id`, `query`, optional `document_ids`, or an earlier shard's rows) -> `RETRIEVED_SCHEMA` rows."""
        queries = batch["query"].to_pylist()
        document_ids = (
            batch["document_ids"].to_pylist() if "document_ids" in batch.column_names else [None] * len(batch)
        )
        if "retrieved_positions" in batch.column_names:  # an earlier shard chose the questions and found hits
            carried = batch["retrieved_positions"].to_pylist()
            scores = batch["retrieval_scores"].to_pylist()
            asked = [row for row, positions in enumerate(carried) if positions is not None]
        else:
            carried, scores = [None] * len(batch), [None] * len(batch)
            asked = [
                row for row, (query, ids) in enumerate(zip(queries, document_ids, strict=True))
                if ids is None and query is not None and query.strip()
            ]  # fmt: skip
        if asked:
            found = self.index.search([queries[row] for row in asked], self.top_k)  # (asked, k) positions, scores
            before = (
                np.array([_padded(carried[row] or [], NO_POSITION, self.top_k) for row in asked], np.int64),
                np.array([_padded(scores[row] or [], NO_SCORE, self.top_k) for row in asked], np.float64),
            )
            positions, hit_scores = merge_top_k([before, found], self.top_k)  # (asked, k)
            offset = self.index.doc_offset
            for row, row_positions, row_scores in zip(asked, positions, hit_scores, strict=True):
                known = dict(zip(carried[row] or [], document_ids[row] or [], strict=True))
                hits = row_positions[row_positions != NO_POSITION]
                document_ids[row] = [known.get(int(p)) or self.index.doc_ids[p - offset] for p in hits]
                scores[row] = row_scores[: hits.size].tolist()
                carried[row] = hits.tolist()
        return pa.table(
            {
                "id": batch["id"],
                "query": batch["query"],
                "document_ids": pa.array(document_ids, pa.list_(pa.string())),
                "retrieval_scores": pa.array(scores, pa.list_(pa.float64())),
                "retrieved_positions": pa.array(carried, pa.list_(pa.int64())),
            },
            schema=RETRIEVED_SCHEMA,
        )


def _padded(values: list, padding: float, k: int) -> list:
    """`values` padded to `k` entries."""
    return list(values) + [padding] * (k - len(values))
