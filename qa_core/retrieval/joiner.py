"""DocumentJoiner: several retrievers' hits joined into one list, as Haystack's `DocumentJoiner` joins them."""

import dataclasses
import inspect
from collections.abc import Hashable, Sequence
from typing import Any

from qa_core.retrieval.fusion import DEFAULT_JOIN_MODE, JOIN_MODES, fuse, normalized_weights
from qa_core.retrieval.scored_document import ScoredDocument
from qa_core.retrieval.topk import check_k


class DocumentJoiner:
    """
    Joins the ranked documents of several retrievers as Haystack's `DocumentJoiner` does
    (`qa_core.retrieval.fusion`): `reciprocal_rank_fusion`, `distribution_based_rank_fusion`, `merge` or
    `concatenate`, with optional weights per retriever; a document found by several keeps the place where it first
    appeared; best first, cut to `top_k`.

    Usage example:
    ```python
    joiner = DocumentJoiner(join_mode="reciprocal_rank_fusion", top_k=10)
    joined = joiner.run(documents=[bm25_hits, dense_hits])["documents"]
    ```

    Differences from Haystack: the documents are always sorted by score (its `sort_by_score=True`, the default).
    """

    def __init__(
        self, join_mode: str = DEFAULT_JOIN_MODE, weights: list[float] | None = None, top_k: int | None = None
    ) -> None:
        """
        :param join_mode: One of `JOIN_MODES`.
        :param weights: One per retriever, for `reciprocal_rank_fusion` and `merge` (normalised to sum 1); None:
            equal.
        :param top_k: Most documents to return; None: all.
        :raises ValueError: For an unknown join mode, a negative weight, weights that sum to 0, or `top_k < 1`.
        """
        if join_mode not in JOIN_MODES:
            raise ValueError(f"join_mode must be one of {', '.join(JOIN_MODES)}, not {join_mode!r}.")
        normalized_weights(weights)  # raises ValueError for bad weights
        if top_k is not None:
            check_k(top_k)
        self.join_mode = join_mode
        self.weights = weights
        self.top_k = top_k

    def warm_up(self) -> None:
        """Nothing to load: here for the components' common lifecycle."""

    def join_hits(
        self, hit_lists: Sequence[Sequence[tuple[Hashable, float]]], top_k: int | None = None
    ) -> list[tuple[Hashable, float]]:
        """
        The retrievers' hits given as `(key, score)` pairs, best first, joined: what `run` does to documents, for
        callers that hold their hits by another key (the bulk job's corpus positions).

        :param hit_lists: One list per retriever, in the order of `weights`.
        :param top_k: Most hits to return; None: the joiner's `top_k`.
        :returns: `(key, joined score)`, best first.
        """
        return fuse(hit_lists, self.join_mode, self.weights, self.top_k if top_k is None else top_k)

    def run(self, documents: list[list[ScoredDocument]], top_k: int | None = None) -> dict[str, Any]:
        """
        Joins the retrievers' documents.

        :param documents: One ranked list per retriever, in the order of `weights`.
        :param top_k: Most documents to return; None: the joiner's `top_k`.
        :returns: `{"documents": [ScoredDocument, ...]}`: each the first found of its id, with its joined score.
        """
        first: dict[str, ScoredDocument] = {}
        for hits in documents:
            for document in hits:
                first.setdefault(document.id, document)
        hit_lists = [[(document.id, document.score) for document in hits] for hits in documents]
        joined = self.join_hits(hit_lists, top_k)
        return {"documents": [dataclasses.replace(first[doc_id], score=score) for doc_id, score in joined]}

    def run_batch(self, documents: list[list[list[ScoredDocument]]], top_k: int | None = None) -> dict[str, Any]:
        """
        Joins the retrievers' documents of many queries; each list equals what `run` returns for its query.

        :param documents: Per query, one ranked list per retriever.
        :param top_k: Most documents per query; None: the joiner's `top_k`.
        :returns: `{"documents": [[ScoredDocument, ...], ...]}`.
        """
        return {"documents": [self.run(lists, top_k)["documents"] for lists in documents]}

    def to_dict(self) -> dict[str, Any]:
        """Serializes the joiner: `{"type": ..., "init_parameters": {...}}` with every constructor parameter."""
        parameters = {name: getattr(self, name) for name in inspect.signature(type(self)).parameters}
        return {"type": f"{type(self).__module__}.{type(self).__qualname__}", "init_parameters": parameters}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DocumentJoiner":
        """Rebuilds a joiner from `to_dict()`'s form."""
        return cls(**data.get("init_parameters", {}))
