"""BM25 retrieval: parity with Haystack's InMemoryDocumentStore and InMemoryBM25Retriever, shards, files, bad input."""

import json
import math
import os
import pickle
import re
from pathlib import Path

import bm25s
import numpy as np
import pytest
from haystack import Document as HaystackDocument
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.document_stores.in_memory.document_store import _DEFAULT_BM25_TOKENIZATION_REGEX

from qa_core.document import Document
from qa_core.local_models import TEXT_FILE
from qa_core.retrieval import (
    DEFAULT_TOKENIZATION_REGEX,
    BM25Index,
    BM25Retriever,
    ScoredDocument,
    Tokenizer,
    build_sharded,
    merge_top_k,
    pruning,
)
from qa_core.retrieval import counted as counted_module
from qa_core.retrieval import counts as counts_module
from qa_core.retrieval import index as index_module
from qa_core.retrieval import pair_weights as pair_weights_module
from qa_core.retrieval.counted import CountedShard, count_parts, count_shard
from qa_core.retrieval.fingerprint import add_fingerprints, fingerprint_hex
from qa_core.retrieval.scoring import resolve_parameters
from qa_core.retrieval.sharding import search_shards, shard_bounds, weigh_counted_shard
from qa_core.retrieval.statistics import CorpusStatistics
from qa_core.retrieval.topk import top_k

REPO = Path(__file__).resolve().parents[2]
SCORE_RTOL = 1e-12  # on raw scores: float64 weights summed in Haystack's term order; only avgdl and log differ in ulps
HAYSTACK_ALGORITHMS = ("BM25Okapi", "BM25L", "BM25Plus")
PARAMETER_SETS = {
    "BM25Okapi": [None, {"k1": 1.2, "b": 0.4, "epsilon": 0.5}],
    "BM25L": [None, {"k1": 0.9, "b": 0.3, "delta": 1.0}],
    "BM25Plus": [None, {"k1": 2.0, "b": 1.0, "delta": 0.25}],
}


def _english_texts() -> list[str]:
    with TEXT_FILE.open(encoding="utf-8") as file:
        texts = [json.loads(line)["text"] for line in file]
    return [paragraph for text in texts for paragraph in text.split("\n\n") if paragraph.strip()][:700]


def _chinese_texts() -> list[str]:
    paths = sorted((REPO / "data/text/seeds_zh").glob("*.txt"))
    assert len(paths) == 2, paths  # the project's two seed documents
    text = "\n".join(path.read_text(encoding="utf-8") for path in paths)
    return [sentence for sentence in re.split(r"[\n。]", text) if sentence.strip()]


ENGLISH = _english_texts()
CHINESE = _chinese_texts()
CORPORA = {
    "english": (
        ENGLISH,
        [
            "How do I sort a dictionary by value?",
            "What does the json module do?",
            "dict dict dict keys keys",  # repeated terms count once
            "the of and to a",  # only very common terms
            "OrderedDict remembers the order entries were added",
            "zzyzx qwvrt",  # no known term: BM25Okapi returns zero scores in corpus order
            "???",  # no term at all
            ENGLISH[17][:80],
            ENGLISH[400][:60],
        ],
    ),
    "chinese": (
        CHINESE,
        ["抽取式问答组件", "pipeline 中的 Generator 组件", "查询字符串", "答案 答案 答案", "管线的文档"],
    ),
    "ties": (
        # Equal scores must come back in corpus order: duplicates and permutations of the same words.
        ["red green blue", "blue green red", "red green blue", "green", "red red", "red red", "red", "blue", "x y z"]
        + ["red green blue"] * 3,
        ["red", "green blue", "red red green", "blue", "x"],
    ),
    "empty_and_none": (
        ["", None, "   ", "!!! ???", None, "alpha beta", "beta gamma gamma", "", "alpha", "delta"],
        ["alpha", "gamma beta", "delta alpha", "epsilon"],
    ),
    "negative_okapi": (
        # Most terms are in more than half the documents: BM25Okapi's epsilon goes negative, and so do scores.
        ["a b", "a c", "a b c", "a", "a b c d"],
        ["a", "a b", "d", "c d a", "e"],
    ),
}


def _ids(texts: list[str | None], name: str) -> list[str]:
    return [f"{name}-{i}" for i in range(len(texts))]


def _haystack_hits(texts, ids, query, algorithm, parameters, top_k, scale_score=False) -> list[tuple[str, float]]:
    store = InMemoryDocumentStore(bm25_algorithm=algorithm, bm25_parameters=parameters, shared=False)
    store.write_documents([HaystackDocument(id=doc_id, content=text) for doc_id, text in zip(ids, texts, strict=True)])
    retriever = InMemoryBM25Retriever(store, top_k=top_k, scale_score=scale_score)
    return [(doc.id, doc.score) for doc in retriever.run(query=query)["documents"]]


