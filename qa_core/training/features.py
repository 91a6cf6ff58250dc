"""
Train features: SQuAD examples tokenized into windows exactly as the reader tokenizes them for inference
(`qa_core.tokenization.tokenize_each_pair`: `truncation="only_second"`, `max_seq_length`, `stride`), each window
labelled with the token positions of its answer, or with the null position 0 (the CLS / `<s>` token) when the
question is impossible or the answer is not wholly inside the window. HF `run_qa.py`'s `prepare_train_features`,
on our tokenization.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from qa_core.spans import NULL_POSITION
from qa_core.tokenization import Sequence, TokenizationSettings, tokenize_each_pair

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

    from qa_core.squad import SquadExample


@dataclass
class TrainFeature:
    """
    One window of one example, with its answer's token labels.

    :param example_index: Index of the example it came from.
    :param sequence: The window, as inference sees it.
    :param start_position: Token where the answer starts; `NULL_POSITION` when this window holds no answer.
    :param end_position: Token where the answer ends (inclusive); `NULL_POSITION` when this window holds no answer.
    """

    example_index: int
    sequence: Sequence
    start_position: int
    end_position: int

    @property
    def has_answer(self) -> bool:
        """True when the labels point at an answer span rather than at the null position."""
        return self.start_position != NULL_POSITION


class FeatureError(ValueError):
    """Examples that cannot become features; `problems` maps each example id to why."""

    def __init__(self, problems: dict[str, str]):
        self.problems = problems
        listed = "\n".join(f"  - {qid}: {why}" for qid, why in list(problems.items())[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(f"{len(problems)} example(s) cannot be tokenized:\n{listed}{more}")


def prepare_train_features(
    tokenizer: PreTrainedTokenizerBase, examples: Seq[SquadExample], settings: TokenizationSettings
) -> list[TrainFeature]:
    """
    Tokenizes examples into windowed train features with start/end token labels.

    The first gold answer is the label (SQuAD train sets have one). A window is labelled with the answer only when
    the answer's characters lie wholly inside the window's context; then `start_position` is the token whose
    offsets contain the answer's first character and `end_position` the one containing its last.

    :param tokenizer: A fast Hugging Face tokenizer (the model's).
    :param examples: Labelled examples.
    :param settings: `max_seq_length` and `stride`, the same as the reader's at inference.
    :returns: The features, grouped by example and in document order.
    :raises FeatureError: Naming each example whose question leaves no room for its context.
    """
    settings.check()
    sequences, failures = tokenize_each_pair(
        tokenizer, [example.question for example in examples], [example.context for example in examples], settings
    )
    if failures:
        raise FeatureError({examples[index].id: why for index, why in failures.items()})
    features = []
    for sequence in sequences:
        example = examples[sequence.pair_index]
        start = end = NULL_POSITION
        if not example.is_impossible and example.answers:
            answer = example.answers[0]
            start, end = answer_tokens(sequence, answer.answer_start, answer.answer_start + len(answer.text))
        features.append(TrainFeature(sequence.pair_index, sequence, start, end))
    return features


def answer_tokens(sequence: Sequence, start_char: int, end_char: int) -> tuple[int, int]:
    """
    The first and last (inclusive) tokens of the character span `[start_char, end_char)` in a window, or
    `(NULL_POSITION, NULL_POSITION)` when the span is not wholly inside the window's context.
    """
    first, stop = sequence.context_start, sequence.context_end
    if stop <= first or end_char <= start_char:
        return NULL_POSITION, NULL_POSITION
    starts = sequence.char_starts[first:stop]  # (context tokens,), non-decreasing
    ends = sequence.char_ends[first:stop]
    if starts[0] > start_char or ends[-1] < end_char:
        return NULL_POSITION, NULL_POSITION
    start = first + int(np.searchsorted(starts, start_char, side="right")) - 1  # last token starting at or before
    end = first + int(np.searchsorted(ends, end_char, side="left"))  # first token ending at or after
    if end < start:
        return NULL_POSITION, NULL_POSITION
    return start, end


def collate_features(features: Seq[TrainFeature], pad_token_id: int) -> dict[str, torch.Tensor]:
    """
    A padded training batch, with the inputs inference gives the model (`input_ids`, `attention_mask`: no
    `token_type_ids`) plus the labels.

    :returns: `input_ids`, `attention_mask`, `context_mask` (batch, longest) and `start_positions`,
        `end_positions` (batch,).
    """
    import torch

    from qa_core.inference import pad_batch

    batch = pad_batch([feature.sequence for feature in features], pad_token_id)
    batch["start_positions"] = torch.tensor([feature.start_position for feature in features], dtype=torch.long)
    batch["end_positions"] = torch.tensor([feature.end_position for feature in features], dtype=torch.long)
    return batch
