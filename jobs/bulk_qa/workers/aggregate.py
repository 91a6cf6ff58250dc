"""
The aggregation stage: all work rows of one shard -> each question's answers, status and parsed replies,
committed to the output folder as the shard's tables. Returns the shard's completion marker.
"""

import dataclasses
import json
from collections import Counter, defaultdict
from typing import Any

import pyarrow as pa

from jobs.bulk_qa.workers.rows import CANDIDATE, PAIR, QUESTION, REPLIES, SEQUENCE, candidate_answer
from jobs.bulk_qa.workers.tables import (
    ANSWERS_SCHEMA,
    GENERATED_ANSWERS_SCHEMA,
    QUESTION_STATUSES,
    QUESTIONS_SCHEMA,
    answer_rows,
    generated_answer_rows,
)
from jobs.retrieval.retrieve import RANKER_FIELD, RETRIEVER_FIELDS
from jobs.storage import ShardStore
from qa_core.answer_builder import AnswerBuilder, AnswerBuilderSettings
from qa_core.answers import ExtractedAnswer
from qa_core.document import Document
from qa_core.refusal import RefusalSettings
from qa_core.selection import SelectionSettings, model_no_answer_score, no_answer_score, rank_answers

MARKER_SCHEMA = pa.schema([("shard", pa.int32()), ("marker", pa.string())])




def question_result(
    question: dict[str, Any], notes: list[dict[str, Any]], selection: SelectionSettings, refusal: RefusalSettings
) -> tuple[dict[str, Any], list[ExtractedAnswer]]:
    """
    One question's row of the questions table and its answers, from its `question` row and the notes and
    candidates of its documents (or retrieved passages, see `candidate_answers`). `best_answer` and `best_score`
    are the answer given: both set when the question is answered, both null otherwise (a refused question's best
    span stays in the answers table).

    :returns: The questions-table row and the answers.
    """
    query = question["query"]
    errors = [question["error"]] if question["error"] else []
    pairs = sorted((note for note in notes if note["kind"] == PAIR), key=lambda note: note["position"])
    unknown = [note["document_id"] for note in pairs if note["error"].startswith("unknown")]
    if unknown:
        errors.append(f"unknown document ids: {', '.join(map(repr, unknown))} (the known documents were read)")
    errors += [note["error"] for note in pairs if not note["error"].startswith("unknown")]
    sequences = [note for note in notes if note["kind"] == SEQUENCE]
    candidates = sorted(
        (note for note in notes if note["kind"] == CANDIDATE),
        key=lambda note: (note["position"], note["sequence_index"], note["rank"]),
    )
    answers, haystack_no_answer, model_no_answer = [], None, None
    if sequences:
        answers = rank_answers(query, candidate_answers(query, candidates, question.get("passage_ids")), selection)
        haystack_no_answer = next((answer.score for answer in answers if answer.data is None), None)
        if haystack_no_answer is None:
            haystack_no_answer = no_answer_score([answer.score for answer in answers])
        model_no_answer = model_no_answer_score(
            [note["null_logit"] for note in sequences], [note["best_logit"] for note in sequences]
        )
    best = next((answer for answer in answers if answer.data is not None), None)
    no_answer = refusal.no_answer(haystack_no_answer, model_no_answer)
    if errors:
        status = "error"
    elif not sequences:
        status = "no_documents"
    elif best is None or refusal.refused(best.score, no_answer):
        status = "refused"
    else:
        status = "answered"
    answered = status == "answered"
    row = {
        "question_id": question["question_id"],
        "query": query,
        "status": status,
        "best_answer": best.data if answered else None,
        "best_score": best.score if answered else None,
        "no_answer_score": haystack_no_answer,
        "model_no_answer_score": model_no_answer,
        "n_documents": len({note["position"] for note in sequences}),
        "n_sequences": len(sequences),
        "error": "; ".join(errors) or None,
        **retrieval_columns(question),
    }
    return row, answers


def candidate_answers(
    query: str, candidates: list[dict[str, Any]], passage_ids: list[str] | None
) -> list[ExtractedAnswer]:
    """
    A question's candidate rows as answers, in their (position, sequence, rank) order. Read in retrieved passages
    (`passage_ids`, by position; see `distinct_across_passages`), each names its passage in `meta["passage_id"]`.
    """
    answers = [candidate_answer(query, note) for note in candidates]
    if passage_ids is None:
        return answers
    return distinct_across_passages(
        [
            dataclasses.replace(answer, meta={**answer.meta, "passage_id": passage_ids[note["position"]]})
            for answer, note in zip(answers, candidates, strict=True)
        ]
    )


def distinct_across_passages(answers: list[ExtractedAnswer]) -> list[ExtractedAnswer]:
    """
    The answers without the copies of a span (same document, same offsets) found in another passage than the one
    where it scores highest (on equal scores, the first in the given order: the passage retrieved first). Passages
    of a document overlap by `split_overlap` words, so a span there is read twice; it is kept once, before the
    ranking cuts to `top_k`. Copies within one passage (its overlapping windows) are left to the ranking, as the
    reader leaves them.

    :param answers: In retrieval order, each with `meta["passage_id"]`.
    """
    best: dict[tuple[str, int, int], ExtractedAnswer] = {}
    for answer in answers:
        key = _span_key(answer)
        if key not in best or answer.score > best[key].score:
            best[key] = answer
    return [answer for answer in answers if answer.meta["passage_id"] == best[_span_key(answer)].meta["passage_id"]]


def _span_key(answer: ExtractedAnswer) -> tuple[str, int, int]:
    """The document and offsets of a span answer."""
    return answer.document.id, answer.document_offset.start, answer.document_offset.end


