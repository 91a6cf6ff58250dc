"""BM25Index: term-major postings with their term counts, weighed at search time, searched for many queries at once."""

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from qa_core.retrieval.counted import PAIRS_PER_STEP, CountedShard, count_shard, per_posting
from qa_core.retrieval.index_io import COUNTED_ARRAYS, IndexFiles, array_dtype, read_index_files, write_index_files
from qa_core.retrieval.pair_weights import PairWeights
from qa_core.retrieval.pruning import MAX_CANDIDATE_SHARE, MIN_DOCS, PostingReader, pruned_top_k, pruned_top_k_among
from qa_core.retrieval.scoring import DEFAULT_ALGORITHM, resolve_parameters
from qa_core.retrieval.statistics import CorpusWeights
from qa_core.retrieval.tokenizer import DEFAULT_TOKENIZATION_REGEX, Tokenizer
from qa_core.retrieval.topk import NO_POSITION, NO_SCORE, check_k, top_k


@dataclass(frozen=True)
class CorpusStats:
    """
    The statistics of the corpus an index (or each of its shards) was weighed with.

    :param n_docs: Documents in the corpus.
    :param avg_doc_len: Their mean length in terms.
    :param fingerprint: `corpus.fingerprint` of the whole corpus.
    """

    n_docs: int
    avg_doc_len: float
    fingerprint: str


@dataclass(frozen=True)
class PostingLists:
    """
    An index's arrays: term `t`'s postings are `starts[t]:starts[t + 1]` of `doc_indices` and `term_counts`; a
    posting weighs `idf[t] * tfc(count, its document's length)` (`pair_weights.PairWeights`).

    :param starts: `(terms + 1,)` int64 offsets (a CSC matrix's `indptr`).
    :param doc_indices: `(pairs,)` document index within the index, ascending within a term (`index_io.posting_dtype`).
    :param term_counts: `(pairs,)` occurrences of the term in the document (at least 1).
    :param doc_lengths: `(documents,)` each document's length in terms.
    :param idf: `(terms,)` float64 each term's idf in the corpus.
    :param bounds: `(terms,)` float64 each term's largest weight in the index (what pruning bounds a score with).
    """

    starts: np.ndarray
    doc_indices: np.ndarray
    term_counts: np.ndarray
    doc_lengths: np.ndarray
    idf: np.ndarray
    bounds: np.ndarray


def _bounds(weights: PairWeights, starts: np.ndarray) -> np.ndarray:
    """`(terms,)` each term's largest weight, the postings weighed a step at a time (every term has postings)."""
    bounds = np.zeros(starts.size - 1)
    for first in range(0, int(starts[-1]), PAIRS_PER_STEP):
        stop = min(first + PAIRS_PER_STEP, int(starts[-1]))
        step_weights = per_posting(weights.idf, starts, first, stop) * weights.tfc(slice(first, stop))
        terms = slice(int(np.searchsorted(starts, first, "right")) - 1, int(np.searchsorted(starts, stop, "left")))
        cuts = np.clip(starts[terms.start : terms.stop], first, stop) - first  # where each term's part starts
        np.maximum(bounds[terms], np.maximum.reduceat(step_weights, cuts), out=bounds[terms])
    return bounds


