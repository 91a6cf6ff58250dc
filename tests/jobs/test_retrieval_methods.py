"""The registry of retrieval methods: each `--retrieval` name's retrievers, joining and index parts."""

import pytest

from jobs.indexing.check import PART_CHECKS
from jobs.indexing.plan import PART_BUILDERS
from jobs.retrieval.stages import RETRIEVER_STAGES
from jobs.retrieval_settings import JOINED, RetrievalSettings
from qa_core.retrieval import RETRIEVAL_METHODS, BM25Retriever, EmbeddingRetriever, retrieval_method
from qa_core.retrieval.methods import INDEX_PARTS, RETRIEVERS


def test_each_method_names_its_retrievers_and_index_parts() -> None:
    described = {
        name: (method.retrievers, method.joins, method.embeds, method.added_parts)
        for name, method in RETRIEVAL_METHODS.items()
    }
    assert described == {
        "bm25": (("bm25",), False, False, ()),
        "dense": (("dense",), False, True, ("dense",)),
        "hybrid": (("bm25", "dense"), True, True, ("dense",)),
    }
    assert RETRIEVERS == {"bm25": BM25Retriever, "dense": EmbeddingRetriever}
    assert JOINED == ("bm25", "dense")  # join_weights' keys: the hybrid method's retrievers, in their order


def test_every_retriever_and_index_part_has_its_stage_builder_and_check() -> None:
    """Where the job dispatches on the registry's names: a name without its entry would fail only at run time."""
    assert set(RETRIEVER_STAGES) == set(RETRIEVERS)
    assert set(PART_BUILDERS) == set(PART_CHECKS) == set(INDEX_PARTS[1:])


def test_an_unknown_method_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="retrieval must be one of bm25, dense, hybrid, not 'sparse'"):
        retrieval_method("sparse")
    assert RetrievalSettings(retrieval="sparse").problems() == [
        "retrieval must be one of bm25, dense, hybrid, not 'sparse'"
    ]
    assert RetrievalSettings(retrieval="hybrid", embedding_model="m").method is RETRIEVAL_METHODS["hybrid"]
