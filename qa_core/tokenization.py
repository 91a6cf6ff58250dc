"""Tokenize (query, document) pairs into model sequences, splitting long documents with a stride."""

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Sequence:
    """
    One tokenized (query, document window) pair, unpadded.

    :param pair_index: Index of the (query, document) pair it came from.
    :param input_ids: Token ids, shape (length,).
    :param context_start: First token of the document side.
    :param context_end: One past the last token of the document side.
    :param char_starts: Character offset in the document where each token starts, (length,); 0 outside the context.
    :param char_ends: Character offset in the document where each token ends, (length,); 0 outside the context.
    """

    pair_index: int
    input_ids: np.ndarray
    context_start: int
    context_end: int
    char_starts: np.ndarray
    char_ends: np.ndarray

    def __len__(self) -> int:
        return len(self.input_ids)


def tokenize_pairs(
    tokenizer, queries: list[str], contents: list[str], max_seq_length: int, stride: int
) -> list[Sequence]:
    """
    Tokenizes (query, document) pairs. A document longer than `max_seq_length` tokens (with its query) is split into
    several sequences whose document sides overlap by `stride` tokens; the query is never truncated.

    :param tokenizer: A fast Hugging Face tokenizer.
    :param queries: One query per pair.
    :param contents: One document text per pair.
    :param max_seq_length: Maximum tokens in one sequence.
    :param stride: Tokens shared by consecutive windows of one document.
    :returns: The sequences, grouped by pair and in document order.
    :raises ValueError: If a query leaves no room for its document; the message names the query.
    """
    if not queries:
        return []
    try:
        encoded = tokenizer(
            queries,
            contents,
            truncation="only_second",
            max_length=max_seq_length,
            stride=stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            padding=False,
        )
    except Exception as error:  # tokenizers raises a bare Exception when a query leaves no room for its document
        if len(queries) == 1:
            raise ValueError(
                f"Cannot tokenize query {queries[0][:80]!r} with max_seq_length={max_seq_length} and stride={stride}: "
                f"{error}. Shorten the query or raise max_seq_length."
            ) from error
        for query, content in zip(queries, contents, strict=True):
            tokenize_pairs(tokenizer, [query], [content], max_seq_length, stride)
        raise
    sequences = []
    for encoding, pair_index in zip(encoded.encodings, encoded["overflow_to_sample_mapping"], strict=True):
        sequence_ids = encoding.sequence_ids
        context = [i for i, sequence_id in enumerate(sequence_ids) if sequence_id == 1]
        offsets = np.asarray(encoding.offsets, dtype=np.int64).reshape(-1, 2)
        sequences.append(
            Sequence(
                pair_index=int(pair_index),
                input_ids=np.asarray(encoding.ids, dtype=np.int64),
                context_start=context[0] if context else 0,
                context_end=context[-1] + 1 if context else 0,
                char_starts=offsets[:, 0],
                char_ends=offsets[:, 1],
            )
        )
    return sequences


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
