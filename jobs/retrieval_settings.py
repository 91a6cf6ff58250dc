"""
How a run or `python -m jobs.index` finds documents for questions without `document_ids`: by BM25, by embeddings,
or both joined (`RetrievalSettings`), and how the index they search is built (shards, passages, vectors, graph).
The bulk job's retrieval stage, the index build and the command lines all read these settings from here.
"""

from dataclasses import dataclass
from typing import Any

from jobs.storage import redact
from qa_core.hardware import PRECISIONS
from qa_core.retrieval.ann import ANN_KINDS, AnnSearch
from qa_core.retrieval.dense import DEFAULT_SIMILARITY, SIMILARITIES
from qa_core.retrieval.filters import FilterError, check_filters
from qa_core.retrieval.fusion import DEFAULT_JOIN_MODE, JOIN_MODES
from qa_core.retrieval.methods import RETRIEVAL_METHODS, RetrievalMethod, retrieval_method
from qa_core.retrieval.scoring import DEFAULT_ALGORITHM, resolve_parameters
from qa_core.settings import Settings, at_least, setting, setting_factory

# The retrievers whose hits hybrid retrieval joins, in this order (DocumentJoiner's inputs): join_weights' keys.
JOINED = RETRIEVAL_METHODS["hybrid"].retrievers


