"""
Per-query answer selection, shared by the in-process reader and the Ray job's aggregation:
rank candidates by score, drop overlapping duplicates, cut to `top_k`, add the no-answer score, apply a threshold.
Also the answers' details that need the document's text: answer text, page number and context window.
"""

from __future__ import annotations

import logging
import math
from bisect import bisect_left
from collections.abc import Hashable
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from qa_core.answers import ExtractedAnswer
from qa_core.document import Document
from qa_core.settings import Settings, at_least, setting, within

if TYPE_CHECKING:  # spans.py imports torch, which the Ray job's aggregation tasks do without
    from qa_core.spans import SequenceSpans

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SelectionSettings(Settings):
    """How one query's candidate spans become its answers."""

    top_k: int = setting(20, "answers per question, plus the no-answer row")
    score_threshold: float | None = setting(None, "keep answers scoring at least this")
    overlap_threshold: float | None = setting(0.01, "de-duplicate answers overlapping more than this; None keeps all")
    no_answer: bool = setting(True, "add the no-answer row")
    context_window_size: int | None = setting(None, "characters of context around each answer; None: no context")

    def problems(self) -> list[str]:
        return [
            *at_least("top_k", self.top_k, 1),
            *within("score_threshold", self.score_threshold, 0, 1),
            *within("overlap_threshold", self.overlap_threshold, 0, 1),
            *at_least("context_window_size", self.context_window_size, 0, optional=True),
        ]


@dataclass
class SpanCandidate:
    """A candidate span: the key of its document (its id) and its character offsets there."""

    document_key: Hashable | None
    start: int | None
    end: int | None


def overlap_length(start1: int, end1: int, start2: int, end2: int) -> int:
    """Number of characters two spans `[start, end)` share."""
    if start1 <= end2 and start2 <= end1:
        return min(end1 - start1, end1 - start2, end2 - start1, end2 - start2)
    return 0


def is_duplicate(candidate: SpanCandidate, kept: Seq[SpanCandidate], overlap_threshold: float) -> bool:
    """
    True when the candidate overlaps a kept span of the same document by more than `overlap_threshold`
    of either span's length. Spans without a document or offsets are never duplicates.
    """
    if candidate.document_key is None or candidate.start is None or candidate.end is None:
        return False
    for other in kept:
        if other.document_key != candidate.document_key or other.start is None or other.end is None:
            continue
        overlap = overlap_length(other.start, other.end, candidate.start, candidate.end)
        if overlap == 0:
            continue
        if overlap / (other.end - other.start) > overlap_threshold or overlap / (candidate.end - candidate.start) > (
            overlap_threshold
        ):
            return True
    return False


def select_spans(
    candidates: Seq[SpanCandidate], scores: Seq[float], top_k: int | None, overlap_threshold: float | None
) -> list[int]:
    """
    Ranks candidates by score (descending, stable), drops overlapping duplicates and keeps the first `top_k`.

    Greedy de-duplication in score order keeps exactly the answers that de-duplicating all candidates and then
    cutting to `top_k` would keep, so it stops as soon as `top_k` answers are kept.

    :param candidates: The spans.
    :param scores: One score per span.
    :param top_k: Most answers to keep; `None` keeps all.
    :param overlap_threshold: See `is_duplicate`; `None` keeps duplicates.
    :returns: Indices of the kept candidates, best first.
    """
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    kept: list[int] = []
    kept_spans: list[SpanCandidate] = []
    for index in order.tolist():
        if top_k is not None and len(kept) >= top_k:
            break
        candidate = candidates[index]
        if overlap_threshold is not None and is_duplicate(candidate, kept_spans, overlap_threshold):
            continue
        kept.append(index)
        kept_spans.append(candidate)
    return kept


def no_answer_score(scores: Seq[float]) -> float:
    """Probability that none of the kept answers is right: `prod(1 - score)`."""
    return math.prod(1 - score for score in scores)


def model_no_answer_score(null_logits: Seq[float], best_logits: Seq[float]) -> float:
    """
    The model's own no-answer probability for a question read in these sequences (its documents' windows):
    `sigmoid(min null_logit - max best_logit)`. Above 0.5 exactly when the lowest null score of the question's
    windows beats its best span, the rule SQuAD 2.0 models are evaluated with (Hugging Face's `run_qa.py`, null
    threshold 0). 1.0 when no window has a span.

    :param null_logits: Each sequence's `start_logit + end_logit` at the CLS position (`SequenceSpans.null_logit`).
    :param best_logits: Each sequence's best span's logit sum (`SequenceSpans.best_logit`, `-inf` for none).
    """
    margin = min(null_logits) - max(best_logits)
    if margin == math.inf or margin != margin:  # no span at all (inf - inf is nan): certainly no answer
        return 1.0
    if margin >= 0:
        return 1 / (1 + math.exp(-margin))
    return math.exp(margin) / (1 + math.exp(margin))


