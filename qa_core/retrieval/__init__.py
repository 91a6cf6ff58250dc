"""
Engine-free BM25 retrieval with the ranking of Haystack's `InMemoryDocumentStore.bm25_retrieval`: a sparse index
that searches many queries at once, shards with global statistics, save/load without pickles, and a word splitter.
"""

from qa_core.retrieval.index import BM25Index, CorpusStats
from qa_core.retrieval.retriever import BM25Retriever
from qa_core.retrieval.scored_document import ScoredDocument
from qa_core.retrieval.scoring import ALGORITHMS, DEFAULT_PARAMETERS
from qa_core.retrieval.sharding import build_sharded
from qa_core.retrieval.splitter import split_documents
from qa_core.retrieval.tokenizer import DEFAULT_TOKENIZATION_REGEX, Tokenizer
from qa_core.retrieval.topk import merge_top_k

__all__ = [
    "ALGORITHMS",
    "BM25Index",
    "BM25Retriever",
    "CorpusStats",
    "DEFAULT_PARAMETERS",
    "DEFAULT_TOKENIZATION_REGEX",
    "ScoredDocument",
    "Tokenizer",
    "build_sharded",
    "merge_top_k",
    "split_documents",
]
