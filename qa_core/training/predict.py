"""
SQuAD v2 predictions from a QA model with the reader's own batch internals (`tokenize_pairs`, `pad_batch`,
`length_sorted_batches`, `top_spans`) and the model's null score, scored with `qa_core.evaluation.evaluate`.

A question is refused ("no answer") when its null score, `start_logit[0] + end_logit[0]` (the CLS / `<s>` position
that training labels impossible questions with; the lowest over the question's windows), exceeds its best span's
`start_logit + end_logit` over all windows: HF `run_qa.py`'s rule with a null threshold of 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from qa_core.inference import length_sorted_batches, pad_batch
from qa_core.selection import model_no_answer_score
from qa_core.spans import null_and_best_logits, top_spans
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
    batch_size: int = 32,
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
    nulls: list[list[float]] = [[] for _ in examples]  # each window's null logit sum, by example
    bests: list[list[float]] = [[] for _ in examples]  # and its best span's
    spans = [(0, 0)] * len(examples)
    was_training = model.training
    model.eval()
    try:
        for indices in length_sorted_batches(sequences, batch_size):
            batch = [sequences[index] for index in indices]
            tensors = {name: tensor.to(device) for name, tensor in pad_batch(batch, tokenizer.pad_token_id).items()}
            with torch.inference_mode():
                output = model(input_ids=tensors["input_ids"], attention_mask=tensors["attention_mask"])
                mask = tensors["context_mask"] & (tensors["attention_mask"] == 1)
                top = top_spans(output.start_logits, output.end_logits, mask, 1, 1.0, max_answer_length)
                null_logits, best_logits = null_and_best_logits(output.start_logits, output.end_logits, *top[1:])
            for row, sequence in enumerate(batch):
                example = sequence.pair_index
                score = best_logits[row].item() if sequence.context_end > sequence.context_start else -math.inf
                if score > max(bests[example], default=-math.inf):
                    start, end = top[1][row, 0].item(), top[2][row, 0].item()
                    spans[example] = (int(sequence.char_starts[start]), int(sequence.char_ends[end]))
                nulls[example].append(null_logits[row].item())
                bests[example].append(score)
    finally:
        model.train(was_training)
    answers, na_probs, refused = {}, {}, {}
    for index, example in enumerate(examples):
        refuse = not min(nulls[index]) <= max(bests[index])
        refused[example.id] = refuse
        answers[example.id] = "" if refuse else example.context[spans[index][0] : spans[index][1]]
        na_probs[example.id] = model_no_answer_score(nulls[index], bests[index])
    return SquadPredictions(answers=answers, na_probs=na_probs, refused=refused)


def evaluate_model(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    examples: Seq[SquadExample],
    settings: TokenizationSettings,
    batch_size: int = 32,
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
