"""
The tokenize stage (CPU tasks): pairs joined with their documents -> `sequence` rows, each carrying the window of
document text its answers and contexts are cut from. A pair that cannot be read gets a `pair` note with the
reason, which the stage writes to the run's folder for its shard's aggregation (`ShardStore.write_pair_notes`),
so that the reader actors receive sequences only. A pair of a retrieved passage reads only the passage's range
of its document, as Haystack's reader reads the passage; its sequences' offsets are the document's. Only this
stage and the reader stage load a tokenizer, and only when they run.
"""

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa

from jobs.bulk_qa.workers.rows import PAIR, PAIRS_SCHEMA, SEQUENCES_SCHEMA, sequence_row, table
from jobs.storage import ShardStore
from qa_core.document import Document
from qa_core.models import ModelSettings, load_tokenizer
from qa_core.secret import Secret
from qa_core.selection import DocumentText, SelectionSettings
from qa_core.tokenization import Sequence, TokenizationSettings, tokenize_each_pair


def tokenize(
    batch: pa.Table,
    model: ModelSettings,
    token: Secret | None,
    tokenization: TokenizationSettings,
    selection: SelectionSettings,
    output: str,
) -> pa.Table:
    """
    Pairs joined with their documents -> `sequence` rows. A pair whose document is unknown or that cannot be
    tokenized gets a `pair` note, written to `output` for its shard's aggregation. Documents with null content
    are skipped, as the reader skips them.

    :param model: Whose tokenizer to use.
    :param token: The hub token, resolved here from the worker's environment.
    :param tokenization: `max_seq_length` and `stride`, as the reader uses them.
    :param selection: Its `context_window_size` says how much text around each sequence the answers' contexts need.
    :param output: The run's output folder.
    """
    tokenizer = load_tokenizer(model.model, token, model.trust_remote_code)
    notes: list[dict[str, Any]] = []
    to_read: list[dict[str, Any]] = []
    for row in batch.to_pylist():
        if not row.get("known"):
            notes.append({**row, "error": f"unknown document id {row['document_id']!r}"})
        elif row.get("content") is not None:
            to_read.append(row)
    texts = [pair["content"][slice(*_read_range(pair))] for pair in to_read]
    sequences, failures = tokenize_each_pair(tokenizer, [pair["query"] for pair in to_read], texts, tokenization)
    notes += [{**to_read[index], "kind": PAIR, "error": error} for index, error in failures.items()]
    if notes:
        ShardStore(output).write_pair_notes(table(notes, PAIRS_SCHEMA))
    rows: list[dict[str, Any]] = []
    sequence_index = 0
    for position, sequence in enumerate(sequences):
        previous = sequences[position - 1].pair_index if position else None
        sequence_index = sequence_index + 1 if previous == sequence.pair_index else 0
        pair = to_read[sequence.pair_index]
        sequence = _in_document(sequence, _read_range(pair)[0])
        rows.append(sequence_row(pair, sequence_index, sequence, _window(pair, sequence, selection)))
    return table(rows, SEQUENCES_SCHEMA)


def _read_range(pair: dict[str, Any]) -> tuple[int, int]:
    """The character range of the document a pair reads: a retrieved passage's, else the whole content."""
    if pair.get("passage_start") is None:
        return 0, len(pair["content"])
    return pair["passage_start"], pair["passage_end"]


def _in_document(sequence: Sequence, start: int) -> Sequence:
    """A sequence of the text starting at `start` in its document, its context tokens' offsets made the document's."""
    if start == 0:
        return sequence
    shift = np.zeros_like(sequence.char_starts)  # offsets outside the context stay 0
    shift[sequence.context_start : sequence.context_end] = start
    return dataclasses.replace(sequence, char_starts=sequence.char_starts + shift, char_ends=sequence.char_ends + shift)


def _window(pair: dict[str, Any], sequence: Sequence, selection: SelectionSettings) -> DocumentText:
    """The document text a sequence's answers and their contexts are cut from, within the range the pair reads (the
    context's word-boundary search looks one character beyond the context window)."""
    content = pair["content"]
    start, end = _read_range(pair)
    if sequence.context_end > sequence.context_start:
        first_char = int(sequence.char_starts[sequence.context_start])
        last_char = int(sequence.char_ends[sequence.context_end - 1])
    else:
        first_char = last_char = start
    margin = (selection.context_window_size or 0) + 1
    offset = max(start, first_char - margin)
    page_number = pair.get("page_number")
    first_page = None if page_number is None else page_number + content.count("\f", 0, offset)
    document = Document(content=None, id=pair["document_id"])
    return DocumentText(document, content[offset : min(end, last_char + margin)], offset, first_page)
