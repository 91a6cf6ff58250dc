"""The forward pass: length-bucketed batches of sequences through a QA model, decoded to spans."""

from dataclasses import dataclass

import numpy as np
import torch

from qa_core.settings import Settings, at_least, setting
from qa_core.spans import SequenceSpans, null_and_best_logits, spans_to_chars, top_spans
from qa_core.tokenization import Sequence

DEFAULT_BATCH_SIZE = 32
DEFAULT_ANSWERS_PER_SEQ = 20
# Padded tokens per forward pass by default, for the reader and the embedder. On the CPU, by the model's dtype, the
# fastest budgets of `python -m jobs.bench`'s limit rows on both CPUs measured, an AMD EPYC with AVX-512 BF16 and an
# Intel Xeon with AMX, and of the embedder's on the Xeon (docs/benchmarks.md, "Reader throughput",
# "bf16", "Dense and approximate search"): 2,048 in fp32, 4,096 in bf16; any other
# dtype takes fp32's. On a GPU (and any other accelerator), where larger passes keep it busy, 128 sequences of 384
# tokens.
CPU_BATCH_TOKENS = {torch.float32: 2048, torch.bfloat16: 4096}
ACCELERATOR_BATCH_TOKENS = 49152


def resolve_device(device: str | torch.device | None) -> torch.device:
    """`None` picks the first CUDA device when there is one, else the CPU; an explicit device is honoured."""
    if device is None:
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def default_batch_tokens(device: torch.device | str, dtype: torch.dtype = torch.float32) -> int:
    """Padded tokens per forward pass for a model in `dtype` on `device`: `CPU_BATCH_TOKENS` on the CPU,
    `ACCELERATOR_BATCH_TOKENS` elsewhere."""
    if torch.device(device).type != "cpu":
        return ACCELERATOR_BATCH_TOKENS
    return CPU_BATCH_TOKENS.get(dtype, CPU_BATCH_TOKENS[torch.float32])


@dataclass(frozen=True)
class InferenceSettings(Settings):
    """How sequences go through the model and how spans are decoded from its logits."""

    max_batch_size: int | None = setting(
        None, "most sequences per forward pass (None: only the token budget bounds it)"
    )
    max_batch_tokens: int | None = setting(None, "most padded tokens per forward pass (None: by device and dtype)")
    answers_per_seq: int | None = setting(None, "candidate spans per sequence (None: 20)")
    calibration_factor: float = setting(0.1, "multiplies start + end logits before the sigmoid")
    max_answer_length: int | None = setting(None, "longest answer in tokens; None: no limit")

    def batch_tokens(self, device: torch.device | str, dtype: torch.dtype = torch.float32) -> int:
        """`max_batch_tokens`, or when it is None `default_batch_tokens(device, dtype)`."""
        if self.max_batch_tokens is not None:
            return self.max_batch_tokens
        return default_batch_tokens(device, dtype)

    @property
    def spans_per_sequence(self) -> int:
        """`answers_per_seq`, or `DEFAULT_ANSWERS_PER_SEQ` when it is None."""
        return DEFAULT_ANSWERS_PER_SEQ if self.answers_per_seq is None else self.answers_per_seq

    def problems(self) -> list[str]:
        problems = at_least("max_batch_size", self.max_batch_size, 1, optional=True)
        problems += at_least("max_batch_tokens", self.max_batch_tokens, 1, optional=True)
        problems += at_least("answers_per_seq", self.answers_per_seq, 1, optional=True)
        if not self.calibration_factor > 0:
            problems.append(f"calibration_factor must be > 0, not {self.calibration_factor}")
        return problems + at_least("max_answer_length", self.max_answer_length, 1, optional=True)


def pad_batch(sequences: list[Sequence], pad_token_id: int) -> dict[str, torch.Tensor]:
    """
    Pads sequences to the longest of the batch.

    :returns: `input_ids`, `attention_mask` and `context_mask` (tokens that may start or end an answer),
        each of shape (batch, longest).
    """
    longest = max(len(sequence) for sequence in sequences)
    input_ids = np.full((len(sequences), longest), pad_token_id, dtype=np.int64)
    attention_mask = np.zeros((len(sequences), longest), dtype=np.int64)
    context_mask = np.zeros((len(sequences), longest), dtype=bool)
    for row, sequence in enumerate(sequences):
        input_ids[row, : len(sequence)] = sequence.input_ids
        attention_mask[row, : len(sequence)] = 1
        context_mask[row, sequence.context_start : sequence.context_end] = True
    return {
        "input_ids": torch.from_numpy(input_ids),
        "attention_mask": torch.from_numpy(attention_mask),
        "context_mask": torch.from_numpy(context_mask),
    }


