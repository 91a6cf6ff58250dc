"""Filtered search: BM25 (every search path, shards) and dense (exact, approximate) with an allowed-mask, and
parity with Haystack's InMemoryBM25Retriever / InMemoryEmbeddingRetriever given the same filters."""

import itertools

import numpy as np
import pytest
from haystack import Document as HaystackDocument
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever
from haystack.document_stores.in_memory import InMemoryDocumentStore

from qa_core.document import Document
from qa_core.retrieval import BM25Retriever, build_sharded
from qa_core.retrieval import ann as ann_module
from qa_core.retrieval import dense as dense_module
from qa_core.retrieval import index as index_module
from qa_core.retrieval.ann import ANN_KINDS, AnnSearch, build_ann_index, recall_at_k, search_ann
from qa_core.retrieval.dense import SEARCH_PRECISIONS, DenseIndex, unit_rows
from qa_core.retrieval.embedding_retriever import EmbeddingRetriever
from qa_core.retrieval.filters import FilterError, document_columns, matching_mask
from qa_core.retrieval.topk import NO_POSITION
from qa_core.retrieval.sharding import search_shards
from tests.qa_core.test_retrieval import ENGLISH, _windows_corpus

# Selectivities: nothing, one document, the selective path's share and below, past it, everything.
SHARES = (0.0, 0.0005, 0.01, 0.08, 0.3, 0.7, 1.0)


def _masks(n_docs: int) -> list[np.ndarray]:
    rng = np.random.default_rng(54)
    masks = [rng.random(n_docs) < share for share in SHARES]
    masks[1] = np.zeros(n_docs, bool)
    masks[1][n_docs // 3] = True
    return masks


def _post_filtered(every_hit: tuple[np.ndarray, np.ndarray], k: int, allowed: np.ndarray) -> tuple[np.ndarray, ...]:
    """The reference: of every document's hit (unfiltered, scoring every document), those allowed, the first k."""
    positions, scores = every_hit
    queries = positions.shape[0]
    expected_positions = np.full((queries, k), -1)
    expected_scores = np.full((queries, k), -np.inf)
    for row in range(queries):
        kept = (positions[row] >= 0) & allowed[np.maximum(positions[row], 0)]
        found = positions[row][kept][:k]
        expected_positions[row, : found.size] = found
        expected_scores[row, : found.size] = scores[row][kept][:k]
    return expected_positions, expected_scores


@pytest.mark.parametrize("algorithm", ["BM25Okapi", "BM25L"])
def test_filtered_bm25_equals_post_filtering_every_hit(algorithm: str, monkeypatch) -> None:
    """The top k of the allowed documents with their unfiltered scores, bit for bit, on each search path."""
    ids, texts, queries = _windows_corpus()
    queries = queries[:8] + queries[-4:]  # windows, and single, unknown and common words
    shards = build_sharded(ids, texts, n_shards=3, algorithm=algorithm)
    every_hit = search_shards(shards, queries, len(texts), prune=False)
    monkeypatch.setattr(index_module, "MIN_DOCS", 1)
    for path in ("selective", "pruned", "every document"):
        # Which path a search takes is a matter of speed: forced here, so that each is compared on a small corpus.
        monkeypatch.setattr(index_module, "MAX_CANDIDATE_SHARE", 1.0 if path == "selective" else 0.0)
        for allowed, k in itertools.product(_masks(len(texts)), (1, 10, 300)):
            expected = _post_filtered(every_hit, k, allowed)
            found = search_shards(shards, queries, k, prune=path != "every document", allowed=allowed)
            assert found[0].tolist() == expected[0].tolist()
            assert found[1].tobytes() == expected[1].tobytes()
            if allowed.sum() >= k:  # never fewer than k hits while k allowed documents score
                assert (found[0][:, -1] >= 0).sum() == (expected[0][:, -1] >= 0).sum()


def test_a_selective_filter_returns_top_k_where_a_fixed_candidate_list_would_not() -> None:
    ids, texts, queries = _windows_corpus()
    index = build_sharded(ids, texts, n_shards=1)[0]
    unfiltered, _ = index.search(queries[:1], 50)
    allowed = np.ones(len(texts), bool)
    allowed[unfiltered[0]] = False  # none of the 50 best
    positions, scores = index.search(queries[:1], 10, allowed=allowed)
    assert (positions >= 0).all() and allowed[positions[0]].all()
    assert scores[0, 0] <= index.search(queries[:1], 51)[1][0, 50]


def test_allowed_must_be_one_bool_per_document() -> None:
    ids, texts, queries = _windows_corpus()
    index = build_sharded(ids, texts, n_shards=1)[0]
    with pytest.raises(ValueError, match=r"^allowed must hold one bool per document \(2700\), not int64 of shape"):
        index.search(queries, 3, allowed=np.ones(len(texts), np.int64))
    with pytest.raises(ValueError, match=r"^allowed must hold one bool per document \(2700\), not bool of shape"):
        index.search(queries, 3, allowed=np.ones(5, bool))


def _meta(i: int) -> dict:
    """Metadata of every kind: years with gaps and None, kinds, dates as ISO strings, a flag."""
    meta = {"kind": ("report", "letter", "memo")[i % 3], "date": f"20{10 + i % 14:02d}-0{1 + i % 9}-15"}
    if i % 7:
        meta["year"] = None if i % 11 == 0 else 1990 + i % 35
    if i % 2:
        meta["flag"] = i % 4 == 1
    return meta


FILTERS = [
    {"field": "meta.year", "operator": ">=", "value": 2010},
    {"field": "meta.kind", "operator": "in", "value": ["memo", "letter"]},
    {"field": "meta.date", "operator": "<", "value": "2015-06-01"},
    {"field": "year", "operator": "==", "value": None},
    {"operator": "NOT", "conditions": [{"field": "meta.flag", "operator": "==", "value": True}]},
    {"operator": "AND", "conditions": [
        {"field": "meta.year", "operator": "!=", "value": 2000},
        {"operator": "OR", "conditions": [{"field": "meta.kind", "operator": "==", "value": "report"},
                                          {"field": "meta.date", "operator": ">", "value": "2020-01-01T00:00:00"}]},
    ]},
    {"field": "meta.year", "operator": "==", "value": 1991},  # 5 documents or so: fewer than top_k
    {"field": "id", "operator": "not in", "value": ["p-3", "p-5"]},
]  # fmt: skip


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], list[dict], list[str]]:
    texts = [paragraph for paragraph in ENGLISH if paragraph.strip()][:400]
    words = " ".join(texts).split()
    rng = np.random.default_rng(3)
    queries = [" ".join(words[start : start + 6]) for start in rng.integers(0, len(words) - 6, 6)]
    return texts, [_meta(i) for i in range(len(texts))], queries


