"""
A reader's results over a SQuAD dataset in the formats other tools read: the official SQuAD prediction files
(`predictions.json`, `na_probs.json`), the dataset annotated with its predicted spans (SQuAD JSON, with silver
labels for unlabelled questions) and Label Studio tasks for review; and the one converter back: a Label Studio
export of the reviewed tasks as SQuAD questions with gold answers (`label_studio_dataset`, which
`qa_core.question_files.read_questions` calls for a `.json` list, so every command that reads SQuAD files reads
exports). Pure functions over plain records: they know nothing of the reader or of the engine that ran it.

Usage example:
```python
dataset = read_squad("dev-v2.0.json")
predictions = {"q1": Prediction("answered", "Paris", 0.1, [PredictedSpan("Paris", 0, 0.8)])}
answers, na_probs = squad_predictions(predictions)
document = annotated_squad_json(dataset, predictions)  # json.dumps it to annotated.squad.json
```
"""

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qa_core.squad import (
    GoldAnswer,
    MisalignedAnswer,
    SquadDataset,
    SquadExample,
    SquadFormatError,
    shown,
    squad_json,
)

# The no-answer probability of a question the reader read nothing for (no documents, or a question-level error).
UNREAD_NO_ANSWER_PROBABILITY = 1.0


@dataclass(frozen=True)
class PredictedSpan:
    """
    A predicted answer span: `context[answer_start : answer_start + len(text)] == text`.

    :param text: The answer.
    :param answer_start: Its character offset in the question's context.
    :param score: The reader's score for it.
    :param document_id: The document it was read in, when known.
    :param file_path: That document's file, when it came from one.
    :param page: The page the answer is on, when the document is paged.
    """

    text: str
    answer_start: int
    score: float
    document_id: str | None = None
    file_path: str | None = None
    page: int | None = None


@dataclass(frozen=True)
class Prediction:
    """
    A reader's outcome for one question.

    :param status: `answered`, `refused`, `no_documents` or `error` (the bulk job's statuses).
    :param answer: The answer given: its text when answered, else `None`.
    :param no_answer_probability: The no-answer score; `None` when nothing was read.
    :param spans: The predicted spans in the question's context, best first (refused or not).
    :param answer_score: The job's score for the answer given; `None` unless answered.
    """

    status: str
    answer: str | None
    no_answer_probability: float | None
    spans: list[PredictedSpan] = field(default_factory=list)
    answer_score: float | None = None

    @property
    def given_span(self) -> PredictedSpan | None:
        """The span of the answer given: its first span with the answer's text (`None` unless answered, or when
        the answer came from another document than the question's context)."""
        if self.status != "answered":
            return None
        return next((span for span in self.spans if span.text == self.answer), None)


def squad_predictions(predictions: Mapping[str, Prediction]) -> tuple[dict[str, str], dict[str, float]]:
    """
    The official SQuAD v2.0 evaluation script's two input files, as dicts.

    :param predictions: By question id.
    :returns: `(answers, na_probs)`: the answer given by id (`""` when refused or not answered), and the no-answer
        probability by id (`UNREAD_NO_ANSWER_PROBABILITY` for a question nothing was read for).
    """
    answers = {qid: prediction.answer or "" for qid, prediction in predictions.items()}
    na_probs = {
        qid: UNREAD_NO_ANSWER_PROBABILITY if p.no_answer_probability is None else p.no_answer_probability
        for qid, p in predictions.items()
    }
    return answers, na_probs


def best_spans(dataset: SquadDataset, predictions: Mapping[str, Prediction]) -> dict[str, str]:
    """Each question's best span, refused or not (`""` without spans), by question id in dataset order."""
    return {e.id: predictions[e.id].spans[0].text if predictions[e.id].spans else "" for e in dataset.examples}


def check_spans(dataset: SquadDataset, predictions: Mapping[str, Prediction]) -> None:
    """
    :raises ValueError: When a question has no prediction, or a predicted span does not index its context,
        naming the question ids.
    """
    missing = [example.id for example in dataset.examples if example.id not in predictions]
    if missing:
        raise ValueError(f"No prediction for {len(missing)} question(s): {missing[:20]}.")
    misplaced = sorted(
        {
            example.id
            for example in dataset.examples
            for span in predictions[example.id].spans
            if span.answer_start < 0
            or example.context[span.answer_start : span.answer_start + len(span.text)] != span.text
        }
    )
    if misplaced:
        raise ValueError(f"Predicted spans that do not index their context, for questions {misplaced[:20]}.")


