"""
CrossEncoderRanker against Haystack's own `SentenceTransformersSimilarityRanker` on the same locally built
cross-encoder (MiniLM-L6 with a seeded 1-label head): the same documents in the same order with scores within 1e-5,
for every setting that changes results, on queries and documents of mixed lengths.
"""

import json
import math
from pathlib import Path
from typing import Any

import pytest
from haystack import Document as HaystackDocument
from haystack_integrations.components.rankers.sentence_transformers.sentence_transformers_similarity import (
    SentenceTransformersSimilarityRanker,
)

from qa_core.document import Document
from qa_core.local_models import TEXT_FILE
from qa_core.ranker import CrossEncoderRanker
from qa_core.retrieval.scored_document import ScoredDocument

TOLERANCE = 1e-5
QUERIES = [
    "json",
    "What does os.path.join return when one of the components is an absolute path?",
    "How many arguments does the print function accept, and which of them must be given by keyword when you call "
    "it from a module that redirects standard output to a file opened in text mode?",
]


def _documents() -> list[Document]:
    """Pages of the project's text cut to mixed lengths (8 to 900 characters), with meta of several kinds, some
    missing or None."""
    pages = [json.loads(line) for line in TEXT_FILE.read_text(encoding="utf-8").splitlines()[:24]]
    documents = []
    for index, page in enumerate(pages):
        length = 8 + (index * 397) % 900
        meta = {"title": page["title"], "number": index, "draft": index % 3 == 0}
        if index % 4 == 0:
            meta["title"] = None
        if index % 5 == 0:
            del meta["number"]
        documents.append(Document(content=page["text"][:length], id=f"page-{index}", meta=meta))
    return documents


DOCUMENTS = _documents()
# Each query's documents: 8, 12 and 4 of them, overlapping.
BATCH = [DOCUMENTS[:8], DOCUMENTS[6:18], DOCUMENTS[19:23]]


@pytest.fixture(scope="module")
def ranker(minilm_cross_encoder: Path) -> CrossEncoderRanker:
    component = CrossEncoderRanker(model=minilm_cross_encoder, device="cpu", top_k=50)
    component.warm_up()
    return component


@pytest.fixture(scope="module")
def haystack_model(minilm_cross_encoder: Path) -> Any:
    """The CrossEncoder that Haystack's ranker loads, loaded once for every Haystack ranker of the module."""
    haystack = SentenceTransformersSimilarityRanker(model=str(minilm_cross_encoder), device=None)
    haystack.warm_up()
    return haystack._cross_encoder


def haystack_ranking(model: Any, query: str, documents: list[Document], run: dict, **init) -> list[tuple]:
    """Haystack's ranker of `model` (a folder, or a loaded CrossEncoder) built with `init`, run with `run`:
    (id, score) best first."""
    haystack = SentenceTransformersSimilarityRanker(model=str(model), device=None, **init)
    if isinstance(model, Path):
        haystack.warm_up()
    else:
        haystack._cross_encoder = model
    docs = [HaystackDocument(id=doc.id, content=doc.content, meta=doc.meta, score=getattr(doc, "score", None))
            for doc in documents]  # fmt: skip
    return [(doc.id, doc.score) for doc in haystack.run(query=query, documents=docs, **run)["documents"]]


def assert_same_ranking(ours: list[ScoredDocument], theirs: list[tuple]) -> None:
    assert [doc.id for doc in ours] == [doc_id for doc_id, _ in theirs]
    for doc, (_, score) in zip(ours, theirs, strict=True):
        assert doc.score == pytest.approx(score, abs=TOLERANCE)


# Haystack's constructor arguments, ours the same; and run-time arguments passed to both.
SETTINGS = {
    "defaults": ({}, {}),
    "top_k": ({"top_k": 5}, {}),
    "top_k at run time": ({}, {"top_k": 3}),
    "raw logits": ({"scale_score": False}, {}),
    "raw logits at run time": ({}, {"scale_score": False}),
    "score threshold": ({"score_threshold": 0.52}, {}),
    "score threshold at run time": ({}, {"score_threshold": 0.55, "scale_score": True}),
    "meta fields": ({"meta_fields_to_embed": ["title", "number", "draft"], "embedding_separator": " | "}, {}),
    "prefixes and suffixes": (
        {"query_prefix": "query: ", "query_suffix": " ?", "document_prefix": "passage: ", "document_suffix": " END"},
        {},
    ),
    "small batches": ({"batch_size": 2}, {}),
}


