"""
The aggregation stage: all work rows of one shard -> each question's answers, status and parsed replies,
committed to the output folder as the shard's tables. Returns one summary row per shard.
"""

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from jobs.output import OutputFolder
from jobs.rows import CANDIDATE, PAIR, QUESTION, REPLIES, SEQUENCE
from qa_core.answer_builder import AnswerBuilder
from qa_core.answers import ExtractedAnswer
from qa_core.document import Document
from qa_core.schemas import (
    ANSWERS_SCHEMA,
    GENERATED_ANSWERS_SCHEMA,
    QUESTION_STATUSES,
    QUESTIONS_SCHEMA,
    answer_rows,
    generated_answer_rows,
)
from qa_core.selection import rank_answers

SUMMARY_SCHEMA = pa.schema([("shard", pa.int32()), ("marker", pa.string())])


@dataclass
class AggregationSettings:
    """What the aggregation needs of the job's configuration."""

    top_k: int
    overlap_threshold: float | None
    no_answer: bool
    score_threshold: float | None
    refusal_threshold: float | None
    answer_builder: dict[str, Any]  # AnswerBuilder constructor arguments
    with_replies: bool


def question_result(
    question: dict[str, Any], notes: list[dict[str, Any]], settings: AggregationSettings
) -> tuple[dict[str, Any], list[ExtractedAnswer]]:
    """
    One question's row of the questions table and its answers, from its `question` row and the notes and
    candidates of its documents.

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
    answers = []
    if sequences:
        answers = rank_answers(
            query,
            [candidate_answer(query, note) for note in candidates],
            settings.top_k,
            settings.overlap_threshold,
            settings.no_answer,
            settings.score_threshold,
        )
    best = next((answer for answer in answers if answer.data is not None), None)
    no_answer = next((answer.score for answer in answers if answer.data is None), None)
    if no_answer is None and sequences:
        no_answer = 1.0
        for answer in answers:
            no_answer *= 1 - answer.score
    if errors:
        status = "error"
    elif not sequences:
        status = "no_documents"
    elif best is None or _refused(best.score, no_answer, settings.refusal_threshold):
        status = "refused"
    else:
        status = "answered"
    row = {
        "question_id": question["question_id"],
        "query": query,
        "status": status,
        "best_answer": best.data if best is not None and status == "answered" else None,
        "best_score": best.score if best is not None else None,
        "no_answer_score": no_answer,
        "n_documents": len({note["position"] for note in sequences}),
        "n_sequences": len(sequences),
        "error": "; ".join(errors) or None,
    }
    return row, answers


def _refused(best_score: float, no_answer_score: float, refusal_threshold: float | None) -> bool:
    """Default: refuse when no answer is likelier than the best answer; with a threshold: when it reaches it."""
    if refusal_threshold is None:
        return no_answer_score > best_score
    return no_answer_score >= refusal_threshold


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


def aggregate_shard(group: pa.Table, settings: AggregationSettings, output: str) -> pa.Table:
    """
    All work rows of one shard -> the shard's answers, questions and generated_answers tables, committed to the
    output folder. Returns the shard's summary (its completion marker).
    """
    rows = group.to_pylist()
    shard = rows[0]["shard"]
    questions: dict[str, dict[str, Any]] = {}
    replies: dict[str, dict[str, Any]] = {}
    notes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["kind"] == QUESTION:
            questions[row["question_id"]] = row
        elif row["kind"] == REPLIES:
            replies[row["question_id"]] = row
        else:
            notes[row["question_id"]].append(row)
    builder = AnswerBuilder(**settings.answer_builder)
    question_rows, answers, generated = [], [], []
    workers: Counter[str] = Counter()
    for question_id in sorted(questions):
        question = questions[question_id]
        row, question_answers = question_result(question, notes[question_id], settings)
        if question_id in replies:
            try:
                generated += parse_replies(question, replies[question_id], builder)
            except ValueError as error:
                earlier = [row["error"]] if row["error"] else []
                row.update(status="error", best_answer=None, error="; ".join([*earlier, f"replies: {error}"]))
        question_rows.append(row)
        answers += answer_rows(question_id, question_answers)
        workers.update(note["worker"] for note in notes[question_id] if note["kind"] == SEQUENCE)
    tables = {
        "questions": pa.Table.from_pylist(question_rows, schema=QUESTIONS_SCHEMA),
        "answers": pa.Table.from_pylist(answers, schema=ANSWERS_SCHEMA),
    }
    if settings.with_replies:
        tables["generated_answers"] = pa.Table.from_pylist(generated, schema=GENERATED_ANSWERS_SCHEMA)
    statuses = Counter(row["status"] for row in question_rows)
    marker = {
        "questions": len(question_rows),
        "statuses": {status: statuses.get(status, 0) for status in QUESTION_STATUSES},
        "answers": len(answers),
        "generated_answers": len(generated),
        "sequences": sum(workers.values()),
        "workers": dict(workers),
        "replies_without_question": sorted(set(replies) - set(questions)),
    }
    OutputFolder(output).commit_shard(shard, tables, marker)
    return pa.table({"shard": [shard], "marker": [json.dumps(marker)]}, schema=SUMMARY_SCHEMA)


def candidate_answer(query: str, row: dict[str, Any]) -> ExtractedAnswer:
    """A candidate row back as the answer it was made from."""
    context_offset = None
    if row["context_start"] is not None:
        context_offset = ExtractedAnswer.Span(row["start"] - row["context_start"], row["end"] - row["context_start"])
    page = row["answer_page_number"]
    return ExtractedAnswer(
        query=query,
        score=row["score"],
        data=row["answer"],
        document=Document(content=None, id=row["document_id"]),
        context=row["context"],
        document_offset=ExtractedAnswer.Span(row["start"], row["end"]),
        context_offset=context_offset,
        meta={} if page is None else {"answer_page_number": page},
    )


def parse_reply_meta(values: list[str] | None) -> list[dict[str, Any]] | None:
    """Reply meta JSON strings as dicts (never evaluated otherwise). `None` when absent."""
    if values is None:
        return None
    parsed = [json.loads(value) if value else {} for value in values]
    if any(not isinstance(value, dict) for value in parsed):
        raise ValueError("each reply meta must be a JSON object")
    return parsed
