"""
The run's results in other tools' formats, written at the end of a run from the committed shards (so a resumed
run writes them complete): `predictions.json` and `na_probs.json` (the official SQuAD v2.0 evaluation script's
inputs), with gold answers `evaluation.json` (the official script's metrics) and `evaluation/` (per question
`exact` and `f1`), and for review `annotated.squad.json`, `label_studio.json` and its labelling config
`label_studio.xml`. The questions and answers tables are left as they are.

For a SQuAD input the annotated dataset is the input dataset; for Parquet questions and documents it is a SQuAD
v2.0 dataset built from them: each question with, as its context, the document of its best span (else its first
document with content), and only the spans in that document. Questions with no such document are left out.
"""

import dataclasses
import json
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from jobs.bulk_qa.config import WorkSettings
from jobs.bulk_qa.output import OutputFolder
from jobs.bulk_qa.squad_input import SquadInput
from jobs.bulk_qa.workers.storage import resolve_path
from qa_core.annotation import (
    LABEL_STUDIO_CONFIG,
    PredictedSpan,
    Prediction,
    annotated_squad_json,
    label_studio_tasks,
    squad_predictions,
)
from qa_core.evaluation import evaluate
from qa_core.squad import SquadDataset, SquadExample

EVALUATION_SCHEMA = pa.schema(
    [
        ("question_id", pa.string()),
        ("has_answer", pa.bool_()),  # the question has gold answers (False: impossible)
        ("prediction", pa.string()),  # as in predictions.json
        ("no_answer_probability", pa.float64()),  # as in na_probs.json
        ("exact", pa.float64()),  # the official script's per-question exact match (0 or 1)
        ("f1", pa.float64()),  # and token F1, in [0, 1]
    ]
)

_QUESTION_COLUMNS = ["question_id", "status", "best_answer", "no_answer_score"]
_ANSWER_COLUMNS = ["question_id", "rank", "answer", "score", "is_no_answer", "document_id", "document_start"]


def read_predictions(output: OutputFolder, shards: list[int]) -> tuple[dict[str, Prediction], dict[str, list]]:
    """
    Each question's prediction from the committed shards, its spans with their offsets in their document; and
    each question's span documents, best first (one id per span).
    """
    questions = output.read_shards("questions", shards, _QUESTION_COLUMNS).to_pydict()
    answers = output.read_shards("answers", shards, _ANSWER_COLUMNS)
    answers = answers.filter(pc.invert(answers["is_no_answer"])).sort_by(
        [("question_id", "ascending"), ("rank", "ascending")]
    )
    spans: dict[str, list[PredictedSpan]] = defaultdict(list)
    documents: dict[str, list[str]] = defaultdict(list)
    columns = answers.to_pydict()
    for qid, text, start, score, document_id in zip(
        columns["question_id"],
        columns["answer"],
        columns["document_start"],
        columns["score"],
        columns["document_id"],
        strict=True,
    ):
        spans[qid].append(PredictedSpan(text, start, score))
        documents[qid].append(document_id)
    predictions = {
        qid: Prediction(status, answer, no_answer, spans.get(qid, []))
        for qid, status, answer, no_answer in zip(
            questions["question_id"],
            questions["status"],
            questions["best_answer"],
            questions["no_answer_score"],
            strict=True,
        )
    }
    return predictions, documents


def write_results(
    output: OutputFolder, shards: list[int], squad: SquadInput | None, work: WorkSettings
) -> dict[str, Any]:
    """
    Writes the run's result files (see the module's documentation).

    :returns: What the manifest records of them: the files written, with gold the dataset's summary and the
        official metrics (`evaluation`).
    """
    predictions, span_documents = read_predictions(output, shards)
    answers, na_probs = squad_predictions(predictions)
    output.write_file(_json(answers), "predictions.json")
    output.write_file(_json(na_probs), "na_probs.json")
    written = ["predictions.json", "na_probs.json"]
    results: dict[str, Any] = {}
    if squad is not None:
        dataset = squad.dataset
        results["gold"] = squad.gold_summary()
        if dataset.has_gold:
            scored = evaluate(dataset, answers, na_probs)
            output.write_file(_json(scored["metrics"], indent=2), "evaluation.json")
            output.write_file(
                _parquet(_evaluation_table(dataset, answers, na_probs, scored)), "evaluation", "part-00000.parquet"
            )
            written += ["evaluation.json", "evaluation/"]
            results["evaluation"] = scored["metrics"]
    else:
        dataset, predictions = dataset_from_tables(work, predictions, span_documents)
    output.write_file(_json(annotated_squad_json(dataset, predictions)), "annotated.squad.json")
    output.write_file(_json(label_studio_tasks(dataset, predictions)), "label_studio.json")
    output.write_file(LABEL_STUDIO_CONFIG.encode("utf-8"), "label_studio.xml")
    written += ["annotated.squad.json", "label_studio.json", "label_studio.xml"]
    results["result_files"] = written
    return results


