"""Behaviour of ExtractiveReader and its phases (tokenization, span decoding, answer selection)."""

import inspect
import json
import logging
import math
import re
from collections import defaultdict

import numpy as np
import pytest
import torch
from transformers import AutoModelForQuestionAnswering, AutoTokenizer

import qa_core.inference
import qa_core.reader
from qa_core.answers import ExtractedAnswer
from qa_core.document import Document
from qa_core.inference import (
    ACCELERATOR_BATCH_TOKENS,
    CPU_BATCH_TOKENS,
    InferenceSettings,
    length_sorted_batches,
    pad_batch,
    resolve_device,
)
from qa_core.local_models import TEXT_FILE
from qa_core.reader import ExtractiveReader
from qa_core.secret import Secret
from qa_core.selection import DocumentText, SelectionSettings, rank_answers
from qa_core.spans import null_and_best_logits, spans_to_chars, top_spans
from qa_core.tokenization import Sequence, TokenizationSettings, tokenize_each_pair, tokenize_pairs

RIVER = "I swam in the river in Maine."


def stdlib_docs() -> dict[str, str]:
    """The project's real text, title -> text."""
    with TEXT_FILE.open(encoding="utf-8") as lines:
        return {row["title"]: row["text"] for row in map(json.loads, lines)}


TEXTS = stdlib_docs()
SHORT = TEXTS["collections"][:300]  # fits in one sequence of 384 tokens
LONG = TEXTS["re"]  # 6,000 characters: several sequences at max_seq_length=128


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


@pytest.fixture(scope="module")
def readers(tiny_bert_model):
    """Warmed readers on the tiny BERT model, one per set of constructor arguments, shared by the module."""
    cache: dict[tuple, ExtractiveReader] = {}

    def get(**kwargs) -> ExtractiveReader:
        key = tuple(sorted(kwargs.items()))
        if key not in cache:
            cache[key] = ExtractiveReader(model=tiny_bert_model, device="cpu", **kwargs)
            cache[key].warm_up()
        return cache[key]

    return get


class CountingModel:
    """Wraps a model and records the batch size of every forward pass."""

    def __init__(self, model):
        self.model = model
        self.batch_sizes: list[int] = []

    def __call__(self, **inputs):
        self.batch_sizes.append(inputs["input_ids"].shape[0])
        return self.model(**inputs)

    def parameters(self):
        return self.model.parameters()


def answer(score: float, start: int, end: int, document: Document | None, query: str = "q") -> ExtractedAnswer:
    return ExtractedAnswer(
        query=query,
        score=score,
        data=document.content[start:end] if document is not None else None,
        document=document,
        document_offset=ExtractedAnswer.Span(start, end),
    )


def spans_of(answers: list[ExtractedAnswer]) -> list[tuple]:
    return [
        (
            a.data,
            a.document.id if a.document else None,
            a.document_offset and (a.document_offset.start, a.document_offset.end),
        )
        for a in answers
    ]


def overlapping_pairs(answers: list[ExtractedAnswer]) -> int:
    """Pairs of answers of the same document that share at least one character."""
    return sum(
        a.document.id == b.document.id
        and max(a.document_offset.start, b.document_offset.start) < min(a.document_offset.end, b.document_offset.end)
        for i, a in enumerate(answers)
        for b in answers[:i]
    )


# --- 1. Scoring: hand-built tensors -------------------------------------------------------------------------------

# One sequence of 6 tokens: [CLS] q [SEP] c c c; the query and special tokens have the largest logits.
START = torch.tensor([[9.0, 8.0, 7.0, 1.0, 2.0, 0.5]])
END = torch.tensor([[9.0, 8.0, 7.0, 0.3, 1.2, 2.5]])
CONTEXT = torch.tensor([[False, False, False, True, True, True]])


def test_top_spans_scores_every_context_span_with_start_before_end():
    scores, starts, ends = top_spans(START, END, CONTEXT, answers_per_seq=36, calibration_factor=0.1)
    expected = sorted(
        ((sigmoid(0.1 * (START[0, s] + END[0, e]).item()), s, e) for s in range(3, 6) for e in range(s, 6)),
        reverse=True,
    )
    assert len(expected) == 6
    valid = scores[0] > 0
    assert valid.sum().item() == 6  # the other 30 spans are invalid (score 0), query tokens included
    assert list(zip(starts[0][valid].tolist(), ends[0][valid].tolist(), strict=True)) == [
        (s, e) for _, s, e in expected
    ]
    assert scores[0][valid].tolist() == pytest.approx([score for score, _, _ in expected], abs=1e-7)
    assert scores[0][~valid].tolist() == [0.0] * 30


def test_top_spans_keeps_the_best_answers_per_seq_and_applies_the_calibration_factor():
    scores, starts, ends = top_spans(START, END, CONTEXT, answers_per_seq=2, calibration_factor=0.5)
    assert scores.shape == starts.shape == ends.shape == (1, 2)
    # Best sums: (start 4, end 5) = 2 + 2.5 = 4.5, then (3, 5) = 1 + 2.5 = 3.5.
    assert starts.tolist() == [[4, 3]] and ends.tolist() == [[5, 5]]
    assert scores[0].tolist() == pytest.approx([sigmoid(0.5 * 4.5), sigmoid(0.5 * 3.5)], abs=1e-7)


def test_top_spans_does_not_normalise_per_sequence():
    # Row 1 equals row 0 except for a much larger start logit on token 3: the other spans keep their scores,
    # as they would not under a per-sequence softmax.
    start = torch.cat([START, START]).clone()
    start[1, 3] = 50.0
    end = torch.cat([END, END])
    context = torch.cat([CONTEXT, CONTEXT])
    scores, starts, ends = top_spans(start, end, context, answers_per_seq=6, calibration_factor=0.1)
    rows = [
        {(s, e): v for s, e, v in zip(starts[r].tolist(), ends[r].tolist(), scores[r].tolist(), strict=True)}
        for r in range(2)
    ]
    for span in [(4, 4), (4, 5), (5, 5)]:
        assert rows[1][span] == rows[0][span] == pytest.approx(sigmoid(0.1 * (start[0, span[0]] + end[0, span[1]])))
    assert rows[1][(3, 3)] == pytest.approx(sigmoid(0.1 * 50.3), abs=1e-7)


def test_top_spans_max_answer_length_counts_tokens():
    scores, starts, ends = top_spans(START, END, CONTEXT, 36, 0.1, max_answer_length=2)
    valid = scores[0] > 0
    kept = set(zip(starts[0][valid].tolist(), ends[0][valid].tolist(), strict=True))
    assert kept == {(3, 3), (3, 4), (4, 4), (4, 5), (5, 5)}  # (3, 5) is 3 tokens long
    scores, starts, ends = top_spans(START, END, CONTEXT, 36, 0.1, max_answer_length=1)
    valid = scores[0] > 0
    assert set(zip(starts[0][valid].tolist(), ends[0][valid].tolist(), strict=True)) == {(3, 3), (4, 4), (5, 5)}


