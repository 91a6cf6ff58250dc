"""
Shards: a corpus split by document into indexes weighed with the whole corpus's statistics, built at once
(`build_sharded`) or one shard at a time: each shard tokenized once into its term counts and statistics
(`count_shard`), the shards' statistics merged in corpus order, then each shard weighed from its counts
(`weigh_shard`), again without tokenizing whenever the corpus grows.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qa_core.retrieval.corpus import check_corpus, check_unique_ids, weigh_corpus
from qa_core.retrieval.counts import TermIds, count_terms
from qa_core.retrieval.fingerprint import fingerprint_value
from qa_core.retrieval.index import BM25Index, CorpusStats, PostingLists, dense_rows
from qa_core.retrieval.index_io import (
    ARRAY_SHAPES,
    DOC_IDS_FILE,
    VOCABULARY_FILE,
    posting_dtype,
    read_array,
    read_doc_ids,
    read_json,
    write_doc_ids,
    write_json,
)
from qa_core.retrieval.scoring import DEFAULT_ALGORITHM, resolve_parameters, term_frequency_components
from qa_core.retrieval.statistics import CorpusStatistics, CorpusWeights
from qa_core.retrieval.tokenizer import DEFAULT_TOKENIZATION_REGEX, Tokenizer
from qa_core.retrieval.topk import merge_top_k


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
    bounds = shard_bounds(len(texts), n_shards)
    return [
        BM25Index.from_rows(weighted, ids, texts, start, stop, algorithm, resolved, tokenization_regex)
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True)
    ]


def shard_bounds(n_docs: int, n_shards: int) -> list[int]:
    """The first corpus position of each of `n_shards` contiguous shards, then `n_docs`: sizes differ by at most 1."""
    return [shard * n_docs // n_shards for shard in range(n_shards + 1)]


# Documents a shard is counted in at a time (`count_parts`): what one count holds at its peak, besides the shard's
# counts (about 100 Python strings per document while tokenizing, and a term matrix of the part).
COUNT_PART_DOCS = 50_000
# Postings reordered and weighed at a time (`weigh_shard`): its temporaries (8 bytes a posting each) stay in the
# CPU's caches, where each of the step's passes over them runs, rather than in memory (1.6x as fast as 4M a step).
_PAIRS_PER_STEP = 1 << 16
# A shard's tfc are looked up in a table of its (term count, document length) pairs (`_tfc_lookup`) when the table
# has at most this share of its postings' number of entries; else computed posting by posting.
_TFC_TABLE_SHARE = 1 / 16
# The term counts of a shard, beside its index files, and the dtypes they may have: term counts in the smallest
# unsigned type that holds them (`count_dtype`; int32 in an index of format 3).
COUNT_FILES = {
    "term_counts": tuple(np.dtype(kind) for kind in (np.uint8, np.uint16, np.uint32, np.int32)),
    "doc_lengths": (np.dtype(np.int64),),
}


def count_dtype(term_counts: np.ndarray) -> np.dtype:
    """The smallest unsigned dtype that holds a shard's term counts (uint8 unless a term occurs 256 times in one)."""
    return np.min_scalar_type(max(1, int(np.max(term_counts, initial=0))))


@dataclass(frozen=True)
class ShardCounts:
    """
    What a shard's weights are computed from, besides the corpus's statistics.

    :param term_counts: `(pairs,)` occurrences of each posting's term in its document, in posting order (int32, or
        the smallest unsigned type that holds them as saved).
    :param doc_lengths: `(documents,)` int64 terms per document.
    """

    term_counts: np.ndarray
    doc_lengths: np.ndarray

    def save(self, folder: Path, names: Iterable[str] = tuple(COUNT_FILES)) -> None:
        """Writes `term_counts.npy` and `doc_lengths.npy` (or those of `names`) into a shard folder."""
        for name in names:
            values = getattr(self, name)
            dtype = count_dtype(values) if name == "term_counts" else COUNT_FILES[name][0]
            np.save(folder / f"{name}.npy", np.ascontiguousarray(values, dtype), allow_pickle=False)

    @classmethod
    def load(cls, folder: Path, mmap: bool = False) -> "ShardCounts":
        """
        Reads what `save` wrote, never unpickling (memory-mapped read-only with `mmap`).

        :raises ValueError: If a file is missing or not a one-dimensional array of its dtype.
        """
        return cls(**{name: read_array(folder / f"{name}.npy", dtype, 1, mmap) for name, dtype in COUNT_FILES.items()})


