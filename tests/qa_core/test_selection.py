"""The model's own no-answer probability (`qa_core.selection.model_no_answer_score`)."""

import math

import pytest

from qa_core.selection import model_no_answer_score


def test_is_the_sigmoid_of_the_lowest_null_minus_the_best_span_over_the_windows():
    # Two windows: nulls 1.0 and 3.0 (the lowest counts), best spans 0.5 and -2.0 (the highest counts).
    assert model_no_answer_score([3.0, 1.0], [-2.0, 0.5]) == pytest.approx(1 / (1 + math.exp(-0.5)), abs=1e-15)
    assert model_no_answer_score([-4.0], [2.0]) == pytest.approx(1 / (1 + math.exp(6.0)), abs=1e-15)


def test_is_above_one_half_exactly_when_the_null_beats_the_best_span():
    assert model_no_answer_score([2.0], [2.0]) == 0.5
    assert model_no_answer_score([2.0 + 1e-9], [2.0]) > 0.5
    assert model_no_answer_score([2.0 - 1e-9], [2.0]) < 0.5


def test_is_one_without_a_span_and_stays_finite_for_large_margins():
    assert model_no_answer_score([5.0, -1.0], [-math.inf, -math.inf]) == 1.0
    assert model_no_answer_score([-1000.0], [1000.0]) == 0.0
    assert model_no_answer_score([1000.0], [-1000.0]) == 1.0
