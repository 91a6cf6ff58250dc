"""
A reader's results over a SQuAD dataset in the formats other tools read: the official SQuAD prediction files
(`predictions.json`, `na_probs.json`), the dataset annotated with its predicted spans (SQuAD JSON, with silver
labels for unlabelled questions) and Label Studio tasks for review. Pure functions over plain records: they know
nothing of the reader or of the engine that ran it.

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
from typing import Any

from qa_core.squad import GoldAnswer, SquadDataset, squad_json

# The no-answer probability of a question the reader read nothing for (no documents, or a question-level error).
UNREAD_NO_ANSWER_PROBABILITY = 1.0

# The Label Studio labelling configuration `label_studio_tasks` writes for: the context as labelable text, the
# question above it, one `Answer` span label.
LABEL_STUDIO_CONFIG = """<View>
  <Header value="$question"/>
  <Text name="context" value="$context" granularity="symbol"/>
  <Labels name="answer" toName="context">
    <Label value="Answer"/>
  </Labels>
</View>
"""


@dataclass(frozen=True)
class PredictedSpan:
    """
    A predicted answer span: `context[answer_start : answer_start + len(text)] == text`.

    :param text: The answer.
    :param answer_start: Its character offset in the question's context.
    :param score: The reader's score for it.
    """

    text: str
    answer_start: int
    score: float


@dataclass(frozen=True)
class Prediction:
    """
    A reader's outcome for one question.

    :param status: `answered`, `refused`, `no_documents` or `error` (the bulk job's statuses).
    :param answer: The answer given: its text when answered, else `None`.
    :param no_answer_probability: The no-answer score; `None` when nothing was read.
    :param spans: The predicted spans in the question's context, best first (refused or not).
    """

    status: str
    answer: str | None
    no_answer_probability: float | None
    spans: list[PredictedSpan] = field(default_factory=list)


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
        prediction = predictions[example.id]
        answered = prediction.status == "answered"
        best = next((span for span in prediction.spans if span.text == prediction.answer), None) if answered else None
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
                qa["predicted_answers"] = [dataclasses.asdict(span) for span in prediction.spans]
                qa["predicted_status"] = prediction.status
                qa["no_answer_probability"] = prediction.no_answer_probability
    return document


def label_studio_tasks(
    dataset: SquadDataset, predictions: Mapping[str, Prediction], model_version: str = "bulk-qa"
) -> list[dict[str, Any]]:
    """
    Label Studio tasks for reviewing the predictions in a span-labelling project (`LABEL_STUDIO_CONFIG`): one task
    per question with `data` = `{id, question, context}` and one prediction whose result regions are the
    predicted spans (`value: {start, end, text, labels: ["Answer"]}`, character offsets in the context, each
    with its score); the prediction's score is the best span's (0.0 without spans). Gold answers, if any, are in
    `data.gold_answers` for the reviewer.

    :raises ValueError: See `check_spans`.
    """
    check_spans(dataset, predictions)
    tasks = []
    for example in dataset.examples:
        prediction = predictions[example.id]
        regions = [
            {
                "id": f"{example.id}-{rank}",
                "from_name": "answer",
                "to_name": "context",
                "type": "labels",
                "value": {
                    "start": span.answer_start,
                    "end": span.answer_start + len(span.text),
                    "text": span.text,
                    "labels": ["Answer"],
                },
                "score": span.score,
            }
            for rank, span in enumerate(prediction.spans, start=1)
        ]
        data: dict[str, Any] = {"id": example.id, "question": example.question, "context": example.context}
        if dataset.has_gold:
            data["gold_answers"] = [answer.text for answer in example.answers]
        score = prediction.spans[0].score if prediction.spans else 0.0
        tasks.append(
            {"data": data, "predictions": [{"model_version": model_version, "score": score, "result": regions}]}
        )
    return tasks


__all__ = [
    "LABEL_STUDIO_CONFIG",
    "PredictedSpan",
    "Prediction",
    "annotated_squad_json",
    "check_spans",
    "label_studio_tasks",
    "squad_predictions",
    "with_silver_labels",
]
