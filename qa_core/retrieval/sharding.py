"""
Shards: a corpus split by document into indexes weighed with the whole corpus's statistics, built at once
(`build_sharded`) or one shard at a time: each shard tokenized once into its term counts and statistics
(`counted.count_shard`), the shards' statistics merged in corpus order, then each shard weighed from its counts
(`weigh_counted_shard`), again without tokenizing whenever the corpus grows.
"""

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from qa_core.retrieval.corpus import check_corpus
from qa_core.retrieval.counted import CountedShard, count_shard
from qa_core.retrieval.index import BM25Index
from qa_core.retrieval.index_io import COUNTED_ARRAYS, DOC_IDS_FILE, VOCABULARY_FILE
from qa_core.retrieval.scoring import DEFAULT_ALGORITHM, resolve_parameters
from qa_core.retrieval.statistics import CorpusStatistics, CorpusWeights
from qa_core.retrieval.tokenizer import DEFAULT_TOKENIZATION_REGEX, Tokenizer
from qa_core.retrieval.topk import merge_top_k


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
    if isinstance(n_shards, bool) or not isinstance(n_shards, int) or not 1 <= n_shards <= max(len(texts), 1):
        raise ValueError(f"n_shards must be an integer from 1 to the {len(texts)} documents, not {n_shards!r}.")
    return build_shards(ids, texts, shard_bounds(len(texts), n_shards), algorithm, parameters, tokenization_regex)[0]


def build_shards(
    ids: Sequence[str],
    texts: Sequence[str],
    bounds: Sequence[int],
    algorithm: str = DEFAULT_ALGORITHM,
    parameters: dict[str, float] | None = None,
    tokenization_regex: str = DEFAULT_TOKENIZATION_REGEX,
) -> tuple[list[BM25Index], CorpusStatistics]:
    """
    `build_sharded` with the shards' bounds given: each shard counted (`counted.count_shard`), the statistics
    merged, each shard weighed with them.

    :param bounds: The first corpus position of each shard, then `len(texts)`, increasing from 0.
    :returns: The shards, in corpus order, and the corpus's statistics.
    :raises ValueError: As `BM25Index.build`.
    """
    resolved = resolve_parameters(algorithm, parameters)
    tokenizer = Tokenizer(tokenization_regex)
    check_corpus(ids, texts)
    counted = [count_shard(ids[start:stop], texts[start:stop], start, tokenizer)
               for start, stop in zip(bounds[:-1], bounds[1:], strict=True)]  # fmt: skip
    statistics = CorpusStatistics.merge(shard_statistics for _, shard_statistics in counted)
    statistics.check(tokenization_regex)
    weights = statistics.weights(algorithm, resolved)
    shards = [
        BM25Index.from_counted(shard, start, shard_statistics.fingerprint_hex, weights, algorithm, resolved,
                               tokenization_regex)
        for (shard, shard_statistics), start in zip(counted, bounds[:-1], strict=True)
    ]  # fmt: skip
    return shards, statistics


def shard_bounds(n_docs: int, n_shards: int) -> list[int]:
    """The first corpus position of each of `n_shards` contiguous shards, then `n_docs`: sizes differ by at most 1."""
    return [shard * n_docs // n_shards for shard in range(n_shards + 1)]


def weigh_counted_shard(
    folder: Path,
    doc_offset: int,
    doc_fingerprint: str,
    weights: CorpusWeights,
    algorithm: str,
    parameters: dict[str, float],
    tokenization_regex: str,
    parts: Sequence[Path] = (),
) -> int:
    """
    `BM25Index.from_counted` of the counted shard in a folder (a shard counted, or weighed before and weighed
    again for a grown corpus), its index written beside its counts. Only the files whose bytes change are
    written: the idf, bounds and header always, the files in term order (vocabulary, postings, term counts) only
    when the shard's terms were put in another order. A shard weighed before keeps its order (a grown corpus
    numbers its new terms after the old ones), so weighing it again reads its counts memory-mapped and writes its
    idf, bounds and header only.

    :param folder: The shard's folder (`CountedShard.save`'s, or a weighed shard's).
    :param parts: The folders of the shard's consecutive parts, where it was counted in parts rather than into
        `folder`: put together (`CountedShard.concatenate`), and every file of the shard written into `folder`.
    :returns: The shard's vocabulary size.
    :raises ValueError: As `BM25Index.from_counted`, or if the folder's files are missing or do not fit each other.
    """
    if parts:
        counted = CountedShard.concatenate([CountedShard.load(part) for part in parts])
    else:
        counted = CountedShard.load(folder, mmap=True)
    index = BM25Index.from_counted(counted, doc_offset, doc_fingerprint, weights, algorithm, parameters,
                                   tokenization_regex)  # fmt: skip
    if parts:  # nothing of the shard is in its folder yet
        kept: frozenset[str] = frozenset()
    elif index.vocabulary is counted.vocabulary:  # the terms were in the corpus's order: the counts as they are
        kept = frozenset({DOC_IDS_FILE, VOCABULARY_FILE, *(f"{name}.npy" for name in COUNTED_ARRAYS)})
    else:  # reordered: ids and lengths are in document order
        kept = frozenset({DOC_IDS_FILE, "doc_lengths.npy"})
        del counted  # no array of it is read again: its files are written over below
    index.save(folder, kept)
    return len(index.vocabulary)


def search_shards(
    shards: Sequence[BM25Index],
    queries: Sequence[str],
    k: int,
    prune: bool = True,
    best: tuple[np.ndarray, np.ndarray] | None = None,
    allowed: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """
    Searches a corpus's shards one after the other, each with the k-th best score found so far as its floor
    (`BM25Index.search`'s `floors`: a later shard skips what cannot beat it), merging as it goes.

    :param shards: The shards, in corpus order (`build_sharded`'s, or loaded).
    :param queries: Non-empty query strings.
    :param k: Most hits per query.
    :param prune: As in `BM25Index.search`.
    :param best: The hits of the shards before these (`(queries, k)` positions and scores, padded with -1 and
        -inf), which the search starts from; None: these are the first.
    :param allowed: Bool by corpus position, covering the shards' positions: the documents a hit may be
        (`BM25Index.search`'s, each shard given its part); None: all.
    :returns: As `merge_top_k` of every shard's `search` (and `best`): the same positions and scores.
    """
    for shard in shards:
        floors = None if best is None else best[1][:, k - 1]  # -inf where fewer than k so far
        shard_allowed = None if allowed is None else allowed[shard.doc_offset : shard.doc_offset + shard.n_docs]
        found = shard.search(queries, k, floors=floors, prune=prune, allowed=shard_allowed)
        best = found if best is None else merge_top_k([best, found], k)
    return best
