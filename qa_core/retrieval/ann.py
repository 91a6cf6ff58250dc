"""
Approximate dense search, opt-in, over the vectors of all the dense shards of an index, in corpus order, so that its
ids are corpus positions; one index over the corpus rather than one per shard (per-shard indexes, 8,192 vectors each
as the index build writes them, 123 at 1M, would multiply a search's cost by the shards' count). Two kinds
(`ANN_KINDS`), both FAISS, inner product:

- `hnsw`: a graph (`IndexHNSWFlat`); a search walks it keeping `ef_search` candidates.
- `ivf`: the vectors turned onto their leading principal directions (`ivf_rotation`: the fewest holding
  `IVF_KEPT_ENERGY` of their energy, 188 of 384 for MiniLM-like vectors, then a random rotation that spreads the
  variance evenly over them), clustered by k-means into lists (`ivf_lists`) and each held, less its list's centroid
  (the residual: finer codes than of the vector itself), as a 4-bit product-quantization code of 2 of those
  dimensions per sub-quantizer (`IndexIVFPQFastScan` behind FAISS's `IndexPreTransform`, about 1/32 of the float32
  vectors' bytes); a search scans the codes of the `nprobe` lists nearest the query and keeps its best
  `candidates`. Trained on a seeded sample, it builds in a minute or two where the graph takes tens of minutes; the
  codes rank only roughly, so many more candidates than k are kept and rescored exactly. Fewer dimensions make fewer
  code bytes to scan per vector, the search's main cost.

A search restricted to some of the vectors (a metadata filter's allowed-mask) passes FAISS a selector of them
(`IDSelectorBitmap`), so that only those are candidates; where they are at most `EXACT_MATCH_SHARE` of the corpus
(a graph walked among mostly excluded nodes finds too few of them, and so few vectors are cheap to score), and for
any query the index answers with fewer hits than k while k are allowed, the search is exact over the allowed
vectors instead (`search_matches`).

Either index's hits are rescored exactly (float64, `DenseIndex.exact_scores`, from the dense shards, not from a
copy in the index) and ordered as exact search orders them, so a hit's score is the one exact search gives it;
only which documents are found may differ (its recall@k against exact search). Of the ivf index's candidates only
those that a float32 screen within a proven bound cannot exclude from the best k are rescored in float64 (`rescore`).
"""

import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from qa_core.retrieval.dense import DenseIndex, unit_rows
from qa_core.retrieval.topk import NO_POSITION, NO_SCORE, check_k, merge_top_k

ANN_KINDS = ("hnsw", "ivf")
HNSW_M = 32  # neighbours per node (FAISS's M)
HNSW_EF_CONSTRUCTION = 80  # candidates kept while inserting
IVF_MAX_LISTS = 1024  # k-means lists of the ivf index at most (the square root of the vectors' count below 1M)
IVF_TRAINING_VECTORS = 100_000  # the seeded sample the rotation, the lists and the codes are trained on, at most
IVF_CODE_BITS = 4  # bits per sub-quantizer code (FAISS's fast scan needs 4)
IVF_KEPT_ENERGY = 0.97  # the share of the sample's energy (sum of squares) the ivf index's dimensions keep
# At most this share of the corpus allowed by a filter, a search is exact over the allowed vectors (gathered).
EXACT_MATCH_SHARE = 0.02


@dataclass(frozen=True)
class AnnSearch:
    """How an approximate index is searched: each kind reads its own parameters."""

    ef_search: int = 128  # hnsw: candidates kept while walking the graph (FAISS's default, 16, finds too few at 1M)
    nprobe: int = 160  # ivf: lists scanned per query (of `ivf_lists`, 1,000 at 1M)
    candidates: int = 200  # ivf: the codes' best hits rescored exactly per query (at least k)


DEFAULT_SEARCH = AnnSearch()


def require_faiss() -> Any:
    """
    The `faiss` module.

    :raises ImportError: If FAISS is not installed, saying how to install it.
    """
    try:
        import faiss
    except ImportError:
        raise ImportError(
            f"the approximate index (ann: {', '.join(ANN_KINDS)}) needs FAISS, which is not installed: "
            "pip install 'ray-extractive-qa[ann]' (faiss-cpu), or leave --ann out for exact search."
        ) from None
    return faiss


