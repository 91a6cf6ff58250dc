"""A corpus weighed for BM25 with its global statistics."""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from qa_core.retrieval.counts import count_terms
from qa_core.retrieval.fingerprint import fingerprint_value
from qa_core.retrieval.scoring import term_frequency_components
from qa_core.retrieval.statistics import CorpusStatistics
from qa_core.retrieval.tokenizer import Tokenizer

# Documents weighed per step: bounds the temporaries of the formulas.
_DOCS_PER_STEP = 65536


@dataclass
class WeightedCorpus:
    """
    Every (document, term) weight `idf(term) * tfc(term, document)` of a corpus.

    :param vocabulary: The terms, by term id.
    :param weights: `(documents, terms)` float64 CSR matrix; a row holds only the terms its document has.
    :param avg_doc_len: Mean document length, the `avgdl` every weight used.
    :param fingerprint: `fingerprint.fingerprint(ids, texts)` of the whole corpus.
    """

    vocabulary: list[str]
    weights: sp.csr_matrix
    avg_doc_len: float
    fingerprint: str

    @property
    def n_docs(self) -> int:
        """Documents in the corpus, the `N` every idf used."""
        return self.weights.shape[0]


def weigh_corpus(
    ids: Sequence[str], texts: Sequence[str], algorithm: str, parameters: dict[str, float], tokenizer: Tokenizer
) -> WeightedCorpus:
    """
    Tokenizes a corpus and weighs its terms with the corpus's own statistics (N, document frequencies, avgdl).

    :param ids: Document ids, unique and non-empty.
    :param texts: Document texts, in the same order (empty texts count as documents of length 0, as in Haystack).
    :param algorithm: One of `scoring.ALGORITHMS`.
    :param parameters: From `scoring.resolve_parameters`.
    :param tokenizer: Splits a text into terms.
    :returns: The weighed corpus.
    :raises ValueError: If the corpus is empty, has no terms at all, or the ids are not unique non-empty strings
        matching the texts one to one.
    """
    check_corpus(ids, texts)
    counts = count_terms(texts, tokenizer)
    statistics = CorpusStatistics.of_counts(counts, fingerprint_value(ids, texts))
    statistics.check(tokenizer.regex)
    weights = statistics.weights(algorithm, parameters)
    frequencies = weigh_frequencies(
        counts.frequencies, counts.doc_lengths, weights.idf, weights.avg_doc_len, algorithm, parameters
    )
    return WeightedCorpus(counts.vocabulary, frequencies, weights.avg_doc_len, weights.fingerprint)


def weigh_frequencies(
    frequencies: sp.csr_matrix,
    doc_lengths: np.ndarray,
    idf: np.ndarray,
    avg_doc_len: float,
    algorithm: str,
    parameters: dict[str, float],
) -> sp.csr_matrix:
    """
    The BM25 weights of counted documents.

    :param frequencies: `(documents, terms)` CSR term counts, columns by corpus term id.
    :param doc_lengths: `(documents,)` their lengths.
    :param idf: `(terms,)` the corpus's idf, by corpus term id.
    :param avg_doc_len: The corpus's `avgdl`.
    :param algorithm: One of `scoring.ALGORITHMS`.
    :param parameters: From `scoring.resolve_parameters`.
    :returns: `(documents, terms)` float64 CSR `idf * tfc`, with `frequencies`' structure.
    """
    n_docs = frequencies.shape[0]
    pair_weights = np.empty(frequencies.nnz)  # (pairs,), filled a block of documents at a time to bound memory
    for first in range(0, n_docs, _DOCS_PER_STEP):
        docs = slice(first, first + _DOCS_PER_STEP)
        starts = frequencies.indptr[first : first + _DOCS_PER_STEP + 1]
        pairs = slice(int(starts[0]), int(starts[-1]))
        pair_lengths = np.repeat(doc_lengths[docs], np.diff(starts))  # each pair's document length
        tfc = term_frequency_components(algorithm, parameters, frequencies.data[pairs], pair_lengths, avg_doc_len)
        pair_weights[pairs] = idf[frequencies.indices[pairs]] * tfc
    return sp.csr_matrix((pair_weights, frequencies.indices, frequencies.indptr), shape=frequencies.shape)


def check_corpus(ids: Sequence[str], texts: Sequence[str]) -> None:
    """:raises ValueError: If the corpus is empty, or the ids are not unique non-empty strings matching the texts."""
    if len(texts) == 0:
        raise ValueError("Cannot build a BM25 index from an empty corpus: no documents with content were given.")
    if len(ids) != len(texts):
        raise ValueError(f"Got {len(ids)} document ids for {len(texts)} texts.")
    for doc_id, text in zip(ids, texts, strict=True):
        if not isinstance(doc_id, str) or not doc_id:
            raise ValueError(f"Document ids must be non-empty strings, not {doc_id!r}.")
        if not isinstance(text, str):
            raise ValueError(f"Document {doc_id!r} has content {type(text).__name__}; the index takes strings only.")
    check_unique_ids(ids)


def check_unique_ids(ids: Sequence[str]) -> None:
    """:raises ValueError: Naming the first id that occurs twice."""
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        duplicate = next(doc_id for doc_id in ids if doc_id in seen or seen.add(doc_id))
        raise ValueError(f"Document id {duplicate!r} occurs more than once in the corpus.")