def with_silver_labels(dataset: SquadDataset, predictions: Mapping[str, Prediction]) -> SquadDataset:
    """
    An unlabelled dataset labelled with its predictions (silver labels): an answered question gets as its answer
    its first span whose text is the answer given (its best span, unless the answer came from another document
    than its context), any other (refused, not read, or answered from elsewhere only) is impossible. The result is
    SQuAD v2.0. A labelled dataset is returned as it is.
    """
    if dataset.has_gold:
        return dataset
    examples = []
    for example in dataset.examples:
        best = predictions[example.id].given_span
        answers = [GoldAnswer(best.text, best.answer_start)] if best is not None else []
        examples.append(dataclasses.replace(example, answers=answers, is_impossible=not answers))
    return SquadDataset(examples=examples, version="2.0", has_gold=True, misaligned=list(dataset.misaligned))


def annotated_squad_json(dataset: SquadDataset, predictions: Mapping[str, Prediction]) -> dict[str, Any]:
    """
    The dataset in the official SQuAD JSON layout with each question's predictions added: `predicted_answers`
    (`text, answer_start, score`, best first), `predicted_status` and `no_answer_probability`. Unlabelled data
    gets silver labels (`with_silver_labels`); labelled data keeps its gold. `read_squad` reads it back to the
    same questions and gold (the added fields are not SQuAD's and are ignored).

    :raises ValueError: See `check_spans`.
    """
    check_spans(dataset, predictions)
    labelled = with_silver_labels(dataset, predictions)
    document = squad_json(labelled)
    for article in document["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                prediction = predictions[qa["id"]]
                qa["predicted_answers"] = [
                    {"text": span.text, "answer_start": span.answer_start, "score": span.score}
                    for span in prediction.spans
                ]
                qa["predicted_status"] = prediction.status
                qa["no_answer_probability"] = prediction.no_answer_probability
    return document


# Label Studio: the review loop's two ends. `label_studio_tasks` writes the tasks a reviewer checks in a project
# labelled with `LABEL_STUDIO_CONFIG`; `label_studio_dataset` reads the project's export (JSON or JSON-MIN) back as
# SQuAD questions with gold answers. Offsets are Python string indices (Unicode code points) on both ends, with no
# conversion: Label Studio's Text tag counts `start` / `end` in code points too (its editor's RichText model splits
# the text with `[...text]` and documents its global offsets "in codepoints"), not in UTF-16 units as JavaScript
# strings do. tests/jobs/test_label_studio_server.py checks it in Label Studio 1.23's own interface, in Chromium:
# a prediction after emoji highlights its text, and a span selected there comes back with Python's offsets.

ANSWER_CONTROL = "answer"  # the span-labelling control: a span labelled `ANSWER_LABEL` is an answer
ANSWER_LABEL = "Answer"
NO_ANSWER_CONTROL = "no_answer"  # the choice that says the context holds no answer
NO_ANSWER_CHOICE = "No answer"

# The labelling configuration of the review project: the question above its context, the answer span label, the
# "No answer" choice, and a line with what the model said (its status, no-answer probability and the other spans
# it found, which are shown but are not part of its prediction).
LABEL_STUDIO_CONFIG = f"""<View>
  <Header value="$question"/>
  <Text name="context" value="$context" granularity="symbol"/>
  <Labels name="{ANSWER_CONTROL}" toName="context">
    <Label value="{ANSWER_LABEL}"/>
  </Labels>
  <Choices name="{NO_ANSWER_CONTROL}" toName="context" choice="single" showInline="true">
    <Choice value="{NO_ANSWER_CHOICE}"/>
  </Choices>
  <Header value="$model_note" size="6"/>
</View>
"""


def review_score(prediction: Prediction) -> float:
    """
    How sure the job is of what it shows for review, in [0, 1], the Label Studio prediction's `score`: the answer's
    score when answered, the no-answer probability when refused, 0.0 when nothing was read (no documents or an
    error). Review goes least sure first.
    """
    if prediction.status == "answered":
        given = prediction.given_span
        score = prediction.answer_score if prediction.answer_score is not None else given.score if given else 0.0
        return float(score)
    if prediction.status == "refused" and prediction.no_answer_probability is not None:
        return float(prediction.no_answer_probability)
    return 0.0


def label_studio_tasks(
    dataset: SquadDataset,
    predictions: Mapping[str, Prediction],
    model_version: str = "bulk-qa",
    review: int | None = None,
) -> list[dict[str, Any]]:
    """
    Label Studio tasks for reviewing the predictions in a project labelled with `LABEL_STUDIO_CONFIG`, least sure
    first (by `review_score`; ties in dataset order).

    Each task's `data`: `question_id`, `question`, `context`, the job's `status`, `no_answer_probability` and
    `model_score` (the `review_score`), the `document_id`, `file_path` and `page` of the answer given (else of the
    best span), `other_spans` (the spans found besides the answer given: `text, start, end, score`), `model_note`
    (all that in a line the reviewer reads) and, with gold, `gold_answers`. Its one prediction, with
    `model_version` and the `review_score` as `score`, is what the job gave: the answer's span labelled `Answer`,
    or for a refused or unread question the "No answer" choice (an answer found only in another document than the
    context gets an empty prediction). Accepting it as it is makes it the gold.

    :param model_version: The model's fingerprint (or name) the predictions are from.
    :param review: Only the `review` least sure questions (all when `None`).
    :raises ValueError: See `check_spans`.
    """
    check_spans(dataset, predictions)
    order = sorted(dataset.examples, key=lambda example: review_score(predictions[example.id]))
    tasks = []
    for example in order[:review]:
        prediction = predictions[example.id]
        score = review_score(prediction)
        tasks.append(
            {
                "data": _task_data(example, prediction, score, dataset.has_gold),
                "predictions": [{"model_version": model_version, "score": score, "result": _result(prediction)}],
            }
        )
    return tasks


def _result(prediction: Prediction) -> list[dict[str, Any]]:
    given = prediction.given_span
    if given is not None:
        end = given.answer_start + len(given.text)
        value = {"start": given.answer_start, "end": end, "text": given.text, "labels": [ANSWER_LABEL]}
        region = {"id": "answer", "from_name": ANSWER_CONTROL, "to_name": "context", "type": "labels"}
        return [{**region, "value": value, "score": given.score}]
    if prediction.status == "answered":
        return []
    value = {"choices": [NO_ANSWER_CHOICE]}
    return [
        {"id": "no-answer", "from_name": NO_ANSWER_CONTROL, "to_name": "context", "type": "choices", "value": value}
    ]


def _task_data(example: SquadExample, prediction: Prediction, score: float, has_gold: bool) -> dict[str, Any]:
    given = prediction.given_span
    source = given or (prediction.spans[0] if prediction.spans else None)
    others = [
        {"text": span.text, "start": span.answer_start, "end": span.answer_start + len(span.text), "score": span.score}
        for span in prediction.spans
        if span is not given
    ]
    data: dict[str, Any] = {
        "question_id": example.id,
        "question": example.question,
        "context": example.context,
        "status": prediction.status,
        "no_answer_probability": prediction.no_answer_probability,
        "model_score": score,
        "document_id": source.document_id if source else None,
        "file_path": source.file_path if source else None,
        "page": source.page if source else None,
        "other_spans": others,
        "model_note": _model_note(prediction, given, others),
    }
    if has_gold:
        data["gold_answers"] = [answer.text for answer in example.answers]
    return data


def _model_note(prediction: Prediction, given: PredictedSpan | None, others: list[dict[str, Any]]) -> str:
    no_answer = prediction.no_answer_probability
    note = f"Model: {prediction.status}, no-answer probability {'n/a' if no_answer is None else f'{no_answer:.2f}'}"
    if prediction.status == "answered" and given is None:
        note += f"; its answer {prediction.answer!r} is from another document"
    if others:
        note += "; other spans (not its prediction): " + ", ".join(f"{o['text']!r} {o['score']:.2f}" for o in others)
    return note


# Keys of a JSON-MIN row that are Label Studio's, not the task's data.
_JSON_MIN_KEYS = {"id", "annotator", "annotation_id", "created_at", "updated_at", "lead_time", "agreement"}


@dataclass
class _Review:
    """One counted review of a question: its answer spans (start, end, text or None), or none for "No answer"."""

    spans: list[tuple[int, int, str | None]]
    annotation_id: Any  # Label Studio's id of the annotation: gold answers follow it, whatever the export's order


@dataclass
class _Task:
    where: str
    task_id: Any
    data: dict[str, Any]
    reviews: list[_Review] = field(default_factory=list)


def label_studio_dataset(path: Path, export: list[Any], allow_misaligned_gold: bool = False) -> SquadDataset:
    """
    A Label Studio export of review tasks (`label_studio_tasks`, or any tasks with `data.question_id`, `question`
    and `context` in a project with `LABEL_STUDIO_CONFIG`'s controls) as SQuAD v2.0 questions with gold answers.
    Both export formats are read: JSON (tasks with `data` and `annotations`) and JSON-MIN (a row per annotation with
    the task's data and the controls' values flattened in; several rows of one task are its annotators').

    The rules: each annotation (a JSON-MIN row) not cancelled or skipped (`was_cancelled`) is a review. Its `Answer`
    spans are gold answers (accepted or corrected alike); its "No answer" choice says the question is impossible;
    both at once is a problem; neither (an empty annotation) is no review. Several reviews of a question (several
    annotators) give all their spans as gold answers, as SQuAD's dev set has several; the question is impossible
    only when every review says "No answer". Tasks without a review are left out and their question ids listed in
    `unreviewed`; an export with no review at all is read as unlabelled questions (every task, `has_gold=False`).

    :param path: The file, for error messages.
    :param export: Its JSON: a list of tasks.
    :param allow_misaligned_gold: Leave out spans whose `text` is not the context between their offsets (listed in
        `misaligned`) instead of raising.
    :raises SquadFormatError: One line naming the first problems by task index (its position in the export) and
        field, never the data itself.
    """
    problems: list[str] = []
    tasks: dict[str, _Task] = {}
    for index, item in enumerate(export):
        task = _read_task(index, item, problems)
        if task is None:
            continue
        qid = task.data["question_id"]
        if qid in tasks and tasks[qid].task_id != task.task_id:
            problems.append(f"{task.where}: question_id {shown(qid)} is also in {tasks[qid].where}")
        elif qid in tasks:
            tasks[qid].reviews.extend(task.reviews)  # JSON-MIN: another annotator's row of the same task
        else:
            tasks[qid] = task
    misaligned: list[MisalignedAnswer] = []
    examples, unreviewed = [], []
    reviewed = any(task.reviews for task in tasks.values())
    for qid, task in tasks.items():
        if reviewed and not task.reviews:
            unreviewed.append(qid)
            continue
        answers = _gold(qid, task, misaligned) if reviewed else []
        impossible = reviewed and all(not review.spans for review in task.reviews)
        if reviewed and not answers and not impossible:
            continue  # every span misaligned: left out (or raised below)
        title = task.data.get("document_id")
        examples.append(
            SquadExample(
                qid, title if isinstance(title, str) else None, task.data["question"], task.data["context"],
                answers, is_impossible=impossible,
            )
        )  # fmt: skip
    if not allow_misaligned_gold:
        problems.extend(
            f"question {m.id!r}: answer {shown(m.text)} at answer_start {m.answer_start} does not match its context"
            for m in misaligned
        )
    if problems:
        raise SquadFormatError(path, problems, "the Label Studio export")
    return SquadDataset(examples, "2.0", has_gold=reviewed, misaligned=misaligned, unreviewed=unreviewed)


def _read_task(index: int, item: Any, problems: list[str]) -> _Task | None:
    where = f"task {index}"
    if not isinstance(item, dict):
        problems.append(f"{where}: not an object but {type(item).__name__}")
        return None
    json_min = "data" not in item and "annotations" not in item
    data = {k: v for k, v in item.items() if k not in _JSON_MIN_KEYS} if json_min else item.get("data")
    prefix = "" if json_min else "data."
    if not isinstance(data, dict):
        problems.append(f"{where}: 'data' must be an object")
        return None
    found = len(problems)
    for name in ("question_id", "question", "context"):
        value = data.get(name)
        if value is None:
            problems.append(f"{where}: missing '{prefix}{name}'")
        elif not isinstance(value, str) or not value.strip():
            problems.append(f"{where}: '{prefix}{name}' must be a non-empty string, not {shown(value)}")
    if len(problems) > found:
        return None
    where = f"{where} (question {data['question_id']!r})"
    task = _Task(where, item.get("id"), data)
    if json_min:
        if item.get("annotation_id") is not None:
            spans, choice = item.get(ANSWER_CONTROL), item.get(NO_ANSWER_CONTROL)
            _add_review(task, spans, choice, item["annotation_id"], where, problems)
        return task
    annotations = item.get("annotations", [])
    if not isinstance(annotations, list):
        problems.append(f"{where}: 'annotations' must be a list")
        return None
    for a, annotation in enumerate(annotations):
        at = f"annotations[{a}]"
        if not isinstance(annotation, dict) or not isinstance(annotation.get("result", []), list):
            problems.append(f"{where}: '{at}' must be an object with a 'result' list")
        elif not (annotation.get("was_cancelled") or annotation.get("skipped")):
            spans, choices = [], []
            for r, region in enumerate(annotation.get("result", [])):
                kind = region.get("type") if isinstance(region, dict) else None
                value = region.get("value") if isinstance(region, dict) else None
                if kind == "labels":
                    spans.append((value, f"{at}.result[{r}].value"))
                elif kind == "choices":
                    choices.append((value.get("choices") if isinstance(value, dict) else None, f"{at}.result[{r}]"))
            _add_checked_review(task, spans, choices, annotation.get("id"), where, at, problems)
    return task


def _add_review(task: _Task, spans: Any, choice: Any, annotation_id: Any, where: str, problems: list[str]) -> None:
    """A JSON-MIN row's review: `spans` the answer control's regions, `choice` the no-answer control's value."""
    if spans is not None and not isinstance(spans, list):
        problems.append(f"{where}: '{ANSWER_CONTROL}' must be a list of spans")
        return
    regions = [(span, f"{ANSWER_CONTROL}[{i}]") for i, span in enumerate(spans or [])]
    choices = [] if choice is None else [([choice] if isinstance(choice, str) else choice, NO_ANSWER_CONTROL)]
    _add_checked_review(task, regions, choices, annotation_id, where, "", problems)


def _add_checked_review(
    task: _Task,
    regions: list[tuple[Any, str]],
    choices: list[tuple[Any, str]],
    annotation_id: Any,
    where: str,
    at: str,
    problems: list[str],
) -> None:
    found = len(problems)
    spans = []
    for value, field_name in regions:
        start = value.get("start") if isinstance(value, dict) else None
        end = value.get("end") if isinstance(value, dict) else None
        text = value.get("text") if isinstance(value, dict) else None
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (start, end)):
            problems.append(f"{where}: '{field_name}' needs integer 'start' and 'end'")
        elif not 0 <= start < end <= len(task.data["context"]):
            problems.append(f"{where}: '{field_name}' offsets {start}..{end} are outside the context")
        elif text is not None and not isinstance(text, str):
            problems.append(f"{where}: '{field_name}.text' must be a string")
        else:
            spans.append((start, end, text))
    no_answer = False
    for value, field_name in choices:
        if not isinstance(value, list):
            problems.append(f"{where}: '{field_name}' must hold a list of choices")
        elif NO_ANSWER_CHOICE in value:
            no_answer = True
    if len(problems) > found:
        return
    if no_answer and spans:
        problems.append(f"{where}: {at or 'a review'} has both answer spans and {NO_ANSWER_CHOICE!r}")
    elif no_answer or spans:
        task.reviews.append(_Review(spans, annotation_id))


def _gold(qid: str, task: _Task, misaligned: list[MisalignedAnswer]) -> list[GoldAnswer]:
    context = task.data["context"]
    answers = []
    # By annotation id (JSON-MIN lists a task's annotations newest first, JSON oldest first); stable for ids missing.
    ordered = sorted(task.reviews, key=lambda r: (0, r.annotation_id) if isinstance(r.annotation_id, int) else (1, 0))
    for review in ordered:
        for start, end, text in review.spans:
            if text is not None and context[start:end] != text:
                misaligned.append(MisalignedAnswer(qid, text, start))
            else:
                answers.append(GoldAnswer(context[start:end], start))
    return answers


__all__ = [
    "ANSWER_CONTROL",
    "ANSWER_LABEL",
    "LABEL_STUDIO_CONFIG",
    "NO_ANSWER_CHOICE",
    "NO_ANSWER_CONTROL",
    "PredictedSpan",
    "Prediction",
    "annotated_squad_json",
    "best_spans",
    "check_spans",
    "label_studio_dataset",
    "label_studio_tasks",
    "review_score",
    "squad_predictions",
    "with_silver_labels",
]
