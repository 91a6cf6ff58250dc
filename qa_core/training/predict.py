"""
SQuAD v2 predictions from a QA model with the reader's own internals (`tokenize_pairs`, `predict_spans`) and the
model's null score, scored with `qa_core.evaluation.evaluate`.

A question is refused ("no answer") when its null score, `start_logit[0] + end_logit[0]` (the CLS / `<s>` position
that training labels impossible questions with; the lowest over the question's windows), exceeds its best span's
`start_logit + end_logit` over all windows: HF `run_qa.py`'s rule with a null threshold of 0.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from qa_core.inference import DEFAULT_BATCH_SIZE, InferenceSettings, predict_spans
from qa_core.selection import model_no_answer_score
from qa_core.spans import SequenceSpans
from qa_core.tokenization import TokenizationSettings, tokenize_pairs

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from qa_core.squad import SquadExample


@dataclass
class SquadPredictions:
    """
    :param answers: The predicted answer text by question id; `""` when refused.
    :param na_probs: `sigmoid(null score - best span score)` by question id: above 0.5 exactly when refused.
    :param refused: Whether the null score beat every span, by question id.
    """

    answers: dict[str, str]
    na_probs: dict[str, float]
    refused: dict[str, bool]


def predict_squad(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    examples: Seq[SquadExample],
    settings: TokenizationSettings,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_answer_length: int | None = None,
    device: str | torch.device | None = None,
) -> SquadPredictions:
    """
    Predicts each example's answer: the best context span over its windows, or `""` when the null score wins.

    :param model: A `*ForQuestionAnswering` model (left in the train/eval mode it came in).
    :param tokenizer: Its fast tokenizer.
    :param examples: The questions with their contexts.
    :param settings: The windowing (`max_seq_length`, `stride`).
    :param batch_size: Windows per forward pass.
    :param max_answer_length: Longest answer in tokens; `None` for no limit (the reader's default).
    :param device: Where the model is; `None` for the device of its parameters.
    :returns: Answers, no-answer probabilities and refusals by question id.
    """
    device = next(model.parameters()).device if device is None else torch.device(device)
    sequences = tokenize_pairs(tokenizer, [e.question for e in examples], [e.context for e in examples], settings)
    # The reader's own forward pass and span decoding; one span per window, on the raw logit sums.
    inference = InferenceSettings(
        max_batch_size=batch_size, answers_per_seq=1, calibration_factor=1.0, max_answer_length=max_answer_length
    )
    was_training = model.training
    model.eval()
    try:
        read = predict_spans(model, sequences, tokenizer.pad_token_id, inference, device)
    finally:
        model.train(was_training)
    windows: list[list[SequenceSpans]] = [[] for _ in examples]
    for sequence, spans in zip(sequences, read, strict=True):
        windows[sequence.pair_index].append(spans)
    answers, na_probs, refused = {}, {}, {}
    for example, found in zip(examples, windows, strict=True):
        nulls, bests = [spans.null_logit for spans in found], [spans.best_logit for spans in found]
        refuse = not min(nulls) <= max(bests)
        best = max(found, key=lambda spans: spans.best_logit)  # the first of equals
        refused[example.id] = refuse
        answers[example.id] = "" if refuse else example.context[int(best.starts[0]) : int(best.ends[0])]
        na_probs[example.id] = model_no_answer_score(nulls, bests)
    return SquadPredictions(answers=answers, na_probs=na_probs, refused=refused)


def evaluate_model(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    examples: Seq[SquadExample],
    settings: TokenizationSettings,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_answer_length: int | None = None,
    device: str | torch.device | None = None,
) -> dict[str, Any]:
    """
    The official SQuAD v2 metrics of the model's predictions (`predict_squad`) on labelled examples, plus
    `refused_unanswerable` and `refused_answerable`: the share (0-100) of impossible / answerable questions the null
    score refused (absent when there are no such questions).

    :returns: `qa_core.evaluation.evaluate`'s `metrics` (`exact, f1, total, HasAns_exact, ...`) and the two shares.
    """
    from qa_core.evaluation import evaluate
    from qa_core.squad import SquadDataset

    predictions = predict_squad(model, tokenizer, examples, settings, batch_size, max_answer_length, device)
    dataset = SquadDataset(examples=list(examples), version="2.0", has_gold=True)
    metrics = dict(evaluate(dataset, predictions.answers, predictions.na_probs)["metrics"])
    for name, impossible in (("refused_unanswerable", True), ("refused_answerable", False)):
        ids = [example.id for example in examples if example.is_impossible is impossible]
        if ids:
            metrics[name] = 100.0 * sum(predictions.refused[qid] for qid in ids) / len(ids)
    return metrics
