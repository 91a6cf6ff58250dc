"""qa_core.annotation on hand-built datasets: prediction files, the annotated SQuAD file and Label Studio tasks."""

import json
from pathlib import Path

import pytest

from qa_core.annotation import (
    PredictedSpan,
    Prediction,
    annotated_squad_json,
    label_studio_tasks,
    squad_predictions,
    with_silver_labels,
)
from qa_core.squad import GoldAnswer, SquadDataset, SquadExample, read_squad

CONTEXT = "Zoë lives in Kraków. She moved there in 2019 from Paris."
OTHER = "The Nile flows north. 🐊 live in it."


def dataset(has_gold: bool) -> SquadDataset:
    answers = [GoldAnswer("Kraków", 13)] if has_gold else []
    examples = [
        SquadExample("a", "T", "Where does Zoë live?", CONTEXT, answers),
        SquadExample("b", "T", "When did she move?", CONTEXT, [GoldAnswer("2019", 40)] if has_gold else []),
        SquadExample("c", "U", "Who lives in the Nile?", OTHER, [], is_impossible=has_gold),
    ]
    return SquadDataset(examples, "2.0" if has_gold else "1.1", has_gold)


PREDICTIONS = {
    "a": Prediction("answered", "Kraków", 0.2, [PredictedSpan("Kraków", 13, 0.9), PredictedSpan("Paris", 50, 0.4)]),
    "b": Prediction("refused", None, 0.7, [PredictedSpan("2019 from Paris", 40, 0.3)]),
    "c": Prediction("answered", "🐊", 0.1, [PredictedSpan("🐊", 22, 0.8)]),
}


def test_squad_predictions_are_the_answers_given_and_the_no_answer_scores() -> None:
    unread = {"d": Prediction("no_documents", None, None)}
    answers, na_probs = squad_predictions({**PREDICTIONS, **unread})
    assert answers == {"a": "Kraków", "b": "", "c": "🐊", "d": ""}
    assert na_probs == {"a": 0.2, "b": 0.7, "c": 0.1, "d": 1.0}


def test_annotated_labelled_dataset_round_trips_with_its_gold(tmp_path: Path) -> None:
    document = annotated_squad_json(dataset(True), PREDICTIONS)
    path = tmp_path / "annotated.squad.json"
    path.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    assert read_squad(path) == dataset(True)
    qas = {qa["id"]: qa for article in document["data"] for p in article["paragraphs"] for qa in p["qas"]}
    assert qas["a"]["predicted_answers"] == [
        {"text": "Kraków", "answer_start": 13, "score": 0.9},
        {"text": "Paris", "answer_start": 50, "score": 0.4},
    ]
    assert (qas["b"]["predicted_status"], qas["b"]["no_answer_probability"]) == ("refused", 0.7)


def test_unlabelled_dataset_gets_silver_labels(tmp_path: Path) -> None:
    document = annotated_squad_json(dataset(False), PREDICTIONS)
    path = tmp_path / "annotated.squad.json"
    path.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    back = read_squad(path)
    assert (back.version, back.has_gold) == ("2.0", True)
    silver = {e.id: (e.answers, e.is_impossible) for e in back.examples}
    assert silver == {"a": ([GoldAnswer("Kraków", 13)], False), "b": ([], True), "c": ([GoldAnswer("🐊", 22)], False)}
    assert back == with_silver_labels(dataset(False), PREDICTIONS)
    assert [(e.question, e.context) for e in back.examples] == [
        (e.question, e.context) for e in dataset(False).examples
    ]


def test_label_studio_tasks_hold_spans_that_index_the_context() -> None:
    tasks = label_studio_tasks(dataset(True), PREDICTIONS)
    assert [task["data"]["id"] for task in tasks] == ["a", "b", "c"]
    assert tasks[0]["data"] == {"id": "a", "question": "Where does Zoë live?", "context": CONTEXT,
                                "gold_answers": ["Kraków"]}  # fmt: skip
    [prediction] = tasks[0]["predictions"]
    assert prediction["score"] == 0.9
    assert [region["value"] for region in prediction["result"]] == [
        {"start": 13, "end": 19, "text": "Kraków", "labels": ["Answer"]},
        {"start": 50, "end": 55, "text": "Paris", "labels": ["Answer"]},
    ]
    assert {
        (r["from_name"], r["to_name"], r["type"]) for t in tasks for p in t["predictions"] for r in p["result"]
    } == {("answer", "context", "labels")}
    for task in tasks:
        for region in task["predictions"][0]["result"]:
            value = region["value"]
            assert task["data"]["context"][value["start"] : value["end"]] == value["text"]


def test_spans_that_miss_their_context_are_refused_by_id() -> None:
    wrong = {**PREDICTIONS, "b": Prediction("answered", "2019", 0.1, [PredictedSpan("2019", 41, 0.5)])}
    with pytest.raises(ValueError, match=r"do not index their context, for questions \['b'\]"):
        annotated_squad_json(dataset(True), wrong)
    with pytest.raises(ValueError, match=r"No prediction for 1 question\(s\): \['c'\]"):
        label_studio_tasks(dataset(True), {"a": PREDICTIONS["a"], "b": PREDICTIONS["b"]})