@dataclass(frozen=True)
class CountedShard:
    """
    A shard's documents tokenized and counted, term-major, not weighed: what `weigh_shard` weighs with the
    statistics of any corpus the shard belongs to, without its texts. Its files are those of an index folder
    (`vocabulary.json`, `doc_ids.arrow`, `starts.npy`, `doc_indices.npy`) plus `ShardCounts`', so that a weighed
    shard's folder holds its counted shard too (to weigh it again when the corpus grows).

    :param vocabulary: The shard's terms, by term id: in order of first occurrence in the shard as counted, in the
        corpus's term order once weighed.
    :param doc_ids: The documents' ids.
    :param starts: `(terms + 1,)` int64: term `t`'s postings are `starts[t]:starts[t + 1]`.
    :param doc_indices: `(pairs,)` document of each posting, ascending within a term (int64, or uint32 as saved).
    :param counts: The postings' term counts and the documents' lengths.
    """

    vocabulary: list[str]
    doc_ids: Sequence[str]
    starts: np.ndarray
    doc_indices: np.ndarray
    counts: ShardCounts

    def save(self, folder: Path) -> None:
        """Writes the shard's files into a folder, created if needed (no `index.json`: it is not an index yet)."""
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / VOCABULARY_FILE, self.vocabulary)
        write_doc_ids(folder / DOC_IDS_FILE, self.doc_ids)
        np.save(folder / "starts.npy", np.ascontiguousarray(self.starts, np.int64), allow_pickle=False)
        postings = np.ascontiguousarray(self.doc_indices, posting_dtype(len(self.doc_ids)))
        np.save(folder / "doc_indices.npy", postings, allow_pickle=False)
        self.counts.save(folder)

    @classmethod
    def load(cls, folder: Path, mmap: bool = False) -> "CountedShard":
        """
        Reads what `save` (or `BM25Index.save` and `ShardCounts.save`) wrote, its arrays into memory or, with
        `mmap`, memory-mapped read-only (then none of them may be written over while the shard is in use).

        :raises ValueError: If a file is missing or malformed, or the files do not fit each other.
        """
        vocabulary, doc_ids = read_json(folder / VOCABULARY_FILE, list), read_doc_ids(folder, mmap)
        starts, doc_indices = (read_array(folder / f"{name}.npy", ARRAY_SHAPES[name][0], 1, mmap)
                               for name in ("starts", "doc_indices"))  # fmt: skip
        counts = ShardCounts.load(folder, mmap)
        if (
            starts.size != len(vocabulary) + 1
            or starts[-1] != doc_indices.size
            or counts.term_counts.size != doc_indices.size
            or counts.doc_lengths.size != len(doc_ids)
        ):
            raise ValueError(f"{folder}: the shard's term counts do not match its postings, terms or documents.")
        return cls(vocabulary, doc_ids, starts, doc_indices, counts)

    @classmethod
    def concatenate(cls, parts: list["CountedShard"]) -> "CountedShard":
        """
        The counted shard of consecutive parts, the same as counting their documents at once gives: the
        vocabulary in order of first occurrence, each term's postings in document order. Each part's arrays are
        released as it is merged (the list is emptied).

        :param parts: Counted parts, in document order; emptied.
        """
        term_ids = TermIds()
        part_terms = [np.fromiter(map(term_ids.__getitem__, part.vocabulary), np.int64, len(part.vocabulary))
                      for part in parts]  # fmt: skip
        lengths = np.zeros(len(term_ids), np.int64)
        for terms, part in zip(part_terms, parts, strict=True):
            lengths[terms] += np.diff(part.starts)
        starts = np.zeros(len(term_ids) + 1, np.int64)
        np.cumsum(lengths, out=starts[1:])
        doc_indices = np.empty(starts[-1], np.int64)
        term_counts = np.empty(starts[-1], np.int32)
        cursor, first_doc, doc_ids, doc_lengths = starts[:-1].copy(), 0, [], []
        for terms in part_terms:
            part = parts.pop(0)
            part_lengths = np.diff(part.starts)
            # each posting's place: its term's cursor, then its place among the term's postings in this part
            places = np.repeat(cursor[terms] - part.starts[:-1], part_lengths) + np.arange(part.starts[-1])
            doc_indices[places] = part.doc_indices + first_doc
            term_counts[places] = part.counts.term_counts
            cursor[terms] += part_lengths
            first_doc += len(part.doc_ids)
            doc_ids += part.doc_ids
            doc_lengths.append(part.counts.doc_lengths)
            del part, places
        lengths_array = np.concatenate(doc_lengths) if doc_lengths else np.zeros(0, np.int64)
        return cls(list(term_ids), doc_ids, starts, doc_indices, ShardCounts(term_counts, lengths_array))


