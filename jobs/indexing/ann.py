"""
The approximate index of an index folder (`--ann hnsw|ivf`): one FAISS index over all its dense shards
(`qa_core.retrieval.ann`, which says why one), written as `dense/<kind>.faiss` beside the dense shards; its recall@10
against exact search is measured on a seeded sample of the passages' own vectors as queries, searched as the run
will search it (`AnnSearch`), and recorded in `build.json`'s `dense.ann` with what it was built from
(`vectors_fingerprint`).

With the Ray engine the index is built by one Ray task holding the CPUs of a node (FAISS's threads), which
memory-maps the shards from the index folder: the driver never holds the vectors or the index. The in-process engine
builds it in its own process. A run that keeps an index (a resumed run) builds its approximate index when it is
missing (`needs_graph`): asked for but never built (the build was stopped after the vectors were written), of
another kind than asked for, or recorded but its file absent.
"""

import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from jobs.indexing.embed import DENSE_FOLDER
from jobs.retrieval_settings import RetrievalSettings
from jobs.storage import local_index_folder, resolve_path, written_in_place
from qa_core.retrieval.ann import (
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    IVF_CODE_BITS,
    AnnSearch,
    build_ann_index,
    ivf_lists_of,
    recall_at_k,
    require_faiss,
    rows,
    search_ann,
    vectors_fingerprint,
)
from qa_core.retrieval.dense import DenseIndex, search_shards

RECALL_QUERIES = 1000  # passages whose own vectors measure the graph's recall@10
RECALL_K = 10


def dense_shards(folder: Path, dense: dict[str, Any]) -> list[DenseIndex]:
    """The dense shards of a local index folder, memory-mapped, in corpus order."""
    return [DenseIndex.load(folder / shard["folder"], similarity=dense["similarity"]) for shard in dense["shards"]]


def ann_file(kind: str) -> str:
    """Where the approximate index of `kind` lies inside the index folder."""
    return f"{DENSE_FOLDER}/{kind}.faiss"


def needs_graph(location: str, dense: dict[str, Any], settings: RetrievalSettings) -> bool:
    """
    Whether the index at `location` lacks the approximate index it should hold: the settings ask for one (`ann`) or
    its `dense` section records one, and the section has none, or one of another kind than asked for, or of other
    vectors, or its file is absent.
    """
    ann = dense.get("ann")
    if ann is None:
        return settings.ann is not None
    if settings.ann is not None and ann.get("kind", "hnsw") != settings.ann:
        return True
    if ann.get("vectors_fingerprint") != vectors_fingerprint(dense):
        return True
    filesystem, inner = resolve_path(f"{location.rstrip('/')}/{ann['file']}")
    return filesystem.get_file_info(inner).type != pafs.FileType.File


def build_ann(location: str, dense: dict[str, Any], kind: str, search: AnnSearch, threads: int) -> dict[str, Any]:
    """
    Builds, measures (searched as `search` says) and writes the approximate index of `kind` over the dense shards
    at `location` with `threads` FAISS threads, where the engine places it (`run_on_a_node`, which gives `threads`).
    The file is written complete or not at all (`written_in_place`), so that a build stopped midway leaves no index.

    :returns: The `dense.ann` section.
    """
    faiss = require_faiss()
    faiss.omp_set_num_threads(threads)
    started = time.time()
    shards = dense_shards(local_index_folder(location), dense)
    index = build_ann_index(kind, shards)
    build_s = time.time() - started
    n = sum(len(shard.ids) for shard in shards)
    sample = np.sort(np.random.default_rng(0).choice(n, min(RECALL_QUERIES, n), replace=False))
    queries = np.concatenate([rows(shard, sample) for shard in shards])  # the sampled passages' vectors
    exact, _ = search_shards(shards, queries, RECALL_K)
    found, _ = search_ann(index, shards, queries, RECALL_K, search)
    _write_graph(faiss, index, location, ann_file(kind))
    if kind == "hnsw":
        built = {"m": HNSW_M, "ef_construction": HNSW_EF_CONSTRUCTION, "ef_search": search.ef_search}
    else:
        lists = ivf_lists_of(index)
        built = {"lists": lists.nlist, "dimensions": lists.d, "code_bits": IVF_CODE_BITS,
                 "residual_codes": bool(lists.by_residual), "nprobe": min(search.nprobe, lists.nlist),
                 "candidates": search.candidates}  # fmt: skip
    return {
        "kind": kind,
        "file": ann_file(kind),
        **built,
        "vectors": n,
        f"recall@{RECALL_K}": round(recall_at_k(found, exact), 4),
        "recall_queries": len(queries),
        "build_s": round(build_s, 3),
        "threads": threads,
        "vectors_fingerprint": vectors_fingerprint(dense),
    }


def _write_graph(faiss: Any, graph: Any, location: str, file: str) -> None:
    """Writes the approximate index as `file` of the index at `location`, complete or not at all."""
    with written_in_place(f"{location.rstrip('/')}/{file}") as staged:
        faiss.write_index(graph, staged.path)
