"""
Parity with Haystack: its own `TransformersExtractiveReader` and ours on the same local model folder, over a
parameter grid, give the same answers (texts, documents, offsets, page numbers, order; scores within 1e-4).
Where Haystack is wrong, a test shows it and shows that ours is right: those tests describe haystack-ai 3.4 with
transformers-haystack 2.0 (private methods and current bugs included), which the test extra pins, so that an
upgrade is a deliberate change of the pins and of these tests rather than a red CI.
"""

import json
import logging
from pathlib import Path

import haystack
import pytest
import torch
from haystack_integrations.components.readers.transformers import TransformersExtractiveReader

from qa_core.answers import ExtractedAnswer
from qa_core.document import Document
from qa_core.local_models import TEXT_FILE
from qa_core.reader import ExtractiveReader
from qa_core.spans import top_spans
from qa_core.tokenization import TokenizationSettings, tokenize_pairs

with TEXT_FILE.open(encoding="utf-8") as lines:
    TEXTS = {row["title"]: row["text"] for row in map(json.loads, lines)}

UNICODE = (
    "Café naïve résumé — 東京は日本の首都です。 🐍 Python 🎉 est génial! Ça marche très bien: ñandú, Ærø, straße. "
    "北京 and 上海 are cities 😀👍🏽, and Zürich is in Switzerland."
)
PAGED = (
    "Page one talks about lists and tuples.\fPage two: the deque type supports fast appends.\f\f"
    "Page four, after an empty page: dict views and sets."
)
# (content, meta): long (split even at 384 tokens), empty, unicode-heavy, paged, paged starting on page 1, short.
CONTENTS = [
    (TEXTS["re"], {}),
    ("", {}),
    (UNICODE, {"lang": "mixed"}),
    (PAGED, {"page_number": 7}),
    (TEXTS["json"][:1500], {"page_number": 1}),
    (TEXTS["collections"][:400], {}),
]
QUERIES = ["What is a deque?", "How do regular expressions work?", "Where is Tokyo?"]

# Constructor arguments given to both readers.
GRID = [
    pytest.param({}, id="defaults"),
    pytest.param({"top_k": 3}, id="top_k=3"),
    pytest.param({"top_k": 1, "no_answer": False}, id="top_k=1-no_answer=off"),
    pytest.param({"no_answer": False}, id="no_answer=off"),
    pytest.param({"score_threshold": 0.5}, id="score_threshold=0.5"),
    pytest.param({"score_threshold": 0.7}, id="score_threshold=0.7"),
    pytest.param({"score_threshold": 0.0}, id="score_threshold=0.0"),
    pytest.param({"overlap_threshold": None}, id="overlap=None"),
    pytest.param({"overlap_threshold": 0.0}, id="overlap=0.0"),
    pytest.param({"overlap_threshold": 0.5}, id="overlap=0.5"),
    pytest.param({"overlap_threshold": 1.0}, id="overlap=1.0"),
    pytest.param({"answers_per_seq": 1}, id="answers_per_seq=1"),
    pytest.param({"answers_per_seq": 5}, id="answers_per_seq=5"),
    pytest.param({"answers_per_seq": 60, "top_k": 40}, id="answers_per_seq=60-top_k=40"),
    pytest.param({"max_seq_length": 64, "stride": 16}, id="split-64-stride-16"),
    pytest.param(
        {"max_seq_length": 128, "stride": 32, "overlap_threshold": None}, id="split-128-stride-32-overlap=None"
    ),
    pytest.param({"max_seq_length": 96, "stride": 0}, id="split-96-stride-0"),
    pytest.param({"max_batch_size": 1}, id="max_batch_size=1"),
    pytest.param({"max_batch_size": 3, "max_seq_length": 128, "stride": 32}, id="max_batch_size=3-split"),
    # Not above 0.5: the tiny models' scores then saturate to float32 ties (see test_haystack_breaks_saturated_ties...).
    pytest.param({"calibration_factor": 0.5}, id="calibration=0.5"),
    pytest.param({"calibration_factor": 0.01}, id="calibration=0.01"),
]
FAMILIES = [pytest.param("tiny_bert_model", id="wordpiece"), pytest.param("tiny_roberta_model", id="byte-bpe")]