def count_shard(
    ids: Sequence[str], texts: Sequence[str], doc_offset: int, tokenizer: Tokenizer
) -> tuple[CountedShard, CorpusStatistics]:
    """
    Tokenizes a shard's documents once: its counts, to weigh later, and its statistics, to merge with the other
    shards' (in corpus order, `CorpusStatistics.merge`) into the corpus's. Counted in parts of
    `COUNT_PART_DOCS` documents (`count_parts`).

    :param ids: The shard's document ids, unique non-empty strings.
    :param texts: Their texts.
    :param doc_offset: Corpus position of the first.
    :param tokenizer: Splits a text into terms.
    :returns: The counted shard and its statistics.
    :raises ValueError: If the ids are invalid.
    """
    check_corpus(ids, texts)
    parts = range(0, len(texts), COUNT_PART_DOCS)
    return count_parts(((ids[start : start + COUNT_PART_DOCS], texts[start : start + COUNT_PART_DOCS])
                        for start in parts), doc_offset, tokenizer)  # fmt: skip


def count_parts(
    parts: Iterable[tuple[Sequence[str], Sequence[str]]], doc_offset: int, tokenizer: Tokenizer
) -> tuple[CountedShard, CorpusStatistics]:
    """
    `count_shard` of a shard given in consecutive parts (ids and texts), counted one after the other: each part's
    tokens and term matrix are freed once its counts are kept as compact term-major arrays, which are merged
    into the shard's at the end (`CountedShard.concatenate`). The memory it takes is then one part's counting
    and the shard's counts (about 12 bytes per posting), not the shard's counting at once.

    :param parts: The shard's `(ids, texts)`, in order; a caller that holds its texts in another form (an Arrow
        column) makes each part's strings only when it is counted.
    :param doc_offset: Corpus position of the first document.
    :param tokenizer: Splits a text into terms.
    :returns: The counted shard and its statistics, the same as counting all its documents at once gives.
    :raises ValueError: If the ids are invalid (not unique non-empty strings, or there are none).
    """
    counted: list[CountedShard] = []
    statistics: list[CorpusStatistics] = []
    position = doc_offset
    for ids, texts in parts:
        check_corpus(ids, texts)
        counts = count_terms(texts, tokenizer)
        by_term = counts.frequencies.tocsc()  # every term occurs: term ids are columns, documents ascending in each
        statistics.append(CorpusStatistics.of_counts(counts, fingerprint_value(ids, texts, position)))
        counted.append(CountedShard(counts.vocabulary, list(ids), by_term.indptr.astype(np.int64), by_term.indices,
                                    ShardCounts(by_term.data, counts.doc_lengths)))  # fmt: skip
        position += len(ids)
        del counts, by_term
    if not counted:
        check_corpus([], [])  # raises: an empty shard
    shard = CountedShard.concatenate(counted)
    check_unique_ids(shard.doc_ids)  # an id in two parts
    return shard, CorpusStatistics.merge(statistics)


def weigh_shard(
    counted: CountedShard,
    doc_offset: int,
    doc_fingerprint: str,
    weights: CorpusWeights,
    algorithm: str,
    parameters: dict[str, float],
    tokenization_regex: str,
) -> tuple[BM25Index, ShardCounts]:
    """
    Weighs a counted shard with the statistics of its corpus: bit for bit `build_sharded`'s shard of these
    positions (its terms put in the corpus's term order, the weights computed pair by pair by the same formulas).

    :param counted: The shard (`count_shard`'s, or loaded from a weighed shard's folder).
    :param doc_offset: Corpus position of its first document.
    :param doc_fingerprint: `fingerprint.fingerprint` of its documents.
    :param weights: The corpus's idf and avgdl; its vocabulary holds every term of the shard.
    :param algorithm: The algorithm `weights` was made for.
    :param parameters: Its parameters (`scoring.resolve_parameters`).
    :param tokenization_regex: The regex the shard was counted with.
    :returns: The shard's index, and its counts in the index's posting order (to save beside it; `counted.counts`
        itself where its terms were in the corpus's order already).
    :raises ValueError: If a term of the shard is missing from the corpus's statistics.
    """
    ordered, corpus_ids = _in_corpus_order(counted, doc_offset, weights)
    index = _weighed(ordered, corpus_ids, doc_offset, doc_fingerprint, weights, algorithm, parameters,
                     tokenization_regex)  # fmt: skip
    return index, ordered.counts