@pytest.mark.parametrize("algorithm", ["BM25Okapi", "BM25L", "BM25Plus"])
def test_bm25_retriever_with_filters_equals_haystack(corpus, algorithm: str) -> None:
    texts, metas, queries = corpus
    store = InMemoryDocumentStore(bm25_algorithm=algorithm, shared=False)
    store.write_documents([HaystackDocument(id=f"p-{i}", content=text, meta=meta)
                           for i, (text, meta) in enumerate(zip(texts, metas, strict=True))])  # fmt: skip
    theirs = InMemoryBM25Retriever(store, top_k=15)
    ours = BM25Retriever(documents=[Document(content=text, id=f"p-{i}", meta=meta)
                                    for i, (text, meta) in enumerate(zip(texts, metas, strict=True))],
                         top_k=15, bm25_algorithm=algorithm, filters=FILTERS[0])  # fmt: skip
    ours.warm_up()
    for filters in FILTERS:
        batch = ours.run_batch(queries, filters=filters)["documents"]
        for query, found in zip(queries, batch, strict=True):
            expected = theirs.run(query=query, filters=filters)["documents"]
            assert [doc.id for doc in found] == [doc.id for doc in expected], (filters, query)
            np.testing.assert_allclose([doc.score for doc in found], [doc.score for doc in expected], rtol=1e-12)
            assert [doc.meta for doc in found] == [doc.meta for doc in expected]
    # The retriever's own filters where run is given none.
    query = queries[0]
    assert [doc.id for doc in ours.run(query)["documents"]] == [
        doc.id for doc in theirs.run(query=query, filters=FILTERS[0])["documents"]
    ]
    # `{}` at run time: no filter (where Haystack would take the retriever's).
    assert [doc.id for doc in ours.run(query, filters={})["documents"]] == [
        doc.id for doc in theirs.run(query=query)["documents"]
    ]