def retrieval_columns(question: dict[str, Any]) -> dict[str, Any]:
    """
    A question's retrieved documents, their passages (null unless split) and their scores, best first (all null
    when none were retrieved).
    """
    scores = question.get("retrieval_scores")
    retrieved = scores is not None
    return {
        "retrieved_document_ids": question["document_ids"] if retrieved else None,
        "retrieval_scores": scores,
        "retrieved_passage_ids": question.get("passage_ids") if retrieved else None,
        **{field.name: question.get(field.name) if retrieved else None for field in (*RETRIEVER_FIELDS, RANKER_FIELD)},
    }


def parse_replies(question: dict[str, Any], replies: dict[str, Any], builder: AnswerBuilder) -> list[dict[str, Any]]:
    """A question's generator replies parsed by AnswerBuilder, its documents (in document_ids order) as targets."""
    documents = [Document(content=None, id=document_id) for document_id in question["document_ids"] or []]
    answers = builder.run(
        query=question["query"] or "",
        replies=replies["replies"] or [],
        meta=parse_reply_meta(replies["reply_meta"]),
        documents=documents,
    )["answers"]
    return generated_answer_rows(question["question_id"], answers)


def aggregate_shard(
    group: pa.Table,
    selection: SelectionSettings,
    refusal: RefusalSettings,
    replies: AnswerBuilderSettings | None,
    output: str,
) -> pa.Table:
    """
    All work rows of one shard, and the notes of its pairs that could not be read (from the output folder) -> the
    shard's answers, questions and (with `replies` settings) generated_answers tables, committed to the output
    folder. Returns the shard's completion marker, as one row.
    """
    shard = group["shard"][0].as_py()
    tables, marker, _ = shard_results(group, selection, refusal, replies, output)
    return commit(output, shard, tables, marker)


def commit(output: str, shard: int, tables: dict[str, pa.Table], marker: dict[str, Any]) -> pa.Table:
    """Commits a shard's tables and marker to the output folder; returns the marker as one row."""
    ShardStore(output).commit_shard(shard, tables, marker)
    return pa.table({"shard": [shard], "marker": [json.dumps(marker, sort_keys=True)]}, schema=MARKER_SCHEMA)


def shard_results(
    group: pa.Table,
    selection: SelectionSettings,
    refusal: RefusalSettings,
    replies: AnswerBuilderSettings | None,
    output: str,
) -> tuple[dict[str, pa.Table], dict[str, Any], dict[str, tuple[dict[str, Any], list[ExtractedAnswer]]]]:
    """
    `aggregate_shard`'s tables and marker, not committed yet, and each question's row and answers by question id
    (for tables derived from them).
    """
    rows = group.to_pylist()
    shard = rows[0]["shard"]
    rows += ShardStore(output).read_pair_notes(shard)
    questions: dict[str, dict[str, Any]] = {}
    shard_replies: dict[str, dict[str, Any]] = {}
    notes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["kind"] == QUESTION:
            questions[row["question_id"]] = row
        elif row["kind"] == REPLIES:
            shard_replies[row["question_id"]] = row
        else:
            notes[row["question_id"]].append(row)
    builder = AnswerBuilder.from_settings(replies) if replies is not None else None
    question_rows, answers, generated = [], [], []
    results: dict[str, tuple[dict[str, Any], list[ExtractedAnswer]]] = {}
    workers: Counter[str] = Counter()
    for question_id in sorted(questions):
        question = questions[question_id]
        row, question_answers = question_result(question, notes[question_id], selection, refusal)
        results[question_id] = row, question_answers
        if question_id in shard_replies:
            try:
                generated += parse_replies(question, shard_replies[question_id], builder)
            except ValueError as error:
                earlier = [row["error"]] if row["error"] else []
                row.update(
                    status="error", best_answer=None, best_score=None, error="; ".join([*earlier, f"replies: {error}"])
                )
        question_rows.append(row)
        retrieved = retrieval_columns(question)
        scores = None
        if retrieved["retrieval_scores"] is not None:  # by passage when split, as the answers name them
            hits = retrieved["retrieved_passage_ids"] or retrieved["retrieved_document_ids"]
            scores = dict(zip(hits, retrieved["retrieval_scores"], strict=True))
        answers += answer_rows(question_id, question_answers, scores)
        workers.update(note["worker"] for note in notes[question_id] if note["kind"] == SEQUENCE)
    tables = {
        "questions": pa.Table.from_pylist(question_rows, schema=QUESTIONS_SCHEMA),
        "answers": pa.Table.from_pylist(answers, schema=ANSWERS_SCHEMA),
    }
    if replies is not None:
        tables["generated_answers"] = pa.Table.from_pylist(generated, schema=GENERATED_ANSWERS_SCHEMA)
    statuses = Counter(row["status"] for row in question_rows)
    marker = {
        "shard": shard,
        "questions": len(question_rows),
        "statuses": {status: statuses.get(status, 0) for status in QUESTION_STATUSES},
        "answers": len(answers),
        "generated_answers": len(generated),
        "sequences": sum(workers.values()),
        "workers": dict(workers),
        "replies_without_question": sorted(set(shard_replies) - set(questions)),
    }
    return tables, marker, results


def parse_reply_meta(values: list[str] | None) -> list[dict[str, Any]] | None:
    """Reply meta JSON strings as dicts (never evaluated otherwise). `None` when absent."""
    if values is None:
        return None
    parsed = [json.loads(value) if value else {} for value in values]
    if any(not isinstance(value, dict) for value in parsed):
        raise ValueError("each reply meta must be a JSON object")
    return parsed
