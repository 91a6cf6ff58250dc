"""Shards: a corpus split by document into indexes weighed with the whole corpus's statistics."""

from collections.abc import Sequence

from qa_core.retrieval.corpus import weigh_corpus
from qa_core.retrieval.index import BM25Index
from qa_core.retrieval.scoring import DEFAULT_ALGORITHM, resolve_parameters
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
    bounds = [shard * len(texts) // n_shards for shard in range(n_shards + 1)]
    return [
        BM25Index.from_rows(weighted, ids, texts, start, stop, algorithm, resolved, tokenization_regex)
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True)
    ]
