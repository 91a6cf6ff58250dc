"""
Counting a shard again with the counts of an earlier index (what an update of an index does with the passages it
keeps, `jobs.indexing.update`): a passage whose id and text an earlier shard counted takes its postings from that
shard, the others are tokenized, and the result is the `CountedShard` and statistics that counting them all gives,
bit for bit: the same postings, and the vocabulary in order of first occurrence.

That order is the one thing counts do not keep: which of a passage's terms comes first in its text. An earlier
shard's own statistics keep its vocabulary in order of first occurrence, so the terms a kept passage is the first
to hold are in their order there, as long as it was the first to hold them in the earlier shard too. A kept passage
that is now the first to hold a term it was not the first to hold before (the passage that held it first was
deleted, changed or is in another shard) is tokenized again for the order of its terms, unless that term is the only
one it holds first.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from qa_core.retrieval.corpus import check_corpus
from qa_core.retrieval.counted import CountedShard
from qa_core.retrieval.counts import TermIds, count_terms
from qa_core.retrieval.fingerprint import fingerprint_of_hashes
from qa_core.retrieval.statistics import CorpusStatistics
from qa_core.retrieval.tokenizer import Tokenizer


@dataclass(frozen=True)
class EarlierShard:
    """
    A shard of an earlier index, as a recount takes postings from it.

    :param counted: Its counts (`CountedShard.load`; memory-mapped is enough).
    :param text_hashes: `(passages, 32)` uint8: the SHA-256 of its passages' texts (`fingerprint.text_hashes`).
    :param own_vocabulary: Its terms in order of first occurrence in it (its own statistics' vocabulary).
    """

    counted: CountedShard
    text_hashes: np.ndarray
    own_vocabulary: list[str]


@dataclass(frozen=True)
class Recounted:
    """
    A shard counted with the counts of earlier shards.

    :param counted: Its counts, as `counted.count_shard` gives them.
    :param statistics: Its statistics, as `counted.count_shard` gives them.
    :param reused: Passages whose postings came from an earlier shard.
    :param tokenized: Passages tokenized: those no earlier shard counted, and kept ones tokenized for their order.
    """

    counted: CountedShard
    statistics: CorpusStatistics
    reused: int
    tokenized: int


def recount_shard(
    ids: Sequence[str],
    texts: Sequence[str],
    hashes: np.ndarray,
    doc_offset: int,
    earlier: Sequence[EarlierShard],
    tokenizer: Tokenizer,
) -> Recounted:
    """
    `counted.count_shard` of a shard's passages, taking the postings of each passage whose id and text hash an
    earlier shard holds from that shard (module docstring).

    :param ids: The shard's passage ids, unique non-empty strings.
    :param texts: Their texts.
    :param hashes: `(passages, 32)` uint8: the SHA-256 of their texts.
    :param doc_offset: Corpus position of the first.
    :param earlier: Shards of an earlier index that may hold some of the passages.
    :param tokenizer: The tokenizer the earlier shards were counted with.
    :raises ValueError: If the ids are invalid (as `count_shard`).
    """
    check_corpus(ids, texts)
    n = len(ids)
    source, local = _matches(ids, hashes, earlier)
    terms = TermIds()  # the shard's terms, numbered as met here (not its order)
    postings: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (term, passage, count), int32 to stay small
    doc_lengths = np.zeros(n, np.int64)
    fresh = np.flatnonzero(source < 0)
    counts = count_terms([texts[i] for i in fresh.tolist()], tokenizer)
    fresh_terms = _numbered(terms, counts.vocabulary)
    matrix = counts.frequencies.tocoo()
    postings.append((fresh_terms[matrix.col].astype(np.int32), fresh[matrix.row].astype(np.int32),
                     matrix.data.astype(np.int32)))  # fmt: skip
    doc_lengths[fresh] = counts.doc_lengths
    shard_terms = []  # each earlier shard's terms' numbers here
    for at, shard in enumerate(earlier):
        counted = shard.counted
        numbers = _numbered(terms, counted.vocabulary) if (source == at).any() else None
        shard_terms.append(numbers)
        if numbers is None:
            continue
        kept = np.full(len(counted.doc_ids), -1, np.int32)
        kept[local[source == at]] = np.flatnonzero(source == at)
        passages = kept[np.asarray(counted.doc_indices)]
        taken = passages >= 0
        posting_terms = np.repeat(numbers.astype(np.int32), np.diff(np.asarray(counted.starts)))
        counts_taken = np.asarray(counted.term_counts)[taken].astype(np.int32)
        postings.append((posting_terms[taken], passages[taken], counts_taken))
        doc_lengths[source == at] = np.asarray(counted.doc_lengths)[local[source == at]]
    term, passage, count = (np.concatenate(column) for column in zip(*postings, strict=True))
    first = np.full(len(terms), n, np.int64)
    np.minimum.at(first, term, passage)  # each term's first passage
    rank, again = _ranks(first, source, local, fresh_terms, shard_terms, earlier, texts, tokenizer, list(terms))
    held = np.flatnonzero(first < n)  # an earlier shard's terms that no passage kept from it holds are left out
    order = held[np.lexsort((rank[held], first[held]))]  # the vocabulary in order of first occurrence
    new_ids = np.full(len(terms), -1, np.int32)
    new_ids[order] = np.arange(order.size, dtype=np.int32)
    term = new_ids[term]
    sort = np.lexsort((passage, term))
    starts = np.zeros(order.size + 1, np.int64)
    np.cumsum(np.bincount(term, minlength=order.size), out=starts[1:])
    vocabulary = list(terms)
    counted = CountedShard([vocabulary[i] for i in order.tolist()], list(ids), starts,
                           passage[sort].astype(np.int64), count[sort], doc_lengths)  # fmt: skip
    statistics = CorpusStatistics(counted.vocabulary, np.diff(starts), n, int(doc_lengths.sum()),
                                  fingerprint_of_hashes(ids, hashes, doc_offset))  # fmt: skip
    return Recounted(counted, statistics, n - int(fresh.size), int(fresh.size) + again)


def _matches(ids: Sequence[str], hashes: np.ndarray, earlier: Sequence[EarlierShard]) -> tuple[np.ndarray, np.ndarray]:
    """Each passage's earlier shard (-1: none holds its id with its text) and its place there."""
    wanted = np.asarray(list(ids), dtype=object)
    source = np.full(len(wanted), -1, np.int64)
    local = np.full(len(wanted), -1, np.int64)
    for at, shard in enumerate(earlier):
        place = pd.Index(np.asarray(list(shard.counted.doc_ids), dtype=object)).get_indexer(wanted)
        found = (place >= 0) & (source < 0)
        found[found] = (shard.text_hashes[place[found]] == hashes[found]).all(axis=1)
        source[found], local[found] = at, place[found]
    return source, local


def _numbered(terms: TermIds, vocabulary: Sequence[str]) -> np.ndarray:
    """The numbers of a vocabulary's terms in `terms` (new terms numbered as met)."""
    return np.fromiter(map(terms.__getitem__, vocabulary), np.int64, len(vocabulary))


def _ranks(
    first: np.ndarray,
    source: np.ndarray,
    local: np.ndarray,
    fresh_terms: np.ndarray,
    shard_terms: list[np.ndarray | None],
    earlier: Sequence[EarlierShard],
    texts: Sequence[str],
    tokenizer: Tokenizer,
    vocabulary: list[str],
) -> tuple[np.ndarray, int]:
    """
    Each term's place in the order of first occurrence among the terms first held by the same passage: from the
    tokenized passages' vocabulary for a passage tokenized, from its earlier shard's own vocabulary for a kept one
    that was the first to hold them there too, else (it is the first to hold more than one) from the passage
    tokenized again; and how many kept passages were tokenized again.
    """
    rank = np.zeros(first.size, np.int64)
    rank[fresh_terms] = np.arange(fresh_terms.size)  # first met in the tokenized passages: in their text order
    again = np.zeros(source.size, bool)
    for at, (shard, numbers) in enumerate(zip(earlier, shard_terms, strict=True)):
        if numbers is None:
            continue
        held = np.flatnonzero(np.append(source, -1)[first] == at)  # terms first held by a passage kept from it
        place = np.full(first.size, -1, np.int64)
        place[numbers] = np.arange(numbers.size)
        starts = np.asarray(shard.counted.starts)
        first_there = np.asarray(shard.counted.doc_indices)[starts[place[held]]]  # where it was first held there
        own = pd.Index(shard.own_vocabulary).get_indexer(np.asarray(shard.counted.vocabulary, dtype=object))
        rank[held] = own[place[held]]
        again[first[held[first_there != local[first[held]]]]] = True
    again &= np.bincount(first[first < source.size], minlength=source.size) > 1  # one term alone needs no order
    for passage in np.flatnonzero(again).tolist():
        order = {term: at for at, term in enumerate(dict.fromkeys(tokenizer.tokenize(texts[passage])))}
        held = np.flatnonzero(first == passage)
        rank[held] = [order[vocabulary[term]] for term in held.tolist()]
    return rank, int(np.count_nonzero(again))
