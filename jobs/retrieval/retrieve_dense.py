"""
Dense and hybrid retrieval, one actor per pool: the questions' queries embedded by the index's embedding model, the
dense shards of the index searched by `qa_core.retrieval.EmbeddingRetriever` (Haystack's
`InMemoryEmbeddingRetriever` ranking, exact or approximate), and with a method that joins (`retrieval: hybrid`) the
BM25 hits that the BM25 stages carried in the rows joined with the dense ones by `qa_core.retrieval.DocumentJoiner`
(as Haystack's `DocumentJoiner`).

The rows keep the joined hits (`document_ids`, `retrieval_scores`, ...) and each retriever's own score and rank
(1 = its best) of every joined hit (`retrieve.RETRIEVER_FIELDS`, null where that retriever did not find the hit).
A question's metadata filter restricts the dense search as it restricts BM25's (`retrieve.FilterMasks`, from the
filter fields of the BM25 shards, which hold the same passages in the same order): each retriever filtered, then
joined.
"""

from typing import Any

import numpy as np
import pyarrow as pa

from jobs.passages import Passages, ShardPassages
from jobs.retrieval.retrieve import (
    RETRIEVED_SCHEMA,
    RETRIEVER_FIELDS,
    FilterMasks,
    Hit,
    asked_rows,
    filter_groups,
    hit_columns,
    local_index_folder,
    retrieved_table,
    row_filters,
    row_hits,
    set_row_hits,
)
from jobs.retrieval_settings import JOINED
from qa_core.embedding import SentenceEmbedder
from qa_core.retrieval.ann import DEFAULT_SEARCH, AnnSearch
from qa_core.retrieval.embedding_retriever import EmbeddingRetriever
from qa_core.retrieval.index_io import HEADER_FILE, read_doc_ids
from qa_core.retrieval.joiner import DocumentJoiner
from qa_core.retrieval.topk import NO_POSITION

RETRIEVER_COLUMNS = {field.name: field.type for field in RETRIEVER_FIELDS}
DENSE_RETRIEVED_SCHEMA = pa.schema(
    [*RETRIEVED_SCHEMA, *(pa.field(name, kind) for name, kind in RETRIEVER_COLUMNS.items())]
)