def weigh_counted_shard(
    folder: Path,
    doc_offset: int,
    doc_fingerprint: str,
    weights: CorpusWeights,
    algorithm: str,
    parameters: dict[str, float],
    tokenization_regex: str,
    parts: Sequence[Path] = (),
) -> int:
    """
    `weigh_shard` of the counted shard in a folder (a shard counted, or weighed before and weighed again for a
    grown corpus), its index written beside its counts. Only the files whose bytes change are written: the
    weights and the header always, the files in term order (vocabulary, postings, term counts) only when the
    shard's terms were put in another order. A shard weighed before keeps its order (a grown corpus numbers its
    new terms after the old ones), so weighing it again reads its postings and counts memory-mapped and writes
    its weights only.

    :param folder: The shard's folder (`CountedShard.save`'s, or a weighed shard's).
    :param parts: The folders of the shard's consecutive parts, where it was counted in parts rather than into
        `folder`: put together (`CountedShard.concatenate`), and every file of the shard written into `folder`.
    :returns: The shard's vocabulary size.
    :raises ValueError: As `weigh_shard`, or if the folder's files are missing or do not fit each other.
    """
    if parts:
        counted = CountedShard.concatenate([CountedShard.load(part) for part in parts])
    else:
        counted = CountedShard.load(folder, mmap=True)
    index, counts = weigh_shard(counted, doc_offset, doc_fingerprint, weights, algorithm, parameters,
                                tokenization_regex)  # fmt: skip
    if parts:  # nothing of the shard is in its folder yet
        kept, written = frozenset(), list(COUNT_FILES)
    elif counts is counted.counts:  # the terms were in the corpus's order: postings and counts as they are
        kept, written = frozenset({DOC_IDS_FILE, VOCABULARY_FILE, "starts.npy", "doc_indices.npy"}), []
    else:  # as counted, ids and lengths are in document order
        kept, written = frozenset({DOC_IDS_FILE}), ["term_counts"]
        del counted  # no array of it is read again: its files are written over below
    counts.save(folder, names=written)
    index.save(folder, kept)
    return len(index.vocabulary)


def _in_corpus_order(counted: CountedShard, doc_offset: int, weights: CorpusWeights) -> tuple[CountedShard, np.ndarray]:
    """
    The shard with its terms in the corpus's term order, each term's postings as they are (the shard itself when
    they are in that order already), and its terms' corpus ids, ascending.

    :raises ValueError: If a term of the shard is missing from the corpus's statistics.
    """
    vocabulary = counted.vocabulary
    try:
        corpus_ids = np.fromiter(map(weights.term_ids.__getitem__, vocabulary), np.int64, len(vocabulary))
    except KeyError as error:
        raise ValueError(f"The term {error.args[0]!r} of shard {doc_offset} is not in the corpus statistics.") from None
    if not np.any(np.diff(corpus_ids) < 0):
        return counted, corpus_ids
    starts, doc_indices, term_counts = counted.starts, counted.doc_indices, counted.counts.term_counts
    order = np.argsort(corpus_ids)
    lengths = np.diff(starts)[order]
    new_starts = np.zeros(lengths.size + 1, np.int64)
    np.cumsum(lengths, out=new_starts[1:])
    shifts = starts[:-1][order] - new_starts[:-1]  # each term's postings' shift from their old place
    moved_docs = np.empty(doc_indices.size, doc_indices.dtype)
    moved_counts = np.empty(doc_indices.size, term_counts.dtype)
    for first in range(0, doc_indices.size, _PAIRS_PER_STEP):
        stop = min(first + _PAIRS_PER_STEP, doc_indices.size)
        places = _per_posting(shifts, new_starts, first, stop)  # the step's postings' old places
        places += np.arange(first, stop)
        moved_docs[first:stop], moved_counts[first:stop] = doc_indices[places], term_counts[places]
    ordered = CountedShard([vocabulary[i] for i in order.tolist()], counted.doc_ids, new_starts, moved_docs,
                           ShardCounts(moved_counts, counted.counts.doc_lengths))  # fmt: skip
    return ordered, corpus_ids[order]


def _per_posting(values: np.ndarray, starts: np.ndarray, first: int, stop: int) -> np.ndarray:
    """
    `np.repeat(values, np.diff(starts))[first:stop]` without the whole: each term's value over its postings among
    postings `first` to `stop` (term `t`'s are `starts[t]:starts[t + 1]`).
    """
    terms = slice(int(np.searchsorted(starts, first, "right")) - 1, int(np.searchsorted(starts, stop, "left")))
    return np.repeat(values[terms], np.diff(np.clip(starts[terms.start : terms.stop + 1], first, stop)))


