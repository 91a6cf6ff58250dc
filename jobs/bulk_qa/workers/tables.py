"""The job's output tables: their names, Arrow schemas and statuses, and answers turned into their rows."""

import json
from typing import Any

import pyarrow as pa

from jobs.retrieval.retrieve import RANKER_COLUMN, RETRIEVER_COLUMNS
from jobs.table_schema import described_schema
from qa_core.answers import ExtractedAnswer, GeneratedAnswer

TABLES = ("answers", "questions", "generated_answers", "by_document")  # by_document: --every-document

ANSWERS_SCHEMA, ANSWERS_DESCRIPTIONS = described_schema(
    [
        ("question_id", pa.string(), "the question's id, as in the input"),
        ("query", pa.string(), "the question's text"),
        ("rank", pa.int32(), "1-based position in the question's answer list, the no-answer row included"),
        ("answer", pa.string(), "the answer's text; null for the no-answer row"),
        ("score", pa.float64(), "sigmoid(calibration_factor * (start + end logits)); no-answer row: prod(1 - score)"),
        ("is_no_answer", pa.bool_(), "true for the no-answer row"),
        ("document_id", pa.string(), "the document the answer was read in (a retrieved passage's source)"),
        ("document_start", pa.int64(), "character offset of the answer's start in the document (a passage's source)"),
        ("document_end", pa.int64(), "its end, exclusive: content[document_start:document_end] is the answer"),
        (
            "context",
            pa.string(),
            "text around the answer, context_window_size characters (the job's default: 200); null for the no-answer "
            "row or when context_window_size is none",
        ),
        ("context_start", pa.int64(), "character offset of the answer's start inside the context"),
        ("context_end", pa.int64(), "its end inside the context, exclusive"),
        ("answer_page_number", pa.int64(), "the document's page_number plus the form feeds before the answer"),
        (
            "retrieval_score",
            pa.float64(),
            "the retrieval score of the answer's document (or passage): BM25's (bm25), the embedding similarity "
            "(dense) or the joined score (hybrid); null if not retrieved",
        ),
        ("passage_id", pa.string(), "the retrieved passage the answer was read in (with split_length); else null"),
        ("file_path", pa.string(), "the file the answer's document came from (documents' file_path); else null"),
    ]
)

QUESTION_STATUSES = ("answered", "refused", "no_documents", "error")

QUESTIONS_SCHEMA, QUESTIONS_DESCRIPTIONS = described_schema(
    [
        ("question_id", pa.string(), "the question's id, as in the input"),
        ("query", pa.string(), "the question's text"),
        ("status", pa.string(), f"one of {', '.join(QUESTION_STATUSES)}"),
        ("best_answer", pa.string(), "the answer given: null unless answered"),
        ("best_score", pa.float64(), "its score: null unless answered"),
        (
            "no_answer_score",
            pa.float64(),
            "Haystack's no-answer score, prod(1 - score) of the kept answers; null when nothing was read",
        ),
        (
            "model_no_answer_score",
            pa.float64(),
            "the model's null span against its best span, sigmoid(min null - max best logit sums); null when nothing "
            "was read",
        ),
        ("n_documents", pa.int32(), "documents read (known, with content)"),
        ("n_sequences", pa.int32(), "model sequences their text made"),
        ("error", pa.string(), "why the question's status is error (or its replies could not be parsed); else null"),
        (
            "retrieved_document_ids",
            pa.list_(pa.string()),
            "the retrieved documents, best first; null if not retrieved for",
        ),
        (
            "retrieval_scores",
            pa.list_(pa.float64()),
            "their scores: BM25's (bm25), the embedding similarity (dense) or the joined score (hybrid)",
        ),
        ("retrieved_passage_ids", pa.list_(pa.string()), "with split_length: the passages retrieved; else null"),
        *RETRIEVER_COLUMNS,
        RANKER_COLUMN,
    ]
)

GENERATED_ANSWERS_SCHEMA, GENERATED_ANSWERS_DESCRIPTIONS = described_schema(
    [
        ("question_id", pa.string(), "the question the reply answers"),
        ("reply_index", pa.int32(), "the reply's position in the question's replies, from 0"),
        ("answer", pa.string(), "the answer parsed out of the reply (answer_pattern), or the whole reply"),
        (
            "referenced_document_ids",
            pa.list_(pa.string()),
            "its documents: those the reply references, or all of the question's (AnswerBuilder)",
        ),
        ("source_indices", pa.list_(pa.int32()), "their 1-based positions in the question's document_ids"),
        ("meta", pa.string(), "the reply's meta, with the parsing's own keys, as JSON"),
    ]
)


def answer_rows(
    question_id: str, answers: list[ExtractedAnswer], retrieval_scores: dict[str, float] | None = None
) -> list[dict[str, Any]]:
    """
    One `ANSWERS_SCHEMA` row per answer, ranked in list order.

    :param retrieval_scores: The retrieval score of each retrieved document (passage, when split: the answers
        name theirs in `meta["passage_id"]`), by id (None: nothing was retrieved).
    """
    retrieval_scores = retrieval_scores or {}
    rows = []
    for rank, answer in enumerate(answers, start=1):
        document_offset, context_offset = answer.document_offset, answer.context_offset
        document_id = answer.document.id if answer.document is not None else None
        passage_id = answer.meta.get("passage_id")
        rows.append(
            {
                "question_id": question_id,
                "query": answer.query,
                "rank": rank,
                "answer": answer.data,
                "score": answer.score,
                "is_no_answer": answer.data is None,
                "document_id": document_id,
                "document_start": document_offset.start if document_offset else None,
                "document_end": document_offset.end if document_offset else None,
                "context": answer.context,
                "context_start": context_offset.start if context_offset else None,
                "context_end": context_offset.end if context_offset else None,
                "answer_page_number": answer.meta.get("answer_page_number"),
                "retrieval_score": retrieval_scores.get(passage_id or document_id),
                "passage_id": passage_id,
                "file_path": answer.meta.get("file_path"),
            }
        )
    return rows


def generated_answer_rows(question_id: str, answers: list[GeneratedAnswer]) -> list[dict[str, Any]]:
    """One `GENERATED_ANSWERS_SCHEMA` row per parsed reply."""
    rows = []
    for index, answer in enumerate(answers):
        meta = {key: value for key, value in answer.meta.items() if key != "all_messages"}
        rows.append(
            {
                "question_id": question_id,
                "reply_index": index,
                "answer": answer.data,
                "referenced_document_ids": [document.id for document in answer.documents],
                "source_indices": [document.meta["source_index"] for document in answer.documents],
                "meta": json.dumps(meta, sort_keys=True, default=str),
            }
        )
    return rows