def our_documents(contents=CONTENTS) -> list[Document]:
    return [Document(content=content, meta=dict(meta)) for content, meta in contents]


def haystack_documents(contents=CONTENTS) -> list[haystack.Document]:
    return [haystack.Document(content=content, meta=dict(meta)) for content, meta in contents]


@pytest.fixture(scope="module")
def reader_pairs():
    """(ours, Haystack's) warmed readers on one model folder, cached per (folder, constructor arguments)."""
    cache: dict[tuple, tuple[ExtractiveReader, TransformersExtractiveReader]] = {}

    def get(model: Path, **kwargs) -> tuple[ExtractiveReader, TransformersExtractiveReader]:
        key = (str(model), tuple(sorted(kwargs.items())))
        if key not in cache:
            ours = ExtractiveReader(model=model, device="cpu", **kwargs)
            theirs = TransformersExtractiveReader(model=model, **kwargs)
            ours.warm_up()
            theirs.warm_up()
            cache[key] = (ours, theirs)
        return cache[key]

    return get


def described(answer) -> tuple:
    """Everything but the score, comparable between our answers and Haystack's."""
    offset = answer.document_offset
    return (
        answer.query,
        answer.data,
        answer.document.id if answer.document is not None else None,
        (offset.start, offset.end) if offset is not None else None,
        answer.meta,
    )


def assert_same_answers(ours: list[ExtractedAnswer], theirs: list) -> None:
    """
    Same answers in the same order, scores within 1e-4. Only exact ties may come in another order: Haystack ranks
    a sequence's spans by their float32 probabilities, ours by their logits, so spans whose logit sums differ but
    round to the same probability are listed in a different order.
    """
    assert len(ours) == len(theirs)
    assert [a.score for a in ours] == pytest.approx([a.score for a in theirs], abs=1e-4)
    groups: list[tuple[list[str], list[str]]] = []
    for i, (mine, their) in enumerate(zip(ours, theirs, strict=True)):
        tied = i > 0 and (mine.score == ours[i - 1].score or their.score == theirs[i - 1].score)
        if not tied:
            groups.append(([], []))
        groups[-1][0].append(repr(described(mine)))
        groups[-1][1].append(repr(described(their)))
    for mine, their in groups:
        assert sorted(mine) == sorted(their)


@pytest.mark.parametrize("kwargs", GRID)
@pytest.mark.parametrize("family", FAMILIES)
def test_same_answers_as_haystack(request, reader_pairs, family, kwargs):
    ours, theirs = reader_pairs(request.getfixturevalue(family), **kwargs)
    n_spans = 0
    for query in QUERIES[::2]:  # two queries per case keep the grid's time down
        expected = theirs.run(query=query, documents=haystack_documents())["answers"]
        got = ours.run(query, our_documents())["answers"]
        assert_same_answers(got, expected)
        n_spans += sum(a.data is not None for a in got)
    assert n_spans > 0  # never only a comparison of empty lists or of no-answer entries


@pytest.mark.parametrize("rank", [1, 5, 12])
@pytest.mark.parametrize("family", FAMILIES)
def test_score_threshold_between_answers_matches_haystack(request, reader_pairs, family, rank):
    """A threshold equal to the score of the answer at `rank`: exactly the answers down to it are kept."""
    ours, theirs = reader_pairs(request.getfixturevalue(family))
    spans = [a for a in ours.run(QUERIES[0], our_documents())["answers"] if a.data is not None]
    threshold = spans[rank - 1].score
    got = ours.run(QUERIES[0], our_documents(), score_threshold=threshold)["answers"]
    assert [a for a in got if a.data is not None] == spans[:rank]
    expected = theirs.run(query=QUERIES[0], documents=haystack_documents(), score_threshold=threshold)["answers"]
    assert_same_answers(got, expected)


