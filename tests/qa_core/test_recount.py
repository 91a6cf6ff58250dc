"""
`recount.recount_shard`: a shard counted with an earlier index's counts equals the same passages counted from
their texts (`counted.count_shard`), array for array and term for term in the order of first occurrence, whatever
was deleted, changed, added or moved between shards; only the passages no earlier shard holds, and kept ones that
became the first to hold a term, are tokenized.
"""

import random

import numpy as np
import pytest

from qa_core.retrieval.counted import CountedShard, count_shard
from qa_core.retrieval.fingerprint import text_hashes
from qa_core.retrieval.recount import EarlierShard, recount_shard
from qa_core.retrieval.statistics import CorpusStatistics
from qa_core.retrieval.tokenizer import DEFAULT_TOKENIZATION_REGEX, Tokenizer

TOKENIZER = Tokenizer(DEFAULT_TOKENIZATION_REGEX)
WORDS = [f"w{i}" for i in range(300)]


def _text(rng: random.Random) -> str:
    """A text of 1 to 30 words from a vocabulary whose first words are the commonest."""
    return " ".join(rng.choice(WORDS[: rng.randint(5, len(WORDS))]) for _ in range(rng.randint(1, 30)))


def _earlier(ids: list[str], texts: list[str], bounds: list[int], weighed: bool) -> list[EarlierShard]:
    """An earlier index's shards of the passages, as counted or (`weighed`) with their terms in the corpus's order."""
    shards = [count_shard(ids[a:b], texts[a:b], a, TOKENIZER) for a, b in zip(bounds, bounds[1:], strict=False)]
    corpus = CorpusStatistics.merge(statistics for _, statistics in shards)
    term_ids = {term: at for at, term in enumerate(corpus.vocabulary)}
    return [
        EarlierShard(counted.in_corpus_order(term_ids, a)[0] if weighed else counted, text_hashes(texts[a:b]),
                     statistics.vocabulary)  # fmt: skip
        for (counted, statistics), a, b in zip(shards, bounds, bounds[1:], strict=False)
    ]


def _same(found: CountedShard, wanted: CountedShard) -> None:
    """Two counted shards are alike: ids, vocabulary in its order, each array with its values and type."""
    assert list(found.doc_ids) == list(wanted.doc_ids)
    assert found.vocabulary == wanted.vocabulary
    for name, array in wanted.arrays().items():
        assert getattr(found, name).dtype == array.dtype, name
        assert np.array_equal(getattr(found, name), array), name


@pytest.mark.parametrize("weighed", [False, True])
def test_a_recount_equals_counting_the_texts_after_deletes_changes_and_additions(weighed: bool) -> None:
    rng = random.Random(7)
    for _ in range(12):
        ids = [f"d{i}" for i in range(200)]
        texts = [_text(rng) for _ in ids]
        earlier = _earlier(ids, texts, [0, 70, 140, 200], weighed)
        new_ids, new_texts = [], []
        for doc_id, text in zip(ids, texts, strict=True):
            draw = rng.random()
            if draw < 0.1:  # deleted
                continue
            new_ids.append(doc_id)
            new_texts.append(_text(rng) if draw < 0.15 else text)  # changed, or kept
            if rng.random() < 0.05:  # one added after it
                new_ids.append(f"n{len(new_ids)}")
                new_texts.append(_text(rng))
        for a, b in [(0, 60), (60, 150), (150, len(new_ids))]:  # other bounds than the earlier shards'
            recounted = recount_shard(new_ids[a:b], new_texts[a:b], text_hashes(new_texts[a:b]), a, earlier, TOKENIZER)
            counted, statistics = count_shard(new_ids[a:b], new_texts[a:b], a, TOKENIZER)
            _same(recounted.counted, counted)
            assert recounted.statistics.vocabulary == statistics.vocabulary
            assert np.array_equal(recounted.statistics.doc_frequencies, statistics.doc_frequencies)
            found = recounted.statistics
            assert (found.n_docs, found.total_length, found.fingerprint) == (
                statistics.n_docs, statistics.total_length, statistics.fingerprint)  # fmt: skip
            kept = sum(doc_id.startswith("d") and text == texts[int(doc_id[1:])]
                       for doc_id, text in zip(new_ids[a:b], new_texts[a:b], strict=True))  # fmt: skip
            assert recounted.reused == kept
            assert b - a - kept <= recounted.tokenized <= b - a


def test_only_new_passages_and_those_first_to_hold_a_term_are_tokenized() -> None:
    texts = ["alpha beta", "beta gamma", "gamma delta", "delta alpha epsilon", "zeta"]
    ids = ["a", "b", "c", "d", "e"]
    earlier = _earlier(ids, texts, [0, 5], weighed=True)
    # The same passages with one added at the end: nothing but it is tokenized.
    recounted = recount_shard([*ids, "f"], [*texts, "eta beta"], text_hashes([*texts, "eta beta"]), 0, earlier,
                              TOKENIZER)  # fmt: skip
    assert (recounted.reused, recounted.tokenized) == (5, 1)
    _same(recounted.counted, count_shard([*ids, "f"], [*texts, "eta beta"], 0, TOKENIZER)[0])
    # "a" deleted: "b" becomes the first to hold "beta" (tokenized for where it is among its terms), "d" the first
    # to hold "alpha" (tokenized too); "c" and "e" hold first what they held first before.
    recounted = recount_shard(ids[1:], texts[1:], text_hashes(texts[1:]), 0, earlier, TOKENIZER)
    assert (recounted.reused, recounted.tokenized) == (4, 2)
    assert recounted.counted.vocabulary == ["beta", "gamma", "delta", "alpha", "epsilon", "zeta"]
    _same(recounted.counted, count_shard(ids[1:], texts[1:], 0, TOKENIZER)[0])
    # A changed text under a kept id is counted from the text, not from the earlier shard.
    changed = ["alpha beta", "beta omega", *texts[2:]]
    recounted = recount_shard(ids, changed, text_hashes(changed), 0, earlier, TOKENIZER)
    assert recounted.reused == 4
    _same(recounted.counted, count_shard(ids, changed, 0, TOKENIZER)[0])
