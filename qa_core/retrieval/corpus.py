"""The checks a corpus passes before it is counted: documents given, ids unique non-empty strings, texts strings."""

from collections.abc import Sequence


def check_corpus(ids: Sequence[str], texts: Sequence[str]) -> None:
    """:raises ValueError: If the corpus is empty, or the ids are not unique non-empty strings matching the texts."""
    if len(texts) == 0:
        raise ValueError("Cannot build a BM25 index from an empty corpus: no documents with content were given.")
    if len(ids) != len(texts):
        raise ValueError(f"Got {len(ids)} document ids for {len(texts)} texts.")
    for doc_id, text in zip(ids, texts, strict=True):
        if not isinstance(doc_id, str) or not doc_id:
            raise ValueError(f"Document ids must be non-empty strings, not {doc_id!r}.")
        if not isinstance(text, str):
            raise ValueError(f"Document {doc_id!r} has content {type(text).__name__}; the index takes strings only.")
    check_unique_ids(ids)


def check_unique_ids(ids: Sequence[str]) -> None:
    """:raises ValueError: Naming the first id that occurs twice."""
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        duplicate = next(doc_id for doc_id in ids if doc_id in seen or seen.add(doc_id))
        raise ValueError(f"Document id {duplicate!r} occurs more than once in the corpus.")