def vectors_fingerprint(dense: dict[str, Any]) -> str:
    """What an approximate index was built from, by the build record's `dense` section: model, similarity, shards."""
    built_from = [
        dense.get("fingerprint"),
        dense.get("similarity"),
        [[s["doc_offset"], s["n"]] for s in dense["shards"]],
    ]
    return hashlib.sha256(json.dumps(built_from).encode("utf-8")).hexdigest()[:16]


def ivf_lists(n: int) -> int:
    """The ivf index's lists for `n` vectors: about sqrt(n), at most `IVF_MAX_LISTS`."""
    return max(1, min(IVF_MAX_LISTS, round(math.sqrt(n))))


def ivf_dimensions(sample: np.ndarray) -> int:
    """
    The ivf index's dimensions for vectors like the `(n, d)` `sample`: the fewest leading principal directions of
    its second moment (not centred: inner products are not shift-invariant) holding `IVF_KEPT_ENERGY` of its energy,
    rounded up to an even count (2 per sub-quantizer), at most d's largest even count.
    """
    sample = np.asarray(sample, np.float64)
    energies = np.linalg.eigvalsh(sample.T @ sample)[::-1]
    kept = int(np.searchsorted(np.cumsum(energies) / energies.sum(), IVF_KEPT_ENERGY)) + 1
    return max(2, min(kept + kept % 2, sample.shape[1] - sample.shape[1] % 2))


def ivf_rotation(faiss: Any, sample: np.ndarray) -> Any:
    """
    FAISS's `PCAMatrix` onto the `ivf_dimensions` leading principal directions of the sample's second moment, then
    a random rotation of them (FAISS's fixed seed) so that the codes' sub-quantizers share the variance evenly.
    Trained on the sample and its negation: their mean is 0, so the transform is linear (no shift of the vectors:
    a query's inner products keep their order up to the dropped directions' share).
    """
    rotation = faiss.PCAMatrix(sample.shape[1], ivf_dimensions(sample), 0.0, True)
    rotation.train(np.concatenate([sample, -sample]))
    return rotation


def check_size(kind: str, n: int) -> None:
    """
    Refuses an unknown kind, and an ivf index of fewer vectors than a code book's entries (k-means needs as many).

    :raises ValueError: Naming the kind or the count.
    """
    if kind not in ANN_KINDS:
        raise ValueError(f"ann must be one of {', '.join(ANN_KINDS)}, not {kind!r}")
    if kind == "ivf" and n < 2**IVF_CODE_BITS:
        raise ValueError(f"ann ivf needs at least {2**IVF_CODE_BITS} passages, not {n}: use hnsw or exact search.")


def build_ann_index(kind: str, shards: Sequence[DenseIndex]) -> Any:
    """
    The approximate index of `kind` over the shards' vectors (FAISS's threads: the machine's).

    :param shards: Contiguous shards in corpus order, the first at position 0.
    :raises ValueError: If the kind is unknown, the count too small for it (`check_size`), or the shards are not
        contiguous from 0.
    :raises ImportError: Without FAISS.
    """
    faiss = require_faiss()
    dimension, n = shards[0].dimension, sum(len(shard.ids) for shard in shards)
    check_size(kind, n)
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dimension, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    elif kind == "ivf":
        sample = np.sort(np.random.default_rng(0).choice(n, min(IVF_TRAINING_VECTORS, n), replace=False))
        training = np.concatenate([_search_vectors(shard, rows(shard, sample)) for shard in shards])
        rotation = ivf_rotation(faiss, training)
        reduced = rotation.d_out
        lists = faiss.IndexIVFPQFastScan(faiss.IndexFlatIP(reduced), reduced, ivf_lists(n), reduced // 2,
                                         IVF_CODE_BITS, faiss.METRIC_INNER_PRODUCT)  # fmt: skip
        lists.cp.seed = 0  # k-means's seed: the same lists on every build (FAISS's default too, stated)
        lists.by_residual = True  # codes of each vector less its list's centroid: finer, so fewer candidates needed
        index = faiss.IndexPreTransform(rotation, lists)
        index.train(training)  # the lists and the codes, in the rotation's dimensions (the rotation is trained)
    for shard in shards:
        if shard.doc_offset != index.ntotal:
            raise ValueError(f"shard at position {shard.doc_offset} where position {index.ntotal} was expected.")
        index.add(_search_vectors(shard, shard.vectors))
    return index


