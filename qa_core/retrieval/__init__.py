"""
Engine-free retrieval with the rankings of Haystack's `InMemoryDocumentStore`, as components in Haystack's style:
`BM25Retriever` (a sparse index that searches many queries at once, shards with global statistics, save/load without
pickles), `EmbeddingRetriever` (dense shards searched exactly or approximately), `DocumentJoiner` (several retrievers'
hits joined), the retrieval methods that combine them (`RETRIEVAL_METHODS`), and a word splitter.
"""

from qa_core.retrieval.embedding_retriever import EmbeddingRetriever
from qa_core.retrieval.index import BM25Index, CorpusStats
from qa_core.retrieval.joiner import DocumentJoiner
from qa_core.retrieval.methods import RETRIEVAL_METHODS, RetrievalMethod, retrieval_method
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
    "DocumentJoiner",
    "EmbeddingRetriever",
    "RETRIEVAL_METHODS",
    "RetrievalMethod",
    "ScoredDocument",
    "Tokenizer",
    "build_sharded",
    "merge_top_k",
    "retrieval_method",
    "split_documents",
]
