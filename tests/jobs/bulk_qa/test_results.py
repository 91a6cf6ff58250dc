"""The result files' dataset built from the run's Parquet questions (no Ray: the tables are written here)."""

from pathlib import Path

from jobs.bulk_qa.config import WorkSettings
from jobs.bulk_qa.results import dataset_from_tables
from qa_core.annotation import PredictedSpan, Prediction
from tests.jobs.conftest import write_table


def test_questions_with_both_document_ids_and_a_context_are_annotated_against_their_documents(tmp_path: Path) -> None:
    """The job reads `document_ids` when a table has both columns, so the annotated dataset uses them too."""
    documents = write_table(tmp_path / "d.parquet", {"id": ["d1", "d2"], "content": ["Alpha beta.", "Gamma delta."]})
    questions = write_table(
        tmp_path / "q.parquet",
        {"id": ["q1"], "query": ["Which?"], "document_ids": [["d1", "d2"]], "context": ["Unrelated text."]},
    )
    spans = [PredictedSpan("Gamma", 0, 0.9), PredictedSpan("Alpha", 0, 0.8)]
    predictions = {"q1": Prediction("answered", "Gamma", 0.1, spans)}
    work = WorkSettings(questions=questions, documents=documents)
    dataset, kept = dataset_from_tables(work, predictions, {"q1": ["d2", "d1"]})
    [example] = dataset.examples
    assert (example.id, example.title, example.context) == ("q1", "d2", "Gamma delta.")  # the best span's document
    assert kept["q1"].spans == [spans[0]]
