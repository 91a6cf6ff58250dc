"""The approximate indexes (hnsw, ivf) against exact search on the same vectors, and their refusals."""

import sys

import numpy as np
import pytest

from jobs.engines import InProcessEngine
from jobs.indexing.vectors import add_graph
from jobs.retrieval_settings import RetrievalSettings
from jobs.storage import InputError
from qa_core.retrieval.ann import (
    AnnSearch,
    build_ann_index,
    ivf_dimensions,
    load_ann,
    recall_at_k,
    require_faiss,
    rescore,
    screen,
    search_ann,
    vectors_fingerprint,
)
from qa_core.retrieval.dense import DenseIndex, search_shards, unit_rows
from qa_core.retrieval.topk import merge_top_k

pytest.importorskip("faiss")


@pytest.fixture(autouse=True)
def one_faiss_thread() -> None:
    """FAISS's OpenMP threads on small sets: 2 threads on a busy 2-core machine wait on each other (0.3 s -> 5 s)."""
    import faiss

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(threads)


# 6,000 clustered 48-d vectors, measured: hnsw 0.990 at efSearch 256 (0.971 at 128, 0.926 at 64); ivf (46 of the 48
# dimensions, 77 lists of 4-bit codes) 0.962 at nprobe 16 with 100 rescored (0.868 at 8 with 50), 0.998 over all
# lists with 200. FAISS's threaded build may vary a little from run to run.
# Both similarities with the graph; the codes' search rescores by the same function (`rescore`), with cosine only.
SEARCHES = [
    ("hnsw", AnnSearch(ef_search=256), 0.97, "dot_product"),
    ("hnsw", AnnSearch(ef_search=256), 0.97, "cosine"),
    ("ivf", AnnSearch(nprobe=16, candidates=100), 0.93, "cosine"),
]


@pytest.mark.parametrize(("kind", "search", "least_recall", "similarity"), SEARCHES)
def test_the_index_finds_the_exact_hits_with_their_exact_scores(
    kind: str, search: AnnSearch, least_recall: float, similarity: str
) -> None:
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((30, 48))
    vectors = unit_rows(centres[rng.integers(0, 30, 6000)] + rng.standard_normal((6000, 48))).astype(np.float32)
    if similarity == "cosine":
        vectors *= rng.uniform(0.5, 2.0, (6000, 1)).astype(np.float32)  # cosine ranks other than dot products
    queries = (vectors[:300] + 0.3 * rng.standard_normal((300, 48))).astype(np.float32)
    shards = [DenseIndex([str(i) for i in range(a, min(a + 2500, 6000))], vectors[a : a + 2500], a, similarity)
              for a in range(0, 6000, 2500)]  # fmt: skip
    exact_positions, exact_scores = search_shards(shards, queries, 10)
    positions, scores = search_ann(build_ann_index(kind, shards), shards, queries, 10, search)
    assert recall_at_k(positions, exact_positions) >= least_recall
    found = positions == exact_positions  # where it finds exact search's hit at the same rank: the same score
    np.testing.assert_array_equal(scores[found], exact_scores[found])
    exact_queries, exact_vectors = queries.astype(np.float64), vectors.astype(np.float64)
    if similarity == "cosine":
        exact_queries, exact_vectors = unit_rows(exact_queries), unit_rows(exact_vectors)
    expected = np.einsum("ij,ikj->ik", exact_queries, exact_vectors[positions])  # each hit's exact score
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-12)
    assert (positions[:, 0] == exact_positions[:, 0]).mean() >= least_recall
    assert (np.diff(scores, axis=1) <= 0).all()  # best first


@pytest.mark.parametrize("similarity", ["dot_product", "cosine"])
def test_the_float32_screen_keeps_the_best_k_of_rescoring_every_candidate_exactly(similarity: str) -> None:
    rng = np.random.default_rng(2)
    vectors = rng.standard_normal((3000, 64)).astype(np.float32) * rng.uniform(0.5, 2.0, (3000, 1)).astype(np.float32)
    vectors[1000:1100] = vectors[:100]  # exact ties, in another shard
    vectors[1100:1200] = vectors[:100] * np.float32(1 + 2**-20)  # within float32's error of them
    shards = [DenseIndex([str(i) for i in range(a, a + 700)], vectors[a : a + 700], a, similarity)
              for a in range(0, 2800, 700)] + [DenseIndex([str(i) for i in range(2800, 3000)], vectors[2800:], 2800,
                                                          similarity)]  # fmt: skip
    queries = np.asarray(vectors[:100], np.float64) + 0.01 * rng.standard_normal((100, 64))
    if similarity == "cosine":
        queries = unit_rows(queries)
    found = np.concatenate([np.stack([np.arange(100), np.arange(1000, 1100), np.arange(1100, 1200)], axis=1),
                            rng.choice(3000, (100, 60))], axis=1)  # fmt: skip
    found[::7, -5:] = -1  # fewer candidates for some queries
    everything = np.full(found.shape, -np.inf)
    for shard in shards:
        mine = (found >= shard.doc_offset) & (found < shard.doc_offset + len(shard.ids))
        everything[mine] = shard.exact_scores(queries[np.nonzero(mine)[0]], found[mine] - shard.doc_offset)
    for k in (1, 3, 10):
        expected = merge_top_k([(found, everything)], k)
        positions, scores = merge_top_k([(found, rescore(shards, queries, found, k))], k)
        np.testing.assert_array_equal(positions, expected[0])
        np.testing.assert_array_equal(scores, expected[1])
    # The screen (FAISS's products of the candidates' rows where they lie, the shards' lengths): every candidate's
    # float32 score within its bound of the exact one, the bound no wider than float32's error needs; none: -inf.
    screened, bounds = screen(shards, queries, found)
    valid = found != -1
    errors = np.abs(screened[valid] - everything[valid])
    lengths = 1.0 if similarity == "cosine" else np.linalg.norm(vectors[found[valid]], axis=1)
    assert (errors <= bounds[valid]).all() and (errors > 0).any()  # float32's error is there: the bound is needed
    assert (bounds[valid] <= 1e-5 * np.linalg.norm(queries, axis=1)[np.nonzero(valid)[0]] * lengths).all()
    assert (screened[~valid] == -np.inf).all() and (bounds[~valid] == 0).all()