def test_bm25_retriever_refuses_bad_filters() -> None:
    with pytest.raises(FilterError, match=r"^Unknown comparison operator 'like'"):
        BM25Retriever(documents=[Document(content="x")], filters={"field": "meta.a", "operator": "like", "value": 1})
    retriever = BM25Retriever(documents=[Document(content="alpha", meta={"a": "text"})])
    retriever.warm_up()
    with pytest.raises(FilterError, match=r"^'value' key missing in"):
        retriever.run("alpha", filters={"operator": "AND", "conditions": [{"field": "meta.a", "operator": "=="}]})
    with pytest.raises(FilterError, match=r"^Can't compare strings using operators"):
        retriever.run("alpha", filters={"field": "meta.a", "operator": ">", "value": 3})


def _clustered(n: int, dimension: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors around 20 centres, four of them equal (ties), and 20 queries near some of them."""
    rng = np.random.default_rng(54)
    centres = rng.standard_normal((20, dimension))
    vectors = unit_rows(centres[rng.integers(0, 20, n)] + 0.7 * rng.standard_normal((n, dimension)))
    vectors[10:14] = vectors[n // 2]
    queries = vectors[rng.integers(0, n, 20)] + 0.2 * rng.standard_normal((20, dimension))
    return vectors.astype(np.float32), queries.astype(np.float32)


@pytest.mark.parametrize("similarity", ["dot_product", "cosine"])
def test_filtered_dense_search_equals_float64_brute_force_over_the_allowed(similarity: str, monkeypatch) -> None:
    monkeypatch.setattr(dense_module, "ROWS_PER_PRODUCT", 512)  # many blocks, some without an allowed vector
    vectors, queries = _clustered(6000, 32)
    exact_queries, exact_vectors = queries.astype(np.float64), vectors.astype(np.float64)
    if similarity == "cosine":
        exact_queries, exact_vectors = unit_rows(exact_queries), unit_rows(exact_vectors)
    scores = exact_queries @ exact_vectors.T  # (queries, vectors)
    bounds = [0, 2100, 4097, len(vectors)]
    shards = [DenseIndex([str(i) for i in range(a, b)], vectors[a:b], a, similarity)
              for a, b in zip(bounds[:-1], bounds[1:], strict=True)]  # fmt: skip
    masks = _masks(len(vectors))
    masks[2][:4000] = False  # the allowed vectors in a few blocks only
    masks = [masks[share] for share in (0, 1, 2, 4, 6)]  # none, one, a few blocks' 1%, 30%, all
    for allowed, precision in itertools.product(masks, SEARCH_PRECISIONS):
        k = 10
        allowed_rows = np.flatnonzero(allowed)
        order = [allowed_rows[np.lexsort((allowed_rows, -row[allowed_rows]))][:k] for row in scores]
        expected = np.full((len(queries), k), NO_POSITION)
        for row, found in enumerate(order):
            expected[row, : found.size] = found
        positions, found_scores = dense_module.search_shards(shards, queries, k, precision, allowed=allowed)
        np.testing.assert_array_equal(positions, expected)
        padded = np.where(expected >= 0, np.take_along_axis(scores, np.maximum(expected, 0), axis=1), -np.inf)
        np.testing.assert_allclose(found_scores, padded, rtol=0, atol=1e-12)


@pytest.mark.parametrize("similarity", ["dot_product", "cosine"])
def test_embedding_retriever_with_filters_equals_in_memory_embedding_retriever(corpus, similarity, tmp_path) -> None:
    texts, metas, _ = corpus
    vectors, queries = _clustered(len(texts), 16)
    store = InMemoryDocumentStore(embedding_similarity_function=similarity, shared=False)
    store.write_documents([HaystackDocument(id=f"p-{i}", content=text, meta=meta, embedding=vectors[i].tolist())
                           for i, (text, meta) in enumerate(zip(texts, metas, strict=True))])  # fmt: skip
    theirs = InMemoryEmbeddingRetriever(store, top_k=15)
    ours = [Document(content=text, id=f"p-{i}", meta=meta) for i, (text, meta) in enumerate(zip(texts, metas, strict=True))]
    dense = {"similarity": similarity, "shards": []}
    for start, stop in ((0, 150), (150, len(ours))):  # two shards
        DenseIndex([doc.id for doc in ours[start:stop]], vectors[start:stop], start).save(tmp_path / f"shard-{start}")
        dense["shards"].append({"folder": f"shard-{start}", "doc_offset": start, "n": stop - start})
    retriever = EmbeddingRetriever(tmp_path, dense, top_k=15)
    retriever.warm_up()
    columns = document_columns(ours)
    for filters in FILTERS:
        positions, scores = retriever.search(queries[:8], allowed=matching_mask(filters, columns, len(ours)))
        for query, row_positions, row_scores in zip(queries[:8], positions, scores, strict=True):
            expected = theirs.run(query_embedding=query.tolist(), filters=filters)["documents"]
            found = row_positions[row_positions >= 0]
            assert [ours[p].id for p in found] == [doc.id for doc in expected], filters
            np.testing.assert_allclose(row_scores[: found.size], [doc.score for doc in expected], rtol=0, atol=1e-12)


@pytest.fixture(scope="module")
def ann_corpus():
    """6,000 clustered vectors in three shards and both approximate indexes of them (FAISS on one thread)."""
    faiss = pytest.importorskip("faiss")
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    vectors, queries = _clustered(6000, 32)
    shards = [DenseIndex([str(i) for i in range(a, min(a + 2500, 6000))], vectors[a : a + 2500], a)
              for a in range(0, 6000, 2500)]  # fmt: skip
    yield shards, queries, {kind: build_ann_index(kind, shards) for kind in ANN_KINDS}
    faiss.omp_set_num_threads(threads)


@pytest.mark.parametrize("kind", ANN_KINDS)
def test_filtered_approximate_search_finds_allowed_hits_with_their_exact_scores(ann_corpus, kind: str) -> None:
    shards, queries, indexes = ann_corpus
    search = AnnSearch(ef_search=256, nprobe=16, candidates=100)
    for allowed in _masks(6000):
        exact = dense_module.search_shards(shards, queries, 10, allowed=allowed)
        positions, scores = search_ann(indexes[kind], shards, queries, 10, search, allowed=allowed)
        hits = positions != NO_POSITION
        assert allowed[positions[hits]].all()
        assert (hits.sum(axis=1) == min(10, allowed.sum())).all()  # never fewer than k while k are allowed
        np.testing.assert_array_equal(scores[hits], _exact_scores(shards, queries, positions)[hits])
        if allowed.sum() <= ann_module.EXACT_MATCH_SHARE * 6000:  # exact over the allowed vectors
            np.testing.assert_array_equal(positions, exact[0])
            np.testing.assert_array_equal(scores, exact[1])
        else:
            assert recall_at_k(positions, exact[0]) >= 0.9


def test_a_query_the_index_answers_short_is_searched_exactly(ann_corpus, monkeypatch) -> None:
    """Three vectors allowed, searched with the graph's selector: every query gets the three, as exact search."""
    shards, queries, indexes = ann_corpus
    monkeypatch.setattr(ann_module, "EXACT_MATCH_SHARE", 0.0)
    allowed = np.zeros(6000, bool)
    allowed[[7, 3001, 5999]] = True
    exact = dense_module.search_shards(shards, queries, 5, allowed=allowed)
    searched_exactly = []
    search_matches = ann_module.search_matches
    monkeypatch.setattr(ann_module, "search_matches", lambda s, q, *a: searched_exactly.append(len(q)) or search_matches(s, q, *a))
    for kind in ANN_KINDS:
        positions, scores = search_ann(indexes[kind], shards, queries, 5, AnnSearch(ef_search=16, nprobe=1), allowed=allowed)
        np.testing.assert_array_equal(positions, exact[0])
        np.testing.assert_array_equal(scores, exact[1])
    assert sum(searched_exactly) > 0  # the indexes answered short


def _exact_scores(shards, queries: np.ndarray, positions: np.ndarray) -> np.ndarray:
    vectors = np.concatenate([shard.vectors for shard in shards]).astype(np.float64)
    return np.einsum("ij,ikj->ik", queries.astype(np.float64), vectors[np.maximum(positions, 0)])