@dataclass
class DocumentText:
    """
    The text an answer is cut from: a document's whole content, or a window of it starting at `offset`
    (the Ray job ships windows, not whole documents). Offsets given to its methods are document offsets.

    :param document: The document answers will point to (its `content` may be `None` when only a window is kept).
    :param text: The content, or the window of it.
    :param offset: Where `text` starts in the document.
    :param first_page: The page `text` starts on, or `None` when the document has no int `page_number`.
    """

    document: Document
    text: str
    offset: int = 0
    first_page: int | None = None

    @classmethod
    def of(cls, document: Document) -> DocumentText:
        """The whole content of a document, paged when its `meta["page_number"]` is an int."""
        page_number = document.meta.get("page_number")
        if page_number is not None and not isinstance(page_number, int):
            logger.warning(
                "Document %s: page_number must be an int, not %r; no answer page numbers.", document.id, page_number
            )
        return cls(document, document.content or "", 0, page_number if isinstance(page_number, int) else None)

    @cached_property
    def _page_breaks(self) -> list[int]:
        return [index for index, char in enumerate(self.text) if char == "\f"]

    def page_of(self, start: int) -> int | None:
        """The page an answer starting at `start` is on: first page plus the form feeds before it."""
        if self.first_page is None or not self.text:
            return None
        return self.first_page + bisect_left(self._page_breaks, start - self.offset)

    def span(self, start: int, end: int) -> str:
        """The text of `[start, end)`."""
        return self.text[start - self.offset : end - self.offset]

    def context(self, start: int, end: int, window_size: int) -> tuple[str, int]:
        """
        About `window_size` characters centred on `[start, end)`, cut at word boundaries where possible
        (within the available text). The span itself is always inside.

        :returns: The context and the document offset where it starts.
        """
        text, start, end = self.text, start - self.offset, end - self.offset
        padding = max(0, window_size - (end - start)) // 2
        left = max(0, start - padding)
        right = min(len(text), end + padding)
        if left > 0 and not text[left - 1].isspace():
            space = next((i for i in range(left, start) if text[i].isspace()), None)
            if space is not None:
                left = space + 1
        if right < len(text) and not text[right].isspace():
            space = next((i for i in range(right - 1, end - 1, -1) if text[i].isspace()), None)
            if space is not None:
                right = space
        return text[left:right], left + self.offset


def candidate_answers(
    query: str, source: DocumentText, spans: SequenceSpans, context_window_size: int | None = None
) -> list[ExtractedAnswer]:
    """
    One sequence's spans as answers: text, document offsets, `answer_page_number` in meta when the document is
    paged, and `context` / `context_offset` when `context_window_size` is set.
    """
    answers = []
    for score, start, end in zip(spans.scores.tolist(), spans.starts.tolist(), spans.ends.tolist(), strict=True):
        page = source.page_of(start)
        context = context_offset = None
        if context_window_size is not None:
            context, context_start = source.context(start, end, context_window_size)
            context_offset = ExtractedAnswer.Span(start - context_start, end - context_start)
        answers.append(
            ExtractedAnswer(
                query=query,
                score=score,
                data=source.span(start, end),
                document=source.document,
                context=context,
                document_offset=ExtractedAnswer.Span(start, end),
                context_offset=context_offset,
                meta={} if page is None else {"answer_page_number": page},
            )
        )
    return answers


def rank_answers(query: str, candidates: list[ExtractedAnswer], settings: SelectionSettings) -> list[ExtractedAnswer]:
    """
    One query's answers from all its candidates (in document, sequence, rank order): sorted by score,
    de-duplicated by overlap, cut to `top_k`, plus the no-answer entry in score order, then `score_threshold`.
    """
    spans = [as_span_candidate(answer) for answer in candidates]
    scores = [answer.score for answer in candidates]
    answers = [candidates[i] for i in select_spans(spans, scores, settings.top_k, settings.overlap_threshold)]
    if settings.no_answer:
        answers.append(ExtractedAnswer(query=query, score=no_answer_score([a.score for a in answers]), data=None))
        answers.sort(key=lambda answer: answer.score, reverse=True)
    if settings.score_threshold is not None:
        answers = [answer for answer in answers if answer.score >= settings.score_threshold]
    return answers


def as_span_candidate(answer: ExtractedAnswer) -> SpanCandidate:
    """The document id and offsets of an answer, as de-duplication compares them."""
    offset = answer.document_offset
    return SpanCandidate(
        document_key=answer.document.id if answer.document is not None else None,
        start=offset.start if offset is not None else None,
        end=offset.end if offset is not None else None,
    )
