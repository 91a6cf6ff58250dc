"""
Shards: a corpus split by document into indexes weighed with the whole corpus's statistics, built at once
(`build_sharded`) or one shard at a time from the merged statistics of the corpus (`build_shard`), and weighed
again without tokenizing when the corpus grows (`reweigh_shard`, from the term counts `build_shard` keeps).
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from qa_core.retrieval.corpus import check_corpus, weigh_corpus, weigh_frequencies
from qa_core.retrieval.counts import count_terms
from qa_core.retrieval.fingerprint import fingerprint
from qa_core.retrieval.index import BM25Index, CorpusStats, dense_rows, term_major
from qa_core.retrieval.scoring import DEFAULT_ALGORITHM, resolve_parameters, term_frequency_components
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


# The term counts of a shard, beside its index files.
COUNT_FILES = {"term_counts": np.dtype(np.int32), "doc_lengths": np.dtype(np.int64)}


@dataclass(frozen=True)
class ShardCounts:
    """
    What a shard's weights were computed from, besides the corpus's statistics.

    :param term_counts: `(pairs,)` int32 occurrences of each posting's term in its document, in posting order.
    :param doc_lengths: `(documents,)` int64 terms per document.
    """

    term_counts: np.ndarray
    doc_lengths: np.ndarray

    def save(self, folder: Path) -> None:
        """Writes `term_counts.npy` and `doc_lengths.npy` into a shard folder."""
        for name, dtype in COUNT_FILES.items():
            np.save(folder / f"{name}.npy", np.ascontiguousarray(getattr(self, name), dtype=dtype), allow_pickle=False)

    @classmethod
    def load(cls, folder: Path) -> "ShardCounts":
        """
        Reads what `save` wrote, memory-mapped, never unpickling.

        :raises ValueError: If a file is missing or not a one-dimensional array of its dtype.
        """
        arrays = {}
        for name, dtype in COUNT_FILES.items():
            try:
                array = np.load(folder / f"{name}.npy", allow_pickle=False, mmap_mode="r")
            except (OSError, ValueError) as error:
                raise ValueError(f"Cannot load {folder / name}.npy (the shard's term counts): {error}") from error
            if array.dtype != dtype or array.ndim != 1:
                raise ValueError(f"{folder / name}.npy must be a one-dimensional {dtype} array.")
            arrays[name] = array
        return cls(**arrays)


def build_shard(
    ids: Sequence[str],
    texts: Sequence[str],
    doc_offset: int,
    weights: CorpusWeights,
    algorithm: str,
    parameters: dict[str, float],
    tokenization_regex: str,
) -> tuple[BM25Index, ShardCounts]:
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
    :returns: The shard, and its term counts (for `reweigh_shard`).
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
    shard_counts = ShardCounts(term_major(frequencies)[1].data, counts.doc_lengths)  # the weights' posting order
    index = BM25Index.from_weights(
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
    return index, shard_counts


def reweigh_shard(index: BM25Index, counts: ShardCounts, weights: CorpusWeights) -> BM25Index:
    """
    A shard weighed again with the statistics of a corpus that grew (documents added after it), from its term
    counts, without tokenizing: bit for bit the shard `build_shard` makes with those statistics.

    :param index: The shard, as built or loaded.
    :param counts: Its term counts (`build_shard`'s).
    :param weights: The grown corpus's weights (its vocabulary holds every term of the shard).
    :returns: The shard with the new weights and corpus statistics.
    """
    postings = index.postings
    corpus_ids = np.fromiter(map(weights.term_ids.__getitem__, index.vocabulary), np.int64, len(index.vocabulary))
    pair_terms = np.repeat(corpus_ids, np.diff(postings.starts))
    pair_lengths = np.asarray(counts.doc_lengths)[postings.doc_indices]
    tfc = term_frequency_components(
        index.algorithm, index.parameters, np.asarray(counts.term_counts), pair_lengths, weights.avg_doc_len
    )
    pair_weights = weights.idf[pair_terms] * tfc
    dense_terms, dense_weights = dense_rows(postings.starts, postings.doc_indices, pair_weights, index.n_docs)
    return BM25Index(
        algorithm=index.algorithm,
        parameters=index.parameters,
        tokenization_regex=index.tokenizer.regex,
        vocabulary=index.vocabulary,
        doc_ids=index.doc_ids,
        doc_offset=index.doc_offset,
        fingerprint=index.fingerprint,
        corpus=CorpusStats(weights.n_docs, weights.avg_doc_len, weights.fingerprint),
        postings=replace(postings, weights=pair_weights, dense_terms=dense_terms, dense_weights=dense_weights),
    )