def _our_hits(texts, ids, queries, algorithm, parameters, top_k, scale_score=False) -> list[list[tuple[str, float]]]:
    documents = [Document(content=text, id=doc_id) for doc_id, text in zip(ids, texts, strict=True)]
    retriever = BM25Retriever(
        documents=documents, top_k=top_k, bm25_algorithm=algorithm, bm25_parameters=parameters, scale_score=scale_score
    )
    retriever.warm_up()
    return [[(doc.id, doc.score) for doc in hits] for hits in retriever.run_batch(queries)["documents"]]


def _assert_same_hits(ours: list[tuple[str, float]], theirs: list[tuple[str, float]]) -> None:
    assert [doc_id for doc_id, _ in ours] == [doc_id for doc_id, _ in theirs]
    np.testing.assert_allclose([s for _, s in ours], [s for _, s in theirs], rtol=SCORE_RTOL, atol=0)


@pytest.mark.parametrize("corpus", list(CORPORA))
@pytest.mark.parametrize("algorithm", HAYSTACK_ALGORITHMS)
@pytest.mark.parametrize("parameter_set", [0, 1])
def test_ranking_and_scores_equal_haystack(corpus: str, algorithm: str, parameter_set: int) -> None:
    texts, queries = CORPORA[corpus]
    ids = _ids(texts, corpus)
    parameters = PARAMETER_SETS[algorithm][parameter_set]
    top_k = 10
    ours = _our_hits(texts, ids, queries, algorithm, parameters, top_k)
    for query, our_hits in zip(queries, ours, strict=True):
        _assert_same_hits(our_hits, _haystack_hits(texts, ids, query, algorithm, parameters, top_k))


@pytest.mark.parametrize("algorithm", HAYSTACK_ALGORITHMS)
def test_top_k_beyond_the_corpus_and_scaled_scores_equal_haystack(algorithm: str) -> None:
    texts, queries = CORPORA["empty_and_none"]
    ids = _ids(texts, "small")
    ours = _our_hits(texts, ids, queries, algorithm, None, top_k=50, scale_score=True)
    for query, our_hits in zip(queries, ours, strict=True):
        _assert_same_hits(our_hits, _haystack_hits(texts, ids, query, algorithm, None, 50, scale_score=True))


def test_haystack_zero_match_documents_score_zero_for_bm25l_and_plus() -> None:
    # The installed Haystack gives delta only to terms a document contains: a document without any query term
    # scores exactly 0 and is dropped, which the sparse weights reproduce.
    texts = ["alpha beta", "gamma"]
    for algorithm in ("BM25L", "BM25Plus"):
        store = InMemoryDocumentStore(bm25_algorithm=algorithm, shared=False)
        store.write_documents([HaystackDocument(id=str(i), content=text) for i, text in enumerate(texts)])
        scored = store.bm25_algorithm_inst("alpha", store.filter_documents())
        assert [score for _, score in scored][1] == 0.0
        assert [doc.id for doc in store.bm25_retrieval("alpha")] == ["0"]


def test_tokenizer_is_haystacks() -> None:
    assert DEFAULT_TOKENIZATION_REGEX == _DEFAULT_BM25_TOKENIZATION_REGEX
    store = InMemoryDocumentStore(shared=False)
    samples = CHINESE[:20] + ENGLISH[:20] + ["Größe İstanbul ǅ ﬁ café Café 한국어 カタカナ・テスト ｶﾀｶﾅ foo_bar 3.14"]
    for text in samples:
        assert Tokenizer().tokenize(text) == store._tokenize_bm25(text)
    assert Tokenizer().tokenize("北京大学") == ["北", "京", "大", "学"]


@pytest.mark.parametrize("parameters", [None, {"k1": 0.9, "b": 0.4}])
def test_lucene_scores_equal_bm25s(parameters: dict | None) -> None:
    tokenizer = Tokenizer()
    index = BM25Index.build(_ids(ENGLISH, "en"), ENGLISH, algorithm="Lucene", parameters=parameters)
    k1, b = (parameters or {}).get("k1", 1.5), (parameters or {}).get("b", 0.75)
    reference = bm25s.BM25(method="lucene", k1=k1, b=b, dtype="float64")
    reference.index([tokenizer.tokenize(text) for text in ENGLISH], show_progress=False)
    for query in CORPORA["english"][1]:
        known = [term for term in dict.fromkeys(tokenizer.tokenize(query)) if term in reference.vocab_dict]
        # Distinct terms, as for the Haystack algorithms; bm25s cannot score a query without known terms.
        expected = reference.get_scores(known) if known else np.zeros(len(ENGLISH))
        np.testing.assert_allclose(index.score(query), expected, rtol=1e-12, atol=1e-12)
        positions, scores = index.search([query], k=10)
        order = [i for i in np.argsort(-expected, kind="stable") if expected[i] > 0][:10]
        assert positions[0][positions[0] >= 0].tolist() == order


