"""qa_core.annotation on hand-built datasets: prediction files, the annotated SQuAD file and Label Studio tasks."""

import dataclasses
import json
from pathlib import Path

import pytest

from qa_core.annotation import (
    LABEL_STUDIO_CONFIG,
    PredictedSpan,
    Prediction,
    annotated_squad_json,
    label_studio_tasks,
    review_score,
    squad_predictions,
    with_silver_labels,
)
from qa_core.question_files import read_questions
from qa_core.squad import (
    GoldAnswer,
    MisalignedAnswer,
    SquadDataset,
    SquadExample,
    SquadFormatError,
    read_squad,
)

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
    "a": Prediction(
        "answered",
        "Kraków",
        0.2,
        [
            PredictedSpan("Kraków", 13, 0.9, "doc-1", "zoe.pdf", 2),
            PredictedSpan("Paris", 50, 0.4, "doc-1", "zoe.pdf", 3),
        ],
    ),
    "b": Prediction("refused", None, 0.7, [PredictedSpan("2019 from Paris", 40, 0.3, "doc-1")]),
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


def test_label_studio_tasks_show_the_answer_given_least_sure_first() -> None:
    tasks = label_studio_tasks(dataset(True), PREDICTIONS, model_version="minilm@0123456789ab")
    # review_score: a's answer 0.9, b's refusal (no-answer probability) 0.7, c's answer 0.8
    assert [task["data"]["question_id"] for task in tasks] == ["b", "c", "a"]
    by_id = {task["data"]["question_id"]: task for task in tasks}
    assert by_id["a"]["data"] == {
        "question_id": "a", "question": "Where does Zoë live?", "context": CONTEXT, "status": "answered",
        "no_answer_probability": 0.2, "model_score": 0.9, "document_id": "doc-1", "file_path": "zoe.pdf", "page": 2,
        "other_spans": [{"text": "Paris", "start": 50, "end": 55, "score": 0.4}],
        "model_note": "Model: answered, no-answer probability 0.20; other spans (not its prediction): 'Paris' 0.40",
        "gold_answers": ["Kraków"],
    }  # fmt: skip
    # Accepting a's prediction accepts its answer only, not the other spans.
    assert by_id["a"]["predictions"] == [
        {
            "model_version": "minilm@0123456789ab",
            "score": 0.9,
            "result": [
                {
                    "id": "answer", "from_name": "answer", "to_name": "context", "type": "labels", "score": 0.9,
                    "value": {"start": 13, "end": 19, "text": "Kraków", "labels": ["Answer"]},
                }
            ],
        }
    ]  # fmt: skip
    # A refusal is the "No answer" choice, scored by its no-answer probability; its span is only shown.
    assert by_id["b"]["predictions"][0]["score"] == 0.7
    assert by_id["b"]["predictions"][0]["result"] == [
        {"id": "no-answer", "from_name": "no_answer", "to_name": "context", "type": "choices",
         "value": {"choices": ["No answer"]}}
    ]  # fmt: skip
    assert by_id["b"]["data"]["status"] == "refused"
    assert by_id["b"]["data"]["other_spans"] == [{"text": "2019 from Paris", "start": 40, "end": 55, "score": 0.3}]
    assert by_id["c"]["predictions"][0]["result"][0]["value"] == {
        "start": 22, "end": 23, "text": "🐊", "labels": ["Answer"]
    }  # fmt: skip
    assert LABEL_STUDIO_CONFIG.count('<Choice value="No answer"/>') == 1


def test_review_keeps_the_least_sure_and_unread_questions_come_first() -> None:
    unread = {**PREDICTIONS, "c": Prediction("no_documents", None, None)}
    assert [task["data"]["question_id"] for task in label_studio_tasks(dataset(True), unread, review=2)] == ["c", "b"]
    assert review_score(unread["c"]) == 0.0
    assert review_score(dataclasses.replace(PREDICTIONS["a"], answer_score=0.55)) == 0.55  # the job's own score