class RetrieveDense:
    """
    Holds the dense shards of an index (memory-mapped), the embedding model and where each indexed passage lies,
    and retrieves for a batch's questions: those without `document_ids` (`retrieval: dense`), or those an earlier
    BM25 stage retrieved for (`joins`), whose BM25 hits it joins with its own.
    """

    def __init__(
        self,
        location: str,
        dense: dict[str, Any],
        bm25_shards: list[str],
        retriever_top_k: int,
        joins: bool,
        join_mode: str,
        join_weights: list[float] | None,
        cpu_threads: int,
        search_precision: str,
        ann_search: AnnSearch = DEFAULT_SEARCH,
        device: str | None = None,
        filters: dict[str, Any] | None = None,
    ) -> None:
        """
        :param location: The index folder (local path or URI).
        :param dense: The build record's `dense` section (model, similarity, shards).
        :param bm25_shards: The BM25 shard folders, in corpus order (they hold where each passage lies).
        :param retriever_top_k: Hits per question, of each retriever and joined.
        :param joins: Join the BM25 hits carried in the rows with the dense ones.
        :param join_mode: `DocumentJoiner`'s join mode.
        :param join_weights: Its weights, in `JOINED` order, or None.
        :param cpu_threads: torch's threads (the search's, and the model's on the CPU).
        :param search_precision: The exact search's screening product (`fp32`, `bf16` or `auto`; the same hits).
        :param ann_search: How the approximate index is searched, where the index holds one (`dense.ann`): searched
            instead, with `cpu_threads` FAISS threads.
        :param device: Where the model runs; None: the GPU Ray assigned this actor, else the CPU.
        :param filters: The run's filter for every question (ANDed with each question's own), or None.
        """
        import torch

        if device is None:
            import ray

            device = "cuda:0" if ray.get_gpu_ids() and torch.cuda.is_available() else "cpu"
        torch.set_num_threads(max(1, cpu_threads))  # the search runs on the CPU, the model too without a GPU
        folder = local_index_folder(location)
        self.retriever = EmbeddingRetriever(folder, dense, retriever_top_k, search_precision, ann_search=ann_search,
                                            ann_threads=cpu_threads)  # fmt: skip
        self.retriever.warm_up()
        parts = [Passages.load(local_index_folder(shard)) for shard in bm25_shards]
        self.passages = None  # whole documents
        if all(part is not None for part in parts):
            self.passages = ShardPassages(parts, np.cumsum([0, *map(len, parts[:-1])]).tolist())
        self._check_bm25(folder, bm25_shards)
        bm25_folders = [local_index_folder(shard) for shard in bm25_shards]
        self.masks = FilterMasks.of_shards(bm25_folders, [read_doc_ids(shard).arrow() for shard in bm25_folders], 0)
        self.filters = filters
        self.embedder = SentenceEmbedder(dense["model"], precision=dense["precision"], device=device)
        self.embedder.warm_up()
        self.joiner = DocumentJoiner(join_mode, join_weights, retriever_top_k) if joins else None

    def _check_bm25(self, folder: Any, bm25_shards: list[str]) -> None:
        """The BM25 shards index the passages of the dense shards, in the same order (their memory-mapped ids)."""
        bm25_ids = [read_doc_ids(local_index_folder(shard)).arrow() for shard in bm25_shards]
        dense_ids = [shard.ids.arrow() for shard in self.retriever.shards]
        if not pa.chunked_array(bm25_ids, pa.string()).equals(pa.chunked_array(dense_ids, pa.string())):
            raise ValueError(f"{folder}: the dense shards hold other passages than the BM25 index ({HEADER_FILE}).")

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Questions (or the BM25 stages' rows) -> `DENSE_RETRIEVED_SCHEMA` rows."""
        queries = batch["query"].to_pylist()
        hits = hit_columns(batch)
        if self.joiner is not None:
            carried = batch["retrieved_positions"].to_pylist()
            bm25_scores = batch["retrieval_scores"].to_pylist()
            asked = [row for row, positions in enumerate(carried) if positions is not None]
        else:
            carried, bm25_scores = [None] * len(batch), [None] * len(batch)
            asked = asked_rows(queries, hits["document_ids"])
        scores: list[list[float] | None] = [None] * len(batch)
        positions: list[list[int] | None] = [None] * len(batch)
        own: dict[str, list] = {name: [None] * len(batch) for name in RETRIEVER_COLUMNS}
        filters = row_filters(batch, self.filters)
        vectors = self.embedder.embed([queries[row] for row in asked]) if asked else None
        found: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # each asked row's positions and scores
        place = {row: index for index, row in enumerate(asked)}  # each asked row's vector
        for key, group in filter_groups(filters, asked).items():  # the questions of a filter searched at once
            at = [place[row] for row in group]
            group_positions, group_scores = self.retriever.search(vectors[at], allowed=self.masks.mask(key))
            found.update(zip(group, zip(group_positions, group_scores, strict=True), strict=True))
        for row in asked:
            row_positions, row_scores = found[row]
            kept = row_positions != NO_POSITION
            lists = {"dense": list(zip(row_positions[kept].tolist(), row_scores[kept].tolist(), strict=True))}
            if self.joiner is not None:
                lists["bm25"] = list(zip(carried[row], bm25_scores[row], strict=True))
                joined = self.joiner.join_hits([lists[name] for name in JOINED])
            else:
                joined = lists["dense"]
            known = dict(zip(carried[row] or [], row_hits(hits, row), strict=True))
            set_row_hits(hits, row, [known.get(p) or self._hit(p) for p, _ in joined], self.passages is not None)
            positions[row] = [position for position, _ in joined]
            scores[row] = [score for _, score in joined]
            for name, retrieved in lists.items():
                rank = {position: (rank, score) for rank, (position, score) in enumerate(retrieved, 1)}
                own[f"{name}_scores"][row] = [rank[p][1] if p in rank else None for p in positions[row]]
                own[f"{name}_ranks"][row] = [rank[p][0] if p in rank else None for p in positions[row]]
        more = {name: pa.array(values, RETRIEVER_COLUMNS[name]) for name, values in own.items()}
        return retrieved_table(batch, scores, positions, hits, more, DENSE_RETRIEVED_SCHEMA)

    def _hit(self, position: int) -> Hit:
        """The document (or passage) at corpus `position`."""
        if self.passages is None:
            return Hit(self.retriever.id_at(position))
        source_id, start, end = self.passages.hit(position)
        return Hit(source_id, self.retriever.id_at(position), start, end)
