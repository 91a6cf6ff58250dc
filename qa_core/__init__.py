"""
Engine-free extractive question answering with Haystack's semantics: reader, answers, AnswerBuilder, the BM25 and
embedding retrievers, the document joiner and the cross-encoder ranker; SQuAD data and its official evaluation
(`qa_core.squad`, `qa_core.evaluation`).

The public names load on first use, so that code needing only the dataclasses or the answer selection
(for instance the Ray job's aggregation tasks) does not import torch and transformers.
"""

import importlib
from typing import TYPE_CHECKING, Any

_MODULES = {
    "AnswerBuilder": "qa_core.answer_builder",
    "BM25Retriever": "qa_core.retrieval",
    "CrossEncoderRanker": "qa_core.ranker",
    "Document": "qa_core.document",
    "DocumentJoiner": "qa_core.retrieval",
    "EmbeddingRetriever": "qa_core.retrieval",
    "ExtractedAnswer": "qa_core.answers",
    "ExtractiveReader": "qa_core.reader",
    "GeneratedAnswer": "qa_core.answers",
    "Secret": "qa_core.secret",
}
__all__ = [
    "AnswerBuilder",
    "BM25Retriever",
    "CrossEncoderRanker",
    "Document",
    "DocumentJoiner",
    "EmbeddingRetriever",
    "ExtractedAnswer",
    "ExtractiveReader",
    "GeneratedAnswer",
    "Secret",
]

if TYPE_CHECKING:
    from qa_core.answer_builder import AnswerBuilder
    from qa_core.answers import ExtractedAnswer, GeneratedAnswer
    from qa_core.document import Document
    from qa_core.ranker import CrossEncoderRanker
    from qa_core.reader import ExtractiveReader
    from qa_core.retrieval import BM25Retriever, DocumentJoiner, EmbeddingRetriever
    from qa_core.secret import Secret


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module 'qa_core' has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULES[name]), name)
