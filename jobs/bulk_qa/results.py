"""
The run's results in other tools' formats, written at the end of a run from the committed shards (so a resumed
run writes them complete): `predictions.json` and `na_probs.json` (the official SQuAD v2.0 evaluation script's
inputs), with gold answers `evaluation.json` (the official script's metrics) and `evaluation/` (per question
`exact` and `f1`), and for review `annotated.squad.json`, `label_studio.json` (least sure first, only the
`--review` N least sure with it; `qa_core.annotation.label_studio_tasks`) and its labelling config
`label_studio.xml`. The questions and answers tables are left as they are.

For a SQuAD input the annotated dataset is the input dataset; for Parquet questions and documents it is a SQuAD
v2.0 dataset built from them: each question with, as its context, the document of its best span (else its first
document with content), and only the spans in that document. Questions with no such document are left out. When
the index's passage stores served the run (`jobs.indexing.plan.reads_store`), those contexts are read from the
stores by id (`workers.fetch.read_contents`), not from the documents table, which the run then never joins.

Retrieval quality (recall@k and MRR of the retrieved documents, `qa_core.retrieval.quality`) is reported in
`evaluation.json`'s `retrieval` when there is gold for it: a questions table's `relevant_document_ids`, or with
`--pool-contexts` (`jobs.bulk_qa.pooled_contexts`) each question's own context. A pooled run's official metrics
score its end-to-end answers (retrieval, then reading), whichever document they come from; its annotated dataset
and Label Studio tasks keep each question's own context, with the spans found in it.
"""

import dataclasses
import hashlib
import json
from collections import defaultdict
from pathlib import PurePath
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from jobs.bulk_qa.config import WorkSettings
from jobs.bulk_qa.inputs import is_squad_style
from jobs.bulk_qa.output import OutputFolder
from jobs.bulk_qa.pooled_contexts import PooledContexts
from jobs.bulk_qa.squad_input import SquadInput
from jobs.bulk_qa.workers.fetch import read_contents, rows_with_ids
from jobs.storage import parquet_dataset
from jobs.table_schema import described_schema
from qa_core.annotation import (
    LABEL_STUDIO_CONFIG,
    UNREAD_NO_ANSWER_PROBABILITY,
    PredictedSpan,
    Prediction,
    annotated_squad_json,
    best_spans,
    label_studio_tasks,
    squad_predictions,
)
from qa_core.document import Document
from qa_core.evaluation import (
    apply_no_ans_threshold,
    evaluate,
    find_all_best_thresh,
    get_raw_scores,
    make_eval_dict,
)
from qa_core.retrieval.quality import retrieval_quality
from qa_core.squad import SquadDataset, SquadExample

EVALUATION_SCHEMA, EVALUATION_DESCRIPTIONS = described_schema(
    [
        ("question_id", pa.string(), "the question's id, as in the SQuAD data"),
        ("has_answer", pa.bool_(), "the question has gold answers (false: it is impossible)"),
        ("prediction", pa.string(), "the answer given, as in predictions.json (empty: refused, or nothing read)"),
        ("no_answer_probability", pa.float64(), "the no-answer score, as in na_probs.json"),
        ("exact", pa.float64(), "the official SQuAD script's per-question exact match (0 or 1)"),
        ("f1", pa.float64(), "the official SQuAD script's per-question token F1, in [0, 1]"),
    ]
)

# Each no-answer source's column in the questions table.
NO_ANSWER_COLUMNS = {"haystack": "no_answer_score", "model": "model_no_answer_score"}
_QUESTION_COLUMNS = ["question_id", "status", "best_answer", "best_score", *NO_ANSWER_COLUMNS.values()]
_ANSWER_COLUMNS = [
    "question_id",
    "rank",
    "answer",
    "score",
    "is_no_answer",
    "document_id",
    "document_start",
    "file_path",
    "answer_page_number",
]


def read_predictions(
    output: OutputFolder, shards: list[int], no_answer_source: str
) -> tuple[dict[str, Prediction], dict[str, list], dict[str, dict[str, float | None]]]:
    """
    Each question's prediction from the committed shards, with the no-answer score of `no_answer_source` and its
    spans with their offsets in their document; each question's span documents, best first (one id per span);
    and every source's no-answer scores by question id.
    """
    questions = output.read_shards("questions", shards, _QUESTION_COLUMNS).to_pydict()
    answers = output.read_shards("answers", shards, _ANSWER_COLUMNS)
    answers = answers.filter(pc.invert(answers["is_no_answer"])).sort_by(
        [("question_id", "ascending"), ("rank", "ascending")]
    )
    spans: dict[str, list[PredictedSpan]] = defaultdict(list)
    documents: dict[str, list[str]] = defaultdict(list)
    columns = answers.to_pydict()
    for qid, text, start, score, document_id, file_path, page in zip(
        columns["question_id"],
        columns["answer"],
        columns["document_start"],
        columns["score"],
        columns["document_id"],
        columns["file_path"],
        columns["answer_page_number"],
        strict=True,
    ):
        spans[qid].append(PredictedSpan(text, start, score, document_id, file_path, page))
        documents[qid].append(document_id)
    no_answer = {
        source: dict(zip(questions["question_id"], questions[column], strict=True))
        for source, column in NO_ANSWER_COLUMNS.items()
    }
    predictions = {
        qid: Prediction(status, answer, no_answer[no_answer_source][qid], spans.get(qid, []), answer_score)
        for qid, status, answer, answer_score in zip(
            questions["question_id"],
            questions["status"],
            questions["best_answer"],
            questions["best_score"],
            strict=True,
        )
    }
    return predictions, documents, no_answer