def ann_kind(index: Any) -> str:
    """Which of `ANN_KINDS` a FAISS index built by `build_ann` (or read back) is."""
    return "hnsw" if hasattr(index, "hnsw") else "ivf"


def ivf_lists_of(index: Any) -> Any:
    """The lists (FAISS's `IndexIVF`) of an ivf index, behind its rotation (or without one, as built before it)."""
    return require_faiss().extract_index_ivf(index)


def search_ann(
    index: Any,
    shards: Sequence[DenseIndex],
    queries: np.ndarray,
    k: int,
    search: AnnSearch = DEFAULT_SEARCH,
    allowed: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """
    The index's hits of each query, rescored exactly by the shards it was built from, the best k kept.

    :param allowed: `(corpus,)` bool by corpus position: the vectors a hit may be (the module's docstring);
        None: all.
    :returns: `(queries, k)` corpus positions and float64 scores, best first, ties in corpus order, padded with -1
        and -inf.
    """
    check_k(k)
    matches = None if allowed is None else np.flatnonzero(allowed)
    if matches is not None and matches.size <= EXACT_MATCH_SHARE * index.ntotal:
        return search_matches(shards, queries, k, matches)
    faiss = require_faiss()
    bitmap = None if allowed is None else np.packbits(allowed, bitorder="little")  # alive while FAISS reads it
    selector = None if bitmap is None else faiss.IDSelectorBitmap(index.ntotal, faiss.swig_ptr(bitmap))
    if ann_kind(index) == "hnsw":
        kept = k  # the graph ranks its candidates by exact float32 products: more than k would add none of the k
        parameters = faiss.SearchParametersHNSW(sel=selector, efSearch=max(search.ef_search, k))
    else:
        lists = ivf_lists_of(index)
        kept = max(search.candidates, k)
        parameters = faiss.SearchParametersIVF(sel=selector, nprobe=min(search.nprobe, lists.nlist))
        if isinstance(index, faiss.IndexPreTransform):  # behind its rotation
            parameters = faiss.SearchParametersPreTransform(index_params=parameters)
    exact = np.asarray(queries, np.float64)
    if shards[0].similarity == "cosine":
        exact = unit_rows(exact)
    _, found = index.search(exact.astype(np.float32), kept, params=parameters)  # (queries, kept), -1 where fewer
    best = _best_rescored(shards, exact, found, k)
    if matches is not None:  # the queries answered with fewer hits than the allowed vectors allow
        short = np.flatnonzero((best[0] != NO_POSITION).sum(axis=1) < min(k, matches.size))
        if short.size:
            best[0][short], best[1][short] = search_matches(shards, queries[short], k, matches)
    return best


def search_matches(
    shards: Sequence[DenseIndex], queries: np.ndarray, k: int, matches: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """
    Exact search over the vectors at the corpus positions `matches` (ascending), gathered from the shards: the
    hits and scores of `dense.search_shards` restricted to them.
    """
    if matches.size == 0:
        return np.full((len(queries), k), NO_POSITION, np.int64), np.full((len(queries), k), NO_SCORE)
    vectors = np.concatenate([rows(shard, matches) for shard in shards])
    positions, scores = DenseIndex(matches, vectors, 0, shards[0].similarity).search(queries, k)  # ids unread
    return np.where(positions == NO_POSITION, NO_POSITION, matches[np.maximum(positions, 0)]), scores


def _best_rescored(
    shards: Sequence[DenseIndex], exact: np.ndarray, found: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The best k of an index's hits `found` for the float64 queries `exact`, rescored exactly."""
    scores = rescore(shards, exact, found, k)
    # Only the rescored candidates (and -inf fillers) are merged: the others are all -inf, and are left out only
    # where at least k were rescored.
    width = max(k, int((scores > NO_SCORE).sum(axis=1).max(initial=0)))
    if width < found.shape[1]:
        rescored = np.argpartition(-scores, width - 1, axis=1)[:, :width]
        found, scores = np.take_along_axis(found, rescored, axis=1), np.take_along_axis(scores, rescored, axis=1)
    return merge_top_k([(found.astype(np.int64), scores)], k)


def rescore(shards: Sequence[DenseIndex], queries: np.ndarray, found: np.ndarray, k: int) -> np.ndarray:
    """
    The exact float64 scores (`DenseIndex.exact_scores`) of `queries` (float64, unit rows for cosine) with those
    corpus positions of `found` (`(queries, m)`, -1 for none) that can be among each query's best k; the others
    (and -1) are scored -inf, so that the best k are those of rescoring every position exactly.

    Which can be: every position is first scored in float32 (`screen`), within a bound of its exact score, and
    those whose upper bound (score plus bound) is below the k-th largest of the query's lower bounds (score minus
    bound) are left out. None of
    the exact best k (nor any tied with the k-th) is: k positions score exactly at least that k-th largest lower
    bound, so the exact k-th best score does too, and so does each of the best k, whose upper bound is above it.
    """
    screened, bounds = screen(shards, queries, found)
    kth = min(k, found.shape[1])
    lower = -np.partition(bounds - screened, kth - 1, axis=1)[:, kth - 1 : kth]  # the k-th largest lower bound
    scores = np.full(found.shape, NO_SCORE, np.float64)
    for shard, rows, columns, local in _by_shard(shards, found, (found != NO_POSITION) & (screened + bounds >= lower)):
        scores[rows, columns] = shard.exact_scores(queries[rows], local)
    return scores


def screen(shards: Sequence[DenseIndex], queries: np.ndarray, found: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """
    float32 scores of `queries` (float64, unit rows for cosine) with the corpus positions `found` (`(queries, m)`,
    -1 for none, scored -inf), and a bound on each one's distance from the exact float64 score.

    The products are FAISS's (`fvec_inner_products_by_idx`: each query's float32 dot products with its candidates'
    rows, read where they lie, without gathering them), the lengths the shards' (`DenseIndex.lengths`, float32).
    The bound: a float32 sum of d products, in any order (fused multiply-adds included), is within d * u * |query| *
    |vector| of the exact sum (u = 2^-24, the float32 rounding unit, d << 1/u); rounding the query adds u, and for
    cosine (the vector taken as its float32 products over its float32 length, |vector| = 1) the length's sum and
    root add (d/2 + 2) * u. The exact score's own float64 rounding is below u. Twice (d + 4) * u * |query| *
    |vector| covers them all.
    """
    queries32 = np.ascontiguousarray(queries, np.float32)
    scale = 2.0 * (queries.shape[1] + 4) * 2.0**-24 * np.linalg.norm(queries, axis=1)
    products, lengths = _products(shards, queries32, found)
    scores = products.astype(np.float64)
    if shards[0].similarity == "cosine":
        scores /= np.where(lengths == 0.0, np.float32(1.0), lengths)
        bounds = np.broadcast_to(scale[:, None], found.shape)
    else:
        bounds = scale[:, None] * (lengths * 1.001)  # over the float32 lengths' error (d/2 + 2) * u
    return np.where(found == NO_POSITION, NO_SCORE, scores), np.where(found == NO_POSITION, 0.0, bounds)


def _products(shards: Sequence[DenseIndex], queries32: np.ndarray, found: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """
    `(queries, m)` float32 dot products of the float32 queries with the vectors at the corpus positions `found`
    (-1 for none: any value), and those vectors' float32 lengths.

    Each query's positions are sorted, so that those of one shard are contiguous in its row; each shard's are then
    laid out as a `(queries, most of a query in a shard)` table of its own rows (-1 padding), which FAISS's
    `fvec_inner_products_by_idx` reads its vectors by, one call per shard holding any.
    """
    faiss = require_faiss()
    order = np.argsort(found, axis=1)
    ordered = np.take_along_axis(found, order, axis=1)
    offsets = np.array([shard.doc_offset for shard in shards])
    owners = np.searchsorted(offsets, ordered, side="right") - 1  # -1 for none (position -1 < offsets[0] = 0)
    columns = np.arange(found.shape[1])
    firsts = np.maximum.accumulate(np.where(np.diff(owners, axis=1, prepend=-2) != 0, columns, 0), axis=1)
    entries = np.flatnonzero(ordered != NO_POSITION)  # into the flat (queries, m) arrays
    rows, positions, mine = entries // found.shape[1], ordered.ravel()[entries], owners.ravel()[entries]
    slots = (columns - firsts).ravel()[entries]
    width = int(slots.max(initial=0)) + 1
    at = (mine * len(found) + rows) * width + slots  # into the flat (shards, queries, width) table
    table = np.full(len(shards) * len(found) * width, NO_POSITION, np.int64)
    table[at] = positions - offsets[mine]
    table = table.reshape(len(shards), len(found), width)
    products, lengths = np.empty(table.shape, np.float32), np.empty(table.shape, np.float32)
    for owner in np.flatnonzero(np.bincount(mine, minlength=len(shards))):
        vectors = np.ascontiguousarray(shards[owner].vectors, np.float32)  # a memory map is read where it lies
        faiss.fvec_inner_products_by_idx(faiss.swig_ptr(products[owner]), faiss.swig_ptr(queries32),
                                         faiss.swig_ptr(vectors), faiss.swig_ptr(table[owner]), vectors.shape[1],
                                         len(found), width)  # fmt: skip
        lengths[owner] = np.take(shards[owner].lengths(), table[owner])  # the padding's (-1) left out below
    back = rows * found.shape[1] + order.ravel()[entries]  # into the flat (queries, m) arrays, in found's order
    gathered = np.zeros((2, found.size), np.float32)
    gathered[0, back], gathered[1, back] = products.ravel()[at], lengths.ravel()[at]
    return gathered[0].reshape(found.shape), gathered[1].reshape(found.shape)


def _by_shard(
    shards: Sequence[DenseIndex], found: np.ndarray, where: np.ndarray
) -> Iterator[tuple[DenseIndex, np.ndarray, np.ndarray, np.ndarray]]:
    """
    The entries of `found` (corpus positions) where `where` holds, by the shard holding them: the shard, the
    entries' rows and columns, and their rows in the shard.
    """
    rows, columns = np.nonzero(where)
    positions = found[rows, columns]
    order = np.argsort(positions, kind="stable")  # by shard, and ascending in each: gathered in memory order (2x)
    owners = np.searchsorted([shard.doc_offset for shard in shards], positions, side="right") - 1
    starts = np.searchsorted(owners[order], np.arange(len(shards) + 1))
    for owner, (start, end) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
        if start < end:
            mine = order[start:end]
            yield shards[owner], rows[mine], columns[mine], positions[mine] - shards[owner].doc_offset


def recall_at_k(found: np.ndarray, exact: np.ndarray) -> float:
    """The mean share of each row's exact hits (positions, -1 padding left out) that `found` holds too."""
    shares = [
        len(set(f[f != NO_POSITION].tolist()) & set(e[e != NO_POSITION].tolist()))
        / max(int((e != NO_POSITION).sum()), 1)
        for f, e in zip(found, exact, strict=True)
    ]
    return float(np.mean(shares)) if shares else 1.0


def rows(shard: DenseIndex, positions: np.ndarray) -> np.ndarray:
    """The shard's vectors at those of the (ascending) corpus `positions` that it holds."""
    mine = positions[(positions >= shard.doc_offset) & (positions < shard.doc_offset + len(shard.ids))]
    return np.asarray(shard.vectors[mine - shard.doc_offset], np.float32)


def _search_vectors(shard: DenseIndex, vectors: np.ndarray) -> np.ndarray:
    """float32 vectors as the index holds and searches them (unit rows for cosine)."""
    vectors = np.asarray(vectors, np.float32)
    return unit_rows(vectors).astype(np.float32) if shard.similarity == "cosine" else vectors


def load_ann(folder: Path, dense: dict[str, Any]) -> Any:
    """
    The approximate index of a local index folder, checked against its dense shards.

    :raises ValueError: If its file is missing, was built from other vectors than the dense section's, or holds
        another count.
    :raises ImportError: Without FAISS.
    """
    faiss = require_faiss()
    ann = dense["ann"]
    kind = ann.get("kind", "hnsw")
    if ann.get("vectors_fingerprint") != vectors_fingerprint(dense):
        raise ValueError(f"{folder}: its {kind} index was built from other vectors than its dense shards: rebuild it.")
    if not (folder / ann["file"]).is_file():
        raise ValueError(f"{folder}: its {kind} index file {ann['file']} is missing: rebuild it.")
    index = faiss.read_index(str(folder / ann["file"]))
    if index.ntotal != sum(shard["n"] for shard in dense["shards"]):
        raise ValueError(f"{folder}: its {kind} index holds {index.ntotal} vectors, not the dense shards' count.")
    return index