class BM25Index:
    """
    A BM25 index over a corpus, or over a contiguous shard of one, with Haystack's `bm25_retrieval` ranking.

    Usage example:
    ```python
    index = BM25Index.build(ids=["a", "b"], texts=["Python is a language", "Snakes are reptiles"])
    positions, scores = index.search(["what is python?"], k=5)  # (1, 5) each, padded with -1 and -inf
    assert index.doc_ids[positions[0, 0] - index.doc_offset] == "a"
    ```

    Positions are corpus positions: `doc_offset` plus the document's place in `doc_ids`.
    Build with `build` or `sharding.build_sharded`; `save` / `load` keep it as plain `.npy` arrays, an Arrow file of
    its ids and JSON (`index_io`). It stores term counts and document lengths, not weights: a posting's weight is
    computed when a search needs it (`pair_weights`), the same float64 value bit for bit.
    """

    def __init__(
        self,
        *,
        algorithm: str,
        parameters: dict[str, float],
        tokenization_regex: str,
        vocabulary: list[str],
        doc_ids: list[str],
        doc_offset: int,
        fingerprint: str,
        corpus: CorpusStats,
        postings: PostingLists,
    ) -> None:
        """
        Wraps built (or loaded) parts; use `build`, `sharding.build_sharded` or `load` rather than this.

        :param algorithm: One of `scoring.ALGORITHMS`.
        :param parameters: All of the algorithm's parameters (`scoring.resolve_parameters`).
        :param tokenization_regex: The `Tokenizer` regex that made the terms.
        :param vocabulary: The terms, by term id.
        :param doc_ids: The documents' ids, by index within this index.
        :param doc_offset: Corpus position of `doc_ids[0]`.
        :param fingerprint: `corpus.fingerprint` of this index's documents.
        :param corpus: Statistics of the corpus the weights were computed with.
        :param postings: The postings, their counts and the terms' idf and bounds.
        """
        self.algorithm = algorithm
        self.parameters = parameters
        self.tokenizer = Tokenizer(tokenization_regex)
        self.vocabulary = vocabulary
        self.doc_ids = doc_ids
        self.doc_offset = doc_offset
        self.fingerprint = fingerprint
        self.corpus = corpus
        self.postings = postings
        self._term_ids = {term: term_id for term_id, term in enumerate(vocabulary)}
        self._weights = PairWeights(algorithm, parameters, corpus.avg_doc_len, postings.idf, postings.doc_indices,
                                    postings.term_counts, postings.doc_lengths)  # fmt: skip
        self._reader = PostingReader(
            postings.starts, postings.doc_indices, self._weights, postings.bounds, len(doc_ids)
        )

    @classmethod
    def build(
        cls,
        ids: Sequence[str],
        texts: Sequence[str],
        algorithm: str = DEFAULT_ALGORITHM,
        parameters: dict[str, float] | None = None,
        tokenization_regex: str = DEFAULT_TOKENIZATION_REGEX,
    ) -> "BM25Index":
        """
        Indexes a corpus.

        :param ids: Document ids, unique and non-empty.
        :param texts: Document texts, in the same order; `""` is a document of length 0 (it counts in N and avgdl).
        :param algorithm: `"BM25L"` (Haystack's default), `"BM25Okapi"`, `"BM25Plus"` or `"Lucene"`.
        :param parameters: Some of `k1`, `b`, and `delta` (BM25L, BM25Plus) or `epsilon` (BM25Okapi);
            the others take Haystack's defaults.
        :param tokenization_regex: Haystack's `bm25_tokenization_regex`.
        :returns: The index.
        :raises ValueError: If the corpus is empty or has no terms, the ids are invalid, or an option is invalid.
        """
        resolved = resolve_parameters(algorithm, parameters)
        counted, statistics = count_shard(ids, texts, 0, Tokenizer(tokenization_regex))
        statistics.check(tokenization_regex)
        weights = statistics.weights(algorithm, resolved)
        return cls.from_counted(counted, 0, weights.fingerprint, weights, algorithm, resolved, tokenization_regex)

    @classmethod
    def from_counted(
        cls,
        counted: CountedShard,
        doc_offset: int,
        doc_fingerprint: str,
        weights: CorpusWeights,
        algorithm: str,
        parameters: dict[str, float],
        tokenization_regex: str,
    ) -> "BM25Index":
        """
        The index of a counted shard weighed with the statistics of its corpus: each term's idf and largest weight
        added to its counts, its terms put in the corpus's term order (so that every shard of a corpus, and the
        index of the whole, number terms alike); the weights searched with are bit for bit those of weighing the
        whole corpus at once, whatever the shards.

        :param counted: The shard (`counted.count_shard`'s, or loaded from a weighed shard's folder).
        :param doc_offset: Corpus position of its first document.
        :param doc_fingerprint: `fingerprint.fingerprint` of its documents.
        :param weights: The corpus's idf and avgdl; its vocabulary holds every term of the shard.
        :param algorithm: The algorithm `weights` was made for.
        :param parameters: Its parameters (`scoring.resolve_parameters`).
        :param tokenization_regex: The regex the shard was counted with.
        :returns: The index; its vocabulary is `counted`'s own where its terms were in the corpus's order.
        :raises ValueError: If a term of the shard is missing from the corpus's statistics.
        """
        ordered, corpus_ids = counted.in_corpus_order(weights.term_ids, doc_offset)
        idf = weights.idf[corpus_ids]
        n_docs = len(ordered.doc_ids)  # the arrays in the dtypes they are saved in, as loading gives them
        arrays = {name: np.asarray(array, array_dtype(name, array, n_docs)) for name, array in ordered.arrays().items()}
        pair_weights = PairWeights(algorithm, parameters, weights.avg_doc_len, idf, arrays["doc_indices"],
                                   arrays["term_counts"], arrays["doc_lengths"])  # fmt: skip
        return cls(
            algorithm=algorithm,
            parameters=parameters,
            tokenization_regex=tokenization_regex,
            vocabulary=ordered.vocabulary,
            doc_ids=ordered.doc_ids,
            doc_offset=doc_offset,
            fingerprint=doc_fingerprint,
            corpus=CorpusStats(weights.n_docs, weights.avg_doc_len, weights.fingerprint),
            postings=PostingLists(**arrays, idf=idf, bounds=_bounds(pair_weights, arrays["starts"])),
        )

    @property
    def n_docs(self) -> int:
        """Documents in this index (a shard's own, not the corpus's)."""
        return len(self.doc_ids)

    def search(
        self,
        queries: Sequence[str],
        k: int,
        floors: np.ndarray | None = None,
        prune: bool = True,
        allowed: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """
        The k best documents of each query, as `InMemoryDocumentStore.bm25_retrieval` ranks them.

        A query's distinct terms count once each (repeats add nothing); scores of 0 or less are left out except
        with BM25Okapi, whose zero and negative scores Haystack keeps; ties go to the earlier corpus position.
        With `floors`, a query's hits are those of the search without, less those scoring at or below its floor:
        a shard searched after others passes the k-th best score found there (`sharding.search_shards`), which
        lets it skip more documents; merging its hits with theirs gives the same top k.

        :param queries: Non-empty query strings.
        :param k: Most hits per query (at least 1).
        :param floors: `(queries,)` float64: each query's hits must score above it (`-inf`: no floor).
        :param prune: Score only the documents that can still be hits (`pruning`: the same hits and scores, bit
            for bit; BM25Okapi, whose hits may score 0 or less, and an index of fewer than `pruning.MIN_DOCS`
            documents score every document); `False` scores every document.
        :param allowed: `(n_docs,)` bool by index within this index: the documents a hit may be (a metadata
            filter's `filters.matching_mask`), the others left out before the top k is taken (each hit keeps the
            score it has without; a query gets k hits while k allowed documents score). Where at most
            `pruning.MAX_CANDIDATE_SHARE` of the documents are allowed, only those are looked up, and pruned as
            they are (`pruning.pruned_top_k_among`) but with BM25Okapi. None: all.
        :returns: `(queries, k)` int64 corpus positions and `(queries, k)` float64 raw scores, best first;
            rows with fewer hits are padded with -1 and -inf.
        :raises ValueError: If `k < 1`, `queries` is a string, a query is not a non-empty string, or `floors` is
            not one number per query, or `allowed` not one bool per document.
        """
        check_k(k)
        if isinstance(queries, str):
            raise ValueError("queries must be a list of strings, not one string.")
        for query in queries:
            if not isinstance(query, str) or not query:
                raise ValueError(f"A query must be a non-empty string, not {query!r}.")
        floors = np.full(len(queries), -np.inf) if floors is None else np.asarray(floors, dtype=np.float64)
        if floors.shape != (len(queries),):
            raise ValueError(f"floors must hold one number per query ({len(queries)}), not shape {floors.shape}.")
        if allowed is not None and (allowed.dtype != np.bool_ or allowed.shape != (self.n_docs,)):
            raise ValueError(f"allowed must hold one bool per document ({self.n_docs}), not {allowed.dtype} "
                             f"of shape {allowed.shape}.")  # fmt: skip
        # Ascending, in the postings' dtype: searching the postings for them then casts neither.
        allowed_docs = None if allowed is None else np.flatnonzero(allowed).astype(self.postings.doc_indices.dtype)
        selective = allowed_docs is not None and allowed_docs.size <= MAX_CANDIDATE_SHARE * self.n_docs
        positions = np.full((len(queries), k), NO_POSITION, dtype=np.int64)
        scores = np.full((len(queries), k), NO_SCORE, dtype=np.float64)
        drop_non_positive = self.algorithm != "BM25Okapi"
        # One score array (and scratch) for all the queries: a fresh one per query costs more in page faults.
        doc_scores = scratch = None
        for row, query in enumerate(queries):
            found = None
            if selective or (prune and drop_non_positive and self.n_docs >= MIN_DOCS):
                scratch = self._reader.new_scratch() if scratch is None else scratch
            if selective and drop_non_positive:
                found = pruned_top_k_among(self._reader, self._query_terms(query), k, float(floors[row]), scratch,
                                           allowed_docs)  # fmt: skip
            elif selective:
                found = self._allowed_top_k(self._query_terms(query), allowed_docs, k, scratch)
            elif prune and drop_non_positive and self.n_docs >= MIN_DOCS:
                found = pruned_top_k(self._reader, self._query_terms(query), k, float(floors[row]), scratch,
                                     allowed)  # fmt: skip
            if found is None:
                if doc_scores is None:
                    doc_scores = np.empty(self.n_docs)
                doc_scores.fill(0.0)
                self._add_scores(query, doc_scores)
                if allowed_docs is None:
                    found = top_k(doc_scores, k, drop_non_positive)
                else:
                    hits, hit_scores = top_k(doc_scores[allowed_docs], k, drop_non_positive)
                    found = allowed_docs[hits], hit_scores
            above = found[1] > floors[row]
            hits, hit_scores = found[0][above], found[1][above]
            positions[row, : hits.size] = hits + self.doc_offset
            scores[row, : hits.size] = hit_scores
        return positions, scores

    def _allowed_top_k(
        self, term_ids: list[int], docs: np.ndarray, k: int, scratch: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """
        The k best of the documents `docs` (ascending) by BM25Okapi (whose weights may be negative: no pruning),
        zero and negative scores kept: their weights looked up term by term in query order and summed from 0.0,
        as scoring every document sums them (a missing term adds 0.0), so the same scores bit for bit.
        """
        doc_scores = np.zeros(docs.size)
        for term_id in term_ids:
            doc_scores += self._reader.weights_at(term_id, docs, scratch)
        hits, hit_scores = top_k(doc_scores, k, drop_non_positive=False)
        return docs[hits], hit_scores

    def score(self, query: str) -> np.ndarray:
        """
        Every document's raw score for a query (0 for documents without any of its terms).

        :param query: The query.
        :returns: `(n_docs,)` float64 scores, by index within this index.
        """
        scores = np.zeros(self.n_docs)
        self._add_scores(query, scores)
        return scores

    def _query_terms(self, query: str) -> list[int]:
        """The ids of the query's distinct terms present in the index, in order of first occurrence."""
        term_ids = (self._term_ids.get(term) for term in dict.fromkeys(self.tokenizer.tokenize(query)))
        return [term_id for term_id in term_ids if term_id is not None]

    def _add_scores(self, query: str, scores: np.ndarray) -> None:
        """
        Adds each of the query's distinct terms' weights to `scores`, term by term in query order, so that every
        document sums its terms in Haystack's order (a term's documents are distinct: one addition each).
        """
        for term_id in self._query_terms(query):
            span = slice(int(self.postings.starts[term_id]), int(self.postings.starts[term_id + 1]))
            scores[self.postings.doc_indices[span]] += self._weights.weights(term_id, span)

    def save(self, directory: str | Path, kept: frozenset[str] = frozenset()) -> None:
        """
        Writes the index as `.npy` arrays, an Arrow file and JSON (no pickles) into a directory, created if needed.

        :param directory: The directory; the files of an index already there are replaced (the arrays are written
            as they are, not copied first: an index memory-mapped from `directory` is loaded with `mmap=False` to be
            saved back into it).
        :param kept: Files `directory` already holds with the bytes this index would write, left as they are
            (`index_io.write_index_files`): a shard weighed again writes its idf, bounds and header only.
        """
        header = {
            "algorithm": self.algorithm,
            "parameters": self.parameters,
            "tokenization_regex": self.tokenizer.regex,
            "doc_offset": self.doc_offset,
            "fingerprint": self.fingerprint,
            "corpus": asdict(self.corpus),
        }
        arrays = {field.name: getattr(self.postings, field.name) for field in fields(self.postings)}  # not copied
        write_index_files(Path(directory), IndexFiles(header, self.vocabulary, self.doc_ids, arrays), kept)

    @classmethod
    def load(cls, directory: str | Path, mmap: bool = True) -> "BM25Index":
        """
        Reads an index written by `save`, never unpickling anything, so a folder from elsewhere cannot run code.

        :param directory: The directory.
        :param mmap: Memory-map the arrays read-only (`np.load(mmap_mode="r")`) instead of reading them.
        :returns: The index.
        :raises ValueError: If a file is missing or malformed, an array needs pickle, or the parts disagree.
        """
        directory = Path(directory)
        files = read_index_files(directory, mmap=mmap)
        header, arrays = files.header, files.arrays
        try:
            algorithm, corpus = header["algorithm"], CorpusStats(**header["corpus"])
            parameters = resolve_parameters(algorithm, header["parameters"])
            tokenization_regex, doc_offset, doc_fingerprint = (
                header["tokenization_regex"],
                header["doc_offset"],
                header["fingerprint"],
            )
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"{directory} has an incomplete or malformed index header: {error!r}.") from error
        counted_arrays = {name: arrays[name] for name in COUNTED_ARRAYS}
        CountedShard(files.vocabulary, files.doc_ids, **counted_arrays).check(directory)
        if arrays["idf"].size != len(files.vocabulary) or arrays["bounds"].size != len(files.vocabulary):
            raise ValueError(f"{directory}: idf.npy and bounds.npy must hold one number per term of the vocabulary.")
        return cls(
            algorithm=algorithm,
            parameters=parameters,
            tokenization_regex=tokenization_regex,
            vocabulary=files.vocabulary,
            doc_ids=files.doc_ids,
            doc_offset=doc_offset,
            fingerprint=doc_fingerprint,
            corpus=corpus,
            postings=PostingLists(**arrays),
        )