def write_results(
    output: OutputFolder,
    shards: list[int],
    squad: SquadInput | None,
    work: WorkSettings,
    no_answer_source: str,
    pooled: PooledContexts | None = None,
    model_version: str = "bulk-qa",
    review: int | None = None,
    stores: list[str] | None = None,
) -> dict[str, Any]:
    """
    Writes the run's result files (see the module's documentation); `na_probs.json` holds the no-answer scores of
    `no_answer_source`.

    :param pooled: The corpus of a `--pool-contexts` run: each question's own context is its relevant document.
    :param model_version: The Label Studio predictions' `model_version`: the model's fingerprint.
    :param review: `label_studio.json` holds only the `review` least sure questions (all when `None`).
    :param stores: The index's shard folders, when their passage stores served the run: the contexts are read
        from them.
    :returns: What the manifest records of them: the files written, with gold the dataset's summary and the
        official metrics (`evaluation`), with gold for retrieval its recall and MRR (`retrieval_quality`).
    """
    predictions, span_documents, no_answer = read_predictions(output, shards, no_answer_source)
    answers, na_probs = squad_predictions(predictions)
    output.write_file(_json(answers), "predictions.json")
    output.write_file(_json(na_probs), "na_probs.json")
    written = ["predictions.json", "na_probs.json"]
    results: dict[str, Any] = {}
    # A SQuAD input read closed names its contexts: nothing is retrieved.
    quality = retrieval_gold_quality(output, shards, work, pooled) if squad is None or pooled is not None else None
    metrics: dict[str, Any] = {}
    if squad is not None:
        dataset = squad.dataset
        results["gold"] = squad.gold_summary()
        if dataset.has_gold:
            scored = evaluate(dataset, answers, na_probs)
            metrics = {
                **scored["metrics"],
                "no_answer_sources": compare_no_answer_sources(dataset, predictions, no_answer),
            }
            output.write_file(
                _parquet(_evaluation_table(dataset, answers, na_probs, scored)), "evaluation", "part-00000.parquet"
            )
            written.append("evaluation/")
            results["evaluation"] = dict(metrics)
        if pooled is not None:  # the annotated files show each question's own context
            predictions = own_context_predictions(dataset, predictions, span_documents)
    else:
        dataset, predictions = dataset_from_tables(work, predictions, span_documents, pooled is not None, stores)
    if quality is not None:
        metrics["retrieval"] = quality
        results["retrieval_quality"] = quality
    if metrics:
        output.write_file(_json(metrics, indent=2), "evaluation.json")
        written.append("evaluation.json")
    output.write_file(_json(annotated_squad_json(dataset, predictions)), "annotated.squad.json")
    tasks = label_studio_tasks(dataset, predictions, model_version, review)
    output.write_file(_json(tasks), "label_studio.json")
    output.write_file(LABEL_STUDIO_CONFIG.encode("utf-8"), "label_studio.xml")
    written += ["annotated.squad.json", "label_studio.json", "label_studio.xml"]
    results["result_files"] = written
    return results


def model_version(model: str, fingerprint: dict[str, Any]) -> str:
    """
    The Label Studio predictions' `model_version`: the model's name (a folder's own name, or the hub id) and the
    first 12 hex digits of the sha256 of its fingerprint (`qa_core.models.model_fingerprint`, as canonical JSON),
    so that predictions of changed weights are told apart.
    """
    digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode("utf-8")).hexdigest()
    return f"{PurePath(model).name or model}@{digest[:12]}"


