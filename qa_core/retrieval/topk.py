"""Top-k selection in Haystack's order: score descending, ties in corpus order (its sort is stable)."""

from collections.abc import Sequence

import numpy as np

# Padding of result rows with fewer than k hits.
NO_POSITION = -1
NO_SCORE = -np.inf
# top_k estimates its floor from one document in this many.
_SAMPLE_STRIDE = 16


def top_k(scores: np.ndarray, k: int, drop_non_positive: bool) -> tuple[np.ndarray, np.ndarray]:
    """
    The k best documents of one query.

    :param scores: `(docs,)` float64 score of every document, by corpus position.
    :param k: Most hits to return (at least 1).
    :param drop_non_positive: Leave out scores of 0 or less (Haystack does for every algorithm but BM25Okapi).
    :returns: `(hits,)` positions and `(hits,)` scores, best first, `hits <= k`.
    """
    candidates = _candidates(scores, k, drop_non_positive)  # ascending positions holding every hit
    values = scores[candidates]
    if values.size > k:
        kth = np.partition(values, values.size - k)[values.size - k]
        above = np.flatnonzero(values > kth)
        at_kth = np.flatnonzero(values == kth)[: k - above.size]  # ties at the k-th: the earliest positions win
        kept = np.union1d(above, at_kth)
        candidates, values = candidates[kept], values[kept]
    order = np.lexsort((candidates, -values))
    return candidates[order].astype(np.int64), values[order]


def _candidates(scores: np.ndarray, k: int, drop_non_positive: bool) -> np.ndarray:
    """
    Positions whose score reaches a floor no higher than the k-th best score, so that every hit is among them.

    The floor is the k-th best score of every `_SAMPLE_STRIDE`-th document: a subset's k-th best is at most the
    whole's. One comparison pass then replaces a partition of all the scores.
    """
    sample = scores[::_SAMPLE_STRIDE]
    floor = np.partition(sample, sample.size - k)[sample.size - k] if sample.size > k else -np.inf
    if drop_non_positive and floor <= 0:
        return np.flatnonzero(scores > 0)
    return np.flatnonzero(scores >= floor)


def merge_top_k(results: Sequence[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """
    Merges the top-k of several shards into the top-k of the whole corpus.

    Exact when each shard's scores use the corpus's statistics (`build_sharded` does) and its positions are
    corpus positions (`BM25Index.search` returns them).

    Usage example:
    ```python
    shards = build_sharded(ids, texts, n_shards=3)
    positions, scores = merge_top_k([shard.search(queries, k=10) for shard in shards], k=10)
    ```

    :param results: Per shard, `(queries, k_shard)` positions and scores as `BM25Index.search` returns them
        (padded with -1 and -inf).
    :param k: Hits to keep per query (at least 1).
    :returns: `(queries, k)` positions and scores, best first, ties in corpus order, padded with -1 and -inf.
    :raises ValueError: If `k < 1`, no results are given, or the shards answered different numbers of queries.
    """
    check_k(k)
    if not results:
        raise ValueError("merge_top_k needs the results of at least one shard.")
    if len({positions.shape[0] for positions, _ in results}) != 1:
        raise ValueError("merge_top_k got results for different numbers of queries.")
    positions = np.concatenate([positions for positions, _ in results], axis=1)  # (queries, sum of k_shard)
    scores = np.concatenate([scores for _, scores in results], axis=1)
    # Padding gets the largest position so that it sorts after every hit, whatever its score.
    positions_key = np.where(positions == NO_POSITION, np.iinfo(np.int64).max, positions)
    by_position = np.argsort(positions_key, axis=1, kind="stable")
    positions = np.take_along_axis(positions, by_position, axis=1)
    scores = np.take_along_axis(scores, by_position, axis=1)
    by_score = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    merged_positions = np.take_along_axis(positions, by_score, axis=1)
    merged_scores = np.take_along_axis(scores, by_score, axis=1)
    return pad_columns(merged_positions, merged_scores, k)


def pad_columns(positions: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Pads `(queries, n)` result arrays with `n <= k` to `(queries, k)` with -1 positions and -inf scores."""
    missing = k - positions.shape[1]
    if missing == 0:
        return positions, scores
    return (
        np.pad(positions, ((0, 0), (0, missing)), constant_values=NO_POSITION),
        np.pad(scores, ((0, 0), (0, missing)), constant_values=NO_SCORE),
    )


def check_k(k: int) -> None:
    """:raises ValueError: If `k` is not an integer of at least 1."""
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"top_k must be an integer of at least 1, not {k!r}.")
