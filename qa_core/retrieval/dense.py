"""
Exact vector search with the ranking of Haystack's `InMemoryDocumentStore.embedding_retrieval` (what
`InMemoryEmbeddingRetriever` runs): scores are dot products (the store's default `dot_product`) or cosines of the
query's and the documents' vectors, unscaled (its `scale_score=False`), best first, ties in corpus order, no
score dropped.

A dense shard is a folder: `vectors.npy` (float32 `(n, dimension)`, memory-mapped) and `dense.json`
(`doc_offset`: the corpus position of its first vector, `n`, `dimension`, `similarity`, the ids). Shards are
contiguous ranges of corpus positions; `search_shards` searches several as one corpus.

The search screens, then rescores (`search_shards`): a matrix product of the queries with a block of vectors in
the search precision (`fp32`, or `bf16` where the CPU multiplies bfloat16 natively) gives approximate scores, each
within a proven bound of the exact one (`screening_error`); only the vectors whose approximate score could still
place them in a query's top k (within twice the bound of the block's k-th best, and within the bound of the k-th
best exact score found so far) are rescored exactly, as float64 dot products of the float32 vectors (as Haystack
scores them), and merged into the running top k. So both precisions return the same hits and the same scores; bf16
only makes the screening product about twice as fast (and keeps a bfloat16 copy of the vectors in memory).
"""

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from qa_core.retrieval.topk import NO_POSITION, NO_SCORE, check_k, merge_top_k

FORMAT = "qa_core.retrieval.dense/1"
DENSE_HEADER_FILE = "dense.json"
VECTORS_FILE = "vectors.npy"
SIMILARITIES = ("dot_product", "cosine")  # InMemoryDocumentStore's embedding_similarity_function values
DEFAULT_SIMILARITY = "dot_product"  # InMemoryDocumentStore's default
SEARCH_PRECISIONS = ("fp32", "bf16")  # the screening product's precision (the hits and scores are the same)
# Vectors screened per matrix product: a 256-query score block of 8 MiB stays in the CPU's cache.
ROWS_PER_PRODUCT = 8192
_FP32_ROUNDOFF = 2.0**-24  # unit roundoff of float32 (24 significant bits)
_BF16_ROUNDOFF = 2.0**-8  # of bfloat16 (8 significant bits)


def check_similarity(similarity: str) -> None:
    """:raises ValueError: If `similarity` is not one of `SIMILARITIES`."""
    if similarity not in SIMILARITIES:
        raise ValueError(f"similarity must be one of {', '.join(SIMILARITIES)}, not {similarity!r}.")