def compare_no_answer_sources(
    dataset: SquadDataset, predictions: dict[str, Prediction], no_answer: dict[str, dict[str, float | None]]
) -> dict[str, dict[str, float]]:
    """
    For each no-answer source, how well it refuses: with each question's best span given unless its no-answer
    score is above a threshold, the official `best_exact` / `best_f1` and their thresholds, and `HasAns_f1` /
    `NoAns_f1` at `best_f1_thresh` (each only when such questions exist).
    """
    spans = best_spans(dataset, predictions)
    gold = {example.id: [answer.text for answer in example.answers] for example in dataset.examples}
    has_answer = {qid: bool(answers) for qid, answers in gold.items()}
    exact_raw, f1_raw = get_raw_scores(gold, spans, dataset.version)  # once: only the thresholds differ
    compared = {}
    for source, scores in no_answer.items():
        na_probs = {qid: UNREAD_NO_ANSWER_PROBABILITY if scores[qid] is None else scores[qid] for qid in gold}
        compared[source] = find_all_best_thresh(spans, exact_raw, f1_raw, na_probs, has_answer)
        f1 = apply_no_ans_threshold(f1_raw, na_probs, has_answer, compared[source]["best_f1_thresh"])
        for prefix, wanted in (("HasAns", True), ("NoAns", False)):
            qids = [qid for qid, has in has_answer.items() if has is wanted]
            if qids:
                compared[source][f"{prefix}_f1"] = make_eval_dict(f1, f1, qids)["f1"]
    return compared


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


RELEVANT_COLUMN = "relevant_document_ids"  # gold for retrieval in a questions table: each question's relevant documents


def retrieval_gold_quality(
    output: OutputFolder, shards: list[int], work: WorkSettings, pooled: PooledContexts | None = None
) -> dict[str, Any] | None:
    """
    The retrieval's recall@k and MRR (`qa_core.retrieval.quality`) over the questions retrieved for, against
    gold: with `pooled` (a `--pool-contexts` run) each question's own context, else the questions table's
    `relevant_document_ids` column (list of document ids); None without either.
    """
    if pooled is not None:
        relevant = pooled.relevant
    elif RELEVANT_COLUMN not in parquet_dataset(work.questions).schema.names:
        return None
    else:
        gold = parquet_dataset(work.questions).to_table(columns=["id", RELEVANT_COLUMN]).to_pydict()
        relevant = {qid: ids for qid, ids in zip(gold["id"], gold[RELEVANT_COLUMN], strict=True) if ids}
    questions = output.read_shards("questions", shards, ["question_id", "retrieved_document_ids"]).to_pydict()
    retrieved = {
        qid: ids
        for qid, ids in zip(questions["question_id"], questions["retrieved_document_ids"], strict=True)
        if ids is not None
    }
    return retrieval_quality(retrieved, relevant)


def own_context_predictions(
    dataset: SquadDataset, predictions: dict[str, Prediction], span_documents: dict[str, list[str]]
) -> dict[str, Prediction]:
    """
    A `--pool-contexts` run's predictions with only the spans found in each question's own context (a span of
    another retrieved document does not index it).
    """
    kept = {}
    for example in dataset.examples:
        own = Document(content=example.context).id
        prediction = predictions[example.id]
        spans = [
            span for span, key in zip(prediction.spans, span_documents.get(example.id, []), strict=True) if key == own
        ]
        kept[example.id] = dataclasses.replace(prediction, spans=spans)
    return kept


def dataset_from_tables(
    work: WorkSettings,
    predictions: dict[str, Prediction],
    span_documents: dict[str, list[str]],
    pooled: bool = False,
    stores: list[str] | None = None,
) -> tuple[SquadDataset, dict[str, Prediction]]:
    """
    An unlabelled SQuAD v2.0 dataset from the run's Parquet questions (with a `context` column, or with documents),
    and the predictions with only the spans in each question's context (see the module's documentation; with
    `pooled`, a `--pool-contexts` run, the spans of other retrieved documents are left out). With `stores` (the
    index's shard folders, whose passage stores served the run) the contexts are read from them, else from the
    documents table.
    """
    names = parquet_dataset(work.questions).schema.names
    with_context = is_squad_style(names)
    # Questions retrieved for have no document_ids: their span's document is their context.
    columns = ["id", "query", *[name for name in ("context" if with_context else "document_ids",) if name in names]]
    questions = parquet_dataset(work.questions).to_table(columns=columns).to_pydict()
    if with_context:
        contexts = dict(zip(questions["id"], questions["context"], strict=True))
        chosen = {
            qid: (Document(content=context).id if pooled else None, context)
            for qid, context in contexts.items()
            if context
        }
    else:
        listed = questions.get("document_ids", [None] * len(questions["id"]))
        candidates = {
            qid: list(dict.fromkeys([*span_documents.get(qid, [])[:1], *(document_ids or [])]))
            for qid, document_ids in zip(questions["id"], listed, strict=True)
        }
        needed = sorted({document_id for ids in candidates.values() for document_id in ids})
        contents = read_contents(stores, needed) if stores is not None else _document_contents(work.documents, needed)
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


def _document_contents(documents: str, ids: list[str]) -> dict[str, str]:
    """The contents of the documents with these ids, by id, from the documents table (those with content only)."""
    return {row["id"]: row["content"] for row in rows_with_ids(documents, ids) if row["content"]}


def _json(value: Any, indent: int | None = None) -> bytes:
    return json.dumps(value, ensure_ascii=False, indent=indent).encode("utf-8")


def _parquet(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()