def _search_grid():
    texts = ENGLISH + CORPORA["ties"][0] + ["", "!!!"]
    queries = CORPORA["english"][1] + CORPORA["ties"][1]
    return _ids(texts, "grid"), texts, queries


@pytest.mark.parametrize("algorithm", ["BM25Okapi", "BM25L", "BM25Plus", "Lucene"])
def test_three_shards_equal_one_index(algorithm: str) -> None:
    ids, texts, queries = _search_grid()
    whole = BM25Index.build(ids, texts, algorithm=algorithm)
    shards = build_sharded(ids, texts, n_shards=3, algorithm=algorithm)
    assert [shard.doc_offset for shard in shards] == [0, len(texts) // 3, 2 * len(texts) // 3]
    assert sum((shard.doc_ids for shard in shards), []) == ids
    assert {shard.corpus for shard in shards} == {whole.corpus}
    for k in (1, 10, len(texts) + 5):
        positions, scores = whole.search(queries, k)
        merged_positions, merged_scores = merge_top_k([shard.search(queries, k) for shard in shards], k)
        np.testing.assert_array_equal(merged_positions, positions)
        np.testing.assert_array_equal(merged_scores, scores)  # same weights, same summation order: bit-equal


def _steps_of(monkeypatch: pytest.MonkeyPatch, postings: int) -> None:
    """Counting's and weighing's steps of a few postings, so that terms and documents straddle them."""
    monkeypatch.setattr(counted_module, "PAIRS_PER_STEP", postings)
    monkeypatch.setattr(index_module, "PAIRS_PER_STEP", postings)


def _assert_same_shard(shard: BM25Index, reference: BM25Index) -> None:
    """Bit for bit: the same terms, documents, statistics and arrays (dtypes and bytes)."""
    assert (shard.vocabulary, shard.doc_ids, shard.doc_offset) == (
        reference.vocabulary,
        reference.doc_ids,
        reference.doc_offset,
    )
    assert (shard.corpus, shard.fingerprint) == (reference.corpus, reference.fingerprint)
    for name, array in vars(reference.postings).items():
        assert np.asarray(getattr(shard.postings, name)).dtype == array.dtype, name
        assert np.asarray(getattr(shard.postings, name)).tobytes() == array.tobytes(), name


@pytest.mark.parametrize("tfc_table_share", [0.0, math.inf], ids=["tfc per posting", "tfc looked up"])
@pytest.mark.parametrize("algorithm", ["BM25Okapi", "BM25L", "BM25Plus", "Lucene"])
def test_shards_counted_apart_and_weighed_with_merged_statistics_equal_build_sharded(
    algorithm: str, tfc_table_share: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    The distributed build's pieces: each shard tokenized once and saved as counts, the shards' statistics merged
    in order, then each shard weighed from its loaded counts (its terms put in the corpus's order), a few
    postings at a time, the tfc computed per posting or looked up in a table of the shard's (count, length).
    """
    _steps_of(monkeypatch, 7)
    monkeypatch.setattr(pair_weights_module, "_TFC_TABLE_SHARE", tfc_table_share)
    ids, texts, _ = _search_grid()
    parameters, tokenizer = resolve_parameters(algorithm, None), Tokenizer()
    expected = build_sharded(ids, texts, n_shards=3, algorithm=algorithm)
    bounds = shard_bounds(len(texts), 3)
    parts = [
        count_shard(ids[start:stop], texts[start:stop], start, tokenizer)
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    weights = CorpusStatistics.merge(statistics for _, statistics in parts).weights(algorithm, parameters)
    shards = []
    for shard, ((counted, statistics), start) in enumerate(zip(parts, bounds, strict=False)):
        counted.save(tmp_path / str(shard))
        loaded = CountedShard.load(tmp_path / str(shard))
        doc_fingerprint = fingerprint_hex(statistics.fingerprint)
        shards.append(
            BM25Index.from_counted(loaded, start, doc_fingerprint, weights, algorithm, parameters, tokenizer.regex)
        )
    assert any(shard.vocabulary != counted.vocabulary for shard, (counted, _) in zip(shards, parts, strict=True))
    for shard, reference in zip(shards, expected, strict=True):
        _assert_same_shard(shard, reference)
    assert add_fingerprints([shard.fingerprint for shard in shards]) == expected[0].corpus.fingerprint


def test_a_shard_counted_in_parts_equals_the_shard_counted_at_once() -> None:
    """`count_parts`: parts of uneven sizes, their compact counts merged (`CountedShard.concatenate`)."""
    ids, texts, _ = _search_grid()
    whole, expected = count_shard(ids[100:], texts[100:], 100, Tokenizer())
    bounds = [100, 101, 160, 400, len(texts)]
    parts = ((ids[start:stop], texts[start:stop]) for start, stop in zip(bounds[:-1], bounds[1:], strict=True))
    counted, statistics = count_parts(parts, 100, Tokenizer())
    assert (counted.vocabulary, counted.doc_ids) == (whole.vocabulary, whole.doc_ids)
    for name, want in whole.arrays().items():
        got = counted.arrays()[name]
        assert got.dtype == want.dtype and np.array_equal(got, want), name
    fields = ("vocabulary", "n_docs", "total_length", "fingerprint_hex")
    assert [getattr(statistics, field) for field in fields] == [getattr(expected, field) for field in fields]
    assert np.array_equal(statistics.doc_frequencies, expected.doc_frequencies)
    with pytest.raises(ValueError, match=f"Document id {ids[100]!r} occurs more than once in the corpus."):
        count_parts([(ids[100:102], texts[100:102]), (ids[100:101], texts[100:101])], 100, Tokenizer())


@pytest.mark.parametrize("algorithm", ["BM25Okapi", "BM25L", "Lucene"])
def test_shards_weighed_again_for_a_grown_corpus_equal_shards_built_with_its_statistics(
    algorithm: str, tmp_path: Path
) -> None:
    """Documents added as new shards: the old shards weighed again from their saved folders, not tokenized."""
    ids, texts, _ = _search_grid()
    parameters, tokenizer = resolve_parameters(algorithm, None), Tokenizer()
    old = 500  # the corpus's first 500 documents, in 2 shards; the rest added later
    parts = [
        count_shard(ids[start:stop], texts[start:stop], start, tokenizer)
        for start, stop in ((0, 250), (250, old), (old, len(texts)))
    ]
    before = CorpusStatistics.merge(statistics for _, statistics in parts[:2])
    after = CorpusStatistics.merge(statistics for _, statistics in parts)

    def weigh(shard: CountedShard, start: int, statistics: CorpusStatistics, corpus: CorpusStatistics):
        """The shard (whose own statistics are `statistics`) weighed with the statistics of the `corpus`."""
        doc_fingerprint, weights = fingerprint_hex(statistics.fingerprint), corpus.weights(algorithm, parameters)
        return BM25Index.from_counted(shard, start, doc_fingerprint, weights, algorithm, parameters, tokenizer.regex)

    for (counted, statistics), start in zip(parts[:2], (0, 250), strict=True):
        weigh(counted, start, statistics, before).save(tmp_path)
        grown = weigh(CountedShard.load(tmp_path), start, statistics, after)  # again, from the saved folder
        expected = weigh(counted, start, statistics, after)
        _assert_same_shard(grown, expected)
    whole = build_sharded(ids, texts, n_shards=1, algorithm=algorithm)[0]
    assert whole.corpus == grown.corpus


def test_a_shard_weighed_in_its_folder_writes_only_the_files_that_change(tmp_path: Path) -> None:
    """
    `weigh_counted_shard`: a counted shard's folder weighed (its terms put in the corpus's order: its files in term
    order written again), then weighed again for a grown corpus: each time `BM25Index.from_counted`'s index bit for
    bit, and the second time its idf, bounds and header written, its counts, files in term order and ids left as
    they were.
    """
    ids, texts, _ = _search_grid()
    parameters, tokenizer = resolve_parameters("BM25L", None), Tokenizer()
    parts = [count_shard(ids[start:stop], texts[start:stop], start, tokenizer)
             for start, stop in ((0, 250), (250, 500), (500, len(texts)))]  # fmt: skip
    counted, statistics = parts[1]
    counted.save(tmp_path)
    untouched = ["vocabulary.json", "doc_ids.arrow", "starts.npy", "doc_indices.npy", "term_counts.npy",
                 "doc_lengths.npy"]  # fmt: skip
    for corpus in (parts[:2], parts):  # the first two shards, then all three
        weights = CorpusStatistics.merge(part for _, part in corpus).weights("BM25L", parameters)
        for name in untouched:
            os.utime(tmp_path / name, ns=(0, 0))
        arguments = (250, fingerprint_hex(statistics.fingerprint), weights, "BM25L", parameters, tokenizer.regex)
        terms = weigh_counted_shard(tmp_path, *arguments)
        expected = BM25Index.from_counted(counted, *arguments)
        _assert_same_shard(BM25Index.load(tmp_path), expected)
        assert terms == len(expected.vocabulary)
        saved = CountedShard.load(tmp_path)  # counts and lengths in the smallest type that holds them
        assert saved.term_counts.dtype == saved.doc_lengths.dtype == np.uint8
        assert saved.term_counts.tolist() == expected.postings.term_counts.tolist()
        written = [name for name in untouched if (tmp_path / name).stat().st_mtime_ns]
        assert written == ([] if len(corpus) == 3 else ["vocabulary.json", "starts.npy", "doc_indices.npy",
                                                        "term_counts.npy"])  # fmt: skip
    assert expected.vocabulary != counted.vocabulary and expected.corpus.n_docs == len(texts)


@pytest.mark.parametrize("n_docs", [1, 7, 100, 5000])
@pytest.mark.parametrize("drop_non_positive", [True, False])
def test_top_k_equals_a_stable_sort(n_docs: int, drop_non_positive: bool) -> None:
    rng = np.random.default_rng(n_docs)
    for _ in range(20):
        scores = rng.integers(-3, 4, n_docs).astype(np.float64)  # many ties, zeros and negatives
        for k in (1, 3, 10, 200, n_docs + 3):
            expected = sorted(range(n_docs), key=lambda i: -scores[i])  # Python's sort is stable, like Haystack's
            expected = [i for i in expected if scores[i] > 0 or not drop_non_positive][:k]
            positions, values = top_k(scores, k, drop_non_positive)
            assert positions.tolist() == expected
            assert values.tolist() == scores[expected].tolist()


def test_counting_and_weighing_in_steps_equal_doing_it_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    ids, texts, _ = _search_grid()
    whole = BM25Index.build(ids, texts)
    monkeypatch.setattr(counts_module, "_CHUNK_DOCS", 7)
    monkeypatch.setattr(counted_module, "COUNT_PART_DOCS", 11)
    _steps_of(monkeypatch, 5)
    chunked = BM25Index.build(ids, texts)
    assert chunked.vocabulary == whole.vocabulary
    for name, array in vars(whole.postings).items():
        np.testing.assert_array_equal(getattr(chunked.postings, name), array)


@pytest.mark.parametrize("algorithm", ["BM25Okapi", "BM25L", "BM25Plus", "Lucene"])
def test_weights_looked_up_or_computed_posting_by_posting_score_bit_for_bit_alike(
    algorithm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search's weights come from a table of (count, length) or the formulas per posting: the same bits."""
    ids, texts, queries = _search_grid()
    found = []
    for share in (0.0, math.inf):
        monkeypatch.setattr(pair_weights_module, "_TFC_TABLE_SHARE", share)
        index = BM25Index.build(ids, texts, algorithm=algorithm)
        assert (index._weights._table is None) == (share == 0.0)
        scores = [index.score(query).tobytes() for query in queries]
        found.append(scores + [array.tobytes() for array in index.search(queries, 10)])
    assert found[0] == found[1]


def _windows_corpus() -> tuple[list[str], list[str], list[str]]:
    """
    Passages that are windows of one text, as the benchmark's, many of them repeated (ties at every rank), and
    queries that are windows too (a few rare terms among common ones), single words, and unknown words.
    """
    words = " ".join(ENGLISH).split()[:3000]
    rng = np.random.default_rng(7)
    texts = [" ".join(words[start : start + 40]) for start in rng.integers(0, len(words) - 40, 2400)]
    texts += texts[:300]  # the first 300 passages again, later in the corpus: ties broken by position
    queries = [" ".join(words[start : start + 8]) for start in rng.integers(0, len(words) - 8, 40)]
    queries += [words[17], words[1200] + " zzyzx", "the of and", "zzyzx qwvrt"]
    return _ids(texts, "windows"), texts, queries


@pytest.mark.parametrize("algorithm", ["BM25Okapi", "BM25L", "BM25Plus", "Lucene"])
def test_pruned_search_equals_scoring_every_document(algorithm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ids, texts, queries = _windows_corpus()
    shards = build_sharded(ids, texts, n_shards=3, algorithm=algorithm)
    narrowed = []  # (candidates in, candidates left) of each narrowing
    original_narrow = pruning._narrow

    def spy(reader, terms, docs, *args):
        found = original_narrow(reader, terms, docs, *args)
        narrowed.append((docs.size, found[0].size))
        return found

    monkeypatch.setattr(pruning, "_narrow", spy)
    # Pruning whatever the index's size and the candidates' share (a matter of speed only), so that this small
    # corpus takes every path.
    monkeypatch.setattr(pruning, "MAX_CANDIDATE_SHARE", 0.5)
    monkeypatch.setattr(index_module, "MIN_DOCS", 1)
    for k in (1, 10, 40, len(texts) + 5):  # ties at the k-th, and more than the matches
        expected = merge_top_k([shard.search(queries, k, prune=False) for shard in shards], k)
        for found in (
            merge_top_k([shard.search(queries, k) for shard in shards], k),
            search_shards(shards, queries, k),
            search_shards(shards[1:], queries, k, best=search_shards(shards[:1], queries, k)),  # as chained stages
        ):
            for left, right in zip(found, expected, strict=True):
                assert left.tobytes() == right.tobytes()  # bit for bit
    if algorithm == "BM25Okapi":  # its hits may score 0: every document is scored
        assert not narrowed
        return
    n_docs = shards[0].n_docs
    assert len(narrowed) > len(queries)  # pruned, not scoring every document ...
    assert max(candidates for candidates, _ in narrowed) <= pruning.MAX_CANDIDATE_SHARE * n_docs
    assert sum(left for _, left in narrowed) < sum(candidates for candidates, _ in narrowed)  # ... and narrowed
    assert sum(4 * left < candidates for candidates, left in narrowed) > len(queries)


def test_floors_leave_out_hits_at_or_below_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_module, "MIN_DOCS", 1)  # pruned too, on this small corpus
    ids, texts, queries = _windows_corpus()
    index = BM25Index.build(ids, texts)
    positions, scores = index.search(queries, 10, prune=False)
    floors = scores[:, 4]  # the fifth best: ties with it are left out too
    for prune in (True, False):
        floored_positions, floored_scores = index.search(queries, 10, floors=floors, prune=prune)
        above = scores > floors[:, None]
        for row in range(len(queries)):
            assert floored_positions[row, : above[row].sum()].tolist() == positions[row, above[row]].tolist()
            assert floored_scores[row, : above[row].sum()].tobytes() == scores[row, above[row]].tobytes()
            assert (floored_positions[row, above[row].sum() :] == -1).all()
    with pytest.raises(ValueError, match="one number per query"):
        index.search(queries, 10, floors=floors[:3])


def test_search_pads_rows_with_fewer_hits() -> None:
    texts, _ = CORPORA["empty_and_none"]
    present = [text for text in texts if text is not None]
    index = BM25Index.build(_ids(present, "pad"), present)
    positions, scores = index.search(["alpha", "epsilon"], k=4)
    assert positions.shape == scores.shape == (2, 4)
    assert positions[0, 2:].tolist() == [-1, -1] and np.all(scores[0, 2:] == -np.inf)
    assert positions[1].tolist() == [-1] * 4


def test_save_load_round_trip_is_identical_and_memory_mapped(tmp_path: Path) -> None:
    ids, texts, queries = _search_grid()
    index = BM25Index.build(ids, texts, algorithm="BM25Plus", parameters={"delta": 0.7})
    index.save(tmp_path / "index")
    loaded = BM25Index.load(tmp_path / "index")
    assert all(isinstance(array, np.memmap) for array in vars(loaded.postings).values())
    assert (loaded.algorithm, loaded.parameters, loaded.tokenizer.regex) == (
        "BM25Plus",
        index.parameters,
        index.tokenizer.regex,
    )
    assert (loaded.vocabulary, loaded.doc_ids, loaded.fingerprint, loaded.corpus) == (
        index.vocabulary,
        index.doc_ids,
        index.fingerprint,
        index.corpus,
    )
    for name, array in vars(index.postings).items():
        np.testing.assert_array_equal(getattr(loaded.postings, name), array)
    for left, right in zip(index.search(queries, 10), loaded.search(queries, 10), strict=True):
        np.testing.assert_array_equal(left, right)
    in_memory = BM25Index.load(tmp_path / "index", mmap=False)
    assert not isinstance(in_memory.postings.term_counts, np.memmap)


_UNPICKLED: list[str] = []


def _record_unpickling() -> str:
    _UNPICKLED.append("ran")
    return "payload"


class _Payload:
    def __reduce__(self):
        return (_record_unpickling, ())


def test_load_refuses_an_array_that_needs_pickle(tmp_path: Path) -> None:
    BM25Index.build(["a", "b"], ["alpha beta", "beta"]).save(tmp_path)
    np.save(tmp_path / "idf.npy", np.array([_Payload()], dtype=object), allow_pickle=True)
    assert pickle.loads(pickle.dumps(_Payload())) == "payload" and _UNPICKLED == ["ran"]  # the payload is live
    _UNPICKLED.clear()
    with pytest.raises(ValueError, match="idf.npy"):
        BM25Index.load(tmp_path)
    with pytest.raises(ValueError, match="idf.npy"):
        BM25Index.load(tmp_path, mmap=False)
    assert _UNPICKLED == []


def test_load_refuses_a_malformed_folder(tmp_path: Path) -> None:
    BM25Index.build(["a", "b"], ["alpha beta", "beta"]).save(tmp_path)
    np.save(tmp_path / "idf.npy", np.zeros(2, dtype=np.float32))
    with pytest.raises(ValueError, match="float64"):
        BM25Index.load(tmp_path)
    np.save(tmp_path / "idf.npy", np.zeros(7, dtype=np.float64))
    with pytest.raises(ValueError, match="one number per term"):
        BM25Index.load(tmp_path)
    np.save(tmp_path / "idf.npy", np.zeros(2, dtype=np.float64))
    np.save(tmp_path / "term_counts.npy", np.array([1, 0, 1], np.uint8))
    with pytest.raises(ValueError, match="counts its term 0 times"):
        BM25Index.load(tmp_path)
    np.save(tmp_path / "term_counts.npy", np.array([1, 1, 1], np.uint8))
    np.save(tmp_path / "doc_indices.npy", np.array([0, 2, 1]))  # document 2 of 2
    with pytest.raises(ValueError, match="documents beyond the index's 2: it is corrupt"):
        BM25Index.load(tmp_path)
    np.save(tmp_path / "doc_indices.npy", np.array([0, 0, 1, 1]))
    with pytest.raises(ValueError, match="do not match"):
        BM25Index.load(tmp_path)
    (tmp_path / "index.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="is an index of format 'something else', not qa_core.retrieval.bm25/5"):
        BM25Index.load(tmp_path)
    with pytest.raises(ValueError, match="Cannot read"):
        BM25Index.load(tmp_path / "missing")


def test_an_index_keeps_counts_not_weights_and_one_of_an_earlier_format_is_refused(tmp_path: Path) -> None:
    """
    Format 5: uint32 postings, term counts and lengths in a byte each, ids in `doc_ids.arrow`, memory-mapped, and
    no stored weights; an index of format 4 (stored float64 weights) asks to be built again.
    """
    texts, queries = CORPORA["english"]
    ids = [f"doc-{i}" for i in range(len(texts))]
    built = BM25Index.build(ids, texts)
    built.save(tmp_path)
    index = BM25Index.load(tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "bounds.npy", "doc_ids.arrow", "doc_indices.npy", "doc_lengths.npy", "idf.npy", "index.json", "starts.npy",
        "term_counts.npy", "vocabulary.json",
    ]  # fmt: skip
    dtypes = {name: getattr(index.postings, name).dtype for name in ("doc_indices", "term_counts", "doc_lengths")}
    assert dtypes == {"doc_indices": np.uint32, "term_counts": np.uint8, "doc_lengths": np.uint8}
    assert isinstance(index.postings.doc_indices, np.memmap)
    assert (index.doc_ids[3], index.doc_ids[-2:], list(index.doc_ids)) == ("doc-3", ids[-2:], ids)
    for found, wanted in zip(index.search(queries, 5), built.search(queries, 5), strict=True):
        assert found.tobytes() == wanted.tobytes()
    header = json.loads((tmp_path / "index.json").read_text())
    (tmp_path / "index.json").write_text(json.dumps({**header, "format": "qa_core.retrieval.bm25/4"}))
    message = "is an index of format 'qa_core.retrieval.bm25/4', not qa_core.retrieval.bm25/5 .* `python -m jobs.index`"
    with pytest.raises(ValueError, match=message):
        BM25Index.load(tmp_path)


def test_retriever_saves_and_loads_an_index_folder(tmp_path: Path) -> None:
    texts, queries = CORPORA["english"]
    documents = [Document(content=text, meta={"n": i}) for i, text in enumerate(texts)] + [Document(content=None)]
    built = BM25Retriever(documents=documents, top_k=5)
    built.warm_up()
    built.save(tmp_path / "folder")
    expected = built.run_batch(queries)["documents"]
    from_folder = BM25Retriever(index_path=tmp_path / "folder", top_k=5)
    from_folder.warm_up()
    assert from_folder.run_batch(queries)["documents"] == expected
    with_documents = BM25Retriever(documents=documents, index_path=tmp_path / "folder", top_k=5)
    with_documents.warm_up()
    assert with_documents.run_batch(queries)["documents"] == expected
    other = BM25Retriever(documents=documents[:-2], index_path=tmp_path / "folder")
    with pytest.raises(ValueError, match="other documents"):
        other.warm_up()
    other_options = BM25Retriever(index_path=tmp_path / "folder", bm25_algorithm="BM25Okapi")
    with pytest.raises(ValueError, match="built with BM25L"):
        other_options.warm_up()
    built._index.save(tmp_path / "index-only")  # as the bulk job saves its indexes: no documents beside them
    with pytest.raises(ValueError, match="holds no documents.jsonl .*: pass the documents it was built from"):
        BM25Retriever(index_path=tmp_path / "index-only").warm_up()


def test_retriever_refuses_a_shard(tmp_path: Path) -> None:
    texts = ["alpha beta", "beta", "gamma"]
    build_sharded(["a", "b", "c"], texts, n_shards=2)[1].save(tmp_path)
    documents = [Document(content=text, id=doc_id) for doc_id, text in zip("abc", texts, strict=True)]
    with pytest.raises(ValueError, match="shard"):
        BM25Retriever(documents=documents, index_path=tmp_path).warm_up()


def test_run_matches_run_batch_and_returns_copies() -> None:
    texts, queries = CORPORA["english"]
    documents = [Document(content=text, meta={"n": i}) for i, text in enumerate(texts)]
    retriever = BM25Retriever(documents=documents, top_k=3)
    retriever.warm_up()
    batch = retriever.run_batch(queries, top_k=7)["documents"]
    assert [retriever.run(query, top_k=7)["documents"] for query in queries] == batch
    hit = batch[0][0]
    assert isinstance(hit, ScoredDocument) and isinstance(hit, Document)
    source = next(doc for doc in documents if doc.id == hit.id)
    assert (hit.content, hit.meta) == (source.content, source.meta) and hit.meta is not source.meta
    assert len(retriever.run(queries[0])["documents"]) == 3
    scaled = retriever.run(queries[0], scale_score=True)["documents"]
    assert [doc.score for doc in scaled] == [1 / (1 + np.exp(-doc.score / 8)) for doc in batch[0][:3]]


def test_scored_document_round_trips_through_dicts() -> None:
    doc = ScoredDocument(content="text", meta={"a": 1}, score=0.5)
    assert ScoredDocument.from_dict(doc.to_dict()) == doc
    assert doc.id == Document(content="text", meta={"a": 1}).id
    haystack_form = HaystackDocument(content="text", meta={"a": 1}, score=0.5).to_dict()
    assert ScoredDocument.from_dict(haystack_form) == doc


def test_retriever_to_dict_round_trip() -> None:
    documents = [Document(content="alpha beta", meta={"x": [1, 2]}), Document(content=None)]
    filters = {"field": "meta.x", "operator": "!=", "value": None}
    retriever = BM25Retriever(documents=documents, filters=filters, top_k=3, bm25_algorithm="BM25Okapi",
                              bm25_parameters={"k1": 1.1})  # fmt: skip
    data = retriever.to_dict()
    assert data["type"] == "qa_core.retrieval.retriever.BM25Retriever"
    assert data["init_parameters"] == {
        "documents": [doc.to_dict() for doc in documents],
        "index_path": None,
        "filters": filters,
        "top_k": 3,
        "bm25_algorithm": "BM25Okapi",
        "bm25_parameters": {"k1": 1.1},
        "scale_score": False,
        "bm25_tokenization_regex": DEFAULT_TOKENIZATION_REGEX,
    }
    assert BM25Retriever.from_dict(json.loads(json.dumps(data))).to_dict() == data


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs documents, an index_path"),
        ({"documents": [], "top_k": 0}, "top_k"),
        ({"documents": [], "top_k": True}, "top_k"),
        ({"documents": [], "bm25_algorithm": "BM25"}, "bm25_algorithm must be one of"),
        ({"documents": [], "bm25_parameters": {"delta": 1.0}, "bm25_algorithm": "BM25Okapi"}, r"\['delta'\]"),
        ({"documents": [], "bm25_parameters": {"k": 1.0}}, r"\['k'\] do not apply to BM25L"),
        ({"documents": [], "bm25_parameters": {"b": 1.5}}, r"bm25_parameters\['b'\] must be between 0 and 1"),
        ({"documents": [], "bm25_parameters": {"k1": -1}}, r"bm25_parameters\['k1'\] must be at least 0"),
        ({"documents": [], "bm25_parameters": {"k1": "2"}}, r"bm25_parameters\['k1'\] must be a finite number"),
        ({"documents": [], "bm25_parameters": {"k1": float("nan")}}, "finite number"),
        ({"documents": [], "bm25_tokenization_regex": "("}, "tokenization_regex"),
    ],
)
def test_bad_options_raise(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BM25Retriever(**kwargs)


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        ([], "empty corpus"),
        ([None, None], "empty corpus"),
        (["", "!!!", " "], "no terms to index"),
    ],
)
def test_unindexable_corpus_raises(texts: list, message: str) -> None:
    retriever = BM25Retriever(documents=[Document(content=text, meta={"i": i}) for i, text in enumerate(texts)])
    with pytest.raises(ValueError, match=message):
        retriever.warm_up()


