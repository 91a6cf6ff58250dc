"""
Max-score pruning: a query's k best documents found by scoring only those that can still reach them, with exactly
the scores, order and ties of scoring every document (`BM25Index.search(..., prune=False)`).

A term's largest weight in an index bounds what it adds to any document's score; a threshold below which no
document can be a hit is known from the caller's floor (the k-th best score of the shards searched before) or is
found on the way (the k-th best of partial or exact sums: a lower bound of the k-th best score). The documents of
one term (the seed: of the terms every hit must hold, the one with the fewest documents; else the weightiest) are
looked up term by term (the other terms every hit must hold first, then the weightiest first), each step
dropping those whose known weights plus the bounds of the terms still unknown cannot reach the threshold. A
document outside the seed can only be a hit if it holds one of the terms whose bounds, added to those of every
lighter term, reach the threshold, and every term without which it cannot: those documents are scored the same
way. Each survivor's score is then summed term by term in query order, 0.0 where a document lacks a term: the
very float summation of scoring every document, so scores and ties come out bit for bit.

Bounds and partial sums are added in another order than the query's; `_Terms.tolerance` covers the rounding of
both, so that no document that could be a hit is ever dropped.
"""

import math

import numpy as np

from qa_core.retrieval.pair_weights import PairWeights

# Past this share of the index's documents as candidates, pruning costs more than scoring every document (1M
# passages of 80 words, 8-word queries, CPU time: 228 queries/s at 0.03, 295 at 0.1, 289 at 0.2, 292 at 0.4).
MAX_CANDIDATE_SHARE = 0.1
# Below this many documents in an index, scoring every document costs less than pruning's bookkeeping (at 5,000
# documents a shard, pruning searched at 0.6x the speed).
MIN_DOCS = 100_000
_EPS = float(np.finfo(np.float64).eps)


class PostingReader:
    """
    Term lookups on an index's posting arrays (as plain arrays, memory-mapped or not): a term's documents, the
    weights of some of its postings (computed, `pair_weights`) and its bound.

    :param starts: `PostingLists.starts`.
    :param doc_indices: `PostingLists.doc_indices`.
    :param weights: The postings' weights.
    :param bounds: `PostingLists.bounds`.
    :param n_docs: Documents in the index.
    """

    def __init__(
        self, starts: np.ndarray, doc_indices: np.ndarray, weights: PairWeights, bounds: np.ndarray, n_docs: int
    ) -> None:
        # np.asarray drops np.memmap's subclass, whose Python-level indexing costs more than these small lookups.
        self.starts = np.asarray(starts)
        self.doc_indices = np.asarray(doc_indices)
        self.pair_weights = weights
        self.bounds = np.asarray(bounds)
        self.n_docs = n_docs

    def span(self, term_id: int) -> slice:
        """Where a term's postings lie in the posting arrays."""
        return slice(int(self.starts[term_id]), int(self.starts[term_id + 1]))

    def docs(self, term_id: int) -> np.ndarray:
        """A term's `(postings,)` document indices, ascending."""
        return self.doc_indices[self.span(term_id)]

    def weights(self, term_id: int) -> np.ndarray:
        """A term's `(postings,)` weights, in the order of its documents."""
        return self.pair_weights.weights(term_id, self.span(term_id))

    def size(self, term_id: int) -> int:
        """The documents holding a term."""
        return int(self.starts[term_id + 1] - self.starts[term_id])

    def bound(self, term_id: int) -> float:
        """A term's largest weight, at least 0.0."""
        return float(self.bounds[term_id])

    def weights_at(self, term_id: int, docs: np.ndarray, scratch: np.ndarray) -> np.ndarray:
        """
        `(docs,)` a term's weight in each of the documents `docs` (ascending, distinct), 0.0 where it is missing.

        :param scratch: `(n_docs,)` int32 zeros, left so (`new_scratch`).
        """
        span = self.span(term_id)
        term_docs = self.doc_indices[span]
        small, large = sorted((term_docs.size, docs.size))
        weights = np.zeros(docs.size)
        # Measured costs: a table costs about 2 per posting and 3 per candidate, binary searches 1 per level.
        if 2 * term_docs.size + 3 * docs.size < small * math.log2(large + 1):
            scratch[term_docs] = np.arange(1, term_docs.size + 1, dtype=np.int32)  # each document's posting + 1
            at = scratch[docs]
            scratch[term_docs] = 0
            found = at > 0
            postings = at[found] - 1
        elif term_docs.size < docs.size:  # look the term's documents up among the candidates
            at = np.minimum(np.searchsorted(docs, term_docs), docs.size - 1)
            held = docs[at] == term_docs
            found, postings = at[held], np.flatnonzero(held)
        else:  # the candidates among the postings
            at = np.minimum(np.searchsorted(term_docs, docs), term_docs.size - 1)
            found = term_docs[at] == docs
            postings = at[found]
        weights[found] = self.pair_weights.weights(term_id, postings + span.start)
        return weights

    def new_scratch(self) -> np.ndarray:
        """Zeros for `weights_at`, one array for any number of lookups (not shared between threads)."""
        return np.zeros(self.n_docs, np.int32)