@pytest.mark.parametrize("family", FAMILIES)
def test_documents_are_split_in_the_split_cases(request, reader_pairs, family):
    """The grid's split cases really split: the long document at 384 tokens, the three longest at 64."""
    ours, _ = reader_pairs(request.getfixturevalue(family))
    contents = [content for content, _ in CONTENTS]
    at_384 = tokenize_pairs(ours._tokenizer, [QUERIES[1]] * len(contents), contents, TokenizationSettings(384, 128))
    at_64 = tokenize_pairs(ours._tokenizer, [QUERIES[1]] * len(contents), contents, TokenizationSettings(64, 16))
    assert sum(s.pair_index == 0 for s in at_384) > 2
    assert all(sum(s.pair_index == i for s in at_64) > 1 for i in [0, 4, 5])


@pytest.mark.parametrize("family", FAMILIES)
def test_page_numbers_and_unicode_offsets_match_haystack(request, reader_pairs, family):
    # Every span of the paged and unicode documents (answers_per_seq above the number of spans), no de-duplication.
    contents = [CONTENTS[2], CONTENTS[3]]
    model = request.getfixturevalue(family)
    tokenizer = reader_pairs(model)[0]._tokenizer
    longest = max(
        len(s)
        for s in tokenize_pairs(
            tokenizer, ["Which page?"] * 2, [c for c, _ in contents], TokenizationSettings(384, 128)
        )
    )
    # Haystack pads both sequences to `longest`: its top-k over (longest x longest) spans takes every valid one.
    ours, theirs = reader_pairs(model, answers_per_seq=longest**2, overlap_threshold=None)
    got = ours.run("Which page?", our_documents(contents), top_k=100_000)["answers"]
    expected = theirs.run(query="Which page?", documents=haystack_documents(contents), top_k=100_000)["answers"]
    assert_same_answers(got, expected)
    # Page 9 is the empty one between two form feeds: only a tokenizer that keeps "\f" as a token starts a span there.
    assert {7, 8, 10} <= {a.meta["answer_page_number"] for a in got if a.meta} <= {7, 8, 9, 10}
    unicode_answers = {a.data for a in got if a.document is not None and a.document.content == UNICODE}
    assert {"東京", "🐍", "Zürich"} <= unicode_answers


def test_minilm_matches_haystack(minilm_model, reader_pairs):
    ours, theirs = reader_pairs(minilm_model, max_seq_length=128, stride=32)
    for query in QUERIES[:2]:
        expected = theirs.run(query=query, documents=haystack_documents())["answers"]
        assert_same_answers(ours.run(query, our_documents())["answers"], expected)


@pytest.mark.parametrize("family", FAMILIES)
def test_run_batch_matches_haystack_one_query_at_a_time(request, reader_pairs, family):
    ours, theirs = reader_pairs(request.getfixturevalue(family), max_seq_length=96, stride=24, max_batch_size=5)
    document_lists = [CONTENTS, CONTENTS[2:4], [CONTENTS[0]], CONTENTS[3:], CONTENTS[:2] + CONTENTS[4:]]
    queries = ["What is a deque?", "Where is Tokyo?", "What does re.sub do?", "Which page?", "How is JSON parsed?"]
    got = ours.run_batch(queries, [our_documents(contents) for contents in document_lists])["answers"]
    for query, contents, answers in zip(queries, document_lists, got, strict=True):
        expected = theirs.run(query=query, documents=haystack_documents(contents))["answers"]
        assert_same_answers(answers, expected)