def reviewed_export() -> list[dict]:
    """The tasks as Label Studio exports them (JSON) after review: a accepted by one annotator and corrected by
    another, b skipped then answered "No answer", c corrected to a span after the emoji, d not reviewed."""
    tasks = label_studio_tasks(dataset(True), PREDICTIONS)
    extra = label_studio_tasks(SquadDataset([SquadExample("d", None, "Q?", OTHER)], "2.0", True),
                               {"d": PREDICTIONS["c"]})  # fmt: skip
    by_id = {task["data"]["question_id"]: task for task in tasks + extra}

    ids = iter(range(1, 100))

    def annotation(result: list, cancelled: bool = False) -> dict:
        return {"id": next(ids), "completed_by": 1, "result": result, "was_cancelled": cancelled}

    def span(start: int, end: int, text: str) -> dict:
        value = {"start": start, "end": end, "text": text, "labels": ["Answer"]}
        return {"id": "x", "from_name": "answer", "to_name": "context", "type": "labels", "value": value}

    by_id["a"]["annotations"] = [
        annotation(by_id["a"]["predictions"][0]["result"]),
        annotation([span(50, 55, "Paris")]),
    ]
    by_id["b"]["annotations"] = [annotation([span(40, 44, "2019")], cancelled=True),
                                 annotation(by_id["b"]["predictions"][0]["result"])]  # fmt: skip
    by_id["c"]["annotations"] = [annotation([span(24, 34, "live in it")])]
    by_id["d"]["annotations"] = [annotation([])]  # submitted empty: not a review
    return [{"id": number, **task} for number, task in enumerate(by_id.values(), start=1)]


def json_min(export: list[dict]) -> list[dict]:
    """The same export in JSON-MIN, as Label Studio's converter makes it: a row per annotation not cancelled, newest
    first."""
    rows = []
    for task in export:
        kept = [a for a in reversed(task["annotations"]) if not a["was_cancelled"]]
        for annotation in kept or [{}]:
            row = {**task["data"], "id": task["id"], "annotation_id": annotation.get("id"), "annotator": 1}
            for region in annotation.get("result", []):
                value = {k: v for k, v in region["value"].items()}
                if region["type"] == "choices":
                    row[region["from_name"]] = value["choices"][0]
                else:
                    row.setdefault(region["from_name"], []).append(value)
            rows.append(row)
    return rows


EXPECTED_GOLD = {
    "b": ([], True),
    "c": ([GoldAnswer("live in it", 24)], False),
    "a": ([GoldAnswer("Kraków", 13), GoldAnswer("Paris", 50)], False),
}


@pytest.mark.parametrize("layout", ["json", "json-min"])
def test_label_studio_export_reads_back_as_squad_gold(tmp_path: Path, layout: str) -> None:
    export = reviewed_export() if layout == "json" else json_min(reviewed_export())
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export, ensure_ascii=False), encoding="utf-8")
    back = read_questions(path)
    assert (back.version, back.has_gold, back.unreviewed) == ("2.0", True, ["d"])
    assert {e.id: (e.answers, e.is_impossible) for e in back.examples} == EXPECTED_GOLD
    assert [(e.question, e.context, e.title) for e in back.examples] == [
        ("When did she move?", CONTEXT, "doc-1"), ("Who lives in the Nile?", OTHER, None),
        ("Where does Zoë live?", CONTEXT, "doc-1"),
    ]  # fmt: skip
    for example in back.examples:
        for answer in example.answers:
            assert example.context[answer.answer_start : answer.answer_start + len(answer.text)] == answer.text


