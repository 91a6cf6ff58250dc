"""
The aggregation stage: all work rows of one shard -> each question's answers, status and parsed replies,
committed to the output folder as the shard's tables. Returns the shard's completion marker.
"""

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from jobs.bulk_qa.workers.rows import CANDIDATE, PAIR, QUESTION, REPLIES, SEQUENCE, candidate_answer
from jobs.bulk_qa.workers.storage import ShardStore
from jobs.bulk_qa.workers.tables import (
    ANSWERS_SCHEMA,
    GENERATED_ANSWERS_SCHEMA,
    QUESTION_STATUSES,
    QUESTIONS_SCHEMA,
    answer_rows,
    generated_answer_rows,
)
from qa_core.answer_builder import AnswerBuilder, AnswerBuilderSettings
from qa_core.answers import ExtractedAnswer
from qa_core.document import Document
from qa_core.selection import SelectionSettings, no_answer_score, rank_answers
from qa_core.settings import Settings, within

MARKER_SCHEMA = pa.schema([("shard", pa.int32()), ("marker", pa.string())])


@dataclass(frozen=True)
class RefusalSettings(Settings):
    """When a question counts as refused rather than answered (the answers table keeps every answer either way)."""

    refusal_threshold: float | None = None  # refuse when no-answer score >= this; None: when it beats the best answer

    def problems(self) -> list[str]:
        return within("refusal_threshold", self.refusal_threshold, 0, 1)

    def refused(self, best_score: float, no_answer: float) -> bool:
        """Default: refused when no answer is likelier than the best answer; with a threshold: when it reaches it."""
        if self.refusal_threshold is None:
            return no_answer > best_score
        return no_answer >= self.refusal_threshold


def question_result(
    question: dict[str, Any], notes: list[dict[str, Any]], selection: SelectionSettings, refusal: RefusalSettings
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
        answers = rank_answers(query, [candidate_answer(query, note) for note in candidates], selection)
    best = next((answer for answer in answers if answer.data is not None), None)
    no_answer = next((answer.score for answer in answers if answer.data is None), None)
    if no_answer is None and sequences:
        no_answer = no_answer_score([answer.score for answer in answers])
    if errors:
        status = "error"
    elif not sequences:
        status = "no_documents"
    elif best is None or refusal.refused(best.score, no_answer):
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
        **retrieval_columns(question),
    }
    return row, answers


def retrieval_columns(question: dict[str, Any]) -> dict[str, Any]:
    """A question's retrieved documents and their scores, best first (both null when none were retrieved)."""
    scores = question.get("retrieval_scores")
    return {"retrieved_document_ids": None if scores is None else question["document_ids"], "retrieval_scores": scores}


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
    All work rows of one shard -> the shard's answers, questions and (with `replies` settings) generated_answers
    tables, committed to the output folder. Returns the shard's completion marker, as one row.
    """
    rows = group.to_pylist()
    shard = rows[0]["shard"]
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
    workers: Counter[str] = Counter()
    for question_id in sorted(questions):
        question = questions[question_id]
        row, question_answers = question_result(question, notes[question_id], selection, refusal)
        if question_id in shard_replies:
            try:
                generated += parse_replies(question, shard_replies[question_id], builder)
            except ValueError as error:
                earlier = [row["error"]] if row["error"] else []
                row.update(status="error", best_answer=None, error="; ".join([*earlier, f"replies: {error}"]))
        question_rows.append(row)
        retrieved = retrieval_columns(question)
        scores = None
        if retrieved["retrieval_scores"] is not None:
            scores = dict(zip(retrieved["retrieved_document_ids"], retrieved["retrieval_scores"], strict=True))
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
    ShardStore(output).commit_shard(shard, tables, marker)
    return pa.table({"shard": [shard], "marker": [json.dumps(marker, sort_keys=True)]}, schema=MARKER_SCHEMA)


def parse_reply_meta(values: list[str] | None) -> list[dict[str, Any]] | None:
    """Reply meta JSON strings as dicts (never evaluated otherwise). `None` when absent."""
    if values is None:
        return None
    parsed = [json.loads(value) if value else {} for value in values]
    if any(not isinstance(value, dict) for value in parsed):
        raise ValueError("each reply meta must be a JSON object")
    return parsed
