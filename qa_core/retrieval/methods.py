"""
The retrieval methods a run can name (`--retrieval`), in one registry: each method's retrievers (components), how
their hits are joined, and the parts of an index it searches. The settings' checks, the index build and the bulk
job's retrieval stage look a method up here; adding one touches this registry, its retriever component and its index
part's builder.

A method is a pipeline as Haystack's: its retrievers (`RETRIEVERS`), their hits joined by a `DocumentJoiner` where
there are several, then the reader. A ranker (a cross-encoder re-scoring the joined hits) is a step after the
joiner, before the reader.
"""

from dataclasses import dataclass

from qa_core.retrieval.embedding_retriever import EmbeddingRetriever
from qa_core.retrieval.retriever import BM25Retriever

# The retriever components by name; a retriever's name is also the index part it searches (`INDEX_PARTS`).
RETRIEVERS = {"bm25": BM25Retriever, "dense": EmbeddingRetriever}
# The parts of an index folder, in the order they are built: the BM25 shards first, built for every method (they
# hold the passages' ids, where each passage lies and their stores), then the passages' vectors (`dense/`).
INDEX_PARTS = ("bm25", "dense")


@dataclass(frozen=True)
class RetrievalMethod:
    """
    A `--retrieval` name's pipeline.

    :param name: The name (`--retrieval`).
    :param retrievers: The retrievers it runs (keys of `RETRIEVERS`), in the order a `DocumentJoiner` joins their
        hits (and `join_weights` are given).
    """

    name: str
    retrievers: tuple[str, ...]

    @property
    def joins(self) -> bool:
        """Whether its retrievers' hits are joined (more than one retriever)."""
        return len(self.retrievers) > 1

    @property
    def embeds(self) -> bool:
        """Whether it embeds queries and passages (an embedding model is needed)."""
        return "dense" in self.retrievers

    @property
    def added_parts(self) -> tuple[str, ...]:
        """
        The parts of an index it needs beyond the BM25 part (which every method needs), in build order: its
        retrievers' own.
        """
        return tuple(part for part in INDEX_PARTS[1:] if part in self.retrievers)


RETRIEVAL_METHODS = {
    method.name: method
    for method in (
        RetrievalMethod("bm25", ("bm25",)),
        RetrievalMethod("dense", ("dense",)),
        RetrievalMethod("hybrid", ("bm25", "dense")),
    )
}


def retrieval_method(name: str) -> RetrievalMethod:
    """
    The method of a `--retrieval` name.

    :raises ValueError: For a name that is not one of `RETRIEVAL_METHODS`.
    """
    if name not in RETRIEVAL_METHODS:
        raise ValueError(f"retrieval must be one of {', '.join(RETRIEVAL_METHODS)}, not {name!r}")
    return RETRIEVAL_METHODS[name]
