"""
EmbeddingRetriever: Haystack's `InMemoryEmbeddingRetriever` ranking over the dense shards of an index folder, exact
(`dense.search_shards`) or approximate (`ann.search_ann`, where the index holds an approximate index), many queries
at once.
"""

import inspect
from bisect import bisect_right
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from qa_core.hardware import PRECISIONS, resolve_precision
from qa_core.retrieval.ann import DEFAULT_SEARCH, AnnSearch, load_ann, require_faiss, search_ann
from qa_core.retrieval.dense import DenseIndex, search_shards
from qa_core.retrieval.scored_document import ScoredDocument
from qa_core.retrieval.topk import NO_POSITION, check_k


class EmbeddingRetriever:
    """
    Retrieves the passages whose vectors best match a query's vector, ranked and scored as Haystack's
    `InMemoryEmbeddingRetriever` over an `InMemoryDocumentStore` holding the same vectors (`scale_score=False`):
    dot products or cosines, best first, ties in corpus order. Where the index holds an approximate index
    (`dense["ann"]`) and `approximate` is on, it is searched instead and its hits rescored exactly: the same scores,
    only which passages are found may differ (its recall@k).

    The shards are an index folder's `dense/` shards (`jobs.indexing.embed` writes them, `build.json`'s `dense`
    section lists them), memory-mapped. The query vectors come from the embedding model that embedded the passages
    (`qa_core.embedding.SentenceEmbedder`, as Haystack's text embedder precedes its retriever).

    Usage example:
    ```python
    retriever = EmbeddingRetriever(index_path="index", dense=build_record["dense"], top_k=5)
    retriever.warm_up()
    hits = retriever.run(query_embedding=embedder.embed(["What is Python?"])[0])["documents"]
    ```
    """

    def __init__(
        self,
        index_path: str | Path,
        dense: dict[str, Any],
        top_k: int = 10,
        search_precision: str = "auto",
        approximate: bool = True,
        ann_search: AnnSearch | dict[str, int] = DEFAULT_SEARCH,
        ann_threads: int | None = None,
    ) -> None:
        """
        Creates the retriever; `warm_up()` loads the shards.

        :param index_path: The local index folder that holds the shards.
        :param dense: Its build record's `dense` section: `similarity`, `shards` (each `folder`, `doc_offset`, `n`),
            and `ann` where it holds an approximate index.
        :param top_k: Passages to return per query (at least 1).
        :param search_precision: The exact search's screening product: `fp32`, `bf16` or `auto` (bf16 where the CPU
            multiplies it natively); the same hits and scores either way.
        :param approximate: Search the approximate index where the index holds one; off: always exactly.
        :param ann_search: How the approximate index is searched (`AnnSearch`, or its fields as a mapping).
        :param ann_threads: FAISS's threads for the approximate search; None: FAISS's default.
        :raises ValueError: If `top_k < 1` or the precision is unknown.
        """
        check_k(top_k)
        if search_precision not in PRECISIONS:
            raise ValueError(f"search_precision must be one of {', '.join(PRECISIONS)}, not {search_precision!r}.")
        self.index_path = str(index_path)
        self.dense = dense
        self.top_k = top_k
        self.search_precision = search_precision
        self.approximate = approximate
        self.ann_search = AnnSearch(**ann_search) if isinstance(ann_search, dict) else ann_search
        self.ann_threads = ann_threads
        self._shards: list[DenseIndex] = []
        self._offsets: list[int] = []
        self._ann: Any | None = None
        self._precision = "fp32"

    def warm_up(self) -> None:
        """
        Memory-maps the shards and loads the approximate index where it is searched. Calling it again does nothing.

        :raises ValueError: If a shard or the approximate index does not match the `dense` section.
        :raises ImportError: Without FAISS, for an index that holds an approximate index searched.
        """
        if self._shards:
            return
        folder = Path(self.index_path)
        similarity = self.dense["similarity"]
        self._shards = [
            DenseIndex.load(folder / shard["folder"], mmap=True, similarity=similarity)
            for shard in self.dense["shards"]
        ]
        self._offsets = [shard.doc_offset for shard in self._shards]
        self._precision = resolve_precision(self.search_precision, "cpu")
        if self.approximate and "ann" in self.dense:
            self._ann = load_ann(folder, self.dense)
            if self.ann_threads is not None:
                require_faiss().omp_set_num_threads(max(1, self.ann_threads))

    @property
    def shards(self) -> list[DenseIndex]:
        """The loaded shards, in corpus order."""
        return self._warm_shards()

    def search(self, query_embeddings: np.ndarray, top_k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """
        The best passages of each query as corpus positions: what `run_batch` returns, for callers that find the
        passages by position (the bulk job's retrieval stage).

        :param query_embeddings: `(queries, dimension)` query vectors.
        :param top_k: Most passages per query; None: the retriever's `top_k`.
        :returns: `(queries, top_k)` int64 corpus positions and float64 scores, best first, padded with -1 and -inf
            where the index holds fewer passages.
        :raises RuntimeError: If `warm_up()` was not called.
        """
        shards = self._warm_shards()
        top_k = self.top_k if top_k is None else top_k
        if self._ann is None:
            return search_shards(shards, query_embeddings, top_k, self._precision)
        return search_ann(self._ann, shards, query_embeddings, top_k, self.ann_search)

    def id_at(self, position: int) -> str:
        """The id of the passage at corpus `position`."""
        shards = self._warm_shards()
        shard = shards[bisect_right(self._offsets, position) - 1]
        return shard.ids[position - shard.doc_offset]

    def run(self, query_embedding: list[float] | np.ndarray, top_k: int | None = None) -> dict[str, Any]:
        """
        Retrieves the passages that best match a query vector.

        :param query_embedding: The query's vector.
        :param top_k: Most passages to return; None: the retriever's `top_k`.
        :returns: `{"documents": [ScoredDocument, ...]}` (ids and scores; the shards hold no texts), best first.
        :raises RuntimeError: If `warm_up()` was not called.
        """
        return {"documents": self.run_batch([query_embedding], top_k=top_k)["documents"][0]}

    def run_batch(
        self, query_embeddings: list[list[float]] | np.ndarray, top_k: int | None = None
    ) -> dict[str, list[list[ScoredDocument]]]:
        """
        Retrieves the best passages for many query vectors; each list equals what `run` returns for its query.

        :param query_embeddings: The queries' vectors, one row each.
        :param top_k: Most passages per query; None: the retriever's `top_k`.
        :returns: `{"documents": [[ScoredDocument, ...], ...]}`, one list per query, best first.
        :raises RuntimeError: If `warm_up()` was not called.
        """
        positions, scores = self.search(np.asarray(query_embeddings, np.float64), top_k)
        return {
            "documents": [
                [
                    ScoredDocument(content=None, id=self.id_at(int(position)), score=float(score))
                    for position, score in zip(row_positions, row_scores, strict=True)
                    if position != NO_POSITION
                ]
                for row_positions, row_scores in zip(positions, scores, strict=True)
            ]
        }

    def _warm_shards(self) -> list[DenseIndex]:
        if not self._shards:
            raise RuntimeError("The retriever is not warmed up: call warm_up() before run(), run_batch() or search().")
        return self._shards

    def to_dict(self) -> dict[str, Any]:
        """Serializes the retriever: `{"type": ..., "init_parameters": {...}}` with every constructor parameter."""
        parameters = {name: getattr(self, name) for name in inspect.signature(type(self)).parameters}
        parameters["ann_search"] = asdict(self.ann_search)
        return {"type": f"{type(self).__module__}.{type(self).__qualname__}", "init_parameters": parameters}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EmbeddingRetriever":
        """Rebuilds a retriever from `to_dict()`'s form."""
        return cls(**data.get("init_parameters", {}))
