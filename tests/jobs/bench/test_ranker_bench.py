"""The ranker benchmark's corpus: at least the asked passages, each held-out question's relevant one its own
paragraph, and distractor windows cut from train paragraphs only."""

from jobs.bench.ranker import corpus


def test_the_quality_corpus_holds_the_held_out_paragraphs_and_train_windows() -> None:
    documents, questions, relevant = corpus(2_000, seed=0)
    assert len(documents) == 2_000 and len({doc.id for doc in documents}) == 2_000
    by_id = {doc.id: doc.content for doc in documents}
    assert questions and all(example.answers for example in questions)
    assert all(by_id[relevant[example.id]] == example.context for example in questions)
    heldout = [doc for doc in documents if doc.id.startswith("heldout-")]
    train_text = " ".join(" ".join(doc.content.split()) for doc in documents if doc.id.startswith("train-"))
    windows = [doc.content for doc in documents if doc.id.startswith("window-")]
    assert len(windows) == 2_000 - len(heldout) - sum(doc.id.startswith("train-") for doc in documents)
    assert all(window in train_text for window in windows[:50])
    assert all(relevant[example.id].startswith("heldout-") for example in questions)
