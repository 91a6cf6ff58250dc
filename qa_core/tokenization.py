"""Tokenize (query, document) pairs into model sequences, splitting long documents with a stride."""

from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Any

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
    `tokenize_pairs` that goes on past pairs it cannot tokenize. Each distinct query and document text is tokenized
    once, however many pairs share it (the same questions of every document, a question over many documents).

    :returns: The sequences of the pairs that could be tokenized, and for each other pair (by index) why not.
    """
    if not queries:
        return [], {}
    backend, encoded = _encode_texts(tokenizer, [*queries, *contents], settings)
    sequences: list[Sequence] = []
    failures: dict[int, str] = {}
    for index, (query, content) in enumerate(zip(queries, contents, strict=True)):
        problem = _not_text(query, content)
        if problem is None:
            try:
                encoding = backend.post_process(encoded[query], encoded[content], add_special_tokens=True)
            except Exception as error:  # noqa: BLE001 - tokenizers raises a bare Exception when a query leaves no room
                problem = (
                    f"Cannot tokenize query {query[:80]!r} with max_seq_length={settings.max_seq_length} and "
                    f"stride={settings.stride}: {error}. Shorten the query or raise max_seq_length."
                )
        if problem is None:
            sequences += _windows(index, encoding)
        else:
            failures[index] = problem
    return sequences, failures


def _not_text(query: object, content: object) -> str | None:
    """Why a pair cannot be tokenized when its query or document is not text, else None."""
    for name, value in (("query", query), ("document", content)):
        if not isinstance(value, str):
            return f"Cannot tokenize the pair: its {name} is {type(value).__name__}, not a string ({value!r:.80})."
    return None


def _windows(pair_index: int, encoding) -> list[Sequence]:
    """The windows of a pair's encoding as sequences, in document order."""
    sequences = []
    for window in [encoding, *encoding.overflowing]:
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


def _encode_texts(tokenizer, texts: list, settings: TokenizationSettings) -> tuple[Any, dict[str, Any]]:
    """
    The Rust tokenizer, set to truncate and split pairs exactly as `tokenizer(queries, contents,
    truncation="only_second", max_length=max_seq_length, stride=stride, return_overflowing_tokens=True)` does, and
    the encoding of each distinct text of `texts` on its own, before any post-processing.

    The tokenizer encodes a pair's two texts each on its own and only then truncates the pair into windows and adds
    its special tokens (its `post_process`: also the byte-level tokenizers' offset trimming, window by window), so
    `post_process(encoded[query], encoded[content])` is the pair's encoding, its `overflowing` the further windows,
    bit for bit what encoding the pair makes; only the document side's type ids, which the post-processor
    rewrites and no `Sequence` carries, are those of a first text. This also skips transformers' copy of every
    encoding into Python lists (ids, masks, offsets), which this module never reads.
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
    distinct = list(dict.fromkeys(text for text in texts if isinstance(text, str)))
    truncation, post_processor = backend.truncation, backend.post_processor
    backend.no_truncation()  # each text whole, with no special tokens: the pair's post-processing adds them
    backend.post_processor = None
    try:
        encodings = backend.encode_batch(distinct, add_special_tokens=False)
    finally:
        backend.post_processor = post_processor
        backend.enable_truncation(**truncation)
    return backend, dict(zip(distinct, encodings, strict=True))
