"""
Exact vector search with the ranking of Haystack's `InMemoryDocumentStore.embedding_retrieval` (what
`InMemoryEmbeddingRetriever` runs): scores are dot products (the store's default `dot_product`) or cosines of the
query's and the documents' vectors, unscaled (its `scale_score=False`), best first, ties in corpus order, no
score dropped.

A dense shard is a folder: `vectors.npy` (float32 `(n, dimension)`, memory-mapped), `doc_ids.arrow` (the ids, an
uncompressed Arrow IPC file, memory-mapped: `index_io.write_doc_ids`) and `dense.json` (`doc_offset`: the corpus
position of its first vector, `n`, `dimension`, `similarity`). Shards are
contiguous ranges of corpus positions; `search_shards` searches several as one corpus.

The search screens, then rescores (`search_shards`). The vectors and the queries are rotated onto the principal axes
of the first shard's vectors (`Rotation`, an orthogonal basis: dot products are unchanged; computed in float64), and
each is screened by its leading `screen_dimensions(dimension)` coordinates plus one more, the length of the rest:
for a query `q` and a vector `v` this "reduced" dot product `q1 . v1 + |q2| |v2|` is at least `q . v`
(Cauchy-Schwarz on the trailing coordinates), and it costs 161 multiplications instead of 384 at dimension 384 (the
leading axes hold most of an embedding model's vectors' length, so the bound is tight for most pairs). A matrix
product of the queries with a block of reduced vectors in the search precision (`fp32`, or `bf16` where the CPU
multiplies bfloat16 natively) gives these bounds within a proven error (`screening_error`, from the actual
rounding errors of the query and of the block's vectors, plus the rotation's `Rotation.slack`, about 7e-12); only
the vectors whose screened bound reaches, within that error, the k-th best exact score found so far are rescored
exactly, as float64 dot products of the float32 vectors (as Haystack scores them), and merged into the running top
k. Before any candidate is chosen, the products of a pilot of `PILOT_BLOCKS` blocks spread over the corpus are
computed, and each query's best-bounded vectors of each pilot block rescored: the k-th best of these exact scores
seeds the k-th best, and a higher one of them is the query's aim, which the candidates are chosen against as long as
the k-th best is below it (a k-th best still rising from the first blocks would let several times as many pass).
Every vector not rescored then scores below the larger of the k-th best and the aim, so where the k-th best ends at
or above the aim the top k is exact; the rare query whose k-th best ends below it (fewer than k vectors reached it)
is searched again without an aim (`_search`). The k-th best is raised before most candidates are rescored: those of
several blocks are rescored together (`CANDIDATES_PER_RESCORE`), each query's k best-bounded first (`_rescore`). So
both precisions return the same hits and the same scores; bf16 only makes the screening product about twice as
fast. The reduced vectors are kept in memory after the first search (in bf16 161 x 2 bytes per vector at dimension
384, in fp32 twice that), the pilot's products while a batch is searched (in bf16 16 x 8,192 x 2 bytes per query,
64 MiB for 256 queries, in fp32 twice that).
"""

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from qa_core.retrieval.index_io import DOC_IDS_FILE, read_doc_ids, write_doc_ids
from qa_core.retrieval.topk import NO_POSITION, NO_SCORE, check_k, merge_top_k

