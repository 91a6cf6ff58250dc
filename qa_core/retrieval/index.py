"""BM25Index: a term-major sparse matrix of BM25 weights, searched for many queries at once."""

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from qa_core.retrieval.corpus import WeightedCorpus, weigh_corpus
from qa_core.retrieval.fingerprint import fingerprint
from qa_core.retrieval.index_io import IndexFiles, posting_dtype, read_index_files, write_index_files
from qa_core.retrieval.pruning import MIN_DOCS, PostingReader, pruned_top_k
from qa_core.retrieval.scoring import DEFAULT_ALGORITHM, resolve_parameters
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


# A term in at least this share of the documents also keeps its weights as a dense row, added to the scores in
# one vector operation: for 750k postings of 1M documents that takes 0.44 ms where scattering them takes 1.8 ms,
# and such common terms hold most of the postings a query touches (85% on the benchmark's passages).
DENSE_TERM_SHARE = 0.25


@dataclass(frozen=True)
class PostingLists:
    """
    The weights, term-major: term `t`'s documents are `doc_indices[starts[t]:starts[t + 1]]`.

    :param starts: `(terms + 1,)` int64 offsets (a CSC matrix's `indptr`).
    :param doc_indices: `(pairs,)` document index within the index, ascending within a term (`posting_dtype`).
    :param weights: `(pairs,)` float64 `idf * tfc` of the pair.
    :param dense_terms: `(common terms,)` int64 ids of the terms in at least `DENSE_TERM_SHARE` of the documents,
        ascending.
    :param dense_weights: `(common terms, documents)` float64: row `i` is `dense_terms[i]`'s weight in every
        document, 0 where it is missing (the same values as its postings).
    """

    starts: np.ndarray
    doc_indices: np.ndarray
    weights: np.ndarray
    dense_terms: np.ndarray
    dense_weights: np.ndarray


def dense_rows(
    starts: np.ndarray, doc_indices: np.ndarray, weights: np.ndarray, n_docs: int
) -> tuple[np.ndarray, np.ndarray]:
    """
    The `PostingLists.dense_terms` and `dense_weights` of term-major postings.

    :param starts: As in `PostingLists`.
    :param doc_indices: As in `PostingLists`.
    :param weights: As in `PostingLists`.
    :param n_docs: Documents in the index.
    :returns: `(common terms,)` int64 term ids and their `(common terms, n_docs)` float64 rows.
    """
    terms = np.flatnonzero(np.diff(starts) >= DENSE_TERM_SHARE * n_docs).astype(np.int64)
    rows = np.zeros((terms.size, n_docs))
    for row, term_id in enumerate(terms):
        span = _span(starts, term_id)
        rows[row, doc_indices[span]] = weights[span]
    return terms, rows


def term_major(rows: sp.csr_matrix) -> tuple[np.ndarray, sp.csc_matrix]:
    """
    Documents' values by term: the terms they contain, and the values renumbered to those terms, term-major.

    :param rows: `(documents, corpus terms)` CSR values, columns by corpus term id.
    :returns: The corpus term ids present, ascending, and the `(documents, present terms)` CSC matrix (documents
        ascending within a term); two matrices of one sparsity structure come out in one order.
    """
    present = np.bincount(rows.indices, minlength=rows.shape[1]) > 0
    used_terms = np.flatnonzero(present)
    if used_terms.size < rows.shape[1]:  # renumber the documents' terms 0, 1, ...
        local_term = (np.cumsum(present) - 1).astype(rows.indices.dtype)
        shape = (rows.shape[0], used_terms.size)
        rows = sp.csr_matrix((rows.data, local_term[rows.indices], rows.indptr), shape=shape)
    return used_terms, rows.tocsc()


