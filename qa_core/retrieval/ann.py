"""
Approximate dense search, opt-in: a FAISS HNSW graph (`IndexHNSWFlat`, inner product) over the vectors of all the
dense shards of an index, in corpus order, so that its ids are corpus positions. One graph over the corpus rather
than one per shard: a search visits about log n nodes of a graph, so per-shard graphs (8,192 vectors each as the
index build writes them, 122 at 1M) would multiply the search's cost by the shards' count. The graph's hits are
rescored exactly (float64, `DenseIndex.exact_scores`) and ordered as exact search orders them, so a hit's score is
the one exact search gives it; only which documents are found may differ (its recall@k against exact search).
"""

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from qa_core.retrieval.dense import DenseIndex, unit_rows
from qa_core.retrieval.topk import NO_POSITION, NO_SCORE, check_k, merge_top_k

ANN_KINDS = ("hnsw",)
HNSW_M = 32  # neighbours per node (FAISS's M)
HNSW_EF_CONSTRUCTION = 80  # candidates kept while inserting
DEFAULT_EF_SEARCH = 128  # candidates kept while searching (FAISS's default, 16, finds too few at 1M)


def require_faiss() -> Any:
    """
    The `faiss` module.

    :raises ImportError: If FAISS is not installed, saying how to install it.
    """
    try:
        import faiss
    except ImportError:
        raise ImportError(
            "the approximate index (ann: hnsw) needs FAISS, which is not installed: "
            "pip install 'ray-extractive-qa[ann]' (faiss-cpu), or leave --ann out for exact search."
        ) from None
    return faiss


def vectors_fingerprint(dense: dict[str, Any]) -> str:
    """What an HNSW graph was built from, by the build record's `dense` section: model, similarity and shards."""
    built_from = [
        dense.get("fingerprint"),
        dense.get("similarity"),
        [[s["doc_offset"], s["n"]] for s in dense["shards"]],
    ]
    return hashlib.sha256(json.dumps(built_from).encode("utf-8")).hexdigest()[:16]


def _search_vectors(shard: DenseIndex, vectors: np.ndarray) -> np.ndarray:
    """float32 vectors as the graph holds and searches them (unit rows for cosine)."""
    vectors = np.asarray(vectors, np.float32)
    return unit_rows(vectors).astype(np.float32) if shard.similarity == "cosine" else vectors


def build_hnsw(shards: Sequence[DenseIndex], m: int = HNSW_M, ef_construction: int = HNSW_EF_CONSTRUCTION) -> Any:
    """
    An HNSW graph over the shards' vectors (FAISS's threads: the machine's).

    :param shards: Contiguous shards in corpus order, the first at position 0.
    :raises ValueError: If the shards are not contiguous from 0.
    :raises ImportError: Without FAISS.
    """
    faiss = require_faiss()
    index = faiss.IndexHNSWFlat(shards[0].dimension, m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = ef_construction
    for shard in shards:
        if shard.doc_offset != index.ntotal:
            raise ValueError(f"shard at position {shard.doc_offset} where position {index.ntotal} was expected.")
        index.add(_search_vectors(shard, shard.vectors))
    return index


def search_hnsw(
    graph: Any, shards: Sequence[DenseIndex], queries: np.ndarray, k: int, ef_search: int = DEFAULT_EF_SEARCH
) -> tuple[np.ndarray, np.ndarray]:
    """
    The graph's k hits of each query, rescored exactly by the shards it was built from.

    :returns: `(queries, k)` corpus positions and float64 scores, best first, ties in corpus order, padded with -1
        and -inf.
    """
    check_k(k)
    graph.hnsw.efSearch = max(ef_search, k)
    exact = np.asarray(queries, np.float64)
    if shards[0].similarity == "cosine":
        exact = unit_rows(exact)
    _, found = graph.search(exact.astype(np.float32), k)  # (queries, k) positions, -1 where fewer
    rows, columns = np.nonzero(found != NO_POSITION)
    positions = found[rows, columns]
    offsets = np.array([shard.doc_offset for shard in shards])
    owners = np.searchsorted(offsets, positions, side="right") - 1
    scores = np.full((len(exact), k), NO_SCORE, np.float64)
    for owner in np.unique(owners):
        mine = owners == owner
        shard = shards[owner]
        scores[rows[mine], columns[mine]] = shard.exact_scores(exact[rows[mine]], positions[mine] - shard.doc_offset)
    return merge_top_k([(np.where(found == NO_POSITION, NO_POSITION, found).astype(np.int64), scores)], k)


def recall_at_k(found: np.ndarray, exact: np.ndarray) -> float:
    """The mean share of each row's exact hits (positions, -1 padding left out) that `found` holds too."""
    shares = [
        len(set(f[f != NO_POSITION].tolist()) & set(e[e != NO_POSITION].tolist()))
        / max(int((e != NO_POSITION).sum()), 1)
        for f, e in zip(found, exact, strict=True)
    ]
    return float(np.mean(shares)) if shares else 1.0


def load_ann(folder: Path, dense: dict[str, Any]) -> Any:
    """
    The HNSW graph of a local index folder, checked against its dense shards.

    :raises ValueError: If its file is missing, was built from other vectors than the dense section's, or holds
        another count.
    :raises ImportError: Without FAISS.
    """
    faiss = require_faiss()
    ann = dense["ann"]
    if ann.get("vectors_fingerprint") != vectors_fingerprint(dense):
        raise ValueError(f"{folder}: its HNSW file was built from other vectors than its dense shards: rebuild it.")
    if not (folder / ann["file"]).is_file():
        raise ValueError(f"{folder}: its HNSW file {ann['file']} is missing: rebuild it.")
    graph = faiss.read_index(str(folder / ann["file"]))
    if graph.ntotal != sum(shard["n"] for shard in dense["shards"]):
        raise ValueError(f"{folder}: its HNSW file holds {graph.ntotal} vectors, not the dense shards' count.")
    return graph
