"""
BM25 term weights with the formulas of Haystack's `InMemoryDocumentStore` (BM25Okapi, BM25L, BM25Plus) and of
Lucene (the variant of bm25s's `method="lucene"`).

A document's score for a query is the sum, over the query's distinct terms, of `idf(term) * tfc(term, document)`.
A term the document lacks adds nothing, in every variant: the installed Haystack gives BM25L's and BM25Plus's
`delta` only to terms that occur (bm25s instead credits missing terms), so the weights live in a sparse matrix.
"""

import math
from numbers import Real

import numpy as np

ALGORITHMS = ("BM25Okapi", "BM25L", "BM25Plus", "Lucene")
DEFAULT_ALGORITHM = "BM25L"  # Haystack's InMemoryDocumentStore default
# Haystack's defaults (`bm25_parameters.get(...)` in each `_score_*`); Lucene takes bm25s's k1 and b.
DEFAULT_PARAMETERS: dict[str, dict[str, float]] = {
    "BM25Okapi": {"k1": 1.5, "b": 0.75, "epsilon": 0.25},
    "BM25L": {"k1": 1.5, "b": 0.75, "delta": 0.5},
    "BM25Plus": {"k1": 1.5, "b": 0.75, "delta": 1.0},
    "Lucene": {"k1": 1.5, "b": 0.75},
}


def resolve_parameters(algorithm: str, parameters: dict[str, float] | None) -> dict[str, float]:
    """
    Checks an algorithm's parameters and fills in the defaults.

    :param algorithm: One of `ALGORITHMS`.
    :param parameters: Some of the algorithm's parameters (`k1`, `b`, and `delta` or `epsilon`), or `None`.
    :returns: All of the algorithm's parameters, as floats.
    :raises ValueError: If the algorithm is unknown, a parameter does not belong to it, or a value is out of range
        (`k1`, `delta`, `epsilon` must be finite and at least 0, `b` between 0 and 1).
    """
    if algorithm not in DEFAULT_PARAMETERS:
        raise ValueError(f"bm25_algorithm must be one of {', '.join(ALGORITHMS)}, not {algorithm!r}.")
    resolved = dict(DEFAULT_PARAMETERS[algorithm])
    unknown = sorted(set(parameters or {}) - set(resolved))
    if unknown:
        raise ValueError(f"bm25_parameters {unknown} do not apply to {algorithm}, which takes {', '.join(resolved)}.")
    for name, value in (parameters or {}).items():
        if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
            raise ValueError(f"bm25_parameters[{name!r}] must be a finite number, not {value!r}.")
        if value < 0 or (name == "b" and value > 1):
            bounds = "between 0 and 1" if name == "b" else "at least 0"
            raise ValueError(f"bm25_parameters[{name!r}] must be {bounds}, not {value!r}.")
        resolved[name] = float(value)
    return resolved


def inverse_document_frequencies(
    algorithm: str, parameters: dict[str, float], doc_frequencies: np.ndarray, n_docs: int
) -> np.ndarray:
    """
    Each term's idf.

    :param algorithm: One of `ALGORITHMS`.
    :param parameters: From `resolve_parameters`.
    :param doc_frequencies: `(terms,)` documents containing each term, all at least 1.
    :param n_docs: Documents in the corpus (with content, empty ones included).
    :returns: `(terms,)` float64 idf.
    """
    n = doc_frequencies.astype(np.float64)
    if algorithm == "BM25Okapi":
        idf = np.log((n_docs - n + 0.5) / (n + 0.5))
        # Terms in more than half the documents get epsilon times the mean idf of the vocabulary instead.
        eps = parameters["epsilon"] * idf.sum() / idf.size
        return np.where(idf < 0, eps, idf)
    if algorithm == "BM25L":
        return np.log((n_docs + 1.0) / (n + 0.5))
    return np.log(1 + (n_docs - n + 0.5) / (n + 0.5))  # BM25Plus and Lucene


def term_frequency_components(
    algorithm: str, parameters: dict[str, float], frequencies: np.ndarray, doc_lengths: np.ndarray, avg_doc_len: float
) -> np.ndarray:
    """
    Each (term, document) pair's tfc, for terms the document contains.

    :param algorithm: One of `ALGORITHMS`.
    :param parameters: From `resolve_parameters`.
    :param frequencies: `(pairs,)` occurrences of the term in the document, all at least 1.
    :param doc_lengths: `(pairs,)` the document's length.
    :param avg_doc_len: Mean document length of the corpus (greater than 0).
    :returns: `(pairs,)` float64 tfc, the operations in Haystack's order.
    """
    k, b = parameters["k1"], parameters["b"]
    f = frequencies.astype(np.float64)
    length_norm = 1 - b + b * doc_lengths.astype(np.float64) / avg_doc_len
    if algorithm == "BM25L":
        ctd = f / length_norm
        return (1.0 + k) * (ctd + parameters["delta"]) / (k + ctd + parameters["delta"])
    if algorithm == "BM25Plus":
        return f * (1.0 + k) / (f + k * length_norm) + parameters["delta"]
    if algorithm == "BM25Okapi":
        return f * (1.0 + k) / (f + k * length_norm)
    return f / (f + k * length_norm)  # Lucene