def check_search_precision(precision: str) -> None:
    """:raises ValueError: If `precision` is not one of `SEARCH_PRECISIONS`."""
    if precision not in SEARCH_PRECISIONS:
        raise ValueError(f"search precision must be one of {', '.join(SEARCH_PRECISIONS)}, not {precision!r}.")


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length, zero rows left as they are (Haystack's cosine guard against zero vectors)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0.0, 1.0, norms)


def screening_error(precision: str, dimension: int) -> float:
    """
    A bound `c` on the screening product's error: `|approximate - exact| <= c * |q| * |v|` for a query `q` and a
    vector `v` of `dimension` float32 entries, where exact is their dot product.

    float32: the product's sum of `dimension` terms, in any order, errs by at most `gamma_d = d u / (1 - d u)`
    times the sum of the terms' magnitudes (Higham, Accuracy and Stability of Numerical Algorithms, 3.1), which is
    at most `|q| |v|` (Cauchy-Schwarz); twice that bounds it safely. bfloat16: both inputs rounded to 8 bits
    (each term off by at most `2u + u^2` of its magnitude), the terms summed in float32 as above, the result
    rounded to bfloat16 (`u` of its magnitude, itself at most `(1 + 2u + u^2 + 2 gamma_d) |q| |v|`).
    """
    check_search_precision(precision)
    accumulation = 2 * dimension * _FP32_ROUNDOFF
    if precision == "fp32":
        return accumulation
    u = _BF16_ROUNDOFF
    inputs = 2 * u + u * u
    return inputs + accumulation * (1 + inputs) + u * (1 + inputs + accumulation)


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
    # Per block of `ROWS_PER_PRODUCT` rows (by first row and precision): what the screening multiplies (a bfloat16
    # copy is kept, a float32 block of dot products is a view of `vectors`) and the block's largest row norm.
    _blocks: dict[tuple[int, str], tuple[Any, float]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        check_similarity(self.similarity)
        if self.vectors.ndim != 2 or len(self.ids) != self.vectors.shape[0]:
            raise ValueError(f"{len(self.ids)} ids for vectors of shape {self.vectors.shape}: one row per id needed.")

    @property
    def dimension(self) -> int:
        """The vectors' dimension."""
        return int(self.vectors.shape[1])

    def search(self, queries: np.ndarray, k: int, precision: str = "fp32") -> tuple[np.ndarray, np.ndarray]:
        """
        The k most similar vectors of each query (`search_shards` over this index alone).

        :param queries: `(queries, dimension)` query vectors.
        :param k: Most hits per query (at least 1).
        :param precision: The screening product's, `fp32` or `bf16`: the same hits and scores either way.
        :returns: `(queries, k)` int64 corpus positions and float64 scores, best first, ties in corpus order,
            padded with -1 and -inf when the shard holds fewer than k vectors.
        :raises ValueError: If `k < 1` or the queries' dimension is not the index's.
        """
        return search_shards([self], queries, k, precision)

    def exact_scores(self, queries: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """
        The float64 scores of `queries[i]` (float64, unit rows for cosine) with this index's row `rows[i]`, for
        each `i`: dot products of the float32 values, as Haystack computes them from the vectors' float lists.
        """
        vectors = np.asarray(self.vectors[rows], np.float64)  # (len(rows), dimension)
        if self.similarity == "cosine":
            vectors = unit_rows(vectors)
        return np.einsum("ij,ij->i", queries, vectors)

    def screening_block(self, start: int, precision: str) -> tuple[Any, float]:
        """
        The rows `start:start + ROWS_PER_PRODUCT` as the screening multiplies them (a torch tensor: float32, or a
        bfloat16 copy; unit rows for cosine, a float32 copy) and their largest norm, kept after the first search: a
        bfloat16 search holds half the vectors' size in memory, a cosine one their size.
        """
        cached = self._blocks.get((start, precision))
        if cached is not None:
            return cached
        import torch

        vectors = self.vectors[start : start + ROWS_PER_PRODUCT]
        if self.similarity == "cosine":
            vectors = unit_rows(np.asarray(vectors, np.float32)).astype(np.float32)
        largest = float(np.sqrt(np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64).max(initial=0.0)))
        with warnings.catch_warnings():  # a read-only memory map: the tensor is only read
            warnings.simplefilter("ignore", UserWarning)
            tensor = torch.from_numpy(np.asarray(vectors, np.float32))
        if precision == "bf16":
            tensor = tensor.to(torch.bfloat16)
        self._blocks[(start, precision)] = (tensor, largest)
        return tensor, largest

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


def search_shards(
    shards: Sequence[DenseIndex], queries: np.ndarray, k: int, precision: str = "fp32"
) -> tuple[np.ndarray, np.ndarray]:
    """
    The k most similar vectors of each query among all the shards' (of one similarity and dimension), screened
    in blocks of `ROWS_PER_PRODUCT` vectors by one matrix product each, in `precision`, and rescored exactly
    (the module's docstring): what one `DenseIndex` of all their vectors returns.

    Usage example:
    ```python
    positions, scores = search_shards([DenseIndex.load(folder) for folder in folders], query_vectors, k=10)
    ```

    :param shards: Shards whose `doc_offset`s are their vectors' corpus positions.
    :param queries: `(queries, dimension)` query vectors.
    :param k: Most hits per query (at least 1).
    :param precision: `fp32` or `bf16` (the screening product's; the same hits and scores either way).
    :returns: `(queries, k)` int64 corpus positions and float64 scores, best first, ties in corpus order, padded
        with -1 and -inf where the shards hold fewer than k vectors.
    :raises ValueError: If `k < 1`, the precision is unknown, the shards differ in similarity or dimension, or
        the queries' dimension is not theirs.
    """
    import torch

    check_k(k)
    check_search_precision(precision)
    exact = np.asarray(queries, np.float64)
    if len({(shard.similarity, shard.dimension) for shard in shards}) > 1:
        raise ValueError("search_shards got shards of different similarities or dimensions.")
    dimension = shards[0].dimension if shards else exact.shape[-1]
    if exact.ndim != 2 or exact.shape[1] != dimension:
        raise ValueError(f"Query vectors of shape {exact.shape} for an index of dimension {dimension}.")
    if shards and shards[0].similarity == "cosine":
        exact = unit_rows(exact)
    screened = torch.from_numpy(exact.astype(np.float32))
    if precision == "bf16":
        screened = screened.to(torch.bfloat16)
    error = screening_error(precision, dimension) * np.linalg.norm(exact, axis=1)  # (queries,) per unit of |v|
    best = (np.full((len(exact), k), NO_POSITION, np.int64), np.full((len(exact), k), NO_SCORE, np.float64))
    for shard in shards:
        for start in range(0, len(shard.ids), ROWS_PER_PRODUCT):
            vectors, largest = shard.screening_block(start, precision)
            approximate = torch.mm(screened, vectors.T)  # (queries, block rows)
            bound = error * largest
            # A vector of a query's top k scores at least the k-th best exact score found so far (the last column
            # of best) less the bound, and at least the block's own k-th best less the bound twice: the latter
            # (a top-k pass over the block) is only worth its cost while fewer than k hits are known.
            floor = best[1][:, -1] - bound
            if not np.isfinite(floor).all():
                kth = torch.topk(approximate, min(k, vectors.shape[0]), dim=1).values[:, -1].double().numpy()
                floor = np.maximum(floor, kth - 2 * bound)
            # Rounding the floor to nearest cannot pass a representable score at or above it.
            floor = torch.from_numpy(floor).to(approximate.dtype)
            rows, columns = _at_or_above(approximate, floor)
            columns = columns + start
            found = _by_query(rows, columns + shard.doc_offset, shard.exact_scores(exact[rows], columns), len(exact))
            best = merge_top_k([best, found], k)
    return best


def _at_or_above(scores: Any, floor: Any) -> tuple[np.ndarray, np.ndarray]:
    """
    The (row, column) of every score at or above its row's floor, row-major. Rows whose largest score is below
    the floor (most of them, once good hits are known) are not compared again.

    :param scores: `(rows, columns)` torch tensor.
    :param floor: `(rows,)` torch tensor of the same dtype.
    """
    import torch

    asked = torch.nonzero(scores.amax(dim=1) >= floor).flatten()  # (rows with a score at or above their floor,)
    if len(asked) >= len(scores) // 2:  # comparing all rows costs less than copying these
        rows, columns = torch.nonzero(scores >= floor[:, None], as_tuple=True)
        return rows.numpy(), columns.numpy()
    rows, columns = torch.nonzero(scores[asked] >= floor[asked][:, None], as_tuple=True)
    return asked.numpy()[rows.numpy()], columns.numpy()


def _by_query(rows: np.ndarray, positions: np.ndarray, scores: np.ndarray, n_queries: int) -> tuple[np.ndarray, ...]:
    """Hits given as (query row, position, score), rows ascending -> `(queries, most hits of a query)` arrays."""
    counts = np.bincount(rows, minlength=n_queries)
    width = max(int(counts.max(initial=0)), 1)
    slots = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)  # each hit's place in its row
    found_positions = np.full((n_queries, width), NO_POSITION, np.int64)
    found_scores = np.full((n_queries, width), NO_SCORE, np.float64)
    found_positions[rows, slots] = positions
    found_scores[rows, slots] = scores
    return found_positions, found_scores


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