@pytest.mark.parametrize("init, run", SETTINGS.values(), ids=SETTINGS.keys())
def test_run_batch_ranks_as_haystack(minilm_cross_encoder: Path, haystack_model: Any, init: dict, run: dict) -> None:
    """Many queries at once, each ranked as Haystack ranks it alone (Haystack's batch_size is 16 pairs; ours the
    token budget, or the given batch_size)."""
    ours = CrossEncoderRanker(model=minilm_cross_encoder, device="cpu", **{"top_k": 50, **init})
    ours.warm_up()
    ranked = ours.run_batch(QUERIES, BATCH, **run)["documents"]
    for query, documents, found in zip(QUERIES, BATCH, ranked, strict=True):
        theirs = haystack_ranking(haystack_model, query, documents, run, **{"top_k": 50, **init})
        assert_same_ranking(found, theirs)
    assert any(len(found) > 1 for found in ranked)


def test_token_budget_batches_score_as_haystack(minilm_cross_encoder: Path, haystack_model: Any) -> None:
    """A budget so small that most pairs run alone, and one that holds every pair: the same scores."""
    for budget in (64, 100_000):
        ours = CrossEncoderRanker(model=minilm_cross_encoder, device="cpu", top_k=50, max_batch_tokens=budget)
        ours.warm_up()
        found = ours.run(QUERIES[1], BATCH[1])["documents"]
        assert_same_ranking(found, haystack_ranking(haystack_model, QUERIES[1], BATCH[1], {}, top_k=50))


def test_calibration_factor_scales_haystacks_logits(ranker: CrossEncoderRanker, haystack_model: Any) -> None:
    """Haystack's ranker has no calibration factor (its earlier TransformersSimilarityRanker had): the scores are
    sigmoid(factor * Haystack's raw logits), in the same order for a positive factor."""
    logits = haystack_ranking(haystack_model, QUERIES[0], BATCH[0], {"scale_score": False}, top_k=50)
    found = ranker.run(QUERIES[0], BATCH[0], calibration_factor=4.0)["documents"]
    assert_same_ranking(found, [(doc_id, 1 / (1 + math.exp(-4.0 * logit))) for doc_id, logit in logits])
    assert found[0].score - found[-1].score > 0.1  # the factor spreads the scores


def test_duplicate_ids_keep_the_best_scored_copy_as_haystack(ranker: CrossEncoderRanker, haystack_model: Any) -> None:
    first, second = DOCUMENTS[3], DOCUMENTS[9]
    documents = [
        ScoredDocument(content=first.content, id="same", meta={}, score=0.5),
        ScoredDocument(content=DOCUMENTS[4].content, id="other", meta={}, score=None),
        ScoredDocument(content=second.content, id="same", meta={}, score=2.0),  # this copy is ranked
        ScoredDocument(content=first.content, id="same", meta={}, score=2.0),  # equal: the earlier stays
        Document(content=DOCUMENTS[5].content, id="plain"),
    ]
    found = ranker.run(QUERIES[1], documents)["documents"]
    assert sorted(doc.id for doc in found) == ["other", "plain", "same"]
    assert next(doc for doc in found if doc.id == "same").content == second.content
    assert_same_ranking(found, haystack_ranking(haystack_model, QUERIES[1], documents, {}, top_k=50))


def test_run_equals_run_batch_and_keeps_documents(ranker: CrossEncoderRanker) -> None:
    batch = ranker.run_batch(QUERIES, BATCH)["documents"]
    for query, documents, found in zip(QUERIES, BATCH, batch, strict=True):
        alone = ranker.run(query, documents)["documents"]
        assert [(doc.id, doc.score) for doc in alone] == [(doc.id, pytest.approx(doc.score, abs=TOLERANCE))
                                                          for doc in found]  # fmt: skip
        by_id = {doc.id: doc for doc in documents}
        assert all(doc.content == by_id[doc.id].content and doc.meta == by_id[doc.id].meta for doc in found)
    assert batch[2][0].score >= batch[2][-1].score


