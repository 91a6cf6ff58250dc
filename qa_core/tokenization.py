"""Tokenize (query, document) pairs into model sequences, splitting long documents with a stride."""

from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from qa_core.settings import Settings, at_least, setting

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class TokenizationSettings(Settings):
    """How (query, document) pairs become model sequences."""

    max_seq_length: int = setting(384, "tokens per sequence; longer documents are split")
    stride: int = setting(128, "tokens shared by consecutive windows of a document")

    def problems(self) -> list[str]:
        problems = at_least("max_seq_length", self.max_seq_length, 8)
        if not 0 <= self.stride < self.max_seq_length:
            problems.append(f"stride ({self.stride}) must be >= 0 and < max_seq_length ({self.max_seq_length})")
        return problems


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
    tokenizer: "PreTrainedTokenizerBase", queries: list[str], contents: list[str], settings: TokenizationSettings
) -> list[Sequence]:
    """
    Tokenizes (query, document) pairs. A document longer than `max_seq_length` tokens (with its query) is split into
    several sequences whose document sides overlap by `stride` tokens; the query is never truncated.

    :param tokenizer: A fast Hugging Face tokenizer.
    :param queries: One query per pair.
    :param contents: One document text per pair.
    :param settings: `max_seq_length` and `stride`.
    :returns: The sequences, grouped by pair and in document order.
    :raises ValueError: If a query leaves no room for its document; the message names the query.
    """
    sequences, failures = tokenize_each_pair(tokenizer, queries, contents, settings)
    if failures:
        raise ValueError(next(iter(failures.values())))
    return sequences


def tokenize_each_pair(
    tokenizer: "PreTrainedTokenizerBase", queries: list[str], contents: list[str], settings: TokenizationSettings
) -> tuple[list[Sequence], dict[int, str]]:
    """
    `tokenize_pairs` that goes on past pairs it cannot tokenize: all pairs at once, and only when that fails,
    pair by pair.

    :returns: The sequences of the pairs that could be tokenized, and for each other pair (by index) why not.
    """
    if not queries:
        return [], {}
    try:
        return _sequences(_encode_pairs(tokenizer, queries, contents, settings), range(len(queries))), {}
    except Exception:  # noqa: BLE001 - tokenizers raises a bare Exception when a query leaves no room
        pass
    sequences: list[Sequence] = []
    failures: dict[int, str] = {}
    for index, (query, content) in enumerate(zip(queries, contents, strict=True)):
        try:
            sequences += _sequences(_encode_pairs(tokenizer, [query], [content], settings), [index])
        except Exception as error:  # noqa: BLE001 - see above
            failures[index] = _failure(query, content, error, settings)
    return sequences, failures


def _failure(query: object, content: object, error: Exception, settings: TokenizationSettings) -> str:
    """Why a pair could not be tokenized: a query or document that is not text, or a query too long."""
    for name, value in (("query", query), ("document", content)):
        if not isinstance(value, str):
            return f"Cannot tokenize the pair: its {name} is {type(value).__name__}, not a string ({value!r:.80})."
    return (
        f"Cannot tokenize query {query[:80]!r} with max_seq_length={settings.max_seq_length} and "
        f"stride={settings.stride}: {error}. Shorten the query or raise max_seq_length."
    )


def _sequences(encodings: list, pair_indices) -> list[Sequence]:
    """The windows of each pair's encoding as sequences, in pair and document order."""
    sequences = []
    for pair_index, encoding in zip(pair_indices, encodings, strict=True):
        for window in [encoding, *encoding.overflowing]:  # the pair's windows, in document order
            sequence_ids = window.sequence_ids
            try:  # the document side is one contiguous run of sequence id 1
                context_start = sequence_ids.index(1)
                context_end = len(sequence_ids) - sequence_ids[::-1].index(1)
            except ValueError:
                context_start = context_end = 0
            offsets = window.offsets
            offsets = np.fromiter(chain.from_iterable(offsets), dtype=np.int64, count=2 * len(offsets)).reshape(-1, 2)
            sequences.append(
                Sequence(
                    pair_index=pair_index,
                    input_ids=np.asarray(window.ids, dtype=np.int64),
                    context_start=context_start,
                    context_end=context_end,
                    char_starts=offsets[:, 0],
                    char_ends=offsets[:, 1],
                )
            )
    return sequences


def _encode_pairs(tokenizer, queries: list[str], contents: list[str], settings: TokenizationSettings) -> list:
    """
    The Rust tokenizer's encodings of the pairs, truncated and split exactly as `tokenizer(queries, contents,
    truncation="only_second", max_length=max_seq_length, stride=stride, return_overflowing_tokens=True)` would
    make them, without transformers' copy of every encoding into Python lists (ids, masks, offsets), which this
    module never reads and which cost a third of the tokenization time. Each encoding's `overflowing` holds the
    pair's further windows.
    """
    from transformers.tokenization_utils_base import TruncationStrategy
    from transformers.utils import PaddingStrategy

    tokenizer.set_truncation_and_padding(
        padding_strategy=PaddingStrategy.DO_NOT_PAD,
        truncation_strategy=TruncationStrategy.ONLY_SECOND,
        max_length=settings.max_seq_length,
        stride=settings.stride,
        pad_to_multiple_of=None,
        padding_side=None,
    )
    backend = tokenizer.backend_tokenizer
    if backend.encode_special_tokens != tokenizer.split_special_tokens:
        backend.encode_special_tokens = tokenizer.split_special_tokens
    return backend.encode_batch(list(zip(queries, contents, strict=True)), add_special_tokens=True)