def test_bad_run_input_raises() -> None:
    retriever = BM25Retriever(documents=[Document(content="alpha")])
    with pytest.raises(RuntimeError, match="warm_up"):
        retriever.run("alpha")
    retriever.warm_up()
    for bad_k in (0, -1, 2.5):
        with pytest.raises(ValueError, match="top_k"):
            retriever.run("alpha", top_k=bad_k)
    for query in ("", None):
        with pytest.raises(ValueError, match="non-empty string"):
            retriever.run(query)
    with pytest.raises(ValueError, match="list of strings"):
        retriever.run_batch("alpha")


def test_bad_index_input_raises() -> None:
    with pytest.raises(ValueError, match="occurs more than once"):
        BM25Index.build(["a", "a"], ["x", "y"])
    with pytest.raises(ValueError, match="2 document ids for 1 texts"):
        BM25Index.build(["a", "b"], ["x"])
    with pytest.raises(ValueError, match="non-empty strings"):
        BM25Index.build([""], ["x"])
    for n_shards in (0, 3, True):
        with pytest.raises(ValueError, match="n_shards"):
            build_sharded(["a", "b"], ["x", "y"], n_shards=n_shards)
    with pytest.raises(ValueError, match="top_k"):
        merge_top_k([], 0)
    with pytest.raises(ValueError, match="at least one shard"):
        merge_top_k([], 3)