# 2: the ids in `doc_ids.arrow`, not in `dense.json` (format 1, refused: rebuild the index).
FORMAT = "qa_core.retrieval.dense/2"
_EARLIER_FORMAT = "qa_core.retrieval.dense/1"
DENSE_HEADER_FILE = "dense.json"
VECTORS_FILE = "vectors.npy"
SIMILARITIES = ("dot_product", "cosine")  # InMemoryDocumentStore's embedding_similarity_function values
DEFAULT_SIMILARITY = "dot_product"  # InMemoryDocumentStore's default
SEARCH_PRECISIONS = ("fp32", "bf16")  # the screening product's precision (the hits and scores are the same)
# Vectors screened per matrix product: a 256-query score block of 8 MiB stays in the CPU's cache.
ROWS_PER_PRODUCT = 8192
# The share of the rotated coordinates the screen multiplies (160 of 384): measured on all-MiniLM-L6-v2-like vectors
# (jobs/bench/dense_search.py), the leading 160 axes hold all but about 5% of a vector's squared length, and 0.03% of
# (query, vector) pairs pass the screen; 128 axes let 0.1% pass, 96 axes 0.75%.
SCREEN_SHARE = 5 / 12
# Candidates are rescored together (`_rescore`) once they number this many per query: the best-bounded of them raise
# each query's k-th best score before the others are rescored, so that fewer of these are; while the k-th best is
# low (the first blocks), each block's many candidates are rescored at once.
CANDIDATES_PER_RESCORE = 64
# The pilot (the module's docstring): this many screening blocks, spread over the corpus, whose products are computed
# first and whose best-bounded vectors are rescored first (`_pilot_scores`).
PILOT_BLOCKS = 16
# A query's aim is the r-th best of its pilot scores, r = AIM_MARGIN k times the pilot's share of the blocks (at most
# k): about AIM_MARGIN k vectors of the corpus score above it. On all-MiniLM-L6-v2-like vectors (1M, k 10, r 6,
# jobs/bench/dense_search.py) no query of 1,024 missed its aim; at 3 (r 4) 0.9% did, at 2 (r 3) 7.6%, for 17% and 24%
# fewer candidates.
AIM_MARGIN = 4
_FP64_ROUNDOFF = 2.0**-53  # unit roundoff of float64 (53 significant bits)
_FP32_ROUNDOFF = 2.0**-24  # of float32 (24 significant bits)
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


@dataclass(frozen=True)
class Screened:
    """
    Reduced vectors (`Rotation.reduce`, float64) rounded to the screening precision, and the lengths that bound
    the screening product's error (`screening_error`), rounded up: one per vector, or the largest of a block.

    :param tensor: `(n, width)` torch tensor in the precision.
    :param length: Of the reduced vectors and of the vectors before reduction.
    :param rounded_length: Of the rounded vectors.
    :param rounding: Of the rounding's error, reduced vector less rounded one.
    """

    tensor: Any
    length: Any
    rounded_length: Any
    rounding: Any

    @classmethod
    def of(cls, reduced: np.ndarray, lengths: np.ndarray, precision: str) -> "Screened":
        """
        `reduced` rounded to `precision`, with its rows' lengths (`lengths`: of the vectors before reduction).
        The float64 norms are rounded up by a relative 1e-12, far more than their roundoff.
        """
        import torch

        tensor = torch.from_numpy(reduced).to(_torch_dtype(precision))
        rounded = tensor.double().numpy()  # the rounded values, exact in float64

        def norms(rows: np.ndarray) -> np.ndarray:
            return np.linalg.norm(rows, axis=1) * (1 + 1e-12)

        return cls(tensor, np.maximum(norms(reduced), lengths * (1 + 1e-12)), norms(rounded), norms(reduced - rounded))

    def largest(self) -> "Screened":
        """The same tensor with the largest of each length (a block's bounds)."""
        return Screened(
            self.tensor,
            *(float(np.max(values, initial=0.0)) for values in (self.length, self.rounded_length, self.rounding)),
        )


def screening_error(precision: str, query: Screened, block: Screened, slack: float) -> np.ndarray:
    """
    Per query, a bound on how far its exact score with any vector of `block` can exceed the screening product's
    accumulated (float32) value `a` for them: `q . v <= a + error`.

    With `q^`, `v^` the reduced query and vector rounded to the precision and `dq = q - q^`, `dv = v - v^`:
    `q . v = q^ . v^ + dq . v + q^ . dv` exactly, so `|q . v - q^ . v^| <= |dq| |v| + |q^| |dv|` (Cauchy-Schwarz);
    the product's sum of `width` terms in float32, in any order, errs by at most `gamma_w <= 2 w u32` times the sum
    of the terms' magnitudes (Higham, Accuracy and Stability of Numerical Algorithms, 3.1), at most `|q^| |v^|`;
    and the rotation's `slack |q| |v|` (`Rotation`) bounds the rest. bfloat16 also rounds the sum `a` once to the
    screened value `b` (`screened_floor` and `ceilings` take that into account).

    :returns: `(queries,)` float64.
    """
    accumulation = 2 * query.tensor.shape[1] * _FP32_ROUNDOFF
    return (
        query.rounding * block.length
        + query.rounded_length * (block.rounding + accumulation * block.rounded_length)
        + slack * query.length * block.length
    )