def pruned_top_k(
    reader: PostingReader,
    term_ids: list[int],
    k: int,
    floor: float,
    scratch: np.ndarray,
    allowed: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """
    The k best documents of a query with scores above 0 and above `floor`: those of scoring every document and
    `topk.top_k(..., drop_non_positive=True)`, bit for bit, less those at or below `floor`. Every weight must be
    at least 0 (all the algorithms that drop scores of 0 give such weights).

    :param reader: The index's postings.
    :param term_ids: The query's distinct terms present in the index, in query order.
    :param k: Most hits.
    :param floor: Hits must score above it (`-inf` for none).
    :param scratch: `reader.new_scratch()`'s.
    :param allowed: `(n_docs,)` bool: the documents a hit may be (the others are never candidates); None: all.
    :returns: `(hits,)` document indices within the index and `(hits,)` scores, best first, ties to the earlier
        document; `None` where too many documents are candidates for pruning to pay (score them all instead).
    """
    if not term_ids:
        return np.zeros(0, np.int64), np.zeros(0)
    terms = _Terms(reader, term_ids, scratch)
    threshold = max(floor, 0.0)  # nothing below can be a hit
    seed = terms.seed(threshold)
    if terms.sizes[seed] > MAX_CANDIDATE_SHARE * reader.n_docs:
        return None
    seed_docs, seed_weights = reader.docs(term_ids[seed]), reader.weights(term_ids[seed])
    if allowed is not None:
        kept = allowed[seed_docs]
        seed_docs, seed_weights = seed_docs[kept], seed_weights[kept]
    weights = np.empty((seed_docs.size, len(term_ids)))  # (candidates, terms), terms in query order
    weights[:, seed] = seed_weights
    raise_threshold = floor == -np.inf  # no floor: raise the threshold from the seeds' partial sums
    docs, weights, threshold = _narrow(reader, terms, seed_docs, weights, threshold, k, raise_threshold)
    found = [(docs, _query_order_sum(weights))]
    threshold = max(threshold, _kth_best(found[0][1], k))
    outside = terms.outside_seed(seed_docs, threshold, allowed)
    if outside is None:
        return None
    if outside.size:
        weights = np.empty((outside.size, len(term_ids)))
        weights[:, seed] = 0.0  # none of them holds the seed's term
        docs, weights, _ = _narrow(reader, terms, outside, weights, threshold, k, False)
        found.append((docs, _query_order_sum(weights)))
    docs = np.concatenate([docs for docs, _ in found])
    scores = np.concatenate([scores for _, scores in found])
    return _best(docs, scores, k, max(floor, 0.0))


def pruned_top_k_among(
    reader: PostingReader, term_ids: list[int], k: int, floor: float, scratch: np.ndarray, docs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """
    `pruned_top_k` with the candidates given: the k best of the documents `docs` (ascending, in the postings'
    dtype; a selective filter's), their weights looked up term by term, weightiest first, each step dropping those
    that can no longer reach the k-th best of the known sums; the same hits and scores, bit for bit, as scoring
    them all. Every weight must be at least 0.

    :returns: `(hits,)` document indices within the index and `(hits,)` scores, best first, ties to the earlier
        document.
    """
    if not term_ids or docs.size == 0:
        return np.zeros(0, np.int64), np.zeros(0)
    terms = _Terms(reader, term_ids, scratch)
    threshold = max(floor, 0.0)  # nothing below can be a hit
    first = terms.seed(threshold)
    weights = np.empty((docs.size, len(term_ids)))  # (candidates, terms), terms in query order
    weights[:, first] = reader.weights_at(term_ids[first], docs, scratch)
    docs, weights, _ = _narrow(reader, terms, docs, weights, threshold, k, True)
    return _best(docs, _query_order_sum(weights), k, threshold)


class _Terms:
    """
    A query's terms in an index: their bounds, documents, and the order they are looked up in (the seed first).

    Sums of bounds are added in other orders than scores; `tolerance` covers the rounding of both with a margin:
    a sum of up to `len(bounds)` terms, each between 0 and its bound, is within `(terms - 1) * eps / 2` times the
    bounds' sum of its exact value in any order; comparing two such sums (a bound against a score) and adding the
    margin stays within twice that and more.
    """

    def __init__(self, reader: PostingReader, term_ids: list[int], scratch: np.ndarray) -> None:
        self.reader = reader
        self.term_ids = term_ids
        self.scratch = scratch
        self.bounds = [reader.bound(term_id) for term_id in term_ids]
        self.sizes = [reader.size(term_id) for term_id in term_ids]
        self.total = sum(self.bounds)
        self.tolerance = 4 * len(term_ids) * _EPS * self.total
        self.order: list[int] = []
        self.unknown: list[float] = []  # unknown[j]: the bounds of order[j:], then 0.0

    def seed(self, threshold: float) -> int:
        """
        The term whose documents are scored first: of those without which no document reaches the threshold
        (required), the one with the fewest documents; else the weightiest. Sets the lookup order: the seed, the
        other required terms, fewest documents first (each lookup keeps only the documents holding the term),
        then the rest, weightiest first.
        """
        everything = range(len(self.bounds))
        required = [at for at in everything if self.total - self.bounds[at] + self.tolerance < threshold]
        required.sort(key=self.sizes.__getitem__)
        rest = sorted((at for at in everything if at not in required), key=lambda at: -self.bounds[at])
        self.order = required + rest
        seed = self.order[0]
        self.unknown = [0.0] * (len(self.order) + 1)
        for step in range(len(self.order) - 1, -1, -1):
            self.unknown[step] = self.unknown[step + 1] + self.bounds[self.order[step]]
        return seed

    def outside_seed(
        self, seed_docs: np.ndarray, threshold: float, allowed: np.ndarray | None
    ) -> np.ndarray | None:
        """
        The documents outside the seed's that can reach the threshold, ascending: those holding every term
        without which they cannot (the one with the fewest documents of those), else any term but the lightest
        ones whose bounds together stay below it; of those, the `allowed` ones. `None` if they are too many for
        pruning to pay.
        """
        bounds, seed = self.bounds, self.order[0]
        lightest_first = sorted(self.order[1:], key=bounds.__getitem__)
        light = 0.0
        while lightest_first and light + bounds[lightest_first[0]] + self.tolerance < threshold:
            light += bounds[lightest_first.pop(0)]
        if not lightest_first:
            return np.zeros(0, np.int64)
        most = self.total - bounds[seed]  # the most a document without the seed's term can score
        required = [at for at in lightest_first if most - bounds[at] + self.tolerance < threshold]
        needed = [min(required, key=self.sizes.__getitem__)] if required else lightest_first
        if sum(self.sizes[at] for at in needed) > MAX_CANDIDATE_SHARE * self.reader.n_docs:
            return None
        marked = np.zeros(self.reader.n_docs, bool)
        for at in needed:
            marked[self.reader.docs(self.term_ids[at])] = True
        marked[seed_docs] = False
        if allowed is not None:
            marked &= allowed
        return np.flatnonzero(marked)


def _narrow(
    reader: PostingReader,
    terms: _Terms,
    docs: np.ndarray,
    weights: np.ndarray,
    threshold: float,
    k: int,
    raise_threshold: bool,
) -> tuple[np.ndarray, np.ndarray, float]:
    """
    Looks up the candidates' weights term by term in `terms.order` after its first (whose column of `weights` is
    filled), dropping before each step the candidates whose known weights plus the bounds of the rest fall short
    of the threshold; with `raise_threshold`, raised on the way to the k-th best sum of known weights (a lower
    bound of the k-th best score, weights being at least 0).

    :returns: The candidates left (ascending), their `(left, terms)` weights, and the threshold.
    """
    order, tolerance = terms.order, terms.tolerance
    partial = weights[:, order[0]].copy()  # (candidates,) the known weights' sum
    alive = np.arange(docs.size)  # the candidates left, by row of `weights` (narrowed once, at the end)
    for step in range(1, len(order)):
        if docs.size == 0:
            break
        if raise_threshold:
            threshold = max(threshold, _kth_best(partial, k) - tolerance)
        least = threshold - terms.unknown[step] - tolerance  # what the known weights must reach
        if partial.min() < least:
            left = partial >= least
            docs, alive, partial = docs[left], alive[left], partial[left]
        row = order[step]
        found = reader.weights_at(terms.term_ids[row], docs, terms.scratch)
        weights[alive, row] = found
        partial += found
    return docs, weights[alive], threshold


def _query_order_sum(weights: np.ndarray) -> np.ndarray:
    """`(docs, terms)` weights summed term by term in query order from 0.0, as scoring every document does."""
    scores = np.zeros(weights.shape[0])
    for term in range(weights.shape[1]):
        scores += weights[:, term]
    return scores


def _kth_best(values: np.ndarray, k: int) -> float:
    """The k-th largest value, `-inf` with fewer than k."""
    if values.size < k:
        return -np.inf
    return float(np.partition(values, values.size - k)[values.size - k])


def _best(docs: np.ndarray, scores: np.ndarray, k: int, floor: float) -> tuple[np.ndarray, np.ndarray]:
    """The k best scores above `floor`, best first, ties to the earlier document."""
    above = scores > floor
    docs, scores = docs[above], scores[above]
    if docs.size > k:
        kept = scores >= np.partition(scores, docs.size - k)[docs.size - k]
        docs, scores = docs[kept], scores[kept]
    order = np.lexsort((docs, -scores))[:k]
    return docs[order].astype(np.int64), scores[order]