def _span(starts: np.ndarray, term_id: int) -> slice:
    """Where a term's documents and weights lie in the posting arrays."""
    return slice(int(starts[term_id]), int(starts[term_id + 1]))


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
    its ids and JSON (`index_io`).
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
        :param postings: The weights, term-major.
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
        self._dense_row_of_term = {int(term_id): row for row, term_id in enumerate(postings.dense_terms)}
        self._reader = PostingReader(
            postings.starts,
            postings.doc_indices,
            postings.weights,
            self._dense_row_of_term,
            postings.dense_weights,
            len(doc_ids),
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
        tokenizer = Tokenizer(tokenization_regex)
        weighted = weigh_corpus(ids, texts, algorithm, resolved, tokenizer)
        return cls.from_rows(weighted, ids, texts, 0, len(ids), algorithm, resolved, tokenization_regex)

    @classmethod
    def from_rows(
        cls,
        weighted: WeightedCorpus,
        ids: Sequence[str],
        texts: Sequence[str],
        start: int,
        stop: int,
        algorithm: str,
        parameters: dict[str, float],
        tokenization_regex: str,
    ) -> "BM25Index":
        """
        The index of corpus positions `start:stop` of a weighed corpus, keeping the corpus's statistics.

        :param weighted: The whole corpus, weighed.
        :param ids: The whole corpus's document ids.
        :param texts: The whole corpus's texts (for the shard's fingerprint).
        :param start: First corpus position of the shard.
        :param stop: One past its last.
        :param algorithm: The algorithm `weighted` was weighed with.
        :param parameters: Its parameters.
        :param tokenization_regex: The tokenizer's regex.
        :returns: The shard's index; its vocabulary holds only the terms its documents contain.
        """
        whole = (start, stop) == (0, weighted.n_docs)
        rows = weighted.weights if whole else weighted.weights[start:stop]  # (shard docs, corpus terms)
        return cls.from_weights(
            rows,
            weighted.vocabulary,
            list(ids[start:stop]),
            start,
            weighted.fingerprint if whole else fingerprint(ids[start:stop], texts[start:stop], start),
            CorpusStats(weighted.n_docs, weighted.avg_doc_len, weighted.fingerprint),
            algorithm,
            parameters,
            tokenization_regex,
        )

    @classmethod
    def from_weights(
        cls,
        rows: sp.csr_matrix,
        vocabulary: Sequence[str] | Mapping[int, str],
        doc_ids: list[str],
        doc_offset: int,
        doc_fingerprint: str,
        corpus: CorpusStats,
        algorithm: str,
        parameters: dict[str, float],
        tokenization_regex: str,
    ) -> "BM25Index":
        """
        The index of weighed documents.

        :param rows: `(documents, corpus terms)` float64 CSR weights, columns by corpus term id.
        :param vocabulary: Each corpus term id's term (at least those of the documents).
        :param doc_ids: The documents' ids.
        :param doc_offset: Corpus position of the first.
        :param doc_fingerprint: `fingerprint.fingerprint` of the documents, at their corpus positions.
        :param corpus: The statistics of the corpus the weights were computed with.
        :param algorithm: The algorithm the weights were computed with.
        :param parameters: Its parameters.
        :param tokenization_regex: The tokenizer's regex.
        :returns: The index; its vocabulary holds only the terms its documents contain, in corpus term id order.
        """
        used_terms, by_term = term_major(rows)
        starts = by_term.indptr.astype(np.int64, copy=False)
        doc_indices = by_term.indices.astype(posting_dtype(rows.shape[0]))
        weights = by_term.data.astype(np.float64, copy=False)
        dense_terms, dense_weights = dense_rows(starts, doc_indices, weights, rows.shape[0])
        postings = PostingLists(starts, doc_indices, weights, dense_terms, dense_weights)
        return cls(
            algorithm=algorithm,
            parameters=parameters,
            tokenization_regex=tokenization_regex,
            vocabulary=[vocabulary[term_id] for term_id in used_terms.tolist()],
            doc_ids=doc_ids,
            doc_offset=doc_offset,
            fingerprint=doc_fingerprint,
            corpus=corpus,
            postings=postings,
        )

    @property
    def n_docs(self) -> int:
        """Documents in this index (a shard's own, not the corpus's)."""
        return len(self.doc_ids)

    def search(
        self, queries: Sequence[str], k: int, floors: np.ndarray | None = None, prune: bool = True
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
        :returns: `(queries, k)` int64 corpus positions and `(queries, k)` float64 raw scores, best first;
            rows with fewer hits are padded with -1 and -inf.
        :raises ValueError: If `k < 1`, `queries` is a string, a query is not a non-empty string, or `floors` is
            not one number per query.
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
        positions = np.full((len(queries), k), NO_POSITION, dtype=np.int64)
        scores = np.full((len(queries), k), NO_SCORE, dtype=np.float64)
        drop_non_positive = self.algorithm != "BM25Okapi"
        # One score array (and scratch) for all the queries: a fresh one per query costs more in page faults.
        doc_scores = scratch = None
        for row, query in enumerate(queries):
            found = None
            if prune and drop_non_positive and self.n_docs >= MIN_DOCS:
                scratch = self._reader.new_scratch() if scratch is None else scratch
                found = pruned_top_k(self._reader, self._query_terms(query), k, float(floors[row]), scratch)
            if found is None:
                if doc_scores is None:
                    doc_scores = np.empty(self.n_docs)
                doc_scores.fill(0.0)
                self._add_scores(query, doc_scores)
                found = top_k(doc_scores, k, drop_non_positive)
                above = found[1] > floors[row]
                found = found[0][above], found[1][above]
            hits, hit_scores = found
            positions[row, : hits.size] = hits + self.doc_offset
            scores[row, : hits.size] = hit_scores
        return positions, scores

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
        document sums its terms in Haystack's order (adding a dense row's 0 leaves a score as it is).
        """
        for term_id in self._query_terms(query):
            dense_row = self._dense_row_of_term.get(term_id)
            if dense_row is not None:
                scores += self.postings.dense_weights[dense_row]
            else:
                span = _span(self.postings.starts, term_id)
                np.add.at(scores, self.postings.doc_indices[span], self.postings.weights[span])

    def save(self, directory: str | Path, kept: frozenset[str] = frozenset()) -> None:
        """
        Writes the index as `.npy` arrays, an Arrow file and JSON (no pickles) into a directory, created if needed.

        :param directory: The directory; the files of an index already there are replaced (the arrays are written
            as they are, not copied first: an index memory-mapped from `directory` is loaded with `mmap=False` to be
            saved back into it).
        :param kept: Files `directory` already holds with the bytes this index would write, left as they are
            (`index_io.write_index_files`): a shard weighed again writes its weights and header only.
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
        _check_postings(directory, arrays, len(files.vocabulary), len(files.doc_ids))
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


def _check_postings(directory: Path, arrays: dict[str, np.ndarray], n_terms: int, n_docs: int) -> None:
    """:raises ValueError: If the loaded arrays do not fit each other, the vocabulary and the documents."""
    starts, doc_indices, dense_terms = arrays["starts"], arrays["doc_indices"], arrays["dense_terms"]
    if (
        starts.size != n_terms + 1
        or starts[0] != 0
        or starts[-1] != doc_indices.size
        or arrays["weights"].size != doc_indices.size
        or arrays["dense_weights"].shape != (dense_terms.size, n_docs)
    ):
        raise ValueError(f"{directory}: the posting arrays do not match each other or the vocabulary.")
    if doc_indices.size and not 0 <= doc_indices.min() <= doc_indices.max() < n_docs:
        raise ValueError(f"{directory}: the posting lists name documents beyond the index's {n_docs}: it is corrupt.")
    if dense_terms.size and not 0 <= dense_terms.min() <= dense_terms.max() < n_terms:
        raise ValueError(f"{directory}: the dense rows name terms beyond the vocabulary: it is corrupt.")
