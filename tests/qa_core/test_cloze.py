"""Cloze questions from local text: deterministic, aligned answers, held-out paragraphs never trained on."""

import pytest

from qa_core.local_models import TEXT_FILE
from qa_core.squad import read_squad, write_squad_json
from qa_core.training.cloze import (
    ClozeConfig,
    Paragraph,
    answer_candidates,
    generate_cloze,
    make_cloze,
    paragraphs_of,
    read_paragraphs,
    sentences_of,
)


@pytest.fixture(scope="module")
def paragraphs() -> list[Paragraph]:
    return read_paragraphs(TEXT_FILE)


@pytest.fixture(scope="module")
def split(paragraphs):
    return generate_cloze(paragraphs, ClozeConfig(seed=0))


def test_the_same_seed_gives_the_same_questions(paragraphs, split):
    assert generate_cloze(paragraphs, ClozeConfig(seed=0)) == split
    other = generate_cloze(paragraphs, ClozeConfig(seed=1))
    assert [ex.id for ex in other.train] != [ex.id for ex in split.train]


def test_every_answer_start_indexes_its_context_exactly(split):
    for ex in split.train + split.heldout:
        assert ex.question.endswith("?")
        if ex.is_impossible:
            assert ex.answers == [] and ex.id.endswith("-na")
        else:
            (answer,) = ex.answers
            assert (
                answer.text and ex.context[answer.answer_start : answer.answer_start + len(answer.text)] == answer.text
            )


def test_a_third_of_the_questions_are_unanswerable(split):
    for examples in (split.train, split.heldout):
        share = sum(ex.is_impossible for ex in examples) / len(examples)
        assert 0.25 < share < 0.4  # unanswerable_share=0.33, less the questions no other paragraph can take


def test_heldout_paragraphs_are_never_trained_on(split):
    assert len(split.heldout) > 300 and len(split.train) > 1500
    train_contexts = {ex.context for ex in split.train}
    assert {ex.context for ex in split.heldout} <= split.heldout_paragraphs
    assert not train_contexts & split.heldout_paragraphs
    # nor are the held-out questions' sentences (one repeated in a train paragraph is dropped from the held-out set)
    train_sentences = {" ".join(c[a:b].split()) for c in train_contexts for a, b in sentences_of(c)}
    for ex in split.heldout:
        if not ex.is_impossible:
            start = ex.answers[0].answer_start
            (source,) = [(a, b) for a, b in sentences_of(ex.context) if a <= start < b]
            assert " ".join(ex.context[slice(*source)].split()) not in train_sentences


def test_cloze_examples_pass_the_squad_reader(split, tmp_path):
    write_squad_json(split.heldout, tmp_path / "heldout.json", version="2.0")
    dataset = read_squad(tmp_path / "heldout.json")
    assert dataset.examples == split.heldout and dataset.version == "2.0" and not dataset.misaligned


def test_answer_candidates_by_kind():
    sentence = "Call os.path.join() with 3 parts and *sep*, as Unix does for the base directory."
    found = {kind: [sentence[a:b] for a, b in spans] for kind, spans in answer_candidates(sentence).items()}
    assert found == {
        "code": ["os.path.join()", "sep"],
        "number": ["3"],
        "name": ["Unix"],
        "phrase": ["the base directory"],
    }


def test_the_answer_becomes_a_wh_word():
    text = "Intro. Set *n* to 4 for quartiles (the default)."
    (_, sentence) = sentences_of(text)
    assert text[slice(*sentence)] == "Set *n* to 4 for quartiles (the default)."
    four = text.index("4")
    assert make_cloze(text, sentence, (four, four + 1), "number", window=12).question == (
        "Set *n* to how many for quartiles (the default)?"
    )
    n = text.index("n*")
    cloze = make_cloze(text, sentence, (n, n + 1), "code", window=2)
    assert (cloze.question, cloze.answer, cloze.answer_start) == ("Set what to 4?", "n", n)


def test_code_blocks_are_left_out_and_short_blocks_joined():
    text = "First block.\n\n>>> x = 1\n>>> x\n1\n\nSecond block.\n\n" + "A long block. " * 30
    paragraphs = paragraphs_of("doc", text, ClozeConfig(min_paragraph_chars=50, max_paragraph_chars=300))
    assert [p.text for p in paragraphs] == ["First block.\n\nSecond block.", ("A long block. " * 30).strip()]