@pytest.mark.parametrize("family", FAMILIES)
def test_documents_without_content(request, reader_pairs, family, caplog):
    """Haystack crashes on content=None under transformers 5; ours skips it and answers as Haystack does without it."""
    ours, theirs = reader_pairs(request.getfixturevalue(family))
    with pytest.raises(ValueError, match="batch length"):
        theirs.run(query=QUERIES[0], documents=[haystack.Document(content=None)] + haystack_documents())
    with caplog.at_level(logging.WARNING):
        got = ours.run(QUERIES[0], [Document(content=None)] + our_documents())["answers"]
    assert "has no content" in caplog.text
    assert_same_answers(got, theirs.run(query=QUERIES[0], documents=haystack_documents())["answers"])


# --- Where Haystack is wrong -------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_haystack_nests_answers_wrongly_for_several_queries(request, reader_pairs, family):
    """
    Haystack's `_nest_answers` maps answer i to query `query_ids[i // answers_per_seq]`, which only holds when every
    sequence has `answers_per_seq` valid spans. With two queries whose short documents have fewer, the first query
    receives the second one's answers and the second gets none. Ours keeps each query's answers apart.
    """
    answers_per_seq = 50
    ours, theirs = reader_pairs(
        request.getfixturevalue(family), answers_per_seq=answers_per_seq, top_k=100, overlap_threshold=None
    )
    queries = ["Which city?", "Which other city?"]
    nested = [[haystack.Document(content="Paris.")], [haystack.Document(content="in Berlin")]]

    flat_queries, flat_documents, query_ids = theirs._flatten_documents(queries, nested)
    input_ids, attention_mask, sequence_ids, encodings, query_ids, document_ids = theirs._preprocess(
        queries=flat_queries, documents=flat_documents, max_seq_length=384, query_ids=query_ids, stride=128
    )
    with torch.inference_mode():
        output = theirs.model(input_ids=input_ids, attention_mask=attention_mask)
    starts, ends, probabilities = theirs._postprocess(
        start=output.start_logits,
        end=output.end_logits,
        sequence_ids=sequence_ids,
        attention_mask=attention_mask,
        answers_per_seq=answers_per_seq,
        encodings=encodings,
    )
    valid_per_sequence = [len(p) for p in probabilities]
    assert all(0 < n < answers_per_seq for n in valid_per_sequence)  # fewer valid spans than answers_per_seq
    nested_answers = theirs._nest_answers(
        start=starts,
        end=ends,
        probabilities=probabilities,
        flattened_documents=flat_documents,
        queries=queries,
        answers_per_seq=answers_per_seq,
        top_k=100,
        score_threshold=None,
        query_ids=query_ids,
        document_ids=document_ids,
        no_answer=True,
        overlap_threshold=None,
    )
    paris, berlin = (docs[0].id for docs in nested)
    # Haystack: every span goes to the first query, Berlin's included; the second query gets only the no-answer.
    assert {a.document.id for a in nested_answers[0] if a.document is not None} == {paris, berlin}
    assert len(nested_answers[0]) == sum(valid_per_sequence) + 1
    assert [(a.data, a.score) for a in nested_answers[1]] == [(None, 1.0)]

    # Ours: each query gets its own document's spans, exactly as Haystack's (correct) one-query run gives them.
    got = ours.run_batch(queries, [[Document(content="Paris.")], [Document(content="in Berlin")]])["answers"]
    for query, documents, answers, n_valid in zip(queries, nested, got, valid_per_sequence, strict=True):
        assert len(answers) == n_valid + 1
        assert {a.document.id for a in answers if a.document is not None} == {documents[0].id}
        assert_same_answers(answers, theirs.run(query=query, documents=documents)["answers"])