def screened_floor(floor: np.ndarray, precision: str) -> np.ndarray:
    """
    The least screened value `b` whose accumulated value can reach `floor`: in bfloat16 `|a - b| <= u |a|`, so
    `a <= b + u |b| / (1 - u)`, increasing in `b`; in float32 `b` is `a`.
    """
    if precision == "fp32":
        return floor
    u = _BF16_ROUNDOFF
    return np.where(floor >= 0, floor * (1 - u), floor * (1 - u) / (1 - 2 * u))


def ceilings(screened: np.ndarray, precision: str) -> np.ndarray:
    """Upper bounds of the accumulated values of screened values `b` (`screened_floor`'s inverse), float64."""
    if precision == "fp32":
        return screened
    return screened + _BF16_ROUNDOFF * np.abs(screened) / (1 - _BF16_ROUNDOFF)


def screen_dimensions(dimension: int) -> int:
    """How many leading rotated coordinates the screen multiplies (`SCREEN_SHARE` of them, at least one)."""
    return max(1, min(dimension, round(dimension * SCREEN_SHARE)))


@dataclass(frozen=True, eq=False)
class Rotation:
    """
    An orthogonal basis that the screen reduces vectors in: the principal axes of a sample of vectors, largest
    first (the eigenvectors of their second moment, so a vector's length concentrates in the leading coordinates).

    :param axes: `(dimension, dimension)` float64, orthonormal columns up to roundoff.
    :param slack: A bound `s` on how far the reduced dot product can fall below the true one and the rescoring's
        float64 result below the true one through roundoff: `q . v <= reduced(q) . reduced(v) + s |q| |v|` and
        `computed(q . v) <= q . v + s |q| |v|`.
    """

    axes: np.ndarray
    slack: float

    @classmethod
    def of(cls, sample: np.ndarray) -> "Rotation":
        """
        The principal axes of `sample` (`(n, dimension)` vectors).

        The slack, for axes `A` of dimension `d` whose departure from orthonormality is `e = |A^T A - I|`
        (Frobenius, at least the spectral norm of `A A^T - I`): in exact arithmetic, with `y` the leading
        coordinates of `A^T x` and `z` the rest, `q . v = y_q . y_v + z_q . z_v - q^T (A A^T - I) v
        <= y_q . y_v + |z_q| |z_v| + e |q| |v|` (Cauchy-Schwarz), and `|z|^2 = |A^T x|^2 - |y|^2 <= (1 + e) |x|^2 -
        |y|^2`. `reduce` computes `y` in float64 off by at most `eta |x|`, `eta = sqrt(d) gamma_d (1 + e)` with
        `gamma_d <= 2 d u64` (Higham 3.1), which moves the dot product of two reduced vectors by at most `2.1 eta
        |q| |v|` and `|z|^2`'s bound by `2.1 eta |x|^2`; the two float64 squared norms it subtracts err by at most
        `gamma_d` of their size. The rescoring's float64 dot product errs by at most `gamma_d |q| |v|`. So
        `s = e + 8 d sqrt(d) u64` covers all of them (about 7e-12 at d = 384).
        """
        sample = np.asarray(sample, np.float64)
        _, axes = np.linalg.eigh(sample.T @ sample)
        axes = np.ascontiguousarray(axes[:, ::-1])
        dimension = axes.shape[0]
        departure = float(np.linalg.norm(axes.T @ axes - np.eye(dimension)))
        return cls(axes, departure + 8 * dimension * np.sqrt(dimension) * _FP64_ROUNDOFF)

    def reduce(self, vectors: np.ndarray) -> np.ndarray:
        """
        `(n, screen_dimensions(d) + 1)` float64: each vector's leading rotated coordinates and an upper bound on
        the length of the rest, `sqrt((1 + s) |x|^2 - |y|^2)` rounded up (`of`), so that the reduced dot product of
        a query and a vector bounds theirs from above, less the slack.
        """
        import torch

        exact = torch.from_numpy(np.asarray(vectors, np.float64))
        leading = torch.mm(exact, torch.from_numpy(self.axes[:, : screen_dimensions(self.axes.shape[0])]))
        squares = (1 + self.slack) * (exact * exact).sum(dim=1) - (leading * leading).sum(dim=1)
        rest = torch.sqrt(torch.clamp(squares, min=0.0)) * (1 + 4 * _FP64_ROUNDOFF)
        return torch.cat([leading, rest[:, None]], dim=1).numpy()


