"""
qa_core.evaluation against the official SQuAD scripts, vendored in tests/qa_core/reference/ (an independent
implementation): every metric key to 1e-9, on a sample file, synthetic sets and random predictions.
Also its errors and the calibration helpers.
"""

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from qa_core.evaluation import (
    compute_exact,
    compute_f1,
    evaluate,
    expected_calibration_error,
    find_all_best_thresh,
    find_best_thresh,
    fit_calibration_factor,
    get_raw_scores,
    get_tokens,
    normalize_answer,
)
from qa_core.squad import GoldAnswer, SquadDataset, SquadExample, read_squad
from tests.qa_core.reference import squad_v1_official, squad_v2_official

SAMPLE = Path(__file__).parent / "data" / "squad_v2_sample.json"
TOLERANCE = 1e-9

OFFICIAL_KEYS = ["exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact", "NoAns_f1",
                 "NoAns_total", "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]  # fmt: skip


def squad_file(tmp_path: Path, paragraphs: list[tuple[str, list[tuple[str, list[str]]]]], version: str) -> Path:
    """An official-layout file: per paragraph its context and (id, gold texts) questions; offsets found by search."""

    def qas(context: str, questions: list[tuple[str, list[str]]]) -> list[dict[str, Any]]:
        return [
            {
                "id": qid,
                "question": f"Question {qid}?",
                "answers": [{"text": text, "answer_start": context.index(text)} for text in golds],
                **({"is_impossible": not golds} if version == "2.0" else {}),
            }
            for qid, golds in questions
        ]

    data = [{"title": "T", "paragraphs": [{"context": c, "qas": qas(c, q)} for c, q in paragraphs]}]
    path = tmp_path / "squad.json"
    path.write_text(json.dumps({"version": version, "data": data}, ensure_ascii=False), encoding="utf-8")
    return path


def assert_matches_official(path: Path, predictions: dict, na_probs: dict | None, thresh: float) -> dict[str, Any]:
    """Our evaluate on the file read by read_squad against the official script on the raw JSON."""
    raw = json.loads(path.read_text(encoding="utf-8"))["data"]
    theirs, their_exact, their_f1 = squad_v2_official.official_eval(raw, predictions, na_probs, thresh)
    ours = evaluate(read_squad(path), predictions, na_probs, thresh)
    assert list(ours["metrics"]) == list(theirs)
    for key, value in theirs.items():
        assert ours["metrics"][key] == pytest.approx(value, abs=TOLERANCE, rel=0), key
        assert isinstance(ours["metrics"][key], int) == isinstance(value, int), key
    assert list(ours["exact"]) == list(their_exact) and list(ours["f1"]) == list(their_f1)
    for qid in their_exact:
        assert ours["exact"][qid] == pytest.approx(their_exact[qid], abs=TOLERANCE, rel=0), qid
        assert ours["f1"][qid] == pytest.approx(their_f1[qid], abs=TOLERANCE, rel=0), qid
    return ours["metrics"]


def sample_predictions(seed: int) -> tuple[dict[str, str], dict[str, float]]:
    """For every sample question: a gold answer, a plausible answer, a context slice, or ""; and a no-answer prob."""
    rng = random.Random(seed)
    predictions, na_probs = {}, {}
    for example in read_squad(SAMPLE).examples:
        words = example.context.split()
        start = rng.randrange(len(words))
        choices = [a.text for a in example.answers + example.plausible_answers]
        choices += ["", " ".join(words[start : start + rng.randint(1, 6)])]
        predictions[example.id] = rng.choice(choices)
        na_probs[example.id] = round(rng.random(), 1)  # one decimal: ties
    return predictions, na_probs


class TestParityWithOfficialScript:
    @pytest.mark.parametrize("seed", range(5))
    @pytest.mark.parametrize("thresh", [0.0, 0.5, 1.0])
    @pytest.mark.parametrize("with_na_probs", [True, False])
    def test_sample(self, seed: int, thresh: float, with_na_probs: bool):
        predictions, na_probs = sample_predictions(seed)
        metrics = assert_matches_official(SAMPLE, predictions, na_probs if with_na_probs else None, thresh)
        assert (metrics["total"], metrics["HasAns_total"], metrics["NoAns_total"]) == (14, 10, 4)

    def test_sample_gold_predictions_score_100(self):
        dataset = read_squad(SAMPLE)
        predictions = {e.id: e.answers[0].text if e.answers else "" for e in dataset.examples}
        metrics = assert_matches_official(SAMPLE, predictions, None, 1.0)
        assert {key: metrics[key] for key in ("exact", "f1", "best_exact", "best_f1")} == dict.fromkeys(
            ("exact", "f1", "best_exact", "best_f1"), 100.0
        )

    SYNTHETIC = {
        "v1.1": (
            "1.1",
            [
                (
                    "Paris is the capital and largest city of France.",
                    [("p1", ["Paris"]), ("p2", ["France", "France"]), ("p3", ["capital and largest city"])],
                )
            ],
            {"p1": "paris", "p2": "of France", "p3": "largest city"},
        ),
        "v2.0": (
            "2.0",
            [
                (
                    "The Amazon river flows through Brazil, Peru and Colombia.",
                    [
                        ("a1", ["The Amazon river", "Amazon"]),
                        ("a2", []),
                        ("a3", ["Brazil, Peru and Colombia"]),
                        ("a4", []),
                    ],
                )
            ],
            {"a1": "Amazon river", "a2": "", "a3": "Peru", "a4": "Colombia"},
        ),
        "unicode": (
            "2.0",
            [
                (
                    "Zürich liegt am Zürichsee; 東京は日本の首都です。 İstanbul straddles the Bosphorus — “Straße” ½.",
                    [
                        ("u1", ["Zürich"]),
                        ("u2", ["東京は日本の首都です"]),
                        ("u3", ["İstanbul"]),
                        ("u4", ["“Straße”"]),
                        ("u5", []),
                    ],
                )
            ],
            {"u1": "ZÜRICH", "u2": "東京は日本の首都です。", "u3": "i̇stanbul", "u4": "Straße", "u5": "½"},
        ),
        "duplicate gold": (
            "2.0",
            [
                (
                    "Green tea is not oxidised; black tea is fully oxidised.",
                    [("d1", ["black tea", "black tea", "black tea"]), ("d2", ["not oxidised", "not oxidised", "not"])],
                )
            ],
            {"d1": "black", "d2": "not oxidised"},
        ),
        "articles and punctuation": (
            "2.0",
            [
                (
                    "A man saw an apple in the U.S. The end, a tale.",
                    [
                        ("x1", ["an apple"]),
                        ("x2", ["the U.S."]),
                        ("x3", ["A"]),
                        ("x4", ["The end, a tale."]),
                        ("x5", ["a", "A man"]),
                    ],
                )
            ],
            {"x1": "The apple!", "x2": "U S", "x3": "", "x4": "end tale", "x5": "the"},
        ),
        "empty predictions": (
            "2.0",
            [("Rivers flow into the sea.", [("e1", ["the sea"]), ("e2", []), ("e3", ["Rivers"])])],
            {"e1": "", "e2": " ", "e3": ""},  # " " normalises to no answer
        ),
    }

    @pytest.mark.parametrize("name", list(SYNTHETIC))
    @pytest.mark.parametrize("na_probs_kind", ["missing", "spread", "ties"])
    @pytest.mark.parametrize("thresh", [0.0, 0.5, 1.0])
    def test_synthetic_sets(self, tmp_path: Path, name: str, na_probs_kind: str, thresh: float):
        version, paragraphs, predictions = self.SYNTHETIC[name]
        path = squad_file(tmp_path, paragraphs, version)
        na_probs = {
            "missing": None,
            "spread": {qid: (i * 0.37) % 1 for i, qid in enumerate(predictions)},
            "ties": {qid: 0.5 * (i % 2) for i, qid in enumerate(reversed(predictions))},
        }[na_probs_kind]
        metrics = assert_matches_official(path, predictions, na_probs, thresh)
        assert set(metrics) <= set(OFFICIAL_KEYS)

    @pytest.mark.parametrize("seed", range(3))
    def test_random_predictions_and_na_probs(self, tmp_path: Path, seed: int):
        rng = random.Random(seed)
        vocabulary = (
            "the a an river Loire castle king's tea, leaf. water green-black 2000 France Ünïcode 茶 (x)".split()
        )
        paragraphs, predictions, na_probs = [], {}, {}
        for p in range(300):
            words = [rng.choice(vocabulary) for _ in range(40)]
            context = " ".join(words)
            questions = []
            for q in range(rng.randint(1, 5)):
                qid = f"r{p}-{q}"
                starts = [rng.randrange(35) for _ in range(rng.choice([0, 1, 1, 3]))]
                golds = [" ".join(words[s : s + rng.randint(1, 4)]) for s in starts]
                questions.append((qid, golds))
                pick = rng.randrange(4)
                s = rng.randrange(38)
                predictions[qid] = [golds[0] if golds else "", "", " ".join(words[s : s + rng.randint(1, 5)]),
                                    rng.choice(vocabulary)][pick]  # fmt: skip
                na_probs[qid] = round(rng.random(), 2)
            paragraphs.append((context, questions))
        predictions["not-in-the-dataset"] = "ignored"  # the official script ignores it; its na_prob sorts first
        na_probs["not-in-the-dataset"] = 0.0
        shuffled = list(na_probs.items())
        rng.shuffle(shuffled)
        path = squad_file(tmp_path, paragraphs, "2.0")
        for thresh in (0.0, 0.3, 1.0):
            assert_matches_official(path, predictions, dict(shuffled), thresh)
        assert_matches_official(path, predictions, None, 1.0)

    def test_v11_data_with_answerable_golds_matches_the_v2_script(self, tmp_path: Path):
        version, paragraphs, predictions = self.SYNTHETIC["v1.1"]
        metrics = assert_matches_official(squad_file(tmp_path, paragraphs, version), predictions, None, 1.0)
        assert "NoAns_total" not in metrics and metrics["HasAns_total"] == 3


class TestV11Semantics:
    """v1.1 data is scored as the official v1.1 script does, which differs from v2.0 on golds that normalise to ""."""

    PARAGRAPHS = [
        ("The cat sat. A dog ran.", [("v1", ["The"]), ("v2", ["cat", "The"]), ("v3", ["A dog"]), ("v4", ["."])]),
        ("An owl hooted.", [("v5", ["An owl"]), ("v6", ["owl"])]),
    ]
    PREDICTIONS = {"v1": "", "v2": "the", "v3": "dog", "v4": "", "v5": "", "v6": "owl hooted"}

    def test_matches_the_official_v11_script(self, tmp_path: Path):
        path = squad_file(tmp_path, self.PARAGRAPHS, "1.1")
        raw = json.loads(path.read_text(encoding="utf-8"))["data"]
        theirs = squad_v1_official.evaluate(raw, self.PREDICTIONS)
        ours = evaluate(read_squad(path), self.PREDICTIONS)["metrics"]
        assert ours["exact"] == pytest.approx(theirs["exact_match"], abs=TOLERANCE, rel=0)
        assert ours["f1"] == pytest.approx(theirs["f1"], abs=TOLERANCE, rel=0)
        assert list(ours) == ["exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total",
                              "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]  # fmt: skip
        # v1: "" against "The" is an exact match with F1 0; v2 would drop the gold and score F1 1.
        assert (theirs["exact_match"], theirs["f1"]) == pytest.approx((400 / 6, 100 * (1 + 2 / 3) / 6), abs=TOLERANCE)
        v2, _, _ = squad_v2_official.official_eval(raw, self.PREDICTIONS)
        assert v2["f1"] != pytest.approx(theirs["f1"], abs=1e-3)

    def test_get_raw_scores_by_version(self):
        golds = {"v1": ["The"], "v4": ["."], "v6": ["owl"]}
        predictions = {"v1": "", "v4": "the", "v6": "owl hooted"}
        assert get_raw_scores(golds, predictions, "1.1") == (
            {"v1": 1.0, "v4": 1.0, "v6": 0.0},
            {"v1": 0.0, "v4": 0.0, "v6": pytest.approx(2 / 3, abs=TOLERANCE)},
        )
        assert get_raw_scores(golds, predictions, "2.0") == (
            {"v1": 1.0, "v4": 1.0, "v6": 0.0},
            {"v1": 1.0, "v4": 1.0, "v6": pytest.approx(2 / 3, abs=TOLERANCE)},
        )
        with pytest.raises(ValueError, match="Question 'q' has no gold answers"):
            get_raw_scores({"q": []}, {"q": ""}, "1.1")
        with pytest.raises(ValueError, match=r"version must be one of \('1.1', '2.0'\), not 'v2.0'"):
            get_raw_scores(golds, predictions, "v2.0")


class TestFunctions:
    TEXTS = [
        "",
        " ",
        "The",
        "the the",
        "A cat.",
        "an  Apple!!",
        "U.S.A.",
        "The Loire's château",
        "Straße",
        "İstanbul",
        "東京、日本。",
        "theatre",
        "a-b",
        "(an) 'the' \"a\"",
        "\tTabs\nand\u00a0nbsp",
        "½ ⅓",
        "ÀN apple",
    ]

    def test_normalisation_and_tokens_match_official(self):
        for text in self.TEXTS:
            assert normalize_answer(text) == squad_v2_official.normalize_answer(text), text
            assert get_tokens(text) == squad_v2_official.get_tokens(text), text

    def test_exact_and_f1_match_official_on_every_pair(self):
        for gold in self.TEXTS:
            for pred in self.TEXTS:
                assert compute_exact(gold, pred) == squad_v2_official.compute_exact(gold, pred), (gold, pred)
                assert compute_f1(gold, pred) == pytest.approx(
                    squad_v2_official.compute_f1(gold, pred), abs=TOLERANCE, rel=0
                ), (gold, pred)

    def test_exact_values(self):
        assert normalize_answer("The  Garden, of France!") == "garden of france"
        assert compute_exact("the Garden of France", "Garden of France.") == 1
        assert compute_f1("black tea", "black") == pytest.approx(2 / 3, abs=TOLERANCE)
        assert (compute_f1("", ""), compute_f1("the", ""), compute_f1("tea", "")) == (1.0, 1.0, 0.0)

    def test_find_best_thresh_by_hand(self):
        # Start: 1 no-answer question right. a: +1 (best, 0.2); b answers an impossible question: -1; c: +0.5.
        preds = {"a": "x", "b": "y", "c": "z"}
        scores = {"a": 1.0, "b": 0.0, "c": 0.5}
        na_probs = {"c": 0.9, "b": 0.5, "a": 0.2}
        has_ans = {"a": True, "b": False, "c": True}
        assert find_best_thresh(preds, scores, na_probs, has_ans) == (pytest.approx(200 / 3, abs=TOLERANCE), 0.2)
        # F1 0.5 on a: 1.5 after a, 0.5 after b, 1.5 after c (not better): 50% at 0.2.
        assert find_all_best_thresh(preds, scores, {"a": 0.5, "b": 0.0, "c": 1.0}, na_probs, has_ans) == {
            "best_exact": pytest.approx(200 / 3, abs=TOLERANCE),
            "best_exact_thresh": 0.2,
            "best_f1": 50.0,
            "best_f1_thresh": 0.2,
        }

    def test_find_best_thresh_counts_a_blank_prediction_as_an_answer(self):
        # Start: 1 right; b's " " is an answer to an impossible question (-1), then a (+1): never better than 1 of 2.
        args = ({"a": "x", "b": " "}, {"a": 1.0, "b": 1.0}, {"b": 0.1, "a": 0.2}, {"a": True, "b": False})
        assert find_best_thresh(*args) == squad_v2_official.find_best_thresh(*args) == (50.0, 0.0)

    def test_find_best_thresh_ties_follow_na_probs_order_as_official(self):
        preds = {"a": "x", "b": "y"}
        scores = {"a": 1.0, "b": 0.0}
        has_ans = {"a": True, "b": False}
        for na_probs in ({"a": 0.5, "b": 0.5}, {"b": 0.5, "a": 0.5}):
            expected = squad_v2_official.find_best_thresh(preds, scores, na_probs, has_ans)
            assert find_best_thresh(preds, scores, na_probs, has_ans) == expected
        assert find_best_thresh(preds, scores, {"a": 0.5, "b": 0.5}, has_ans) == (100.0, 0.5)
        assert find_best_thresh(preds, scores, {"b": 0.5, "a": 0.5}, has_ans) == (50.0, 0.0)


def dataset_of(golds: dict[str, list[str]], version: str = "2.0", has_gold: bool = True) -> SquadDataset:
    context = "Paris is in France."
    examples = [
        SquadExample(qid, None, "Q?", context, [GoldAnswer(t, context.index(t)) for t in texts], not texts)
        for qid, texts in golds.items()
    ]
    return SquadDataset(examples, version=version, has_gold=has_gold)


class TestEvaluateErrors:
    def test_missing_predictions_are_listed(self):
        dataset = dataset_of({f"q{i:02d}": ["Paris"] for i in range(25)})
        with pytest.raises(ValueError) as error:
            evaluate(dataset, {"q00": "Paris", "q01": "Paris"})
        message = str(error.value)
        assert message.startswith("predictions miss 23 of 25 questions: 'q02', 'q03'")
        assert message.endswith("'q21' and 3 more.")

    def test_bad_inputs(self):
        dataset = dataset_of({"a": ["Paris"], "b": []})
        with pytest.raises(ValueError, match=r"predictions has values of the wrong type for questions 'b'"):
            evaluate(dataset, {"a": "Paris", "b": None})
        with pytest.raises(ValueError, match=r"na_probs miss 1 of 2 questions: 'b'"):
            evaluate(dataset, {"a": "Paris", "b": ""}, {"a": 0.1})
        with pytest.raises(ValueError, match=r"na_probs has values of the wrong type for questions 'a'"):
            evaluate(dataset, {"a": "Paris", "b": ""}, {"a": "0.1", "b": 0.2})
        with pytest.raises(ValueError, match="unlabelled data"):
            evaluate(dataset_of({"a": []}, has_gold=False), {"a": ""})
        with pytest.raises(ValueError, match="no questions"):
            evaluate(dataset_of({}), {})
        duplicated = SquadDataset(dataset.examples * 2, version="2.0", has_gold=True)
        with pytest.raises(ValueError, match="Duplicate question ids: 'a', 'b'"):
            evaluate(duplicated, {"a": "Paris", "b": ""})

    def test_numpy_na_probs_are_accepted(self):
        dataset = dataset_of({"a": ["Paris"], "b": []})
        result = evaluate(dataset, {"a": "Paris", "b": "France"}, {"a": np.float32(0.25), "b": np.float64(0.75)}, 0.5)
        assert result["exact"] == {"a": 1.0, "b": 1.0}
        assert result["metrics"]["best_exact_thresh"] == 0.25  # answering "a" only: both right


class TestCalibration:
    def test_ece_by_hand(self):
        # Bin [0, 0.5): confidence 0.15 on average, accuracy 0.5; bin [0.5, 1]: 0.925 and 1.0; each half the data.
        assert expected_calibration_error([0.1, 0.2, 0.9, 0.95], [0, 1, 1, 1], n_bins=2) == pytest.approx(
            0.5 * 0.35 + 0.5 * 0.075, abs=1e-12
        )
        assert expected_calibration_error([1.0, 1.0, 0.0], [True, True, False]) == 0.0
        assert expected_calibration_error([0.5, 1.0], [True, False], n_bins=1) == pytest.approx(0.25, abs=1e-12)

    def test_ece_errors(self):
        with pytest.raises(ValueError, match="as many correctness labels"):
            expected_calibration_error([0.5], [True, False])
        with pytest.raises(ValueError, match="as many correctness labels"):
            expected_calibration_error([], [])
        with pytest.raises(ValueError, match=r"lie in \[0, 1\]"):
            expected_calibration_error([1.5], [True])
        with pytest.raises(ValueError, match="n_bins must be at least 1"):
            expected_calibration_error([0.5], [True], n_bins=0)

    @staticmethod
    def labelled(true_factor: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        x = rng.uniform(-20.0, 30.0, size=n)
        return x, rng.random(n) < 1.0 / (1.0 + np.exp(-true_factor * x))

    def test_fit_minimises_the_negative_log_likelihood(self):
        x, correct = self.labelled(0.3, 20_000, seed=0)
        fit = fit_calibration_factor(x, correct, current_factor=1.0)

        def nll(factor: float) -> float:
            z = factor * x
            return float(np.mean(np.logaddexp(0.0, z) - correct * z))

        reference = minimize_scalar(nll, bounds=(1e-6, 100.0), method="bounded", options={"xatol": 1e-10})
        assert fit.factor == pytest.approx(reference.x, abs=1e-6)
        assert fit.factor == pytest.approx(0.3, abs=0.02)  # the labels were drawn with 0.3
        assert nll(fit.factor) <= min(nll(fit.factor - 1e-4), nll(fit.factor + 1e-4))
        assert fit.ece_after < 0.02 < fit.ece_before
        assert fit == fit_calibration_factor(x, correct, current_factor=1.0)  # deterministic

    def test_fit_stops_at_the_bounds(self):
        x = np.array([1.0, 2.0, 3.0])
        assert fit_calibration_factor(x, [True, True, True], bounds=(0.01, 5.0)).factor == 5.0
        assert fit_calibration_factor(x, [False, False, False], bounds=(0.01, 5.0)).factor == 0.01

    def test_fit_errors(self):
        with pytest.raises(ValueError, match="as many correctness labels"):
            fit_calibration_factor([1.0, 2.0], [True])
        with pytest.raises(ValueError, match="0 < low < high"):
            fit_calibration_factor([1.0], [True], bounds=(0.0, 1.0))