def _tfc_lookup(
    algorithm: str, parameters: dict[str, float], term_counts: np.ndarray, doc_lengths: np.ndarray, avg_doc_len: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """
    The tfc of every (term count, document length) a shard's postings can hold, to look up rather than compute
    per posting: the same value (the same operations on the same two numbers), in a fraction of the time where
    the postings are many and the lengths few (passages: 29 counts by 101 lengths for 16M postings).

    :returns: `(counts, lengths)` float64 tfc, row `c - 1` for a term count of `c`, and `(documents,)` int64 each
        document's column; None where the table would hold more than `_TFC_TABLE_SHARE` of the postings' number.
    """
    lengths, columns = np.unique(doc_lengths, return_inverse=True)
    rows = int(np.max(term_counts, initial=0))
    if rows * lengths.size > _TFC_TABLE_SHARE * term_counts.size:
        return None
    counts = np.repeat(np.arange(1, rows + 1), lengths.size)
    table = term_frequency_components(algorithm, parameters, counts, np.tile(lengths, rows), avg_doc_len)
    return table.reshape(rows, lengths.size), columns.astype(np.int64)


def _weighed(
    ordered: CountedShard,
    corpus_ids: np.ndarray,
    doc_offset: int,
    doc_fingerprint: str,
    weights: CorpusWeights,
    algorithm: str,
    parameters: dict[str, float],
    tokenization_regex: str,
) -> BM25Index:
    """The index of a counted shard whose terms (of corpus ids `corpus_ids`) are in the corpus's order."""
    starts, doc_indices, term_counts = ordered.starts, ordered.doc_indices, ordered.counts.term_counts
    doc_lengths = np.asarray(ordered.counts.doc_lengths)
    lookup = _tfc_lookup(algorithm, parameters, term_counts, doc_lengths, weights.avg_doc_len)
    pair_weights = np.empty(doc_indices.size)  # filled a step of pairs at a time: the temporaries stay small
    term_idf = weights.idf[corpus_ids]
    for first in range(0, pair_weights.size, _PAIRS_PER_STEP):
        stop = min(first + _PAIRS_PER_STEP, pair_weights.size)
        counts = np.asarray(term_counts[first:stop], np.int32)  # as counted, whatever type they were saved in
        if lookup is None:
            tfc = term_frequency_components(algorithm, parameters, counts, doc_lengths[doc_indices[first:stop]],
                                            weights.avg_doc_len)  # fmt: skip
        else:
            table, columns = lookup
            places = counts.astype(np.int64)  # (count - 1) * lengths + the document's column
            places -= 1
            places *= table.shape[1]
            places += columns[doc_indices[first:stop]]
            tfc = table.ravel()[places]
        np.multiply(_per_posting(term_idf, starts, first, stop), tfc, out=pair_weights[first:stop])
    dense_terms, dense_weights = dense_rows(starts, doc_indices, pair_weights, len(ordered.doc_ids))
    return BM25Index(
        algorithm=algorithm,
        parameters=parameters,
        tokenization_regex=tokenization_regex,
        vocabulary=ordered.vocabulary,
        doc_ids=ordered.doc_ids,
        doc_offset=doc_offset,
        fingerprint=doc_fingerprint,
        corpus=CorpusStats(weights.n_docs, weights.avg_doc_len, weights.fingerprint),
        postings=PostingLists(
            np.asarray(starts),
            np.asarray(doc_indices, posting_dtype(len(ordered.doc_ids))),
            pair_weights,
            dense_terms,
            dense_weights,
        ),
    )


def search_shards(
    shards: Sequence[BM25Index],
    queries: Sequence[str],
    k: int,
    prune: bool = True,
    best: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """
    Searches a corpus's shards one after the other, each with the k-th best score found so far as its floor
    (`BM25Index.search`'s `floors`: a later shard skips what cannot beat it), merging as it goes.

    :param shards: The shards, in corpus order (`build_sharded`'s, or loaded).
    :param queries: Non-empty query strings.
    :param k: Most hits per query.
    :param prune: As in `BM25Index.search`.
    :param best: The hits of the shards before these (`(queries, k)` positions and scores, padded with -1 and
        -inf), which the search starts from; None: these are the first.
    :returns: As `merge_top_k` of every shard's `search` (and `best`): the same positions and scores.
    """
    for shard in shards:
        floors = None if best is None else best[1][:, k - 1]  # -inf where fewer than k so far
        found = shard.search(queries, k, floors=floors, prune=prune)
        best = found if best is None else merge_top_k([best, found], k)
    return best
