"""
The corpus statistics BM25 weighs with (documents, total length, each term's document frequency), counted shard
by shard, possibly in parallel, and merged in corpus order into the very numbers a one-pass count gives.
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qa_core.retrieval.counts import TermCounts, TermIds
from qa_core.retrieval.fingerprint import fingerprint_hex
from qa_core.retrieval.scoring import inverse_document_frequencies

# Where an index folder keeps its corpus's statistics (to grow it).
STATISTICS_FILE = "statistics.json"
FREQUENCIES_FILE = "doc_frequencies.npy"


@dataclass
class CorpusStatistics:
    """
    What BM25 needs to know of a corpus (or of a contiguous part of one) to weigh any of its documents.

    :param vocabulary: The terms, in order of first occurrence in the corpus (the term ids of `count_terms`).
    :param doc_frequencies: `(terms,)` int64 documents containing each term.
    :param n_docs: Documents.
    :param total_length: Terms in all documents, repeats included.
    :param fingerprint: `fingerprint.fingerprint_value` of the documents (at their corpus positions).
    """

    vocabulary: list[str]
    doc_frequencies: np.ndarray
    n_docs: int
    total_length: int
    fingerprint: int

    @classmethod
    def of_counts(cls, counts: TermCounts, fingerprint: int) -> "CorpusStatistics":
        """The statistics of counted documents."""
        frequencies = counts.frequencies
        return cls(
            vocabulary=counts.vocabulary,
            doc_frequencies=np.bincount(frequencies.indices, minlength=len(counts.vocabulary)).astype(np.int64),
            n_docs=int(frequencies.shape[0]),
            total_length=int(counts.doc_lengths.sum()),
            fingerprint=fingerprint,
        )

    @classmethod
    def merge(cls, parts: Iterable["CorpusStatistics"]) -> "CorpusStatistics":
        """
        The statistics of consecutive parts of a corpus, given in corpus order: the vocabulary in order of first
        occurrence, as one count of the whole corpus numbers it (the order BM25Okapi's mean idf sums in).
        """
        term_ids = TermIds()
        frequencies = np.zeros(0, np.int64)
        n_docs = total_length = fingerprint = 0
        for part in parts:
            ids = np.fromiter(map(term_ids.__getitem__, part.vocabulary), np.int64, len(part.vocabulary))
            if len(term_ids) > frequencies.size:
                grown = np.zeros(max(len(term_ids), 2 * frequencies.size), np.int64)
                grown[: frequencies.size] = frequencies
                frequencies = grown
            frequencies[ids] += part.doc_frequencies  # a part's terms are distinct
            n_docs += part.n_docs
            total_length += part.total_length
            fingerprint += part.fingerprint
        return cls(list(term_ids), frequencies[: len(term_ids)].copy(), n_docs, total_length, fingerprint)

    @property
    def avg_doc_len(self) -> float:
        """The mean document length, `avgdl`."""
        return self.total_length / self.n_docs

    @property
    def fingerprint_hex(self) -> str:
        """The fingerprint as the index files hold it."""
        return fingerprint_hex(self.fingerprint)

    def save(self, folder: Path) -> None:
        """Writes `statistics.json` (counts, fingerprint, vocabulary) and `doc_frequencies.npy` into a folder."""
        np.save(folder / FREQUENCIES_FILE, self.doc_frequencies.astype(np.int64), allow_pickle=False)
        header = {"n_docs": self.n_docs, "total_length": self.total_length, "fingerprint": self.fingerprint_hex}
        with (folder / STATISTICS_FILE).open("w", encoding="utf-8") as file:
            json.dump({**header, "vocabulary": self.vocabulary}, file, ensure_ascii=False)

    @classmethod
    def load(cls, folder: Path) -> "CorpusStatistics":
        """
        Reads what `save` wrote, never unpickling.

        :raises ValueError: If a file is missing or malformed.
        """
        try:
            with (folder / STATISTICS_FILE).open(encoding="utf-8") as file:
                values = json.load(file)
            frequencies = np.load(folder / FREQUENCIES_FILE, allow_pickle=False)
            statistics = cls(
                values["vocabulary"],
                frequencies,
                values["n_docs"],
                values["total_length"],
                int(values["fingerprint"], 16),
            )
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(f"Cannot read the corpus statistics in {folder}: {error}") from error
        if frequencies.dtype != np.int64 or frequencies.shape != (len(statistics.vocabulary),):
            raise ValueError(f"{folder / FREQUENCIES_FILE} does not match the vocabulary of {STATISTICS_FILE}.")
        return statistics

    def check(self, tokenization_regex: str) -> None:
        """:raises ValueError: If the corpus is empty or has no terms at all."""
        if self.n_docs == 0:
            raise ValueError("Cannot build a BM25 index from an empty corpus: no documents with content were given.")
        if self.total_length == 0:
            raise ValueError(
                f"The corpus of {self.n_docs} documents has no terms to index (tokenizer {tokenization_regex!r})."
            )

    def weights(self, algorithm: str, parameters: dict[str, float]) -> "CorpusWeights":
        """What a shard of the corpus is weighed with (`index.BM25Index.from_counted`)."""
        return CorpusWeights(
            term_ids={term: term_id for term_id, term in enumerate(self.vocabulary)},
            idf=inverse_document_frequencies(algorithm, parameters, self.doc_frequencies, self.n_docs),
            avg_doc_len=self.avg_doc_len,
            n_docs=self.n_docs,
            fingerprint=self.fingerprint_hex,
        )


@dataclass(frozen=True)
class CorpusWeights:
    """
    A corpus's statistics turned into what weighs any of its documents.

    :param term_ids: Each term's id (its place in the corpus's vocabulary).
    :param idf: `(terms,)` float64 idf, by term id.
    :param avg_doc_len: `avgdl`.
    :param n_docs: Documents in the corpus.
    :param fingerprint: The corpus's fingerprint (hex).
    """

    term_ids: dict[str, int]
    idf: np.ndarray
    avg_doc_len: float
    n_docs: int
    fingerprint: str