def test_pad_batch_context_mask_covers_only_the_second_sequence():
    sequences = [
        Sequence(0, np.array([1, 2, 3, 4, 5]), 3, 4, np.zeros(5, dtype=np.int64), np.zeros(5, dtype=np.int64)),
        Sequence(1, np.array([1, 2, 3]), 1, 2, np.zeros(3, dtype=np.int64), np.zeros(3, dtype=np.int64)),
    ]
    tensors = pad_batch(sequences, pad_token_id=0)
    assert tensors["input_ids"].tolist() == [[1, 2, 3, 4, 5], [1, 2, 3, 0, 0]]
    assert tensors["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert tensors["context_mask"].tolist() == [[False, False, False, True, False], [False, True, False, False, False]]


def test_spans_to_chars_maps_tokens_to_document_offsets_and_drops_invalid_spans():
    sequence = Sequence(
        pair_index=0,
        input_ids=np.arange(6),
        context_start=3,
        context_end=6,
        char_starts=np.array([0, 0, 0, 10, 15, 21]),
        char_ends=np.array([0, 4, 0, 14, 20, 25]),
    )
    spans = spans_to_chars(
        [sequence, sequence],
        np.array([[0.7, 0.6, 0.0], [0.0, 0.0, 0.0]]),
        np.array([[4, 3, 0], [0, 0, 0]]),
        np.array([[5, 3, 0], [0, 0, 0]]),
        null_logits=np.array([-1.5, 2.0]),
        best_logits=np.array([3.25, 7.0]),
    )
    assert spans[0].scores.tolist() == pytest.approx([0.7, 0.6])
    assert spans[0].starts.tolist() == [15, 10]
    assert spans[0].ends.tolist() == [25, 14]
    assert (spans[0].null_logit, spans[0].best_logit) == (-1.5, 3.25)
    assert (spans[1].scores.tolist(), spans[1].null_logit, spans[1].best_logit) == ([], 2.0, -math.inf)


def test_null_and_best_logits_are_the_cls_sum_and_the_top_span_sum():
    _, starts, ends = top_spans(START, END, CONTEXT, answers_per_seq=2, calibration_factor=0.1)
    null, best = null_and_best_logits(START, END, starts, ends)
    assert null.tolist() == [18.0]  # [CLS]: 9.0 + 9.0, which no span score includes
    assert best.tolist() == [4.5]  # the best context span, tokens 4..5: 2.0 + 2.5


# --- 1. Scoring: the reader against a direct computation from the model's logits ----------------------------------


def reference_spans(model_dir, query, content, answers_per_seq, calibration_factor, max_seq_length, stride):
    """Each sequence's best spans computed directly: sigmoid(cf * (start + end)) over context tokens, start <= end."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForQuestionAnswering.from_pretrained(model_dir).eval()
    encoded = tokenizer(
        query,
        content,
        truncation="only_second",
        max_length=max_seq_length,
        stride=stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )
    found = []
    for row, input_ids in enumerate(encoded["input_ids"]):
        with torch.no_grad():
            output = model(input_ids=torch.tensor([input_ids]), attention_mask=torch.ones(1, len(input_ids)))
        start, end = output.start_logits[0].tolist(), output.end_logits[0].tolist()
        context = [i for i, sequence_id in enumerate(encoded.sequence_ids(row)) if sequence_id == 1]
        offsets = encoded["offset_mapping"][row]
        spans = [
            (sigmoid(calibration_factor * (start[s] + end[e])), offsets[s][0], offsets[e][1])
            for s in context
            for e in context
            if s <= e
        ]
        found.extend(sorted(spans, reverse=True)[:answers_per_seq])
    return found


@pytest.mark.parametrize(
    ("content", "max_seq_length", "stride"), [(SHORT, 384, 128), (LONG[:1500], 128, 32)], ids=["one-sequence", "split"]
)
def test_reader_scores_match_a_direct_computation_from_logits(
    readers, tiny_bert_model, content, max_seq_length, stride
):
    query = "What does the module implement?"
    reader = readers(
        max_seq_length=max_seq_length, stride=stride, answers_per_seq=7, overlap_threshold=None, no_answer=False
    )
    got = reader.run(query, [Document(content=content)], top_k=10_000)["answers"]
    expected = reference_spans(tiny_bert_model, query, content, 7, 0.1, max_seq_length, stride)
    if max_seq_length == 128:
        assert len(expected) > 7  # several sequences, each contributing its own 7
    assert len(got) == len(expected)
    # A span inside the stride appears once per window that holds it, with each window's score.
    expected_by_span, got_by_span = defaultdict(list), defaultdict(list)
    for score, start, end in expected:
        expected_by_span[(start, end)].append(score)
    for found in got:
        key = (found.document_offset.start, found.document_offset.end)
        assert found.data == content[key[0] : key[1]]
        got_by_span[key].append(found.score)
    assert got_by_span.keys() == expected_by_span.keys()
    for key, scores in got_by_span.items():
        assert sorted(scores) == pytest.approx(sorted(expected_by_span[key]), abs=1e-6)
    assert [a.score for a in got] == sorted((a.score for a in got), reverse=True)


def test_each_sequence_yields_answers_per_seq_spans(readers):
    reader = readers(max_seq_length=64, stride=16, overlap_threshold=None, no_answer=False)
    sequences = tokenize_pairs(reader._tokenizer, ["What is re?"], [LONG[:2000]], TokenizationSettings(64, 16))
    assert len(sequences) > 3
    answers = reader.run("What is re?", [Document(content=LONG[:2000])], top_k=100_000)["answers"]
    assert len(answers) == 20 * len(sequences)
    answers = reader.run("What is re?", [Document(content=LONG[:2000])], top_k=100_000, answers_per_seq=3)["answers"]
    assert len(answers) == 3 * len(sequences)


# --- 2. Long documents are split with a stride --------------------------------------------------------------------


@pytest.mark.parametrize("model_fixture", ["tiny_bert_model", "tiny_roberta_model"], ids=["wordpiece", "byte-bpe"])
def test_long_document_is_split_into_overlapping_windows(request, model_fixture):
    tokenizer = AutoTokenizer.from_pretrained(request.getfixturevalue(model_fixture))
    query, content = "What is a deque?", TEXTS["collections"][:900]
    sequences = tokenize_pairs(
        tokenizer, [query, "Why?"], [content, "short"], TokenizationSettings(max_seq_length=48, stride=8)
    )
    windows = [s for s in sequences if s.pair_index == 0]
    assert len(windows) >= 4 and [s.pair_index for s in sequences[len(windows) :]] == [1]
    query_ids = windows[0].input_ids[: windows[0].context_start]
    for window in windows:
        assert len(window) <= 48
        assert (window.input_ids[: window.context_start] == query_ids).all()  # the query is never truncated
    for before, after in zip(windows, windows[1:], strict=False):
        assert len(before) == 48  # only the last window may be shorter
        shared_before = before.input_ids[before.context_end - 8 : before.context_end]
        shared_after = after.input_ids[after.context_start : after.context_start + 8]
        assert (shared_before == shared_after).all()  # exactly `stride` tokens shared
        assert before.char_starts[before.context_end - 8] == after.char_starts[after.context_start]
    assert windows[0].char_starts[windows[0].context_start] == 0
    assert windows[-1].char_ends[windows[-1].context_end - 1] == len(content.rstrip())


class CountingBackend:
    """Wraps a Rust tokenizer and records the texts it encodes."""

    def __init__(self, backend) -> None:
        object.__setattr__(self, "backend", backend)
        object.__setattr__(self, "encoded", [])

    def __getattr__(self, name: str):
        return getattr(self.backend, name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self.backend, name, value)

    def encode_batch(self, texts, **kwargs):
        self.encoded.extend(texts)
        return self.backend.encode_batch(texts, **kwargs)


@pytest.mark.parametrize("model_fixture", ["tiny_bert_model", "tiny_roberta_model"], ids=["wordpiece", "byte-bpe"])
@pytest.mark.parametrize(("max_seq_length", "stride"), [(48, 8), (40, 0), (384, 128)])
def test_each_text_is_tokenized_once_and_the_pairs_equal_the_tokenization_of_each_pair(
    request, model_fixture, max_seq_length, stride
):
    tokenizer = AutoTokenizer.from_pretrained(request.getfixturevalue(model_fixture))
    queries = ["What is a deque?", "Wer schrieb «Ünïcode» — 日本語?", " spaced  out "]
    contents = [
        LONG[:4000],  # several windows at each length
        "naïve café — 日本語のテキスト 😀\n\fpage two\tend " * 6,
        "",
        "  \n ",
        "short",
    ]
    pairs = [(query, content) for content in contents for query in queries]  # every question of every document
    counting = CountingBackend(tokenizer.backend_tokenizer)
    tokenizer._tokenizer = counting
    sequences = tokenize_pairs(
        tokenizer, [q for q, _ in pairs], [c for _, c in pairs], TokenizationSettings(max_seq_length, stride)
    )
    assert counting.encoded == queries + contents  # each distinct text once
    tokenizer._tokenizer = counting.backend
    expected = tokenizer(  # what Haystack's reader asks of the tokenizer
        [q for q, _ in pairs],
        [c for _, c in pairs],
        truncation="only_second",
        max_length=max_seq_length,
        stride=stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding=False,
    )
    assert len(sequences) == len(expected["input_ids"]) > len(pairs)
    for row, sequence in enumerate(sequences):
        assert sequence.pair_index == expected["overflow_to_sample_mapping"][row]
        assert sequence.input_ids.tolist() == expected["input_ids"][row]
        offsets = expected["offset_mapping"][row]
        assert sequence.char_starts.tolist() == [start for start, _ in offsets]
        assert sequence.char_ends.tolist() == [end for _, end in offsets]
        context = [index for index, side in enumerate(expected.sequence_ids(row)) if side == 1]
        assert (sequence.context_start, sequence.context_end) == ((context[0], context[-1] + 1) if context else (0, 0))


def test_query_that_leaves_no_room_for_the_document_raises_value_error(readers):
    reader = readers()
    with pytest.raises(ValueError, match="max_seq_length"):
        reader.run("why " * 40, [Document(content=SHORT)], max_seq_length=32, stride=4)


def test_a_pair_that_is_not_text_is_reported_as_such_and_the_other_pairs_tokenized(readers):
    tokenizer = readers()._tokenizer
    sequences, failures = tokenize_each_pair(
        tokenizer, [None, "What is re?", "Why?"], [SHORT, SHORT, 42], TokenizationSettings(64, 16)
    )
    assert failures == {
        0: "Cannot tokenize the pair: its query is NoneType, not a string (None).",
        2: "Cannot tokenize the pair: its document is int, not a string (42).",
    }
    assert {sequence.pair_index for sequence in sequences} == {1}


# --- 3-5. Ranking, de-duplication, top_k, no-answer, score_threshold ----------------------------------------------

RIVER_DOC = Document(content=RIVER)
OTHER_DOC = Document(content=RIVER + " Again.")


def test_deduplicate_by_overlap_examples_from_the_docstring(readers):
    reader = readers()
    long_answer, inside = answer(0.9, 7, 28, RIVER_DOC), answer(0.8, 10, 19, RIVER_DOC)
    assert (long_answer.data, inside.data) == ("in the river in Maine", "the river")  # overlap: 9 / 9 = 1.0
    assert reader.deduplicate_by_overlap([long_answer, inside], overlap_threshold=0.99) == [long_answer]
    assert reader.deduplicate_by_overlap([long_answer, inside], overlap_threshold=1.0) == [long_answer, inside]

    left, right = answer(0.9, 10, 22, RIVER_DOC), answer(0.8, 20, 28, RIVER_DOC)
    assert (left.data, right.data) == ("the river in", "in Maine")  # they share "in": 2 / 8 = 0.25 of "in Maine"
    assert reader.deduplicate_by_overlap([left, right], overlap_threshold=0.25) == [left, right]
    assert reader.deduplicate_by_overlap([left, right], overlap_threshold=0.24) == [left]
    assert reader.deduplicate_by_overlap([left, right], overlap_threshold=None) == [left, right]


def test_deduplication_only_compares_answers_of_the_same_document(readers):
    reader = readers()
    first, same_span_other_doc = answer(0.9, 10, 19, RIVER_DOC), answer(0.8, 10, 19, OTHER_DOC)
    assert reader.deduplicate_by_overlap([first, same_span_other_doc], 0.0) == [first, same_span_other_doc]
    touching = answer(0.7, 19, 22, RIVER_DOC)  # " in" starts where "the river" ends: no shared character
    assert (first.data, touching.data) == ("the river", " in")
    assert reader.deduplicate_by_overlap([first, touching], 0.0) == [first, touching]


def test_rank_answers_sorts_deduplicates_then_cuts_to_top_k():
    candidates = [
        answer(0.5, 0, 6, RIVER_DOC),  # "I swam"
        answer(0.9, 10, 19, RIVER_DOC),  # "the river"
        answer(0.8, 14, 19, RIVER_DOC),  # "river": inside "the river", dropped
        answer(0.7, 10, 19, OTHER_DOC),  # same span, other document: kept
        answer(0.6, 23, 28, RIVER_DOC),  # "Maine"
    ]
    ranked = rank_answers(
        "q", candidates, SelectionSettings(top_k=3, overlap_threshold=0.01, no_answer=False, score_threshold=None)
    )
    assert [(a.score, a.data) for a in ranked] == [(0.9, "the river"), (0.7, "the river"), (0.6, "Maine")]
    assert ranked[1].document is OTHER_DOC
    everything = rank_answers(
        "q", candidates, SelectionSettings(top_k=len(candidates), overlap_threshold=None, no_answer=False)
    )
    assert [a.score for a in everything] == [0.9, 0.8, 0.7, 0.6, 0.5]


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([0.9, 0.3], [0.9, 0.3, pytest.approx(0.07)]),  # no-answer last
        ([0.6, 0.1], [0.6, pytest.approx(0.36), 0.1]),  # no-answer in the middle
        ([0.2, 0.1], [pytest.approx(0.72), 0.2, 0.1]),  # no-answer first
    ],
    ids=["last", "middle", "first"],
)
def test_no_answer_scores_prod_one_minus_score_in_score_order(scores, expected):
    candidates = [answer(score, 0, 1 + i, RIVER_DOC) for i, score in enumerate(scores)]
    ranked = rank_answers(
        "q", candidates, SelectionSettings(top_k=5, overlap_threshold=None, no_answer=True, score_threshold=None)
    )
    assert [a.score for a in ranked] == expected
    (no_answer,) = [a for a in ranked if a.data is None]
    assert no_answer.document is None and no_answer.document_offset is None and no_answer.query == "q"


def test_no_answer_only_counts_answers_kept_after_top_k():
    candidates = [answer(0.6, 0, 1, RIVER_DOC), answer(0.5, 2, 3, RIVER_DOC), answer(0.4, 4, 5, RIVER_DOC)]
    ranked = rank_answers(
        "q", candidates, SelectionSettings(top_k=2, overlap_threshold=None, no_answer=True, score_threshold=None)
    )
    assert [a.score for a in ranked] == [0.6, 0.5, pytest.approx(0.4 * 0.5)]


def test_score_threshold_applies_last_and_to_the_no_answer():
    candidates = [answer(0.6, 0, 1, RIVER_DOC), answer(0.1, 2, 3, RIVER_DOC)]
    # No-answer: 0.4 * 0.9 = 0.36, computed over both answers before the threshold drops 0.1.
    ranked = rank_answers(
        "q", candidates, SelectionSettings(top_k=5, overlap_threshold=None, no_answer=True, score_threshold=0.36)
    )
    assert [(a.score, a.data) for a in ranked] == [(0.6, "I"), (pytest.approx(0.36), None)]
    ranked = rank_answers(
        "q", candidates, SelectionSettings(top_k=5, overlap_threshold=None, no_answer=True, score_threshold=0.37)
    )
    assert [a.score for a in ranked] == [0.6]


def test_reader_answers_are_sorted_deduplicated_and_cut(readers):
    docs = [Document(content=SHORT), Document(content=TEXTS["json"][:800]), Document(content=TEXTS["csv"][:500])]
    reader = readers()
    deduplicated = reader.run("What is a deque?", docs, top_k=10_000, no_answer=False)["answers"]
    # 20 candidates per sequence (four: json's 800 characters take two); overlapping ones are dropped, but each
    # document keeps at least its best.
    assert len(deduplicated) == 5
    assert {a.document.id for a in deduplicated} == {d.id for d in docs}
    answers = reader.run("What is a deque?", docs, top_k=2)["answers"]
    spans = [a for a in answers if a.data is not None]
    assert len(spans) == 2 and len(answers) == 3
    assert spans == deduplicated[:2]  # de-duplicate first, then cut to top_k
    assert [a.score for a in answers] == sorted((a.score for a in answers), reverse=True)
    assert overlapping_pairs(deduplicated) == 0
    # Without de-duplication the same query gives overlapping answers: the check above is not vacuous.
    undeduplicated = reader.run("What is a deque?", docs, top_k=10_000, overlap_threshold=1.0, no_answer=False)
    assert len(undeduplicated["answers"]) == 4 * 20
    assert overlapping_pairs(undeduplicated["answers"]) > 0


def test_reader_no_answer_and_score_threshold(readers):
    reader = readers(overlap_threshold=None)
    docs = [Document(content=SHORT)]
    answers = reader.run("What is a deque?", docs, top_k=4)["answers"]
    (no_answer,) = [a for a in answers if a.data is None]
    spans = [a for a in answers if a.data is not None]
    assert no_answer.score == pytest.approx(math.prod(1 - a.score for a in spans), rel=1e-12)
    assert no_answer.document is None and no_answer.query == "What is a deque?"
    without = reader.run("What is a deque?", docs, top_k=4, no_answer=False)["answers"]
    assert spans_of(without) == spans_of(spans) and len(without) == 4

    threshold = spans[2].score
    kept = reader.run("What is a deque?", docs, top_k=4, score_threshold=threshold)["answers"]
    assert spans_of(kept) == spans_of([a for a in answers if a.score >= threshold])
    assert len(kept) == 3  # the three best spans; the no-answer entry scores below the threshold


# --- 6. Page numbers ----------------------------------------------------------------------------------------------

PAGED = "First page about lists.\fSecond page: the deque type.\f\fFourth page, after an empty one: dict views."


def test_document_text_page_of_counts_form_feeds_before_the_start():
    source = DocumentText.of(Document(content=PAGED, meta={"page_number": 3}))
    assert source.page_of(0) == 3
    assert source.page_of(PAGED.index("\f")) == 3  # the form feed itself is still on the first page
    assert source.page_of(PAGED.index("Second")) == 4
    assert source.page_of(PAGED.index("Fourth")) == 6
    assert DocumentText.of(Document(content=PAGED)).page_of(40) is None


def test_reader_answer_page_numbers(readers, caplog):
    reader = readers(overlap_threshold=None, answers_per_seq=10_000)  # every span
    doc = Document(content=PAGED, meta={"page_number": 3})
    answers = reader.run("Which page?", [doc], top_k=10_000, no_answer=False)["answers"]
    pages = [a.meta["answer_page_number"] for a in answers]
    assert pages == [3 + PAGED[: a.document_offset.start].count("\f") for a in answers]
    assert set(pages) == {3, 4, 6}
    unpaged = reader.run("Which page?", [Document(content=PAGED)], top_k=10_000, no_answer=False)["answers"]
    assert len(unpaged) == 630 and all(a.meta == {} for a in unpaged)  # every span of the seeded tiny BERT
    with caplog.at_level(logging.WARNING):
        wrong = Document(content=PAGED, meta={"page_number": "3"})
        answers = reader.run("Which page?", [wrong], top_k=3, no_answer=False)["answers"]
    assert len(answers) == 3 and all(a.meta == {} for a in answers)
    assert "page_number must be an int" in caplog.text


# --- 7. Documents without content ---------------------------------------------------------------------------------


def test_documents_without_content_are_skipped_with_a_warning(readers, caplog):
    reader = readers()
    empty = Document(content=None, meta={"name": "scan"})
    with caplog.at_level(logging.WARNING):
        answers = reader.run("What is a deque?", [empty, Document(content=SHORT)])["answers"]
    assert f"Document {empty.id} has no content" in caplog.text
    assert answers == reader.run("What is a deque?", [Document(content=SHORT)])["answers"]


def test_no_documents_gives_no_answers(readers):
    reader = readers()
    assert reader.run("What is a deque?", []) == {"answers": []}
    assert reader.run("What is a deque?", [Document(content=None)]) == {"answers": []}
    result = reader.run_batch(["a?", "b?", "c?"], [[], [Document(content=SHORT)], [Document(content=None)]])
    assert result["answers"][0] == [] and result["answers"][2] == []
    assert result["answers"][1] == reader.run("b?", [Document(content=SHORT)])["answers"]
    assert len(result["answers"][1]) >= 2


def test_empty_string_document_gives_only_the_no_answer(readers):
    (only,) = readers().run("What is a deque?", [Document(content="")])["answers"]
    assert only.data is None and only.score == 1.0


# --- 8. warm_up ---------------------------------------------------------------------------------------------------


def test_run_before_warm_up_raises(tiny_bert_model):
    reader = ExtractiveReader(model=tiny_bert_model)
    with pytest.raises(RuntimeError, match=r"warm_up\(\)"):
        reader.run("q?", [Document(content="text")])
    with pytest.raises(RuntimeError, match=r"warm_up\(\)"):
        reader.run_batch(["q?"], [[Document(content="text")]])


def test_run_batch_checks_lengths(readers):
    with pytest.raises(ValueError, match="2 queries but 1 document lists"):
        readers().run_batch(["a?", "b?"], [[Document(content=SHORT)]])


# --- 9 and memory: max_batch_size ---------------------------------------------------------------------------------


def test_max_batch_size_caps_sequences_per_forward_pass(readers, monkeypatch):
    reader = readers(max_seq_length=64, stride=16, max_batch_size=3)
    docs = [Document(content=LONG[:1200]), Document(content=SHORT)]
    n_sequences = len(
        tokenize_pairs(reader._tokenizer, ["What is re?"] * 2, [d.content for d in docs], TokenizationSettings(64, 16))
    )
    assert n_sequences > 7
    counting = CountingModel(reader._model)
    monkeypatch.setattr(reader, "_model", counting)
    capped = reader.run("What is re?", docs)["answers"]
    assert max(counting.batch_sizes) == 3 and sum(counting.batch_sizes) == n_sequences
    assert len(counting.batch_sizes) == math.ceil(n_sequences / 3)

    counting.batch_sizes.clear()
    uncapped = reader.run("What is re?", docs, max_batch_size=100)["answers"]  # run-time override
    assert counting.batch_sizes == [n_sequences]
    assert spans_of(capped) == spans_of(uncapped)
    assert [a.score for a in capped] == pytest.approx([a.score for a in uncapped], abs=1e-5)


def test_span_scores_are_built_for_one_batch_at_a_time(readers, monkeypatch):
    reader = readers(max_seq_length=64, stride=16, max_batch_size=2)
    shapes = []

    def recording_top_spans(start_logits, end_logits, context_mask, *args):
        shapes.append((tuple(start_logits.shape), tuple(end_logits.shape), tuple(context_mask.shape)))
        return top_spans(start_logits, end_logits, context_mask, *args)

    monkeypatch.setattr(qa_core.inference, "top_spans", recording_top_spans)
    n_sequences = len(tokenize_pairs(reader._tokenizer, ["What is re?"], [LONG[:1500]], TokenizationSettings(64, 16)))
    reader.run("What is re?", [Document(content=LONG[:1500])])
    assert len(shapes) == math.ceil(n_sequences / 2) >= 4
    for start_shape, end_shape, mask_shape in shapes:
        assert start_shape == end_shape == mask_shape
        assert start_shape[0] <= 2 and start_shape[1] <= 64  # (batch <= max_batch_size, seq <= max_seq_length)
    assert sum(shape[0][0] for shape in shapes) == n_sequences


class LengthRecordingModel(CountingModel):
    """Also records the real (unpadded) length of every sequence of every forward pass, by batch."""

    def __init__(self, model):
        super().__init__(model)
        self.lengths: list[list[int]] = []

    def __call__(self, **inputs):
        self.lengths.append(inputs["attention_mask"].sum(dim=1).tolist())
        return super().__call__(**inputs)


def test_batches_are_bounded_by_padded_tokens_in_length_order(readers, monkeypatch):
    reader = readers(max_seq_length=64, stride=16, max_batch_tokens=640)  # max_batch_size=None
    contents = [LONG, SHORT, LONG[:2000]]
    sequences = tokenize_pairs(reader._tokenizer, ["What is re?"] * 3, contents, TokenizationSettings(64, 16))
    assert len(sequences) == 55
    recording = LengthRecordingModel(reader._model)
    monkeypatch.setattr(reader, "_model", recording)
    reader.run("What is re?", [Document(content=content) for content in contents])
    # Batches follow the sequences sorted by length (shortest first), however the documents came: the three last
    # windows (45, 50 and 50 tokens) with seven full ones, then the full windows of 64, ten to a pass (640 tokens).
    lengths = sorted(len(sequence) for sequence in sequences)
    assert lengths[:3] == [45, 50, 50] and lengths[3:] == [64] * 52
    assert recording.batch_sizes == [10] * 5 + [5]
    assert recording.lengths == [lengths[:10], *(lengths[i : i + 10] for i in range(10, 55, 10))]
    recording.lengths.clear()  # a run-time override: 45 and 50 pad to 100 tokens, a third 50 would make 150
    reader.run("What is re?", [Document(content=content) for content in contents], max_batch_tokens=128)
    assert [len(batch) for batch in recording.lengths] == [2] * 27 + [1]


@pytest.mark.parametrize("precision, batch_sizes", [("fp32", [32, 23]), ("bf16", [55])])
def test_the_default_budget_follows_the_models_dtype(readers, monkeypatch, precision, batch_sizes):
    # 55 windows of at most 64 tokens: 2,048 padded tokens (fp32) take 32 of them a pass, 4,096 (bf16) all.
    reader = readers(max_seq_length=64, stride=16, precision=precision)
    recording = LengthRecordingModel(reader._model)
    monkeypatch.setattr(reader, "_model", recording)
    reader.run("What is re?", [Document(content=content) for content in [LONG, SHORT, LONG[:2000]]])
    assert recording.batch_sizes == batch_sizes


def test_max_batch_tokens_none_is_the_default_budget_of_the_device_and_dtype():
    assert InferenceSettings().batch_tokens("cpu") == CPU_BATCH_TOKENS[torch.float32] == 2048
    assert InferenceSettings().batch_tokens("cpu", torch.bfloat16) == CPU_BATCH_TOKENS[torch.bfloat16] == 4096
    assert InferenceSettings().batch_tokens("cpu", torch.float16) == 2048  # not measured: fp32's
    assert InferenceSettings().batch_tokens("cuda:1", torch.bfloat16) == ACCELERATOR_BATCH_TOKENS == 49152
    assert InferenceSettings(max_batch_tokens=100).batch_tokens("cpu", torch.bfloat16) == 100


def test_a_sequence_longer_than_the_token_budget_is_read_alone():
    empty = np.zeros(0, dtype=np.int64)
    sequences = [Sequence(i, np.zeros(n, dtype=np.int64), 0, 0, empty, empty) for i, n in enumerate((5, 30, 3, 30))]
    assert length_sorted_batches(sequences, max_tokens=20) == [[2, 0], [1], [3]]
    assert length_sorted_batches(sequences, max_tokens=100, max_sequences=3) == [[2, 0, 1], [3]]


def test_span_decoding_runs_in_fp32_for_half_precision_logits():
    # bf16 holds both logits exactly but not their sum: 256 + 1 rounds to 256 in bf16 (8 bits of mantissa).
    start = torch.tensor([[0.0, 256.0, 0.0]], dtype=torch.bfloat16)
    end = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.bfloat16)
    context = torch.tensor([[False, True, True]])
    assert (start[0, 1] + end[0, 2]).item() == 256.0
    scores, starts, ends = top_spans(start, end, context, answers_per_seq=1, calibration_factor=0.01)
    assert scores.dtype == torch.float32 and (starts.item(), ends.item()) == (1, 2)
    assert scores.item() == pytest.approx(sigmoid(0.01 * 257.0), abs=1e-7)  # bf16's sum would give sigmoid(2.56)


# --- max_answer_length and context windows ------------------------------------------------------------------------


def test_max_answer_length_excludes_longer_spans(readers):
    tokenizer = readers()._tokenizer
    offsets = tokenizer(SHORT, return_offsets_mapping=True, add_special_tokens=False)["offset_mapping"]

    def n_tokens(a: ExtractedAnswer) -> int:
        return sum(a.document_offset.start <= s and e <= a.document_offset.end for s, e in offsets)

    unlimited = readers(overlap_threshold=None).run("What is a deque?", [Document(content=SHORT)], no_answer=False)
    assert max(n_tokens(a) for a in unlimited["answers"]) > 3
    limited = readers(overlap_threshold=None, max_answer_length=3)
    answers = limited.run("What is a deque?", [Document(content=SHORT)], no_answer=False)["answers"]
    assert len(answers) == 20
    assert max(n_tokens(a) for a in answers) <= 3 and min(n_tokens(a) for a in answers) >= 1
    # The kept spans are the best spans of at most 3 tokens: the same as filtering an exhaustive list.
    exhaustive = readers(overlap_threshold=None, answers_per_seq=10_000).run(
        "What is a deque?", [Document(content=SHORT)], top_k=10_000, no_answer=False
    )["answers"]
    short = [a for a in exhaustive if n_tokens(a) <= 3][:20]
    assert spans_of(answers) == spans_of(short)


FOX = "The quick brown fox jumps over the lazy dog"


@pytest.mark.parametrize(
    ("text", "start", "end", "window", "context", "offset"),
    [
        (FOX, 16, 19, 15, "brown fox jumps", 10),
        (FOX, 16, 19, 17, "brown fox jumps", 10),  # cut mid-word on both sides: moved to the word boundaries
        (FOX, 10, 15, 20, "quick brown fox", 4),
        (FOX, 16, 19, 11, "fox", 16),  # no whole word fits on either side
        (FOX, 0, 3, 16, "The quick", 0),  # answer at the start
        (FOX, 40, 43, 14, "lazy dog", 35),  # answer at the end
        (FOX, 4, 15, 5, "quick brown", 4),  # window smaller than the answer
        ("abcdefghij", 4, 6, 6, "cdefgh", 2),  # no word boundary: cut inside the word
    ],
    ids=["fits", "mid-word", "asymmetric", "too-small", "start", "end", "smaller-than-answer", "no-spaces"],
)
def test_context_window_cuts_at_word_boundaries(text, start, end, window, context, offset):
    assert DocumentText.of(Document(content=text)).context(start, end, window) == (context, offset)


def test_reader_context_window(readers):
    reader = readers(context_window_size=40, overlap_threshold=None)
    answers = reader.run("What is a deque?", [Document(content=SHORT)], top_k=20)["answers"]
    spans = [a for a in answers if a.data is not None]
    assert len(spans) == 20  # three of them shorter than the window (6, 10 and 10 characters): context around them
    for a in spans:
        window_start = a.document_offset.start - a.context_offset.start
        assert a.context[a.context_offset.start : a.context_offset.end] == a.data
        assert SHORT[window_start : window_start + len(a.context)] == a.context
        assert len(a.context) <= max(40, len(a.data))
        assert (a.context, window_start) == DocumentText.of(a.document).context(
            a.document_offset.start, a.document_offset.end, 40
        )
    assert sum(len(a.context) > len(a.data) for a in spans) == 3
    (no_answer,) = [a for a in answers if a.data is None]
    assert no_answer.context is None and no_answer.context_offset is None
    default = readers().run("What is a deque?", [Document(content=SHORT)])["answers"]
    assert len(default) == 3 and all(a.context is None for a in default)  # the two spans left and the no-answer


# --- Run-time overrides -------------------------------------------------------------------------------------------


def test_run_time_overrides_honour_falsy_values(readers):
    docs = [Document(content=SHORT)]
    best = readers(stride=32, max_seq_length=64).run("What is a deque?", docs, no_answer=False)["answers"][0].score
    reader = readers(score_threshold=best + 1e-6, overlap_threshold=None, stride=32, max_seq_length=64)
    assert reader.run("What is a deque?", docs)["answers"] == []  # every score is below the threshold
    # score_threshold=0.0 is honoured, not replaced by the constructor's value.
    everything = reader.run("What is a deque?", docs, score_threshold=0.0, top_k=3)["answers"]
    assert len(everything) == 4
    expected = readers(overlap_threshold=None, stride=32, max_seq_length=64).run("What is a deque?", docs, top_k=3)
    assert everything == expected["answers"]
    # overlap_threshold=0.0 is honoured: the answers of a reader built with 0.0, not all 20 candidates.
    zero_overlap = reader.run("What is a deque?", docs, score_threshold=0.0, overlap_threshold=0.0)["answers"]
    built_with_zero = readers(overlap_threshold=0.0, stride=32, max_seq_length=64).run("What is a deque?", docs)
    assert zero_overlap == built_with_zero["answers"]
    assert len(zero_overlap) < 21 == len(reader.run("What is a deque?", docs, score_threshold=0.0)["answers"])
    # top_k=0 is refused with the parameter's rule (a run would keep only a no-answer row, which scores 1).
    with pytest.raises(ValueError, match=r"Invalid run-time parameters: top_k must be >= 1, not 0\."):
        reader.run("What is a deque?", docs, score_threshold=0.0, top_k=0)
    # stride=0 is honoured: windows that share no token.
    no_stride = reader.run("What is re?", [Document(content=LONG[:1000])], score_threshold=0.0, stride=0)
    built_without_stride = readers(stride=0, overlap_threshold=None, max_seq_length=64)
    assert no_stride == built_without_stride.run("What is re?", [Document(content=LONG[:1000])])
    assert no_stride != reader.run("What is re?", [Document(content=LONG[:1000])], score_threshold=0.0)


# --- run_batch ----------------------------------------------------------------------------------------------------


def test_run_batch_equals_run_per_query_and_shares_batches(readers, monkeypatch):
    reader = readers(max_seq_length=96, stride=24, max_batch_size=4)
    titles = list(TEXTS)
    queries = [
        "What is a deque?",
        "How do I parse JSON?",
        "What does re.sub return?",
        "Which module reads CSV files?",
        "Is there anything here?",
        "What is a path?",
        "How are sockets closed?",
        "Who logs?",
    ]
    documents = [
        [Document(content=SHORT)],
        [Document(content=TEXTS["json"]), Document(content=TEXTS["csv"][:700])],
        [Document(content=LONG[:2500]), Document(content=None), Document(content="")],
        [Document(content=TEXTS[t]) for t in titles[20:26]],
        [],
        [Document(content=TEXTS[t], meta={"page_number": 2}) for t in titles[40:43]],
        [Document(content=None)],
        [Document(content=TEXTS["logging.basicConfig"]), Document(content=SHORT)],
    ]
    counting = CountingModel(reader._model)
    monkeypatch.setattr(reader, "_model", counting)
    batched = reader.run_batch(queries, documents)["answers"]
    pairs = [(q, d.content) for q, docs in zip(queries, documents, strict=True) for d in docs if d.content is not None]
    n_sequences = len(
        tokenize_pairs(reader._tokenizer, [q for q, _ in pairs], [c for _, c in pairs], TokenizationSettings(96, 24))
    )
    assert max(counting.batch_sizes) == 4 and sum(counting.batch_sizes) == n_sequences
    assert len(counting.batch_sizes) == math.ceil(n_sequences / 4)  # sequences of different queries share batches

    assert len(batched) == len(queries)
    for query, docs, got in zip(queries, documents, batched, strict=True):
        alone = reader.run(query, docs)["answers"]
        assert spans_of(got) == spans_of(alone)
        assert [a.score for a in got] == pytest.approx([a.score for a in alone], abs=1e-5)
        assert [a.meta for a in got] == [a.meta for a in alone]
        assert all(a.query == query for a in got)
    assert batched[4] == [] and batched[6] == []
    assert len(batched[3]) == 21


# --- Quantization -------------------------------------------------------------------------------------------------


# What int8 costs against fp32 (stated in the README): span scores move by up to this much.
INT8_SCORE_TOLERANCE = 0.11


def test_int8_quantization_quantizes_linear_layers(tiny_bert_model, readers):
    reader = ExtractiveReader(
        model=tiny_bert_model, device="cpu", quantization="int8", overlap_threshold=None, answers_per_seq=10_000
    )
    reader.warm_up()
    dynamic_linear = torch.ao.nn.quantized.dynamic.Linear
    linears = [m for m in reader._model.modules() if isinstance(m, torch.nn.Linear | dynamic_linear)]
    assert linears and all(isinstance(m, dynamic_linear) for m in linears)
    assert isinstance(reader._model.qa_outputs, dynamic_linear)
    # Every span of the document, scored by both: each int8 score within the README's figure of fp32's.
    every_span = {"top_k": 10_000, "no_answer": False}
    answers = reader.run("What is a deque?", [Document(content=SHORT)], **every_span)["answers"]
    fp32 = readers(overlap_threshold=None, answers_per_seq=10_000)
    exact = fp32.run("What is a deque?", [Document(content=SHORT)], **every_span)["answers"]
    reference_scores = {key: a.score for key, a in zip(spans_of(exact), exact, strict=True)}
    scores = {key: a.score for key, a in zip(spans_of(answers), answers, strict=True)}
    assert len(answers) == 3003 and scores.keys() == reference_scores.keys()  # measured: within 0.0062
    for key, score in scores.items():
        assert score == pytest.approx(reference_scores[key], abs=INT8_SCORE_TOLERANCE)


def test_quantization_rejects_non_cpu_devices(tiny_bert_model, monkeypatch):
    with pytest.raises(ValueError, match="CPU only"):
        ExtractiveReader(model=tiny_bert_model, device="cuda:0", quantization="int8").warm_up()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ValueError, match="CPU only"):  # device=None picks the (pretended) GPU
        ExtractiveReader(model=tiny_bert_model, quantization="int8").warm_up()


# --- Half precision -----------------------------------------------------------------------------------------------

# What bf16 costs against fp32 (stated in the README): every span answer's score within this, the best answer's
# span unchanged for at least this share of queries. Measured on the pretrained MiniLM-L6 encoder: largest
# difference 0.0042 over 60 benchmark questions, best span unchanged for 59 of them.
# The no-answer score is left out: it multiplies over the kept spans, so one span swapped in the top k moves it.
BF16_SCORE_TOLERANCE = 0.01
BF16_BEST_SPAN_AGREEMENT = 0.9


def test_bfloat16_answers_stay_within_the_stated_tolerance_of_fp32(minilm_model):
    names = sorted(TEXTS)[:14]
    queries = [f"What does {name} provide?" for name in names[:12]]
    documents = [[Document(content=TEXTS[name][:600]) for name in names[i : i + 3]] for i in range(12)]
    fp32 = ExtractiveReader(model=minilm_model, device="cpu", top_k=5)
    bf16 = ExtractiveReader(model=minilm_model, device="cpu", top_k=5, precision="bf16")
    fp32.warm_up()
    bf16.warm_up()
    assert bf16._model.dtype == torch.bfloat16 and bf16.precision_used == "bf16" and fp32.precision_used == "fp32"
    exact = fp32.run_batch(queries, documents)["answers"]
    half = bf16.run_batch(queries, documents)["answers"]
    same_best, diffs = 0, []
    for ours, reference in zip(half, exact, strict=True):
        reference_scores = {key: a.score for key, a in zip(spans_of(reference), reference, strict=True)}
        diffs += [
            abs(a.score - reference_scores[key])
            for key, a in zip(spans_of(ours), ours, strict=True)
            if key in reference_scores and a.data is not None
        ]
        same_best += spans_of(ours)[:1] == spans_of(reference)[:1]
    assert len(diffs) >= 3 * len(queries)  # most spans are found by both
    assert max(diffs) <= BF16_SCORE_TOLERANCE
    assert same_best / len(queries) >= BF16_BEST_SPAN_AGREEMENT


@pytest.mark.parametrize(
    ("capabilities", "expected"),
    [({}, "fp32"), ({"avx512_bf16": True}, "bf16"), ({"amx_bf16": True, "amx_tile": True}, "bf16")],
)
def test_auto_precision_runs_bf16_only_where_the_cpu_has_bf16_units(
    tiny_bert_model, monkeypatch, capabilities, expected
):
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"avx512_f": True, **capabilities})
    reader = ExtractiveReader(model=tiny_bert_model, device="cpu", precision="auto")
    reader.warm_up()
    assert reader.precision_used == expected
    assert reader._model.dtype == {"fp32": torch.float32, "bf16": torch.bfloat16}[expected]


def test_precision_used_names_what_runs_whatever_asked_for_it(tiny_bert_model):
    by_kwargs = ExtractiveReader(model=tiny_bert_model, device="cpu", model_kwargs={"dtype": "torch.bfloat16"})
    int8 = ExtractiveReader(model=tiny_bert_model, device="cpu", quantization="int8")
    assert by_kwargs.precision_used is None  # not warmed up
    by_kwargs.warm_up()
    int8.warm_up()
    assert (by_kwargs.precision_used, int8.precision_used) == ("bf16", "int8")


# --- 10. Serialisation --------------------------------------------------------------------------------------------


def test_to_dict_has_every_parameter_and_never_the_token(tiny_bert_model, monkeypatch):
    monkeypatch.setenv("HF_API_TOKEN", "hf_very_secret_value")
    reader = ExtractiveReader(
        model=tiny_bert_model,
        device="cpu",
        top_k=3,
        score_threshold=0.25,
        max_seq_length=200,
        stride=50,
        max_batch_size=8,
        answers_per_seq=7,
        no_answer=False,
        calibration_factor=0.3,
        overlap_threshold=None,
        model_kwargs={"torch_dtype": torch.float16},
        max_answer_length=12,
        context_window_size=80,
        quantization=None,
        max_batch_tokens=2048,
        precision="fp32",
    )
    assert reader.token.resolve_value() == "hf_very_secret_value"
    data = reader.to_dict()
    assert "hf_very_secret_value" not in json.dumps(data)
    assert data["type"] == "qa_core.reader.ExtractiveReader"
    assert set(data) == {"type", "init_parameters"}
    parameters = set(inspect.signature(ExtractiveReader.__init__).parameters) - {"self"}
    assert set(data["init_parameters"]) == parameters
    assert data["init_parameters"] == {
        "model": str(tiny_bert_model),
        "device": "cpu",
        "token": {"type": "env_var", "env_vars": ["HF_API_TOKEN", "HF_TOKEN"], "strict": False},
        "top_k": 3,
        "score_threshold": 0.25,
        "max_seq_length": 200,
        "stride": 50,
        "max_batch_size": 8,
        "answers_per_seq": 7,
        "no_answer": False,
        "calibration_factor": 0.3,
        "overlap_threshold": None,
        "model_kwargs": {"torch_dtype": "torch.float16"},
        "max_answer_length": 12,
        "context_window_size": 80,
        "quantization": None,
        "max_batch_tokens": 2048,
        "precision": "fp32",
    }
    restored = ExtractiveReader.from_dict(json.loads(json.dumps(data)))
    assert restored.model_kwargs == {"torch_dtype": torch.float16}
    assert restored.to_dict() == data
    for name in parameters - {"token", "model_kwargs"}:
        assert getattr(restored, name) == getattr(reader, name), name
    assert restored.token.resolve_value() == "hf_very_secret_value"


def test_a_token_given_by_value_is_never_serialised(tiny_bert_model):
    reader = ExtractiveReader(model=tiny_bert_model, token=Secret.from_token("hf_literal"))
    with pytest.raises(ValueError, match="cannot be serialised"):
        reader.to_dict()


def test_model_kwargs_pass_through_to_from_pretrained(tiny_bert_model, monkeypatch):
    monkeypatch.delenv("HF_API_TOKEN", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    original = AutoModelForQuestionAnswering.from_pretrained
    calls = []

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(qa_core.reader.AutoModelForQuestionAnswering, "from_pretrained", spy)
    data = ExtractiveReader(model=tiny_bert_model, device="cpu", model_kwargs={"dtype": torch.float16}).to_dict()
    assert data["init_parameters"]["model_kwargs"] == {"dtype": "torch.float16"}
    reader = ExtractiveReader.from_dict(data)
    reader.warm_up()
    ((args, kwargs),) = calls
    assert args == (str(tiny_bert_model),)
    assert kwargs["dtype"] is torch.float16 and kwargs["token"] is None
    assert set(kwargs) - {"token", "trust_remote_code"} == {"dtype"}  # the user's model_kwargs, nothing else
    assert {p.dtype for p in reader._model.parameters()} == {torch.float16}


# --- 11. Device ---------------------------------------------------------------------------------------------------


def test_resolve_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device(None) == torch.device("cuda:0")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device(None) == torch.device("cpu")


@pytest.mark.parametrize(
    ("cuda", "device", "expected"),
    [(True, None, "cuda:0"), (False, None, "cpu"), (True, "cpu", "cpu"), (False, "cuda:1", "cuda:1")],
    ids=["auto-cuda", "auto-cpu", "explicit-cpu", "explicit-cuda"],
)
def test_warm_up_moves_the_model_to_the_chosen_device(tiny_bert_model, monkeypatch, cuda, device, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    original = AutoModelForQuestionAnswering.from_pretrained
    moved_to = []

    def loaded(*args, **kwargs):
        model = original(*args, **kwargs)
        model.to = lambda target: moved_to.append(target) or model  # record instead of moving: no GPU here
        return model

    monkeypatch.setattr(qa_core.reader.AutoModelForQuestionAnswering, "from_pretrained", loaded)
    reader = ExtractiveReader(model=tiny_bert_model, device=device)
    reader.warm_up()
    assert moved_to == [torch.device(expected)]
    assert reader._device == torch.device(expected)
    assert reader.to_dict()["init_parameters"]["device"] == device


def test_inputs_for_a_gpu_are_pinned_and_copied_without_blocking_under_inference_mode(readers, monkeypatch):
    # No GPU here: a CUDA copy is recorded and the tensor stays on the CPU; the spans must equal a CPU run's.
    reader = readers(max_seq_length=64, stride=16)
    sequences = tokenize_pairs(reader._tokenizer, ["What is re?"], [LONG[:1500]], TokenizationSettings(64, 16))
    settings = qa_core.inference.InferenceSettings()
    on_cpu = qa_core.inference.predict_spans(reader._model, sequences, reader._tokenizer.pad_token_id, settings)

    pinned, copies, forward_modes = [], [], []
    original_to = torch.Tensor.to

    def pin_memory(tensor):
        pinned.append(tensor.clone())
        return pinned[-1]

    def to(tensor, *args, **kwargs):
        if args and isinstance(args[0], torch.device) and args[0].type == "cuda":
            copies.append((args[0], any(tensor is p for p in pinned), kwargs.get("non_blocking")))
            return tensor
        return original_to(tensor, *args, **kwargs)

    class ModeRecordingModel(CountingModel):
        def __call__(self, **inputs):
            forward_modes.append((torch.is_inference_mode_enabled(), torch.is_grad_enabled()))
            return super().__call__(**inputs)

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    monkeypatch.setattr(torch.Tensor, "to", to)
    model = ModeRecordingModel(reader._model)
    on_gpu = qa_core.inference.predict_spans(
        model, sequences, reader._tokenizer.pad_token_id, InferenceSettings(max_batch_size=4), device="cuda:0"
    )
    n_batches = math.ceil(len(sequences) / 4)
    assert len(pinned) == 3 * n_batches  # input_ids, attention_mask, context_mask of each batch
    assert copies == [(torch.device("cuda:0"), True, True)] * (3 * n_batches)
    assert forward_modes == [(True, False)] * n_batches
    for gpu, cpu in zip(on_gpu, on_cpu, strict=True):
        assert gpu.starts.tolist() == cpu.starts.tolist() and gpu.ends.tolist() == cpu.ends.tolist()
        np.testing.assert_allclose(gpu.scores, cpu.scores, atol=1e-6)


# --- Settings: defined once, validated by the component ----------------------------------------------------------


def test_reader_parameters_are_the_settings_fields_with_their_defaults():
    from qa_core.models import ModelSettings
    from qa_core.reader import PHASES

    signature = inspect.signature(ExtractiveReader).parameters
    phases = [ModelSettings, *PHASES.values()]
    fields = {name: default for phase in phases for name, default in phase.defaults().items()}
    assert set(signature) - {"device", "token"} == set(fields)
    defaults = {name: signature[name].default for name in fields}
    assert defaults == {**fields, "model_kwargs": None}  # None: no keyword arguments, as Haystack's reader


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"top_k": -1}, "top_k must be >= 1, not -1"),
        ({"max_seq_length": 64, "stride": 64}, "stride (64) must be >= 0 and < max_seq_length (64)"),
        ({"calibration_factor": 0}, "calibration_factor must be > 0, not 0"),
        ({"overlap_threshold": 1.5}, "overlap_threshold must be within [0, 1], not 1.5"),
        ({"max_batch_size": 0}, "max_batch_size must be >= 1, not 0"),
        ({"quantization": "int4"}, "quantization must be one of (None, 'int8'), not 'int4'"),
        ({"max_batch_tokens": 0}, "max_batch_tokens must be >= 1, not 0"),
        ({"precision": "fp16"}, "precision must be one of fp32, bf16, auto, not 'fp16'"),
        ({"precision": "bf16", "quantization": "int8"}, "precision bf16 and quantization int8 exclude each other"),
        (
            {"precision": "auto", "model_kwargs": {"dtype": "torch.float16"}},
            "precision auto and a dtype in model_kwargs exclude each other: give one",
        ),
    ],
)
def test_reader_refuses_unusable_parameters_naming_them(parameters, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ExtractiveReader(model="unused", **parameters)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ValueError) as error:
        ExtractiveReader(model="unused", top_k=0, score_threshold=2.0, answers_per_seq=0)
    assert str(error.value) == (
        "Invalid ExtractiveReader parameters: answers_per_seq must be >= 1, not 0; top_k must be >= 1, not 0; "
        "score_threshold must be within [0, 1], not 2.0."
    )
