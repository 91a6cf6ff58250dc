"""A corpus weighed for BM25 with its global statistics, and the fingerprint that identifies its documents."""

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from qa_core.retrieval.counts import count_terms
from qa_core.retrieval.scoring import inverse_document_frequencies, term_frequency_components
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
    :param fingerprint: `fingerprint(ids, texts)` of the whole corpus.
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
    _check_corpus(ids, texts)
    counts = count_terms(texts, tokenizer)
    total_length = int(counts.doc_lengths.sum())
    if total_length == 0:
        raise ValueError(f"The corpus of {len(texts)} documents has no terms to index (tokenizer {tokenizer.regex!r}).")
    avg_doc_len = total_length / len(texts)
    frequencies = counts.frequencies  # (documents, terms)
    idf = inverse_document_frequencies(
        algorithm, parameters, np.bincount(frequencies.indices, minlength=len(counts.vocabulary)), len(texts)
    )
    pair_weights = np.empty(frequencies.nnz)  # (pairs,), filled a block of documents at a time to bound memory
    for first in range(0, len(texts), _DOCS_PER_STEP):
        docs = slice(first, first + _DOCS_PER_STEP)
        starts = frequencies.indptr[first : first + _DOCS_PER_STEP + 1]
        pairs = slice(int(starts[0]), int(starts[-1]))
        pair_lengths = np.repeat(counts.doc_lengths[docs], np.diff(starts))  # each pair's document length
        tfc = term_frequency_components(algorithm, parameters, frequencies.data[pairs], pair_lengths, avg_doc_len)
        pair_weights[pairs] = idf[frequencies.indices[pairs]] * tfc
    weights = sp.csr_matrix((pair_weights, frequencies.indices, frequencies.indptr), shape=frequencies.shape)
    return WeightedCorpus(counts.vocabulary, weights, avg_doc_len, fingerprint(ids, texts))


def fingerprint(ids: Sequence[str], texts: Sequence[str]) -> str:
    """
    Identifies a corpus by its document ids and contents, in order.

    :param ids: Document ids.
    :param texts: Document texts, in the same order.
    :returns: A SHA-256 hex digest over each document's id and the SHA-256 of its text.
    """
    digest = hashlib.sha256()
    update_fingerprint(digest, ids, texts)
    return digest.hexdigest()


def update_fingerprint(digest: "hashlib._Hash", ids: Sequence[str], texts: Sequence[str]) -> None:
    """
    Feeds documents into a `hashlib.sha256()` digest, so that a corpus too large to hold can be fingerprinted
    batch by batch: its `hexdigest()` after all batches equals `fingerprint` of the whole corpus.

    :param digest: A `hashlib.sha256()` object, fed the earlier batches.
    :param ids: The batch's document ids.
    :param texts: Their texts, in the same order.
    """
    for doc_id, text in zip(ids, texts, strict=True):
        encoded_id = doc_id.encode("utf-8")
        digest.update(len(encoded_id).to_bytes(8, "little"))
        digest.update(encoded_id)
        digest.update(hashlib.sha256(text.encode("utf-8")).digest())


def _check_corpus(ids: Sequence[str], texts: Sequence[str]) -> None:
    if len(texts) == 0:
        raise ValueError("Cannot build a BM25 index from an empty corpus: no documents with content were given.")
    if len(ids) != len(texts):
        raise ValueError(f"Got {len(ids)} document ids for {len(texts)} texts.")
    for doc_id, text in zip(ids, texts, strict=True):
        if not isinstance(doc_id, str) or not doc_id:
            raise ValueError(f"Document ids must be non-empty strings, not {doc_id!r}.")
        if not isinstance(text, str):
            raise ValueError(f"Document {doc_id!r} has content {type(text).__name__}; the index takes strings only.")
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        duplicate = next(doc_id for doc_id in ids if doc_id in seen or seen.add(doc_id))
        raise ValueError(f"Document id {duplicate!r} occurs more than once in the corpus.")
