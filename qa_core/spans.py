"""Span decoding: from start/end logits to the best-scoring answer spans of each sequence."""

from dataclasses import dataclass

import numpy as np
import torch

from qa_core.tokenization import Sequence


@dataclass
class SequenceSpans:
    """
    The best spans of one sequence, best first, as character offsets in the document.

    :param scores: `sigmoid(calibration_factor * (start_logit + end_logit))`, shape (n,).
    :param starts: Character offset where each span starts, shape (n,).
    :param ends: Character offset where each span ends, shape (n,).
    """

    scores: np.ndarray
    starts: np.ndarray
    ends: np.ndarray


def top_spans(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    context_mask: torch.Tensor,
    answers_per_seq: int,
    calibration_factor: float,
    max_answer_length: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """
    Scores every span whose start and end are context tokens with start <= end, and keeps the best of each sequence.

    Scores are not normalised per sequence or document, so they compare across documents. The score tensor
    is (batch, seq, seq): callers bound its memory by the batch size.

    :param start_logits: (batch, seq) start logits.
    :param end_logits: (batch, seq) end logits.
    :param context_mask: (batch, seq) True for tokens that may start or end an answer.
    :param answers_per_seq: Spans to keep per sequence.
    :param calibration_factor: Multiplies the summed logits before the sigmoid.
    :param max_answer_length: Longest span in tokens; `None` for no limit.
    :returns: `scores`, `start_tokens`, `end_tokens`, each (batch, k). Invalid spans (fewer valid spans than k)
        have score 0.
    """
    start = start_logits.float().masked_fill(~context_mask, -torch.inf)
    end = end_logits.float().masked_fill(~context_mask, -torch.inf)
    logits = start.unsqueeze(-1) + end.unsqueeze(-2)  # (batch, seq start, seq end)
    seq_length = logits.shape[-1]
    allowed = torch.ones(seq_length, seq_length, dtype=torch.bool, device=logits.device).triu()  # end >= start
    if max_answer_length is not None:
        allowed &= ~torch.ones_like(allowed).triu(max_answer_length)  # end - start < max_answer_length
    logits = logits.masked_fill(~allowed, -torch.inf)
    k = min(answers_per_seq, seq_length * seq_length)
    # The sigmoid is monotonic: rank the logit sums, then score only the k kept per sequence.
    values, flat_indices = logits.flatten(1).topk(k)  # (batch, k)
    scores = torch.sigmoid(values * calibration_factor)
    return scores, flat_indices // seq_length, flat_indices % seq_length


def spans_to_chars(
    sequences: list[Sequence], scores: np.ndarray, start_tokens: np.ndarray, end_tokens: np.ndarray
) -> list[SequenceSpans]:
    """
    Maps token spans to character offsets in each sequence's document and drops invalid (score 0) spans.

    :param sequences: The batch's sequences, in the order of the score rows.
    :param scores: (batch, k) span scores.
    :param start_tokens: (batch, k) start token indices.
    :param end_tokens: (batch, k) end token indices.
    :returns: One `SequenceSpans` per sequence.
    """
    result = []
    for row, sequence in enumerate(sequences):
        valid = scores[row] > 0
        result.append(
            SequenceSpans(
                scores=scores[row][valid],
                starts=sequence.char_starts[start_tokens[row][valid]],
                ends=sequence.char_ends[end_tokens[row][valid]],
            )
        )
    return result