def test_no_documents_and_documents_without_content(ranker: CrossEncoderRanker, haystack_model: Any) -> None:
    assert ranker.run_batch([QUERIES[0], QUERIES[1]], [[], BATCH[2]])["documents"][0] == []
    documents = [Document(content=None, id="empty", meta={"title": "t"}), *BATCH[2]]
    found = ranker.run(QUERIES[0], documents)["documents"]
    assert "empty" in [doc.id for doc in found]  # scored on its empty text, as Haystack does
    assert_same_ranking(found, haystack_ranking(haystack_model, QUERIES[0], documents, {}, top_k=50))


def _saved_by_sentence_transformers(source: Path, target: Path, max_length: int) -> Path:
    from sentence_transformers import CrossEncoder

    CrossEncoder(str(source), max_length=max_length).save(str(target))
    return target


def test_sentence_transformers_folders_truncate_as_it_does(
    minilm_cross_encoder: Path, tmp_path: Path
) -> None:
    """A folder saved by CrossEncoder (modules.json, its maximum length in the tokenizer's configuration), and one
    whose sentence_bert_config.json sets max_seq_length (which wins): pairs truncated where CrossEncoder truncates
    them."""
    saved = _saved_by_sentence_transformers(minilm_cross_encoder, tmp_path / "saved", max_length=64)
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    for path in saved.iterdir():
        (earlier / path.name).write_bytes(path.read_bytes())
    transformer = json.loads((saved / "sentence_bert_config.json").read_text())
    (earlier / "sentence_bert_config.json").write_text(json.dumps({**transformer, "max_seq_length": 40}))
    scores = {}
    for folder, length in ((saved, 64), (earlier, 40)):
        ours = CrossEncoderRanker(model=folder, device="cpu", top_k=50)
        ours.warm_up()
        assert ours.config.max_length == length
        found = ours.run(QUERIES[2], BATCH[1])["documents"]
        assert_same_ranking(found, haystack_ranking(folder, QUERIES[2], BATCH[1], {}, top_k=50))
        scores[folder] = [doc.score for doc in found]
    assert scores[saved] != scores[earlier]


def test_bad_parameters_and_models_are_refused(
    ranker: CrossEncoderRanker, tiny_bert_model: Path, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="top_k must be >= 1, not 0; calibration_factor must be > 0, not -1"):
        CrossEncoderRanker(model="any", top_k=0, calibration_factor=-1)
    with pytest.raises(ValueError, match="precision must be one of fp32, bf16, auto, not 'fp16'"):
        CrossEncoderRanker(model="any", precision="fp16")
    with pytest.raises(ValueError, match="Invalid run-time parameters: top_k must be >= 1, not 0"):
        ranker.run(QUERIES[0], BATCH[0], top_k=0)
    with pytest.raises(ValueError, match="Got 2 queries but 1 document lists"):
        ranker.run_batch(QUERIES[:2], BATCH[:1])
    with pytest.raises(RuntimeError, match="call warm_up"):
        CrossEncoderRanker(model="any").run(QUERIES[0], BATCH[0])
    two_labels = CrossEncoderRanker(model=tiny_bert_model)  # a QA model's folder: 2 labels by default
    with pytest.raises(ValueError, match="a ranking cross-encoder has 1 label, not 2"):
        two_labels.warm_up()


def test_a_modules_json_of_other_modules_is_refused(minilm_cross_encoder: Path, tmp_path: Path) -> None:
    folder = tmp_path / "pooled"
    folder.mkdir()
    for path in minilm_cross_encoder.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Dense", "type": "sentence_transformers.models.Dense"}]  # fmt: skip
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ValueError, match=r"modules.json: a cross-encoder of one Transformer module is supported"):
        CrossEncoderRanker(model=folder).warm_up()


def test_to_dict_from_dict_round_trip(minilm_cross_encoder: Path) -> None:
    ranker = CrossEncoderRanker(
        model=minilm_cross_encoder, top_k=3, scale_score=False, score_threshold=0.0, meta_fields_to_embed=["a"],
        embedding_separator=" ", query_prefix="q", document_suffix="d", batch_size=4, precision="auto",
    )  # fmt: skip
    data = ranker.to_dict()
    assert data["type"] == "qa_core.ranker.CrossEncoderRanker"
    assert data["init_parameters"]["score_threshold"] == 0.0 and data["init_parameters"]["top_k"] == 3
    assert CrossEncoderRanker.from_dict(data).to_dict() == data
    assert json.loads(json.dumps(data)) == data
