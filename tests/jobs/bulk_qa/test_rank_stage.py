"""
The ranking stage's work on a batch (`workers.rank.rank_questions`), without Ray: a retrieved question's passages
ranked by their own text and meta as `CrossEncoderRanker.run` ranks them, every per-hit column reordered alike;
questions that name their documents, or whose retrieval found nothing, left as they were.
"""

from pathlib import Path

import pyarrow as pa
import pytest

from jobs.bulk_qa.workers.rank import PER_HIT_COLUMNS, rank_questions
from qa_core import Document
from qa_core.ranker import CrossEncoderRanker
from tests.jobs.conftest import TEXTS

SOURCE = TEXTS[3][:600]
RANGES = [(0, 120), (100, 300), (280, 600), (40, 90)]  # four passages of one source document


def _batch() -> pa.Table:
    """Three questions after the fetch: split passages retrieved, named documents, and a retrieval of no hits."""
    hits = len(RANGES)
    return pa.table(
        {
            "id": ["split", "named", "none"],
            "query": ["What does the function return?", "Anything?", "zzzqqq"],
            "document_ids": [["doc"] * hits, ["a", "b"], []],
            "retrieval_scores": [[4.0, 3.0, 2.0, 1.0], None, []],
            "retrieved_positions": [[7, 8, 9, 6], None, []],
            "passage_ids": [[f"p{index}" for index in range(hits)], None, None],
            "passage_starts": [[start for start, _ in RANGES], None, None],
            "passage_ends": [[end for _, end in RANGES], None, None],
            "passage_contents": [[SOURCE] * hits, ["text a", "text b"], []],
            "passage_page_numbers": pa.array([[1, 2, 3, 1], [None, None], []], pa.list_(pa.int64())),
            "passage_file_paths": pa.array([["f.txt"] * hits, [None, None], []], pa.list_(pa.string())),
            "passage_known": [[True] * hits, [True, True], []],
        }
    )


def test_passages_are_ranked_by_their_own_text_and_every_hit_column_follows(minilm_cross_encoder: Path) -> None:
    settings = {"top_k": 3, "meta_fields_to_embed": ["page_number"], "document_prefix": "passage: "}
    ranker = CrossEncoderRanker(model=minilm_cross_encoder, device="cpu", **settings)
    ranker.warm_up()
    batch = _batch()
    ranked = rank_questions(batch, ranker).to_pylist()
    passages = [
        Document(content=SOURCE[start:end], id=f"p{index}", meta={"page_number": page})
        for index, ((start, end), page) in enumerate(zip(RANGES, [1, 2, 3, 1], strict=True))
    ]
    expected = ranker.run(query="What does the function return?", documents=passages)["documents"]
    order = [int(doc.id[1:]) for doc in expected]
    assert len(order) == 3 and order != sorted(order)  # the ranker reordered them
    before = batch.to_pylist()[0]
    assert ranked[0]["ranker_scores"] == pytest.approx([doc.score for doc in expected], abs=1e-6)
    for name in [name for name in PER_HIT_COLUMNS if name in before]:  # no per-retriever columns: BM25 alone
        assert ranked[0][name] == [before[name][index] for index in order], name
    assert ranked[1] == {**batch.to_pylist()[1], "ranker_scores": None}  # named documents: read as named
    assert ranked[2] == {**batch.to_pylist()[2], "ranker_scores": []}