def pad_rows(rows: list[list[int]], pad_value: int) -> tuple[torch.Tensor, torch.Tensor]:
    """
    Token rows of any lengths padded to the longest with `pad_value`.

    :returns: The `(rows, longest)` int64 values and their attention mask (1 on a row's own tokens).
    """
    longest = max(len(row) for row in rows)
    values = np.full((len(rows), longest), pad_value, dtype=np.int64)
    mask = np.zeros((len(rows), longest), dtype=np.int64)
    for index, row in enumerate(rows):
        values[index, : len(row)] = row
        mask[index, : len(row)] = 1
    return torch.from_numpy(values), torch.from_numpy(mask)


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype of the model's first parameter (its matrix products' dtype; fp32 for a dynamically quantized
    model, whose first parameter is its fp32 embedding table); fp32 for a model without parameters."""
    return next(model.parameters(), torch.empty(0)).dtype


def length_sorted_batches(
    sequences: list[Sequence], max_tokens: int, max_sequences: int | None = None
) -> list[list[int]]:
    """
    Groups sequence indices into batches of similar length, so that padding nearly vanishes: in order of length,
    a batch takes sequences while it holds at most `max_tokens` padded tokens (its count times its longest) and at
    most `max_sequences` sequences; a sequence longer than `max_tokens` makes a batch alone. The sort is stable, so
    equal lengths keep their order.

    :returns: Lists of indices into `sequences`.
    """
    batches: list[list[int]] = []
    batch: list[int] = []
    for index in sorted(range(len(sequences)), key=lambda index: len(sequences[index])):
        full = max_sequences is not None and len(batch) >= max_sequences
        if batch and (full or (len(batch) + 1) * len(sequences[index]) > max_tokens):
            batches.append(batch)
            batch = []
        batch.append(index)
    return batches + [batch] if batch else batches


def predict_spans(
    model: torch.nn.Module,
    sequences: list[Sequence],
    pad_token_id: int,
    settings: InferenceSettings,
    device: torch.device | str = "cpu",
) -> list[SequenceSpans]:
    """
    Runs the model over the sequences in length-sorted batches and returns each sequence's best spans.

    The model sees `input_ids` and `attention_mask` only, as Haystack's reader feeds it.

    :param model: A `*ForQuestionAnswering` model in eval mode.
    :param sequences: The sequences, unpadded.
    :param pad_token_id: The tokenizer's padding id.
    :param settings: The batches' bounds (padded tokens and sequences in one forward pass, and so in one
        span-score tensor) and span decoding.
    :param device: Where the model lives.
    :returns: One `SequenceSpans` per input sequence, in input order.
    """
    device = torch.device(device)
    pin = device.type == "cuda"
    results: list[SequenceSpans | None] = [None] * len(sequences)
    budget = settings.batch_tokens(device, model_dtype(model))
    batches = length_sorted_batches(sequences, budget, settings.max_batch_size)
    for indices in batches:
        batch = [sequences[index] for index in indices]
        tensors = pad_batch(batch, pad_token_id)
        if pin:
            tensors = {name: tensor.pin_memory() for name, tensor in tensors.items()}
        tensors = {name: tensor.to(device, non_blocking=pin) for name, tensor in tensors.items()}
        with torch.inference_mode():
            output = model(input_ids=tensors["input_ids"], attention_mask=tensors["attention_mask"])
            scores, start_tokens, end_tokens = top_spans(
                output.start_logits,
                output.end_logits,
                tensors["context_mask"] & (tensors["attention_mask"] == 1),
                settings.spans_per_sequence,
                settings.calibration_factor,
                settings.max_answer_length,
            )
            null_logits, best_logits = null_and_best_logits(
                output.start_logits, output.end_logits, start_tokens, end_tokens
            )
        spans = spans_to_chars(
            batch, *(tensor.cpu().numpy() for tensor in (scores, start_tokens, end_tokens, null_logits, best_logits))
        )
        for index, sequence_spans in zip(indices, spans, strict=True):
            results[index] = sequence_spans
    return results  # type: ignore[return-value]