@pytest.mark.parametrize(
    ("built_with", "override", "built_with_override"),
    [
        pytest.param(
            {"score_threshold": 0.7}, {"score_threshold": 0.0}, {"score_threshold": 0.0}, id="score_threshold"
        ),
        pytest.param({"overlap_threshold": None}, {"overlap_threshold": 0.0}, {"overlap_threshold": 0.0}, id="overlap"),
        pytest.param(
            {"max_seq_length": 64, "stride": 16}, {"stride": 0}, {"max_seq_length": 64, "stride": 0}, id="stride"
        ),
    ],
)
@pytest.mark.parametrize("family", FAMILIES)
def test_haystack_swallows_falsy_run_time_overrides(
    request, reader_pairs, family, built_with, override, built_with_override
):
    """
    Haystack's `x = x or self.x` replaces a run-time 0 / 0.0 by the constructor's value, so the override is ignored.
    Ours honours it: its answers are those of a Haystack reader built with the overriding value.
    """
    model = request.getfixturevalue(family)
    ours, theirs = reader_pairs(model, **built_with)
    _, theirs_built_with_override = reader_pairs(model, **built_with_override)
    query, documents = QUERIES[1], haystack_documents()
    as_built = theirs.run(query=query, documents=documents)["answers"]
    overridden = theirs_built_with_override.run(query=query, documents=documents)["answers"]
    assert [described(a) for a in as_built] != [described(a) for a in overridden]  # the override matters

    assert_same_answers(theirs.run(query=query, documents=documents, **override)["answers"], as_built)  # ignored
    assert_same_answers(ours.run(query, our_documents(), **override)["answers"], overridden)  # honoured


@pytest.mark.parametrize("family", FAMILIES)
def test_haystack_crashes_when_no_document_has_text(request, reader_pairs, family):
    """With only empty-string documents Haystack's de-duplication indexes an empty list; ours answers "no answer"."""
    ours, theirs = reader_pairs(request.getfixturevalue(family))
    with pytest.raises(IndexError):
        theirs.run(query=QUERIES[0], documents=[haystack.Document(content=""), haystack.Document(content="")])
    (no_answer,) = ours.run(QUERIES[0], [Document(content=""), Document(content="")])["answers"]
    assert no_answer.data is None and no_answer.document is None
    assert no_answer.score == 1.0  # the product over no kept span


@pytest.mark.parametrize("family", FAMILIES)
def test_haystack_breaks_saturated_ties_by_position_not_by_logits(request, reader_pairs, family):
    """
    When `calibration_factor * (start + end)` is large, float32 sigmoids round to 1.0 and Haystack's top-k over
    probabilities keeps whichever tied span comes first, not the model's best span. Ours ranks spans by their logit
    sums, so it keeps the best one (both score 1.0). This is why the parity grid keeps calibration_factor <= 0.5.
    """
    ours, theirs = reader_pairs(request.getfixturevalue(family), calibration_factor=1.0)
    document = haystack.Document(content="alpha beta gamma delta")
    queries, documents, query_ids = theirs._flatten_documents(["Which?"], [[document]])
    input_ids, attention_mask, sequence_ids, encodings, _, _ = theirs._preprocess(
        queries=queries, documents=documents, max_seq_length=384, query_ids=query_ids, stride=128
    )
    context = (sequence_ids[0] == 1).nonzero().flatten().tolist()
    start = torch.zeros(input_ids.shape)
    end = torch.zeros(input_ids.shape)
    for rank, token in enumerate(context):  # every span sums to >= 40; the best is the last token alone
        start[0, token] = end[0, token] = 20.0 + rank
    their_starts, their_ends, their_scores = theirs._postprocess(
        start=start,
        end=end,
        sequence_ids=sequence_ids,
        attention_mask=attention_mask,
        answers_per_seq=1,
        encodings=encodings,
    )
    scores, start_tokens, end_tokens = top_spans(start, end, (sequence_ids == 1) & (attention_mask == 1), 1, 1.0)
    best = context[-1]
    assert (start_tokens.item(), end_tokens.item()) == (best, best)
    assert scores.item() == their_scores[0].item() == 1.0
    best_chars = encodings[0].offsets[best]
    assert best_chars[1] == len(document.content)  # the last token ("delta" or its last piece)
    # Haystack keeps a worse span, the first of the ties: it starts at the first token ("alpha" or its first piece).
    assert their_starts[0][0] == 0 and (their_starts[0][0], their_ends[0][0]) != best_chars