def test_the_ivf_index_keeps_the_fewest_dimensions_holding_the_energy_asked_for_in_any_basis() -> None:
    energies = np.array([60.0, 25.0, 8.0, 3.0, 2.0, 1.0, 0.5, 0.5])  # shares 0.60, 0.85, 0.93, 0.96, 0.98 of 100
    sample = np.diag(np.sqrt(energies))  # its second moment: the energies on the axes
    turned = sample @ np.linalg.qr(np.random.default_rng(0).standard_normal((8, 8)))[0]  # the same on other axes
    assert ivf_dimensions(sample) == ivf_dimensions(turned) == 6  # 5 reach 0.97, rounded up to an even count
    assert ivf_dimensions(np.eye(7)) == 6  # an even spectrum keeps all, but an even count: 2 per code


def test_an_ivf_index_built_before_its_rotation_is_still_searched() -> None:
    import faiss

    vectors = unit_rows(np.random.default_rng(3).standard_normal((400, 8))).astype(np.float32)
    shards = [DenseIndex([str(i) for i in range(400)], vectors)]
    before = faiss.IndexIVFPQFastScan(faiss.IndexFlatIP(8), 8, 4, 4, 4, faiss.METRIC_INNER_PRODUCT)  # no rotation
    before.train(vectors)
    before.add(vectors)
    positions, scores = search_ann(before, shards, vectors[:20], 5, AnnSearch(nprobe=4, candidates=400))  # all
    exact = search_shards(shards, vectors[:20], 5)
    np.testing.assert_array_equal(positions, exact[0])
    np.testing.assert_array_equal(scores, exact[1])


def test_recall_at_k_is_the_share_of_exact_hits_found() -> None:
    exact = np.array([[1, 2, 3, 4], [5, 6, -1, -1]])  # the second query has 2 hits only
    found = np.array([[4, 9, 1, 8], [6, -1, -1, -1]])
    assert recall_at_k(found, exact) == (2 / 4 + 1 / 2) / 2


def test_an_unknown_kind_or_too_few_passages_for_ivf_are_refused(tmp_path) -> None:
    shards = [DenseIndex(["a", "b"], np.eye(2, dtype=np.float32))]
    with pytest.raises(ValueError, match="ann must be one of hnsw, ivf, not 'flat'"):
        build_ann_index("flat", shards)
    with pytest.raises(ValueError, match="ann ivf needs at least 16 passages, not 2"):  # a code book's 16 entries
        build_ann_index("ivf", shards)
    settings = RetrievalSettings(retrieval="dense", embedding_model="m", ann="ivf")
    with pytest.raises(InputError, match="ann ivf needs at least 16 passages, not 2"):  # before a task is started
        add_graph(str(tmp_path), {"shards": [{"folder": "s", "doc_offset": 0, "n": 2}]}, settings, InProcessEngine())


def test_without_faiss_the_approximate_index_is_refused_clearly(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss raises ImportError
    with pytest.raises(
        ImportError, match=r"needs FAISS, which is not installed: pip install 'ray-extractive-qa\[ann\]'"
    ):
        require_faiss()
    settings = RetrievalSettings(retrieval="dense", embedding_model="m", ann="hnsw")
    with pytest.raises(InputError, match="needs FAISS"):
        add_graph(str(tmp_path), {"shards": []}, settings, InProcessEngine())


@pytest.mark.parametrize("kind", ["hnsw", "ivf"])
def test_an_index_of_other_vectors_or_without_its_file_is_refused(kind: str, tmp_path) -> None:
    import faiss

    vectors = unit_rows(np.random.default_rng(1).standard_normal((50, 8))).astype(np.float32)
    faiss.write_index(build_ann_index(kind, [DenseIndex([str(i) for i in range(50)], vectors)]), str(tmp_path / "g"))
    shards = [{"folder": "s", "doc_offset": 0, "n": 50}]
    dense = {"fingerprint": "model-1", "similarity": "dot_product", "shards": shards}
    ann = {"kind": kind, "file": "g", "vectors_fingerprint": vectors_fingerprint(dense)}
    assert load_ann(tmp_path, {**dense, "ann": ann}).ntotal == 50
    other = {**dense, "fingerprint": "model-2"}  # the shards re-embedded by another model
    with pytest.raises(ValueError, match=f"its {kind} index was built from other vectors than its dense shards"):
        load_ann(tmp_path, {**other, "ann": ann})
    more = {**dense, "shards": [{**shards[0], "n": 60}]}  # a count the fingerprint does not tell (recorded as such)
    with pytest.raises(ValueError, match=f"its {kind} index holds 50 vectors, not the dense shards' count"):
        load_ann(tmp_path, {**more, "ann": {**ann, "vectors_fingerprint": vectors_fingerprint(more)}})
    with pytest.raises(ValueError, match=f"its {kind} index file lost is missing"):
        load_ann(tmp_path, {**dense, "ann": {**ann, "file": "lost"}})