@dataclass
class DenseIndex:
    """
    The vectors of a corpus, or of one contiguous shard of it, searched exactly.

    Usage example:
    ```python
    index = DenseIndex(ids=["a", "b"], vectors=np.eye(2, dtype=np.float32))
    positions, scores = index.search(np.array([[1.0, 0.0]], np.float32), k=1)  # [[0]], [[1.0]]
    ```

    :param ids: The ids of the vectors' documents (or passages), in corpus order (a list, or `DocIds` as loaded).
    :param vectors: `(n, dimension)` float32.
    :param doc_offset: The corpus position of the first vector.
    :param similarity: `dot_product` or `cosine`.
    """

    ids: Sequence[str]
    vectors: np.ndarray
    doc_offset: int = 0
    similarity: str = DEFAULT_SIMILARITY
    # Per block of `ROWS_PER_PRODUCT` rows (by first row and precision): the rotation the block was reduced in and
    # its reduced rows as the screening multiplies them.
    _blocks: dict[tuple[int, str], tuple[Rotation, Screened]] = field(default_factory=dict, init=False, repr=False)
    _rotation: Rotation | None = field(default=None, init=False, repr=False)
    _lengths: np.ndarray | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        check_similarity(self.similarity)
        if self.vectors.ndim != 2 or len(self.ids) != self.vectors.shape[0]:
            raise ValueError(f"{len(self.ids)} ids for vectors of shape {self.vectors.shape}: one row per id needed.")

    @property
    def dimension(self) -> int:
        """The vectors' dimension."""
        return int(self.vectors.shape[1])

    def search(
        self, queries: np.ndarray, k: int, precision: str = "fp32", allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """
        The k most similar vectors of each query (`search_shards` over this index alone).

        :param queries: `(queries, dimension)` query vectors.
        :param k: Most hits per query (at least 1).
        :param precision: The screening product's, `fp32` or `bf16`: the same hits and scores either way.
        :param allowed: As in `search_shards`.
        :returns: `(queries, k)` int64 corpus positions and float64 scores, best first, ties in corpus order,
            padded with -1 and -inf when the shard holds fewer than k vectors.
        :raises ValueError: If `k < 1` or the queries' dimension is not the index's.
        """
        return search_shards([self], queries, k, precision, allowed)

    def exact_scores(self, queries: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """
        The float64 scores of `queries[i]` (float64, unit rows for cosine) with this index's row `rows[i]`, for
        each `i`: dot products of the float32 values, as Haystack computes them from the vectors' float lists.
        """
        vectors = np.asarray(self.vectors)[rows]  # (len(rows), dimension); a memory map's plain view indexes faster
        if self.similarity == "cosine":
            vectors = unit_rows(np.asarray(vectors, np.float64))
        return np.einsum("ij,ij->i", queries, vectors, dtype=np.float64)  # float32 rows taken as float64

    def lengths(self) -> np.ndarray:
        """
        `(n,)` float32 lengths of the vectors, computed in float32 (within `(dimension / 2 + 2)` float32 rounding
        units of the exact lengths, relative), kept after the first call.
        """
        if self._lengths is None:
            vectors = np.asarray(self.vectors, np.float32)  # a memory map's plain view
            self._lengths = np.sqrt(np.einsum("ij,ij->i", vectors, vectors))
        return self._lengths

    def rotation(self) -> Rotation:
        """The principal axes of this index's first `ROWS_PER_PRODUCT` vectors (unit rows for cosine), kept."""
        if self._rotation is None:
            self._rotation = Rotation.of(self._rows(0))
        return self._rotation

    def _rows(self, start: int) -> np.ndarray:
        """The rows `start:start + ROWS_PER_PRODUCT` as float64, unit rows for cosine (as `exact_scores` has them)."""
        vectors = np.array(self.vectors[start : start + ROWS_PER_PRODUCT], np.float64)
        return unit_rows(vectors) if self.similarity == "cosine" else vectors

    def screening_block(self, start: int, precision: str, rotation: Rotation) -> Screened:
        """
        The rows `start:start + ROWS_PER_PRODUCT` as the screening multiplies them, reduced in `rotation` and
        rounded to the precision, with the largest of their lengths (`Screened.largest`), kept after the first
        search in that rotation.
        """
        cached = self._blocks.get((start, precision))
        if cached is not None and cached[0] is rotation:
            return cached[1]
        vectors = self._rows(start)
        block = Screened.of(rotation.reduce(vectors), np.linalg.norm(vectors, axis=1), precision).largest()
        self._blocks[(start, precision)] = (rotation, block)
        return block

    def save(self, folder: str | Path, record: dict[str, Any] | None = None) -> None:
        """
        Writes `vectors.npy`, `doc_ids.arrow` and `dense.json` into `folder` (created if needed).

        :param record: More entries for the header (e.g. the model and its fingerprint).
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / VECTORS_FILE, np.ascontiguousarray(self.vectors, np.float32), allow_pickle=False)
        write_doc_ids(folder / DOC_IDS_FILE, self.ids)
        header = {
            **(record or {}),
            "format": FORMAT,
            "doc_offset": self.doc_offset,
            "n": len(self.ids),
            "dimension": self.dimension,
            "similarity": self.similarity,
        }
        (folder / DENSE_HEADER_FILE).write_text(json.dumps(header), encoding="utf-8")

    @classmethod
    def load(cls, folder: str | Path, mmap: bool = True, similarity: str | None = None) -> "DenseIndex":
        """
        Reads a folder that `save` wrote.

        :param mmap: Memory-map the vectors instead of reading them.
        :param similarity: Search with this similarity instead of the one saved (the vectors do not depend on it).
        :raises ValueError: For a folder that is not a dense shard, or whose vectors or ids do not match its header.
        """
        header = read_dense_header(folder)
        ids = read_doc_ids(Path(folder), mmap)
        vectors = np.load(Path(folder) / VECTORS_FILE, mmap_mode="r" if mmap else None, allow_pickle=False)
        if vectors.dtype != np.float32 or vectors.shape != (header["n"], header["dimension"]):
            raise ValueError(
                f"{folder}: {VECTORS_FILE} holds {vectors.dtype} {vectors.shape}, not float32 "
                f"({header['n']}, {header['dimension']}) as {DENSE_HEADER_FILE} says."
            )
        return cls(ids, vectors, header["doc_offset"], similarity or header["similarity"])


def search_shards(
    shards: Sequence[DenseIndex],
    queries: np.ndarray,
    k: int,
    precision: str = "fp32",
    allowed: np.ndarray | None = None,
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
    :param allowed: Bool by corpus position, covering the shards' positions: the vectors a hit may be (a metadata
        filter's `filters.matching_mask`); the others are never candidates, so each query gets the k best of the
        allowed vectors with the scores they have without (k of them while k are allowed). Blocks without an
        allowed vector are not screened. None: all.
    :returns: `(queries, k)` int64 corpus positions and float64 scores, best first, ties in corpus order, padded
        with -1 and -inf where the shards hold fewer than k (allowed) vectors.
    :raises ValueError: If `k < 1`, the precision is unknown, the shards differ in similarity or dimension, or
        the queries' dimension is not theirs.
    """
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
    blocks = [(shard, start) for shard in shards for start in range(0, len(shard.ids), ROWS_PER_PRODUCT)
              if allowed is None or _allowed_rows(allowed, shard, start).any()]  # fmt: skip
    if not blocks:
        return np.full((len(exact), k), NO_POSITION, np.int64), np.full((len(exact), k), NO_SCORE, np.float64)
    # The pilot blocks, spread over the corpus, are screened first.
    pilot = set(np.linspace(0, len(blocks) - 1, min(PILOT_BLOCKS, len(blocks))).round().astype(int).tolist())
    blocks = [blocks[i] for i in sorted(pilot)] + [block for i, block in enumerate(blocks) if i not in pilot]
    return _search(blocks, len(pilot), exact, k, precision, shards[0].rotation(), allowed, aiming=True)


def _allowed_rows(allowed: np.ndarray, shard: DenseIndex, start: int) -> np.ndarray:
    """`(block rows,)` which rows of the screening block of `shard` starting at row `start` are allowed."""
    first = shard.doc_offset + start
    return allowed[first : first + min(ROWS_PER_PRODUCT, len(shard.ids) - start)]


def _search(
    blocks: list[tuple[DenseIndex, int]],
    n_pilot: int,
    exact: np.ndarray,
    k: int,
    precision: str,
    rotation: Rotation,
    allowed: np.ndarray | None,
    aiming: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """
    `search_shards`' search of the screening blocks `blocks` (a shard and a first row each), the first `n_pilot`
    of them the pilot (the module's docstring), for the float64 queries `exact` (unit rows for cosine), among the
    `allowed` vectors. With `aiming`, the queries whose k-th best falls below their aim are searched again
    without one.
    """
    import torch

    query = Screened.of(rotation.reduce(exact), np.linalg.norm(exact, axis=1), precision)

    def screen(shard: DenseIndex, start: int) -> tuple[DenseIndex, int, Screened, Any, np.ndarray, np.ndarray | None]:
        block = shard.screening_block(start, precision, rotation)
        bounds = torch.mm(query.tensor, block.tensor.T)  # (queries, block rows): the scores' bounds, screened
        rows_allowed = None if allowed is None else _allowed_rows(allowed, shard, start)
        if rows_allowed is not None:  # a vector left out bounds nothing: never a seed, never a candidate
            bounds[:, torch.from_numpy(~rows_allowed)] = float("-inf")
        error = screening_error(precision, query, block, rotation.slack)
        return shard, start, block, bounds, error, rows_allowed

    pilot = [screen(shard, start) for shard, start in blocks[:n_pilot]]
    seeds = _pilot_scores(pilot, exact, k)
    # A lower bound on each query's k-th best exact score (the k-th best of k vectors), and the aim.
    known = seeds[:, k - 1] if seeds.shape[1] >= k else np.full(len(exact), NO_SCORE)
    aim = known
    if aiming:
        rank = min(k, int(np.ceil(AIM_MARGIN * k * n_pilot / len(blocks))))  # the pilot's share of the blocks
        aim = np.maximum(known, seeds[:, rank - 1]) if seeds.shape[1] >= rank else known
    best = (np.full((len(exact), k), NO_POSITION, np.int64), np.full((len(exact), k), NO_SCORE, np.float64))
    pending: list[_Candidates] = []
    rest = (screen(shard, start) for shard, start in blocks[n_pilot:])
    for shard, start, _, bounds, error, rows_allowed in itertools.chain(pilot, rest):
        # A vector of a query's top k scores at least the k-th best known, so its screened bound at least the
        # floor; one below the aim scores below it. Rounding the floor to nearest cannot pass a representable
        # bound at or above it.
        floor = screened_floor(np.maximum(best[1][:, -1], aim) - error, precision)
        rows, columns = _at_or_above(bounds, torch.from_numpy(floor).to(bounds.dtype))
        if rows_allowed is not None:  # a floor of -inf passes the -inf of the vectors left out
            kept = rows_allowed[columns]
            rows, columns = rows[kept], columns[kept]
        # Upper bounds of the candidates' exact scores (a NaN's rescored, as `_at_or_above` passes it).
        upper = np.nan_to_num(ceilings(_values(bounds, rows, columns), precision) + error[rows], nan=np.inf)
        pending.append(_Candidates(shard, rows, columns + start, upper))
        if sum(len(block.rows) for block in pending) >= CANDIDATES_PER_RESCORE * len(exact):
            best = _rescore(pending, exact, best)
            pending = []
    best = _rescore(pending, exact, best) if pending else best
    # Every vector not rescored scores below its block's floor, at most the larger of the k-th best and the aim:
    # where the k-th best reaches the aim, the top k is exact; elsewhere vectors between the two may be missing.
    missed = np.flatnonzero(best[1][:, -1] < aim)
    if aiming and len(missed):
        best[0][missed], best[1][missed] = _search(blocks, n_pilot, exact[missed], k, precision, rotation, allowed,
                                                   False)  # fmt: skip
    return best


def _pilot_scores(
    pilot: list[tuple[DenseIndex, int, Screened, Any, np.ndarray, np.ndarray | None]], exact: np.ndarray, k: int
) -> Any:
    """
    The exact scores of each query's best-bounded vectors of each pilot block (`ceil(k / blocks)` of each, so
    k or more in all when the blocks hold that many), best first: `(queries, seeds)` float64; `-inf` for a vector
    taken that is not allowed (a block with fewer allowed vectors than taken).
    """
    each = -(-k // max(len(pilot), 1))
    scores = []
    for shard, start, _, bounds, _, rows_allowed in pilot:
        taken = min(each, bounds.shape[1])
        columns = _best_columns(bounds, taken)
        rows = np.repeat(np.arange(len(exact)), taken)
        found = shard.exact_scores(exact[rows], columns.ravel() + start).reshape(len(exact), taken)
        scores.append(found if rows_allowed is None else np.where(rows_allowed[columns], found, NO_SCORE))
    return -np.sort(-np.nan_to_num(np.concatenate(scores, axis=1), nan=NO_SCORE, neginf=NO_SCORE), axis=1)  # a NaN's no bound


@dataclass(frozen=True)
class _Candidates:
    """
    One screening block's candidates, not yet rescored: of each, the query row, the row in `shard`, and an upper
    bound on its exact score (its screened bound plus the error).
    """

    shard: DenseIndex
    rows: np.ndarray
    columns: np.ndarray
    ceilings: np.ndarray


def _rescore(
    pending: list[_Candidates], exact: np.ndarray, best: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """
    `best` merged with the candidates of `pending` that can enter it, rescored exactly.

    In two steps: first each query's k candidates of highest ceilings (they raise its k-th best score most, as the
    first block's seed does), then the others whose ceiling still reaches the new k-th best: a vector whose upper
    bound is below the k-th best exact score of k vectors cannot be among the top k (a tie with the k-th stays).
    """
    k = best[0].shape[1]
    rows = np.concatenate([block.rows for block in pending])
    ceilings = np.concatenate([block.ceilings for block in pending])
    order = np.lexsort((-ceilings, rows))  # by query, highest ceiling first
    counts = np.bincount(rows, minlength=len(exact))
    ranks = np.empty(len(rows), np.int64)
    ranks[order] = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)  # place in its query's row
    first = ranks < k
    best = merge_top_k([best, _exact_hits(pending, np.flatnonzero(first), exact)], k)
    rest = np.flatnonzero(~first & (ceilings >= best[1][rows, -1]))
    return merge_top_k([best, _exact_hits(pending, rest, exact)], k) if len(rest) else best


def _exact_hits(pending: list[_Candidates], chosen: np.ndarray, exact: np.ndarray) -> tuple[np.ndarray, ...]:
    """The `chosen` candidates (ascending indices into `pending`'s, concatenated) rescored, `_by_query`'s arrays."""
    ends = np.cumsum([len(block.rows) for block in pending])
    cuts = np.searchsorted(chosen, ends)  # the chosen of block i: chosen[cuts[i - 1]:cuts[i]]
    rows, positions, scores = [], [], []
    for block, begin, end, offset in zip(pending, [0, *cuts[:-1]], cuts, [0, *ends[:-1]], strict=True):
        if begin == end:
            continue
        picked = chosen[begin:end] - offset
        rows.append(block.rows[picked])
        columns = block.columns[picked]
        positions.append(columns + block.shard.doc_offset)
        scores.append(block.shard.exact_scores(exact[rows[-1]], columns))
    if not rows:
        return _by_query(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0), len(exact))
    rows_all = np.concatenate(rows)
    by_row = np.argsort(rows_all, kind="stable")
    return _by_query(rows_all[by_row], np.concatenate(positions)[by_row], np.concatenate(scores)[by_row], len(exact))


def _best_columns(scores: Any, taken: int) -> np.ndarray:
    """
    `(rows, taken)` columns of each row's `taken` largest `scores` (a bfloat16 or float32 torch tensor), in any
    order; for one, numpy's argmax (many times faster than torch's `topk`), of bfloat16 as int16 keys that order
    as the values: the magnitude bits flipped where the sign is set.
    """
    import torch

    if taken > 1:
        return torch.topk(scores, taken, dim=1).indices.numpy()
    if scores.dtype == torch.bfloat16:
        bits = scores.view(torch.int16).numpy()
        return (bits ^ ((bits >> 15) & np.int16(0x7FFF))).argmax(axis=1)[:, None]
    return scores.numpy().argmax(axis=1)[:, None]


def _values(scores: Any, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """`scores[rows, columns]` (a bfloat16 or float32 torch tensor) as float64."""
    import torch

    if scores.dtype == torch.bfloat16:  # a bfloat16 is the upper half of the float32 of the same value
        bits = scores.view(torch.int16).numpy()[rows, columns].astype(np.int32) << 16
        return bits.view(np.float32).astype(np.float64)
    return scores.numpy()[rows, columns].astype(np.float64)


def _torch_dtype(precision: str) -> Any:
    """The torch dtype the screening multiplies in."""
    import torch

    return torch.float32 if precision == "fp32" else torch.bfloat16


def _at_or_above(scores: Any, floor: Any) -> tuple[np.ndarray, np.ndarray]:
    """
    The (row, column) of every score at or above its row's floor, row-major, found by numpy (its comparison and
    `flatnonzero` run many times faster than torch's elementwise bfloat16 work and `nonzero` on the CPU).

    Above positive floors, the scores are compared as the integers of their bits (int16 for bfloat16, int32 for
    float32): those of non-negative numbers order as the numbers, those of negative ones (the sign bit set) are
    negative, below every positive floor's; a NaN's lie above, and it is rescored. Other floors compare as floats.

    :param scores: `(rows, columns)` torch tensor, bfloat16 or float32.
    :param floor: `(rows,)` torch tensor of the same dtype.
    """
    import torch

    if bool((floor > 0).all()):
        bits = torch.int16 if scores.dtype == torch.bfloat16 else torch.int32
        mask = scores.view(bits).numpy() >= floor.view(bits).numpy()[:, None]
    else:
        mask = (scores >= floor[:, None]).numpy()
    return np.divmod(np.flatnonzero(mask), scores.shape[1])


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
    if isinstance(header, dict) and header.get("format") == _EARLIER_FORMAT:
        raise ValueError(
            f"{path}: a dense index of an earlier format (its ids in {DENSE_HEADER_FILE}): rebuild it with "
            "`python -m jobs.index`."
        )
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f"{path}: not a dense index of format {FORMAT}.")
    return header