def test_an_export_without_reviews_is_unlabelled_questions(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    path.write_text(json.dumps(label_studio_tasks(dataset(True), PREDICTIONS)), encoding="utf-8")
    back = read_questions(path)
    assert (back.has_gold, back.unreviewed) == (False, [])
    assert [(e.id, e.answers, e.is_impossible) for e in back.examples] == [("b", [], False), ("c", [], False),
                                                                          ("a", [], False)]  # fmt: skip


def test_a_malformed_export_is_one_line_naming_task_and_field(tmp_path: Path) -> None:
    export = reviewed_export()
    del export[1]["data"]["question"]
    export[2]["data"]["context"] = "x" * 100_000 + CONTEXT  # a's spans now miss their context
    export[2]["annotations"].append({"result": [{"type": "labels", "value": {"start": "0", "end": 3}}]})
    export[3]["annotations"] = [{"result": [{"type": "choices", "value": {"choices": ["No answer"]}},
                                            {"type": "labels", "value": {"start": 0, "end": 3}}]}]  # fmt: skip
    export.append(["not", "a", "task"])
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(SquadFormatError) as error:
        read_questions(path)
    message = str(error.value)
    assert "\n" not in message and "xxxxxxxxxx" not in message and len(message) < 700
    assert error.value.problems == [
        "task 1: missing 'data.question'",
        "task 2 (question 'a'): 'annotations[2].result[0].value' needs integer 'start' and 'end'",
        "task 3 (question 'd'): annotations[0] has both answer spans and 'No answer'",
        "task 4: not an object but list",
        "question 'a': answer 'Kraków' at answer_start 13 does not match its context",
        "question 'a': answer 'Paris' at answer_start 50 does not match its context",
    ]
    assert message.startswith(f"{path}: 6 problem(s) in the Label Studio export: task 1: missing 'data.question'; ")


def test_misaligned_export_spans_can_be_left_out(tmp_path: Path) -> None:
    export = reviewed_export()
    export[2]["annotations"][1]["result"][0]["value"]["text"] = "Pari"  # the corrected span's text is not 50..55
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(SquadFormatError, match=r"question 'a': answer 'Pari' at answer_start 50 does not match"):
        read_questions(path)
    back = read_questions(path, allow_misaligned_gold=True)
    assert back.misaligned == [MisalignedAnswer("a", "Pari", 50)]
    assert [(e.id, e.answers) for e in back.examples if e.id == "a"] == [("a", [GoldAnswer("Kraków", 13)])]


def test_a_squad_row_that_is_not_an_object_is_named_not_echoed(tmp_path: Path) -> None:
    path = tmp_path / "questions.jsonl"
    path.write_text(json.dumps(["context " * 1000]) + "\n", encoding="utf-8")
    with pytest.raises(SquadFormatError) as error:
        read_squad(path)
    assert error.value.problems == [f"line 1: not an object: {repr(['context ' * 1000])[:57]}..."]


def test_spans_that_miss_their_context_are_refused_by_id() -> None:
    wrong = {**PREDICTIONS, "b": Prediction("answered", "2019", 0.1, [PredictedSpan("2019", 41, 0.5)])}
    with pytest.raises(ValueError, match=r"do not index their context, for questions \['b'\]"):
        annotated_squad_json(dataset(True), wrong)
    with pytest.raises(ValueError, match=r"No prediction for 1 question\(s\): \['c'\]"):
        label_studio_tasks(dataset(True), {"a": PREDICTIONS["a"], "b": PREDICTIONS["b"]})


def test_an_answer_from_another_document_is_noted_and_not_predicted() -> None:
    elsewhere = {**PREDICTIONS, "a": Prediction("answered", "Lyon", 0.2, [PredictedSpan("Paris", 50, 0.4)], 0.7)}
    task = next(t for t in label_studio_tasks(dataset(True), elsewhere) if t["data"]["question_id"] == "a")
    assert (task["predictions"][0]["result"], task["predictions"][0]["score"]) == ([], 0.7)
    assert task["data"]["model_note"] == (
        "Model: answered, no-answer probability 0.20; its answer 'Lyon' is from another document; "
        "other spans (not its prediction): 'Paris' 0.40"
    )
