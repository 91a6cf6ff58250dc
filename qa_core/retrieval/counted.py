"""
Counting: a shard's documents tokenized once into term-major counts (`CountedShard`), with the statistics that
merge into its corpus's. What an index is built from, and what its folder keeps: weighing a counted shard with
its corpus's statistics (`index.BM25Index.from_counted`) adds only each term's idf and largest weight.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qa_core.retrieval.corpus import check_corpus, check_unique_ids
from qa_core.retrieval.counts import TermIds, count_terms
from qa_core.retrieval.fingerprint import fingerprint_value
from qa_core.retrieval.index_io import (
    COUNTED_ARRAYS,
    DOC_IDS_FILE,
    VOCABULARY_FILE,
    read_arrays,
    read_doc_ids,
    read_json,
    write_array,
    write_doc_ids,
    write_json,
)
from qa_core.retrieval.statistics import CorpusStatistics
from qa_core.retrieval.tokenizer import Tokenizer

# Documents a shard is counted in at a time (`count_parts`): what one count holds at its peak, besides the shard's
# counts (about 100 Python strings per document while tokenizing, and a term matrix of the part).
COUNT_PART_DOCS = 50_000
# Postings moved or weighed at a time (`CountedShard.in_corpus_order`, `index.BM25Index.from_counted`): the
# temporaries (8 bytes a posting each) stay in the CPU's caches rather than in memory.
PAIRS_PER_STEP = 1 << 16


@dataclass(frozen=True)
class CountedShard:
    """
    A shard's documents tokenized and counted, term-major, not weighed. Its files are those of an index folder
    (`vocabulary.json`, `doc_ids.arrow` and the `index_io.COUNTED_ARRAYS`), so that a weighed shard's folder holds
    its counted shard too (to weigh it again when the corpus grows).

    :param vocabulary: The shard's terms, by term id: in order of first occurrence in the shard as counted, in the
        corpus's term order once weighed.
    :param doc_ids: The documents' ids.
    :param starts: `(terms + 1,)` int64: term `t`'s postings are `starts[t]:starts[t + 1]`.
    :param doc_indices: `(pairs,)` document of each posting, ascending within a term (int64, or uint32 as saved).
    :param term_counts: `(pairs,)` occurrences of each posting's term in its document (int32, or the smallest
        unsigned type that holds them as saved).
    :param doc_lengths: `(documents,)` terms per document, repeats included (Haystack's `doc_len`).
    """

    vocabulary: list[str]
    doc_ids: Sequence[str]
    starts: np.ndarray
    doc_indices: np.ndarray
    term_counts: np.ndarray
    doc_lengths: np.ndarray

    def arrays(self) -> dict[str, np.ndarray]:
        """The `COUNTED_ARRAYS` by name."""
        return {name: getattr(self, name) for name in COUNTED_ARRAYS}

    def save(self, folder: Path, names: Iterable[str] = (VOCABULARY_FILE, DOC_IDS_FILE, *COUNTED_ARRAYS)) -> None:
        """
        Writes the shard's files into a folder, created if needed (no `index.json`: it is not an index yet).

        :param names: Those of its files to write: `vocabulary.json`, `doc_ids.arrow` and array names.
        """
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            if name == VOCABULARY_FILE:
                write_json(folder / VOCABULARY_FILE, self.vocabulary)
            elif name == DOC_IDS_FILE:
                write_doc_ids(folder / DOC_IDS_FILE, self.doc_ids)
            else:
                write_array(folder, name, getattr(self, name), len(self.doc_ids))

    @classmethod
    def load(cls, folder: Path, mmap: bool = False) -> "CountedShard":
        """
        Reads what `save` (or `BM25Index.save`) wrote, its arrays into memory or, with `mmap`, memory-mapped
        read-only (then none of them may be written over while the shard is in use).

        :raises ValueError: If a file is missing or malformed, or the files do not fit each other.
        """
        vocabulary = read_json(folder / VOCABULARY_FILE, list)
        if not all(isinstance(value, str) for value in vocabulary):
            raise ValueError(f"{folder / VOCABULARY_FILE} must hold a list of strings.")
        shard = cls(vocabulary, read_doc_ids(folder, mmap), **read_arrays(folder, COUNTED_ARRAYS, mmap))
        shard.check(folder)
        return shard

    def check(self, folder: Path) -> None:
        """:raises ValueError: If the arrays do not fit each other, the vocabulary and the documents."""
        starts, doc_indices, n_docs = self.starts, self.doc_indices, len(self.doc_ids)
        if (
            starts.size != len(self.vocabulary) + 1
            or starts[0] != 0
            or starts[-1] != doc_indices.size
            or self.term_counts.size != doc_indices.size
            or self.doc_lengths.size != n_docs
        ):
            raise ValueError(f"{folder}: the posting arrays do not match each other, the terms or the documents.")
        if doc_indices.size and not 0 <= doc_indices.min() <= doc_indices.max() < n_docs:
            raise ValueError(f"{folder}: the postings name documents beyond the index's {n_docs}: it is corrupt.")
        if doc_indices.size and self.term_counts.min() == 0:
            raise ValueError(f"{folder}: a posting counts its term 0 times: the index is corrupt.")

    def in_corpus_order(self, term_ids: dict[str, int], doc_offset: int) -> tuple["CountedShard", np.ndarray]:
        """
        The shard with its terms in the corpus's term order, each term's postings as they are (the shard itself
        when they are in that order already), and its terms' corpus ids, ascending.

        :param term_ids: Each term of the corpus's id.
        :param doc_offset: The shard's first corpus position (for the message).
        :raises ValueError: If a term of the shard is missing from the corpus's terms.
        """
        vocabulary = self.vocabulary
        try:
            corpus_ids = np.fromiter(map(term_ids.__getitem__, vocabulary), np.int64, len(vocabulary))
        except KeyError as error:
            term = error.args[0]
            raise ValueError(f"The term {term!r} of shard {doc_offset} is not in the corpus statistics.") from None
        if not np.any(np.diff(corpus_ids) < 0):
            return self, corpus_ids
        starts, doc_indices, term_counts = self.starts, self.doc_indices, self.term_counts
        order = np.argsort(corpus_ids)
        lengths = np.diff(starts)[order]
        new_starts = np.zeros(lengths.size + 1, np.int64)
        np.cumsum(lengths, out=new_starts[1:])
        shifts = starts[:-1][order] - new_starts[:-1]  # each term's postings' shift from their old place
        moved_docs = np.empty(doc_indices.size, doc_indices.dtype)
        moved_counts = np.empty(doc_indices.size, term_counts.dtype)
        for first in range(0, doc_indices.size, PAIRS_PER_STEP):
            stop = min(first + PAIRS_PER_STEP, doc_indices.size)
            places = per_posting(shifts, new_starts, first, stop)  # the step's postings' old places
            places += np.arange(first, stop)
            moved_docs[first:stop], moved_counts[first:stop] = doc_indices[places], term_counts[places]
        ordered = CountedShard([vocabulary[i] for i in order.tolist()], self.doc_ids, new_starts, moved_docs,
                               moved_counts, self.doc_lengths)  # fmt: skip
        return ordered, corpus_ids[order]

    @classmethod
    def concatenate(cls, parts: list["CountedShard"]) -> "CountedShard":
        """
        The counted shard of consecutive parts, the same as counting their documents at once gives: the
        vocabulary in order of first occurrence, each term's postings in document order. Each part's arrays are
        released as it is merged (the list is emptied).

        :param parts: Counted parts, in document order; emptied.
        """
        term_ids = TermIds()
        part_terms = [np.fromiter(map(term_ids.__getitem__, part.vocabulary), np.int64, len(part.vocabulary))
                      for part in parts]  # fmt: skip
        lengths = np.zeros(len(term_ids), np.int64)
        for terms, part in zip(part_terms, parts, strict=True):
            lengths[terms] += np.diff(part.starts)
        starts = np.zeros(len(term_ids) + 1, np.int64)
        np.cumsum(lengths, out=starts[1:])
        doc_indices = np.empty(starts[-1], np.int64)
        term_counts = np.empty(starts[-1], np.int32)
        cursor, first_doc, doc_ids, doc_lengths = starts[:-1].copy(), 0, [], []
        for terms in part_terms:
            part = parts.pop(0)
            part_lengths = np.diff(part.starts)
            # each posting's place: its term's cursor, then its place among the term's postings in this part
            places = np.repeat(cursor[terms] - part.starts[:-1], part_lengths) + np.arange(part.starts[-1])
            doc_indices[places] = part.doc_indices + first_doc
            term_counts[places] = part.term_counts
            cursor[terms] += part_lengths
            first_doc += len(part.doc_ids)
            doc_ids += part.doc_ids
            doc_lengths.append(np.asarray(part.doc_lengths, np.int64))
            del part, places
        lengths_array = np.concatenate(doc_lengths) if doc_lengths else np.zeros(0, np.int64)
        return cls(list(term_ids), doc_ids, starts, doc_indices, term_counts, lengths_array)


def count_shard(
    ids: Sequence[str], texts: Sequence[str], doc_offset: int, tokenizer: Tokenizer
) -> tuple[CountedShard, CorpusStatistics]:
    """
    Tokenizes a shard's documents once: its counts, to weigh later, and its statistics, to merge with the other
    shards' (in corpus order, `CorpusStatistics.merge`) into the corpus's. Counted in parts of
    `COUNT_PART_DOCS` documents (`count_parts`).

    :param ids: The shard's document ids, unique non-empty strings.
    :param texts: Their texts.
    :param doc_offset: Corpus position of the first.
    :param tokenizer: Splits a text into terms.
    :returns: The counted shard and its statistics.
    :raises ValueError: If the ids are invalid.
    """
    check_corpus(ids, texts)
    parts = range(0, len(texts), COUNT_PART_DOCS)
    return count_parts(((ids[start : start + COUNT_PART_DOCS], texts[start : start + COUNT_PART_DOCS])
                        for start in parts), doc_offset, tokenizer)  # fmt: skip


def count_parts(
    parts: Iterable[tuple[Sequence[str], Sequence[str]]], doc_offset: int, tokenizer: Tokenizer
) -> tuple[CountedShard, CorpusStatistics]:
    """
    `count_shard` of a shard given in consecutive parts (ids and texts), counted one after the other: each part's
    tokens and term matrix are freed once its counts are kept as compact term-major arrays, which are merged
    into the shard's at the end (`CountedShard.concatenate`). The memory it takes is then one part's counting
    and the shard's counts (about 12 bytes per posting), not the shard's counting at once.

    :param parts: The shard's `(ids, texts)`, in order; a caller that holds its texts in another form (an Arrow
        column) makes each part's strings only when it is counted.
    :param doc_offset: Corpus position of the first document.
    :param tokenizer: Splits a text into terms.
    :returns: The counted shard and its statistics, the same as counting all its documents at once gives.
    :raises ValueError: If the ids are invalid (not unique non-empty strings, or there are none).
    """
    counted: list[CountedShard] = []
    statistics: list[CorpusStatistics] = []
    position = doc_offset
    for ids, texts in parts:
        check_corpus(ids, texts)
        counts = count_terms(texts, tokenizer)
        by_term = counts.frequencies.tocsc()  # every term occurs: term ids are columns, documents ascending in each
        statistics.append(CorpusStatistics.of_counts(counts, fingerprint_value(ids, texts, position)))
        counted.append(CountedShard(counts.vocabulary, list(ids), by_term.indptr.astype(np.int64), by_term.indices,
                                    by_term.data, counts.doc_lengths))  # fmt: skip
        position += len(ids)
        del counts, by_term
    if not counted:
        check_corpus([], [])  # raises: an empty shard
    shard = CountedShard.concatenate(counted)
    check_unique_ids(shard.doc_ids)  # an id in two parts
    return shard, CorpusStatistics.merge(statistics)


def per_posting(values: np.ndarray, starts: np.ndarray, first: int, stop: int) -> np.ndarray:
    """
    `np.repeat(values, np.diff(starts))[first:stop]` without the whole: each term's value over its postings among
    postings `first` to `stop` (term `t`'s are `starts[t]:starts[t + 1]`).
    """
    terms = slice(int(np.searchsorted(starts, first, "right")) - 1, int(np.searchsorted(starts, stop, "left")))
    return np.repeat(values[terms], np.diff(np.clip(starts[terms.start : terms.stop + 1], first, stop)))