def _evaluation_table(
    dataset: SquadDataset, answers: dict[str, str], na_probs: dict[str, float], scored: dict[str, Any]
) -> pa.Table:
    ids = [example.id for example in dataset.examples]
    return pa.table(
        {
            "question_id": ids,
            "has_answer": [bool(example.answers) for example in dataset.examples],
            "prediction": [answers[qid] for qid in ids],
            "no_answer_probability": [na_probs[qid] for qid in ids],
            "exact": [float(scored["exact"][qid]) for qid in ids],
            "f1": [float(scored["f1"][qid]) for qid in ids],
        },
        schema=EVALUATION_SCHEMA,
    )


def dataset_from_tables(
    work: WorkSettings, predictions: dict[str, Prediction], span_documents: dict[str, list[str]]
) -> tuple[SquadDataset, dict[str, Prediction]]:
    """
    An unlabelled SQuAD v2.0 dataset from the run's Parquet questions (with a `context` column, or with documents),
    and the predictions with only the spans in each question's context (see the module's documentation).
    """
    names = _parquet_dataset(work.questions).schema.names
    with_context = "context" in names
    # Questions retrieved for have no document_ids: their span's document is their context.
    columns = ["id", "query", *[name for name in ("context" if with_context else "document_ids",) if name in names]]
    questions = _parquet_dataset(work.questions).to_table(columns=columns).to_pydict()
    if with_context:
        contexts = dict(zip(questions["id"], questions["context"], strict=True))
        chosen = {qid: (None, context) for qid, context in contexts.items() if context}
    else:
        listed = questions.get("document_ids", [None] * len(questions["id"]))
        candidates = {
            qid: list(dict.fromkeys([*span_documents.get(qid, [])[:1], *(document_ids or [])]))
            for qid, document_ids in zip(questions["id"], listed, strict=True)
        }
        needed = sorted({document_id for ids in candidates.values() for document_id in ids})
        documents = _parquet_dataset(work.documents).to_table(
            columns=["id", "content"], filter=pc.field("id").isin(needed)
        )
        contents = {key: text for key, text in zip(*documents.to_pydict().values(), strict=True) if text}
        chosen = {}
        for qid, ids in candidates.items():
            document_id = next((key for key in ids if key in contents), None)
            if document_id is not None:
                chosen[qid] = (document_id, contents[document_id])
    examples, kept = [], {}
    for qid, query in zip(questions["id"], questions["query"], strict=True):
        if qid not in chosen or not (query or "").strip():
            continue
        document_id, context = chosen[qid]
        prediction = predictions[qid]
        documents_of_spans = span_documents.get(qid, [])
        spans = [
            span
            for span, key in zip(prediction.spans, documents_of_spans, strict=True)
            if document_id is None or key == document_id
        ]
        examples.append(SquadExample(id=qid, title=document_id, question=query, context=context))
        kept[qid] = dataclasses.replace(prediction, spans=spans)
    return SquadDataset(examples=examples, version="2.0", has_gold=False), kept


def _parquet_dataset(path: str) -> pads.Dataset:
    filesystem, inner = resolve_path(path)
    return pads.dataset(inner, filesystem=filesystem, format="parquet")


def _json(value: Any, indent: int | None = None) -> bytes:
    return json.dumps(value, ensure_ascii=False, indent=indent).encode("utf-8")


def _parquet(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()
