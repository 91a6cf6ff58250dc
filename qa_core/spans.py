"""Span decoding: from start/end logits to the best-scoring answer spans of each sequence."""

import math
from dataclasses import dataclass

import numpy as np
import torch

from qa_core.tokenization import Sequence

# The CLS / <s> token, first in every sequence: the span SQuAD 2.0 models are trained to point at for "no answer".
NULL_POSITION = 0


@dataclass
class SequenceSpans:
    """
    The best spans of one sequence, best first, as character offsets in the document, and the model's own null
    score next to the best span's.

    :param scores: `sigmoid(calibration_factor * (start_logit + end_logit))`, shape (n,).
    :param starts: Character offset where each span starts, shape (n,).
    :param ends: Character offset where each span ends, shape (n,).
    :param null_logit: `start_logit + end_logit` at `NULL_POSITION` (fp32), which Haystack's scores leave out.
    :param best_logit: `start_logit + end_logit` of the best span; `-inf` when the sequence has none.
    """

    scores: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    null_logit: float
    best_logit: float


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
    seq_length = start.shape[-1]
    # 0 where a span may end (end >= start, end - start < max_answer_length), -inf where not: added in place, one
    # pass over the (batch, seq, seq) sums and no second tensor of their size (a masked_fill broadcast over the batch
    # is much slower on CPU).
    forbidden = torch.full((seq_length, seq_length), -torch.inf, dtype=start.dtype, device=start.device)
    bias = forbidden.tril(-1)
    if max_answer_length is not None:
        bias += forbidden.triu(max_answer_length)
    logits = (start.unsqueeze(-1) + end.unsqueeze(-2)).add_(bias)  # (batch, seq start, seq end)
    k = min(answers_per_seq, seq_length * seq_length)
    # The sigmoid is monotonic: rank the logit sums, then score only the k kept per sequence.
    values, flat_indices = logits.flatten(1).topk(k)  # (batch, k)
    scores = torch.sigmoid(values * calibration_factor)
    return scores, flat_indices // seq_length, flat_indices % seq_length


def null_and_best_logits(
    start_logits: torch.Tensor, end_logits: torch.Tensor, start_tokens: torch.Tensor, end_tokens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """
    Each sequence's null logit sum (at `NULL_POSITION`) and its best span's (`start_tokens[:, 0]`,
    `end_tokens[:, 0]` as `top_spans` ranks them), in fp32.

    :returns: `null_logits`, `best_logits`, each (batch,).
    """
    start, end = start_logits.float(), end_logits.float()
    null = start[:, NULL_POSITION] + end[:, NULL_POSITION]
    best = start.gather(1, start_tokens[:, :1]).squeeze(1) + end.gather(1, end_tokens[:, :1]).squeeze(1)
    return null, best


def spans_to_chars(
    sequences: list[Sequence],
    scores: np.ndarray,
    start_tokens: np.ndarray,
    end_tokens: np.ndarray,
    null_logits: np.ndarray,
    best_logits: np.ndarray,
) -> list[SequenceSpans]:
    """
    Maps token spans to character offsets in each sequence's document and drops invalid (score 0) spans.

    :param sequences: The batch's sequences, in the order of the score rows.
    :param scores: (batch, k) span scores.
    :param start_tokens: (batch, k) start token indices.
    :param end_tokens: (batch, k) end token indices.
    :param null_logits: (batch,) null logit sums; `best_logits` (batch,) the first span's logit sums.
    :returns: One `SequenceSpans` per sequence (`best_logit` `-inf` when it has no valid span).
    """
    result = []
    for row, sequence in enumerate(sequences):
        valid = scores[row] > 0
        result.append(
            SequenceSpans(
                scores=scores[row][valid],
                starts=sequence.char_starts[start_tokens[row][valid]],
                ends=sequence.char_ends[end_tokens[row][valid]],
                null_logit=float(null_logits[row]),
                best_logit=float(best_logits[row]) if valid.any() else -math.inf,
            )
        )
    return result
