"""When a question counts as refused, for each no-answer source (`RefusalSettings`)."""

import pytest

from qa_core.refusal import RefusalSettings


def test_haystack_source_refuses_when_no_answer_beats_the_best_answer():
    refusal = RefusalSettings()
    assert refusal.no_answer(haystack=0.3, model=0.9) == 0.3
    assert (refusal.refused(0.4, 0.3), refusal.refused(0.4, 0.41)) == (False, True)


def test_model_source_refuses_when_the_null_span_beats_the_best_span():
    refusal = RefusalSettings(no_answer_source="model")
    assert refusal.no_answer(haystack=0.3, model=0.9) == 0.9
    # The best span's score plays no part: above 0.5 the null span's logit sum beats the best span's.
    assert [refusal.refused(0.99, score) for score in (0.5, 0.5000001, 0.9)] == [False, True, True]


@pytest.mark.parametrize("source", ["haystack", "model"])
def test_a_threshold_refuses_at_it_for_either_source(source):
    refusal = RefusalSettings(no_answer_source=source, refusal_threshold=0.2)
    assert [refusal.refused(0.99, score) for score in (0.19, 0.2)] == [False, True]


def test_an_unknown_source_is_a_problem_naming_the_choices():
    assert RefusalSettings(no_answer_source="cls").problems() == [
        "no_answer_source must be one of haystack, model, not 'cls'"
    ]
