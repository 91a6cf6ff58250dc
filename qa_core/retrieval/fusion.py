"""
The fusion of several retrievers' ranked hits into one list, exactly as Haystack's `DocumentJoiner` joins them
(`haystack/components/joiners/document_joiner.py` and `haystack.utils.misc._reciprocal_rank_fusion`): the same
arithmetic in the same order, the same de-duplication by id (a document keeps the place where it first appeared),
then a stable sort by score, best first, cut to `top_k`.
"""

from collections.abc import Sequence

JOIN_MODES = ("reciprocal_rank_fusion", "distribution_based_rank_fusion", "merge", "concatenate")
DEFAULT_JOIN_MODE = "reciprocal_rank_fusion"
RRF_K = 61  # Haystack's constant: the paper's 60, plus 1 for 0-based ranks

# A retriever's hits: (id, score) pairs, best first.
Hits = Sequence[tuple[str, float]]


def normalized_weights(weights: Sequence[float] | None) -> list[float] | None:
    """
    The weights as `DocumentJoiner.__init__` keeps them: divided by their sum; None or empty: None (equal weights).

    :raises ValueError: For a negative weight or weights that sum to zero (DocumentJoiner's checks).
    """
    if not weights:
        return None
    if any(weight < 0 for weight in weights):
        raise ValueError("The join weights must not be negative.")
    total = sum(weights)
    if total == 0:
        raise ValueError("The join weights must not sum to zero.")
    return [float(weight) / total for weight in weights]


def fuse(
    hit_lists: Sequence[Hits],
    join_mode: str = DEFAULT_JOIN_MODE,
    weights: Sequence[float] | None = None,
    top_k: int | None = None,
) -> list[tuple[str, float]]:
    """
    Joins the hit lists of several retrievers as `DocumentJoiner(join_mode, weights, top_k).run(lists)` does.

    Usage example:
    ```python
    fused = fuse([[("a", 12.0), ("b", 3.0)], [("b", 0.9), ("c", 0.5)]], top_k=2)
    assert [doc_id for doc_id, _ in fused] == ["b", "a"]
    ```

    :param hit_lists: Each retriever's `(id, score)` hits, best first.
    :param join_mode: One of `JOIN_MODES`.
    :param weights: One per list, for `reciprocal_rank_fusion` and `merge` (normalised to sum 1); None: equal.
    :param top_k: Most hits to return; None: all.
    :returns: `(id, fused score)`, best first, ties in order of first appearance.
    :raises ValueError: For an unknown join mode, bad weights or as many weights as lists.
    """
    if join_mode not in JOIN_MODES:
        raise ValueError(f"join_mode must be one of {', '.join(JOIN_MODES)}, not {join_mode!r}.")
    resolved = normalized_weights(weights)
    if resolved is not None and len(resolved) != len(hit_lists):
        raise ValueError(f"{len(resolved)} join weights for {len(hit_lists)} retrievers: give one per retriever.")
    if join_mode == "reciprocal_rank_fusion":
        joined = _reciprocal_rank_fusion(hit_lists, resolved)
    elif join_mode == "merge":
        joined = _merge(hit_lists, resolved)
    elif join_mode == "distribution_based_rank_fusion":
        joined = _concatenate([_rescaled(hits) for hits in hit_lists])
    else:
        joined = _concatenate(hit_lists)
    ranked = sorted(joined.items(), key=lambda item: item[1], reverse=True)
    return ranked if top_k is None else ranked[:top_k]


def _reciprocal_rank_fusion(hit_lists: Sequence[Hits], weights: list[float] | None) -> dict[str, float]:
    """`_reciprocal_rank_fusion`: each list adds `weight * lists / (61 + rank)`, the sum divided by `lists / 61`."""
    if not hit_lists:
        return {}
    count = len(hit_lists)
    scores: dict[str, float] = {}
    for hits, weight in zip(hit_lists, weights or [1 / count] * count, strict=True):
        for rank, (doc_id, _) in enumerate(hits):
            scores[doc_id] = scores.get(doc_id, 0) + (weight * count) / (RRF_K + rank)
    return {doc_id: score / (count / RRF_K) for doc_id, score in scores.items()}


def _merge(hit_lists: Sequence[Hits], weights: list[float] | None) -> dict[str, float]:
    """`DocumentJoiner._merge`: the weighted sum of each document's scores."""
    if not hit_lists:
        return {}
    scores: dict[str, float] = {}
    for hits, weight in zip(hit_lists, weights or [1 / len(hit_lists)] * len(hit_lists), strict=True):
        for doc_id, score in hits:
            scores[doc_id] = scores.get(doc_id, 0) + score * weight
    return scores


def _rescaled(hits: Hits) -> list[tuple[str, float]]:
    """One list of `_distribution_based_rank_fusion`: scores mapped from mean -/+ 3 standard deviations to 0..1."""
    if not hits:
        return []
    scores = [score for _, score in hits]
    mean = sum(scores) / len(scores)
    deviation = (sum((score - mean) ** 2 for score in scores) / len(scores)) ** 0.5
    low = mean - 3 * deviation
    delta = (mean + 3 * deviation) - low
    if min(scores) == max(scores) or delta == 0.0:  # no spread: the scores are kept as they are
        return list(hits)
    return [(doc_id, (score - low) / delta) for doc_id, score in hits]


def _concatenate(hit_lists: Sequence[Hits]) -> dict[str, float]:
    """`DocumentJoiner._concatenate`: each document's best score, in order of first appearance."""
    best: dict[str, float] = {}
    for hits in hit_lists:
        for doc_id, score in hits:
            if doc_id not in best or score > best[doc_id]:
                best[doc_id] = score
    return best
