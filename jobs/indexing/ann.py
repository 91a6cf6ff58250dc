"""
The approximate index of an index folder (`--ann hnsw`): one FAISS HNSW graph over all its dense shards
(`qa_core.retrieval.ann`, which says why one), built where the index build's driver runs (FAISS uses that machine's
threads; the graph and the vectors are held in its memory once), written as `dense/hnsw.faiss` beside the dense
shards; its recall@10 against exact search is measured on a seeded sample of the passages' own vectors as queries
and recorded in `build.json`'s `dense.ann` with what it was built from (`vectors_fingerprint`).
"""

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from jobs.bulk_qa.workers.retrieve import RetrievalSettings, local_index_folder
from jobs.bulk_qa.workers.storage import InputError, resolve_path
from jobs.indexing.embed import DENSE_FOLDER
from qa_core.retrieval.ann import (
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    build_hnsw,
    recall_at_k,
    require_faiss,
    search_hnsw,
    vectors_fingerprint,
)
from qa_core.retrieval.dense import DenseIndex, search_shards

ANN_FILE = f"{DENSE_FOLDER}/hnsw.faiss"  # inside the index folder
RECALL_QUERIES = 1000  # passages whose own vectors measure the graph's recall@10
RECALL_K = 10


def dense_shards(folder: Path, dense: dict[str, Any]) -> list[DenseIndex]:
    """The dense shards of a local index folder, memory-mapped, in corpus order."""
    return [DenseIndex.load(folder / shard["folder"], similarity=dense["similarity"]) for shard in dense["shards"]]


def add_ann(location: str, dense: dict[str, Any], settings: RetrievalSettings) -> dict[str, Any]:
    """
    Builds the HNSW graph of the dense shards at `location` and writes it into the folder.

    :param dense: The build record's `dense` section (its shards written).
    :returns: The `dense.ann` section: kind, file, M, efConstruction, efSearch, vectors, recall@10 and the sample's
        size, build seconds and `vectors_fingerprint`.
    :raises InputError: Without FAISS.
    """
    try:
        faiss = require_faiss()
    except ImportError as error:
        raise InputError(str(error)) from None
    started = time.time()
    shards = dense_shards(local_index_folder(location), dense)
    graph = build_hnsw(shards)
    build_s = time.time() - started
    n = sum(len(shard.ids) for shard in shards)
    sample = np.sort(np.random.default_rng(0).choice(n, min(RECALL_QUERIES, n), replace=False))
    queries = np.concatenate([_rows(shard, sample) for shard in shards])  # the sampled passages' vectors
    exact, _ = search_shards(shards, queries, RECALL_K)
    found, _ = search_hnsw(graph, shards, queries, RECALL_K, settings.ann_ef_search)
    filesystem, inner = resolve_path(f"{location.rstrip('/')}/{ANN_FILE}")
    if isinstance(filesystem, pafs.LocalFileSystem):
        faiss.write_index(graph, inner)
    else:
        with tempfile.TemporaryDirectory() as local:
            faiss.write_index(graph, f"{local}/graph")
            pafs.copy_files(f"{local}/graph", inner, source_filesystem=pafs.LocalFileSystem(),
                            destination_filesystem=filesystem)  # fmt: skip
    return {
        "kind": "hnsw",
        "file": ANN_FILE,
        "m": HNSW_M,
        "ef_construction": HNSW_EF_CONSTRUCTION,
        "ef_search": settings.ann_ef_search,
        "vectors": n,
        f"recall@{RECALL_K}": round(recall_at_k(found, exact), 4),
        "recall_queries": len(queries),
        "build_s": round(build_s, 3),
        "vectors_fingerprint": vectors_fingerprint(dense),
    }


def _rows(shard: DenseIndex, positions: np.ndarray) -> np.ndarray:
    """The shard's vectors at those of the (ascending) corpus `positions` that it holds."""
    mine = positions[(positions >= shard.doc_offset) & (positions < shard.doc_offset + len(shard.ids))]
    return np.asarray(shard.vectors[mine - shard.doc_offset], np.float32)
