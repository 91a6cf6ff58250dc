"""
Exact vector search with the ranking of Haystack's `InMemoryDocumentStore.embedding_retrieval` (what
`InMemoryEmbeddingRetriever` runs): scores are dot products (the store's default `dot_product`) or cosines of the
query's and the documents' vectors, unscaled (its `scale_score=False`), best first, ties in corpus order, no
score dropped.

A dense shard is a folder: `vectors.npy` (float32 `(n, dimension)`, memory-mapped) and `dense.json`
(`doc_offset`: the corpus position of its first vector, `n`, `dimension`, `similarity`, the ids). Shards are
contiguous ranges of corpus positions; each is searched alone and `merge_top_k` merges their hits exactly.
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from qa_core.retrieval.topk import NO_POSITION, NO_SCORE, check_k, merge_top_k, top_k

FORMAT = "qa_core.retrieval.dense/1"
DENSE_HEADER_FILE = "dense.json"
VECTORS_FILE = "vectors.npy"
SIMILARITIES = ("dot_product", "cosine")  # InMemoryDocumentStore's embedding_similarity_function values
DEFAULT_SIMILARITY = "dot_product"  # InMemoryDocumentStore's default
# Vectors scored per matrix product, so that a query batch's score matrix stays small whatever the shard's size.
ROWS_PER_PRODUCT = 65536


def check_similarity(similarity: str) -> None:
    """:raises ValueError: If `similarity` is not one of `SIMILARITIES`."""
    if similarity not in SIMILARITIES:
        raise ValueError(f"similarity must be one of {', '.join(SIMILARITIES)}, not {similarity!r}.")


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length, zero rows left as they are (Haystack's cosine guard against zero vectors)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0.0, 1.0, norms)


@dataclass
class DenseIndex:
    """
    The vectors of a corpus, or of one contiguous shard of it, searched exactly.

    Usage example:
    ```python
    index = DenseIndex(ids=["a", "b"], vectors=np.eye(2, dtype=np.float32))
    positions, scores = index.search(np.array([[1.0, 0.0]], np.float32), k=1)  # [[0]], [[1.0]]
    ```

    :param ids: The ids of the vectors' documents (or passages), in corpus order.
    :param vectors: `(n, dimension)` float32.
    :param doc_offset: The corpus position of the first vector.
    :param similarity: `dot_product` or `cosine`.
    """

    ids: list[str]
    vectors: np.ndarray
    doc_offset: int = 0
    similarity: str = DEFAULT_SIMILARITY

    def __post_init__(self) -> None:
        check_similarity(self.similarity)
        if self.vectors.ndim != 2 or len(self.ids) != self.vectors.shape[0]:
            raise ValueError(f"{len(self.ids)} ids for vectors of shape {self.vectors.shape}: one row per id needed.")

    @property
    def dimension(self) -> int:
        """The vectors' dimension."""
        return int(self.vectors.shape[1])

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """
        The k most similar vectors of each query.

        :param queries: `(queries, dimension)` query vectors.
        :param k: Most hits per query (at least 1).
        :returns: `(queries, k)` int64 corpus positions and float64 scores, best first, ties in corpus order,
            padded with -1 and -inf when the shard holds fewer than k vectors.
        :raises ValueError: If `k < 1` or the queries' dimension is not the index's.
        """
        check_k(k)
        queries = np.asarray(queries, np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dimension:
            raise ValueError(f"Query vectors of shape {queries.shape} for an index of dimension {self.dimension}.")
        if self.similarity == "cosine":
            queries = unit_rows(queries)
        results = [
            self._search_rows(queries, start, min(start + ROWS_PER_PRODUCT, len(self.ids)), k)
            for start in range(0, len(self.ids), ROWS_PER_PRODUCT)
        ]
        if not results:
            empty = np.full((len(queries), k), NO_POSITION, np.int64)
            return empty, np.full((len(queries), k), NO_SCORE, np.float64)
        return results[0] if len(results) == 1 else merge_top_k(results, k)

    def _search_rows(self, queries: np.ndarray, start: int, stop: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The top k of the vectors in rows `start:stop`, as corpus positions."""
        vectors = np.asarray(self.vectors[start:stop], np.float32)
        if self.similarity == "cosine":
            vectors = unit_rows(vectors)
        scores = (queries @ vectors.T).astype(np.float64)  # (queries, stop - start)
        positions = np.full((len(queries), k), NO_POSITION, np.int64)
        found = np.full((len(queries), k), NO_SCORE, np.float64)
        for row, row_scores in enumerate(scores):
            hits, hit_scores = top_k(row_scores, k, drop_non_positive=False)
            positions[row, : hits.size] = hits + start + self.doc_offset
            found[row, : hits.size] = hit_scores
        return positions, found

    def save(self, folder: str | Path, record: dict[str, Any] | None = None) -> None:
        """
        Writes `vectors.npy` and `dense.json` into `folder` (created if needed).

        :param record: More entries for the header (e.g. the model and its fingerprint).
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / VECTORS_FILE, np.ascontiguousarray(self.vectors, np.float32), allow_pickle=False)
        header = {
            **(record or {}),
            "format": FORMAT,
            "doc_offset": self.doc_offset,
            "n": len(self.ids),
            "dimension": self.dimension,
            "similarity": self.similarity,
            "ids": list(self.ids),
        }
        (folder / DENSE_HEADER_FILE).write_text(json.dumps(header), encoding="utf-8")

    @classmethod
    def load(cls, folder: str | Path, mmap: bool = True, similarity: str | None = None) -> "DenseIndex":
        """
        Reads a folder that `save` wrote.

        :param mmap: Memory-map the vectors instead of reading them.
        :param similarity: Search with this similarity instead of the one saved (the vectors do not depend on it).
        :raises ValueError: For a folder that is not a dense shard, or whose vectors do not match its header.
        """
        header = read_dense_header(folder)
        vectors = np.load(Path(folder) / VECTORS_FILE, mmap_mode="r" if mmap else None, allow_pickle=False)
        if vectors.dtype != np.float32 or vectors.shape != (header["n"], header["dimension"]):
            raise ValueError(
                f"{folder}: {VECTORS_FILE} holds {vectors.dtype} {vectors.shape}, not float32 "
                f"({header['n']}, {header['dimension']}) as {DENSE_HEADER_FILE} says."
            )
        return cls(header["ids"], vectors, header["doc_offset"], similarity or header["similarity"])


def read_dense_header(folder: str | Path) -> dict[str, Any]:
    """
    A dense shard's `dense.json`.

    :raises ValueError: If it is missing or not of this format.
    """
    path = Path(folder) / DENSE_HEADER_FILE
    try:
        header = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a dense index header ({error}).") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f"{path}: not a dense index of format {FORMAT}.")
    return header