@dataclass(frozen=True)
class RetrievalSettings(Settings):
    """How questions without document_ids get documents from --documents: by BM25, embeddings, or both joined."""

    retrieval: str = setting(
        "bm25", "bm25, dense (embedding model) or hybrid (both, joined as Haystack's DocumentJoiner)"
    )
    retriever_top_k: int = setting(10, "documents retrieved for each question without document_ids (Haystack's top_k)")
    bm25_algorithm: str = setting(DEFAULT_ALGORITHM, "BM25L (Haystack's default), BM25Okapi, BM25Plus, or Lucene")
    bm25_parameters: dict[str, float] = setting_factory(dict, "some of k1, b, delta or epsilon (Haystack's)")
    index: str | None = setting(None, "index folder from `python -m jobs.index` to search instead of building one")
    # Each shard of the index is searched by its own actor, their hits merged exactly.
    index_shards: int | None = setting(None, "shards of the index the run builds; None: sized by memory_budget")
    # The shard size bounds the build's memory per task; documents added to an index later make new shards of it.
    index_shard_size: int | None = setting(
        None, "passages per shard of the index built, the last fewer; None: index_shards"
    )
    # Sets the shard size where neither index_shards nor index_shard_size is given (jobs.indexing.memory).
    memory_budget: float | None = setting(None, "GiB of a node's memory the index build may use; None: a quarter of it")
    # Documents split into passages of words before indexing, as Haystack's DocumentSplitter(split_by="word"):
    # retrieval finds passages and the reader reads them; answers point into the documents.
    split_length: int | None = setting(None, "words per indexed passage (DocumentSplitter's); None: whole documents")
    split_overlap: int = setting(0, "words consecutive passages of a document share (with split_length; less than it)")
    embedding_model: str | None = setting(
        None, "sentence-transformers model (hub id or local folder) for dense and hybrid"
    )
    embedding_similarity: str = setting(DEFAULT_SIMILARITY, "dot_product (InMemoryDocumentStore's default) or cosine")
    embedding_precision: str = setting("fp32", "the embedding model's: fp32, bf16, or auto (bf16 where fast)")
    embedding_search_precision: str = setting(
        "auto",
        "the exact dense search's screening product: fp32, bf16 or auto (bf16 where the retrieval actor's CPU "
        "multiplies bf16 natively, else fp32); the same hits and scores, bf16 faster on such CPUs",
    )
    # An approximate index (FAISS, the `ann` extra) built with the dense vectors; a run whose index holds one
    # searches it instead of searching exactly (qa_core.retrieval.ann), its hits rescored exactly.
    ann: str | None = setting(None, "None (exact search only), hnsw (a graph) or ivf (lists of 4-bit codes)")
    ann_ef_search: int = setting(
        AnnSearch.ef_search, "hnsw: candidates kept per query while searching (FAISS's efSearch)"
    )
    ann_nprobe: int = setting(AnnSearch.nprobe, "ivf: lists scanned per query")
    ann_candidates: int = setting(AnnSearch.candidates, "ivf: the codes' best hits rescored exactly per query")
    join_mode: str = setting(DEFAULT_JOIN_MODE, "hybrid: DocumentJoiner's join_mode (reciprocal_rank_fusion, ...)")
    join_weights: dict[str, float] = setting_factory(dict, "hybrid: {bm25: w, dense: w}; empty: equal")
    # Haystack 2's filter syntax (qa_core.retrieval.filters), ANDed with a question's own (the questions' `filters`).
    filters: dict[str, Any] | None = setting(
        None,
        "metadata filter for every question, JSON or YAML in Haystack's syntax ({field: meta.year, operator: '>=', "
        "value: 2020}); ANDed with a question's filters column",
    )
    # Stored in each shard at build time, so that a filtered search reads no documents table.
    filter_fields: list[str] | None = setting(
        None, "metadata fields the index built keeps for filters; None: every scalar metadata field"
    )

    @property
    def method(self) -> RetrievalMethod:
        """The retrieval method (`qa_core.retrieval.methods`): its retrievers and the index parts it needs."""
        return retrieval_method(self.retrieval)

    @property
    def dense(self) -> bool:
        """Whether the retrieval embeds (an embedding model and the index's vectors are needed)."""
        return self.method.embeds

    def problems(self) -> list[str]:
        problems = at_least("retriever_top_k", self.retriever_top_k, 1)
        problems += at_least("index_shards", self.index_shards, 1, optional=True)
        problems += at_least("index_shard_size", self.index_shard_size, 1, optional=True)
        problems += at_least("memory_budget", self.memory_budget, 0.01, optional=True)
        if self.index_shard_size is not None and self.index_shards is not None:
            problems.append(f"index_shards {self.index_shards} and index_shard_size: set one of them, not both")
        problems += self._dense_problems()
        problems += self._filter_problems()
        problems += self._split_problems()
        if not isinstance(self.bm25_parameters, dict):
            return problems + [f"bm25_parameters must be a mapping, not {type(self.bm25_parameters).__name__}"]
        try:
            resolve_parameters(self.bm25_algorithm, self.bm25_parameters)
        except ValueError as error:
            problems.append(str(error).rstrip("."))
        return problems

    def parameters(self) -> dict[str, float]:
        """All of the algorithm's parameters, the defaults filled in (`scoring.resolve_parameters`)."""
        return resolve_parameters(self.bm25_algorithm, self.bm25_parameters)

    @property
    def sized_by_memory(self) -> bool:
        """Whether the shard size comes from the memory budget (no shard setting given)."""
        return self.index_shards is None and self.index_shard_size is None

    def shard_size(self, n_docs: int) -> int:
        """
        Passages per shard of an index of `n_docs` (`index_shard_size`, or `n_docs` over `index_shards`; one shard
        where neither is given: `jobs.indexing.memory.bounded` sets the size then).
        """
        return self.index_shard_size or max(1, -(-n_docs // (self.index_shards or 1)))

    def _dense_problems(self) -> list[str]:
        """The retrieval and its embedding and joining settings."""
        if self.retrieval not in RETRIEVAL_METHODS:
            return [f"retrieval must be one of {', '.join(RETRIEVAL_METHODS)}, not {self.retrieval!r}"]
        problems = []
        if self.dense and not self.embedding_model:
            problems.append(f"retrieval {self.retrieval} needs an embedding_model")
        if self.embedding_similarity not in SIMILARITIES:
            problems.append(
                f"embedding_similarity must be one of {', '.join(SIMILARITIES)}, not {self.embedding_similarity!r}"
            )
        for name in ("embedding_precision", "embedding_search_precision"):
            if getattr(self, name) not in PRECISIONS:
                problems.append(f"{name} must be one of {', '.join(PRECISIONS)}, not {getattr(self, name)!r}")
        if self.ann is not None and (self.ann not in ANN_KINDS or not self.dense):
            problems.append(
                f"ann must be one of {', '.join(ANN_KINDS)} with retrieval dense or hybrid, not {self.ann!r}"
            )
        for name in ("ann_ef_search", "ann_nprobe", "ann_candidates"):
            problems += at_least(name, getattr(self, name), 1)
        if self.join_mode not in JOIN_MODES:
            problems.append(f"join_mode must be one of {', '.join(JOIN_MODES)}, not {self.join_mode!r}")
        weights = self.join_weights
        if not isinstance(weights, dict) or (weights and sorted(weights) != sorted(JOINED)):
            problems.append(f"join_weights must name both of {', '.join(JOINED)} or be empty, not {weights!r}")
        elif weights and (
            any(not isinstance(w, int | float) or w < 0 for w in weights.values()) or not sum(weights.values())
        ):
            problems.append(f"join_weights must be numbers >= 0 that do not sum to 0, not {weights!r}")
        return problems

    def _filter_problems(self) -> list[str]:
        """A malformed `filters` (Haystack's message), and `filter_fields` that are not names of fields."""
        problems = []
        try:
            check_filters(self.filters)
        except FilterError as error:
            problems.append(f"filters: {error}")
        fields = self.filter_fields
        if fields is not None and (not isinstance(fields, list) or not all(isinstance(f, str) and f for f in fields)):
            problems.append(f"filter_fields must be a list of field names, not {fields!r}")
        elif fields is not None and self.index is not None:
            problems.append(
                f"filter_fields chooses the fields of an index being built: the index {redact(self.index)} keeps "
                "those it was built with (its build.json's filter_fields)"
            )
        return problems

    def ann_search(self) -> AnnSearch:
        """How the approximate index is searched (and its recall measured when built)."""
        return AnnSearch(ef_search=self.ann_ef_search, nprobe=self.ann_nprobe, candidates=self.ann_candidates)

    def fusion_weights(self) -> list[float] | None:
        """`join_weights` in the order the retrievers' hits are joined (`JOINED`), or None (equal)."""
        return [float(self.join_weights[name]) for name in JOINED] if self.join_weights else None

    def _split_problems(self) -> list[str]:
        """`split_documents`' rules: split_length >= 1, 0 <= split_overlap < split_length (no overlap unsplit)."""
        problems = at_least("split_length", self.split_length, 1, optional=True)
        problems += at_least("split_overlap", self.split_overlap, 0)
        if problems:
            return problems
        if self.split_length is None and self.split_overlap:
            return [f"split_overlap must be 0 without split_length, not {self.split_overlap}"]
        if self.split_length is not None and self.split_overlap >= self.split_length:
            return [f"split_overlap must be less than split_length {self.split_length}, not {self.split_overlap}"]
        return []
