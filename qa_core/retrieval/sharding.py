"""
Shards: a corpus split by document into indexes weighed with the whole corpus's statistics, built at once
(`build_sharded`) or one shard at a time from the merged statistics of the corpus (`build_shard`).
"""

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from qa_core.retrieval.corpus import check_corpus, weigh_corpus, weigh_frequencies
from qa_core.retrieval.counts import count_terms
from qa_core.retrieval.fingerprint import fingerprint
from qa_core.retrieval.index import BM25Index, CorpusStats
from qa_core.retrieval.scoring import DEFAULT_ALGORITHM, resolve_parameters
from qa_core.retrieval.statistics import CorpusWeights
from qa_core.retrieval.tokenizer import DEFAULT_TOKENIZATION_REGEX, Tokenizer


def build_sharded(
    ids: Sequence[str],
    texts: Sequence[str],
    n_shards: int,
    algorithm: str = DEFAULT_ALGORITHM,
    parameters: dict[str, float] | None = None,
    tokenization_regex: str = DEFAULT_TOKENIZATION_REGEX,
) -> list[BM25Index]:
    """
    Indexes a corpus as contiguous shards that share its idf and avgdl, so that searching each shard and
    merging with `merge_top_k` gives exactly the hits, order and scores of one index.

    Usage example:
    ```python
    shards = build_sharded(ids, texts, n_shards=3)
    positions, scores = merge_top_k([shard.search(queries, k=10) for shard in shards], k=10)
    ```

    :param ids: Document ids, unique and non-empty.
    :param texts: Document texts, in the same order.
    :param n_shards: Shards to make (at least 1, at most one per document); sizes differ by at most one.
    :param algorithm: As in `BM25Index.build`.
    :param parameters: As in `BM25Index.build`.
    :param tokenization_regex: As in `BM25Index.build`.
    :returns: The shards, in corpus order; shard `i` holds corpus positions `shards[i].doc_offset` onwards.
    :raises ValueError: If `n_shards` is out of range, or as `BM25Index.build` does.
    """
    resolved = resolve_parameters(algorithm, parameters)
    tokenizer = Tokenizer(tokenization_regex)
    if isinstance(n_shards, bool) or not isinstance(n_shards, int) or not 1 <= n_shards <= max(len(texts), 1):
        raise ValueError(f"n_shards must be an integer from 1 to the {len(texts)} documents, not {n_shards!r}.")
    weighted = weigh_corpus(ids, texts, algorithm, resolved, tokenizer)
    bounds = shard_bounds(len(texts), n_shards)
    return [
        BM25Index.from_rows(weighted, ids, texts, start, stop, algorithm, resolved, tokenization_regex)
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True)
    ]


def shard_bounds(n_docs: int, n_shards: int) -> list[int]:
    """The first corpus position of each of `n_shards` contiguous shards, then `n_docs`: sizes differ by at most 1."""
    return [shard * n_docs // n_shards for shard in range(n_shards + 1)]


def build_shard(
    ids: Sequence[str],
    texts: Sequence[str],
    doc_offset: int,
    weights: CorpusWeights,
    algorithm: str,
    parameters: dict[str, float],
    tokenization_regex: str,
) -> BM25Index:
    """
    Indexes one shard of a corpus with the corpus's merged statistics (`CorpusStatistics.merge(...).weights`):
    the same index, bit for bit, as `build_sharded`'s shard of these positions.

    :param ids: The shard's document ids, in corpus order.
    :param texts: Their texts.
    :param doc_offset: Corpus position of the first.
    :param weights: The corpus's idf and avgdl; every term of the texts must be in its vocabulary.
    :param algorithm: The algorithm `weights` was made for.
    :param parameters: Its parameters (`scoring.resolve_parameters`).
    :param tokenization_regex: The regex the statistics were counted with.
    :returns: The shard.
    :raises ValueError: If the ids are invalid or a term is missing from the statistics (they were counted from
        other documents).
    """
    check_corpus(ids, texts)
    counts = count_terms(texts, Tokenizer(tokenization_regex))
    try:
        corpus_ids = np.fromiter(map(weights.term_ids.__getitem__, counts.vocabulary), np.int64, len(counts.vocabulary))
    except KeyError as error:
        raise ValueError(f"The term {error.args[0]!r} of shard {doc_offset} is not in the corpus statistics.") from None
    frequencies = counts.frequencies
    frequencies = sp.csr_matrix(
        (frequencies.data, corpus_ids[frequencies.indices].astype(np.int32), frequencies.indptr),
        shape=(frequencies.shape[0], len(weights.term_ids)),
    )
    rows = weigh_frequencies(frequencies, counts.doc_lengths, weights.idf, weights.avg_doc_len, algorithm, parameters)
    return BM25Index.from_weights(
        rows,
        dict(zip(corpus_ids.tolist(), counts.vocabulary, strict=True)),
        list(ids),
        doc_offset,
        fingerprint(ids, texts, doc_offset),
        CorpusStats(weights.n_docs, weights.avg_doc_len, weights.fingerprint),
        algorithm,
        parameters,
        tokenization_regex,
    )
