"""
SQuAD scoring with the official evaluation scripts' semantics, as small pure functions over dicts keyed by question
id (the official v2.0 script's functions, same names and results), one `evaluate` entry over a `SquadDataset`,
and confidence calibration helpers for the reader's `calibration_factor`.
"""

import numbers
import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from qa_core.squad import VERSIONS, SquadDataset

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)

# How many ids an error message lists before it only counts the rest.
_LISTED_IDS = 20


def normalize_answer(s: str) -> str:
    """
    Lower-cases, removes ASCII punctuation, the articles a / an / the and extra whitespace, in the official order.

    :param s: An answer.
    :returns: The normalised answer.
    """
    return " ".join(_ARTICLES.sub(" ", s.lower().translate(_NO_PUNCTUATION)).split())


def get_tokens(s: str) -> list[str]:
    """
    The normalised answer's whitespace tokens.

    :param s: An answer.
    :returns: Its tokens; none for an empty answer.
    """
    return normalize_answer(s).split()


def compute_exact(a_gold: str, a_pred: str) -> int:
    """
    :param a_gold: A gold answer.
    :param a_pred: The predicted answer.
    :returns: 1 when both normalise to the same text, else 0.
    """
    return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold: str, a_pred: str) -> float:
    """
    Token-overlap F1 as SQuAD v2.0 computes it: 1.0 when both answers are empty after normalisation.

    :param a_gold: A gold answer.
    :param a_pred: The predicted answer.
    :returns: F1 in [0, 1].
    """
    return _token_f1(get_tokens(a_gold), get_tokens(a_pred), both_empty=1.0)


def _token_f1(gold_toks: list[str], pred_toks: list[str], both_empty: float) -> float:
    # v2.0 scores two empty answers 1.0; v1.1 scores any empty answer 0.0 (no tokens in common).
    if not gold_toks or not pred_toks:
        return both_empty if not gold_toks and not pred_toks else 0.0
    num_same = sum((Counter(gold_toks) & Counter(pred_toks)).values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_toks)
    recall = num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def get_raw_scores(
    gold_answers: Mapping[str, Sequence[str]], predictions: Mapping[str, str], version: str = "2.0"
) -> tuple[dict[str, float], dict[str, float]]:
    """
    Exact match and F1 of each question's prediction, the maximum over its gold answers.

    v2.0 (the official v2.0 script): gold answers that normalise to empty are dropped, and a question left without
    any is scored against `""` (a correct no-answer is an empty prediction). v1.1 (the official v1.1 script):
    every gold answer counts, and F1 is 0 whenever either answer is empty.

    :param gold_answers: Gold answer texts by question id.
    :param predictions: Predicted answer by question id, one for every id of `gold_answers`.
    :param version: `"2.0"` or `"1.1"`.
    :returns: `(exact, f1)`, each by question id in `gold_answers`' order.
    :raises ValueError: For an unknown version, or a v1.1 question without gold answers.
    """
    if version not in VERSIONS:
        raise ValueError(f"version must be one of {VERSIONS}, not {version!r}.")
    both_empty = 1.0 if version == "2.0" else 0.0
    exact_scores, f1_scores = {}, {}
    for qid, texts in gold_answers.items():
        golds = list(dict.fromkeys(normalize_answer(text) for text in dict.fromkeys(texts)))  # distinct, in order
        if version == "2.0":
            golds = [gold for gold in golds if gold] or [""]
        elif not golds:
            raise ValueError(f"Question {qid!r} has no gold answers, which SQuAD v1.1 scoring cannot score.")
        pred = normalize_answer(predictions[qid])
        pred_toks = pred.split()
        exact_scores[qid] = float(pred in golds)
        if pred_toks and pred in golds:  # the same non-empty tokens: F1 is 1.0, its maximum
            f1_scores[qid] = 1.0
        else:
            f1_scores[qid] = max(_token_f1(gold.split(), pred_toks, both_empty) for gold in golds)
    return exact_scores, f1_scores


def apply_no_ans_threshold(
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    qid_to_has_ans: Mapping[str, bool],
    na_prob_thresh: float,
) -> dict[str, float]:
    """
    Scores after the no-answer decision: a question whose no-answer probability exceeds the threshold counts as
    answered "no answer", which scores 1.0 on an impossible question and 0.0 on an answerable one.

    :param scores: Raw scores by question id.
    :param na_probs: No-answer probability by question id.
    :param qid_to_has_ans: Whether each question has gold answers.
    :param na_prob_thresh: The threshold (`na_prob > na_prob_thresh` means "no answer").
    :returns: The scores by question id.
    """
    return {
        qid: float(not qid_to_has_ans[qid]) if na_probs[qid] > na_prob_thresh else score
        for qid, score in scores.items()
    }


def make_eval_dict(
    exact_scores: Mapping[str, float], f1_scores: Mapping[str, float], qid_list: Sequence[str] | None = None
) -> dict[str, Any]:
    """
    :param exact_scores: Exact match by question id.
    :param f1_scores: F1 by question id.
    :param qid_list: The questions to average over; all of `exact_scores` when `None` or empty.
    :returns: `{"exact": ..., "f1": ..., "total": ...}`, the scores in percent.
    """
    qids = qid_list or list(exact_scores)
    total = len(qids)
    return {
        "exact": 100.0 * sum(exact_scores[qid] for qid in qids) / total,
        "f1": 100.0 * sum(f1_scores[qid] for qid in qids) / total,
        "total": total,
    }


def find_best_thresh(
    preds: Mapping[str, str],
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    qid_to_has_ans: Mapping[str, bool],
) -> tuple[float, float]:
    """
    The best score over no-answer thresholds, as the official script finds it: start from answering "no answer"
    everywhere, then take questions in increasing no-answer probability (ties in `na_probs`' order, one at a time,
    as the official script does), each switching to its prediction.

    :param preds: Predicted answer by question id.
    :param scores: Raw scores by question id.
    :param na_probs: No-answer probability by question id; ids without a score are skipped.
    :param qid_to_has_ans: Whether each question has gold answers.
    :returns: `(best score in percent, its threshold)`.
    """
    num_no_ans = sum(1 for has_ans in qid_to_has_ans.values() if not has_ans)
    cur_score = best_score = num_no_ans
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            cur_score += scores[qid]
        elif preds[qid]:
            cur_score -= 1
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def find_all_best_thresh(
    preds: Mapping[str, str],
    exact_raw: Mapping[str, float],
    f1_raw: Mapping[str, float],
    na_probs: Mapping[str, float],
    qid_to_has_ans: Mapping[str, bool],
) -> dict[str, float]:
    """
    `find_best_thresh` for exact match and for F1. The official function writes these keys into its `main_eval`
    argument; this one returns them.

    :returns: `{"best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"}`.
    """
    best_exact, exact_thresh = find_best_thresh(preds, exact_raw, na_probs, qid_to_has_ans)
    best_f1, f1_thresh = find_best_thresh(preds, f1_raw, na_probs, qid_to_has_ans)
    return {
        "best_exact": best_exact,
        "best_exact_thresh": exact_thresh,
        "best_f1": best_f1,
        "best_f1_thresh": f1_thresh,
    }


def evaluate(
    dataset: SquadDataset,
    predictions: Mapping[str, str],
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, Any]:
    """
    Scores predictions on a labelled SQuAD dataset as the official SQuAD v2.0 script does.

    `metrics` has the official script's keys, in its order: `exact, f1, total`, then `HasAns_*` and `NoAns_*` (each
    only when such questions exist), then `best_exact, best_exact_thresh, best_f1, best_f1_thresh`. The best-threshold
    keys are always there, as in Hugging Face `evaluate`'s `squad_v2`; without `na_probs` every no-answer
    probability is 0.0, as in the official script. v1.1 data is scored with the v1.1 script's per-question rules
    (see `get_raw_scores`) under the same keys: with `na_probs=None`, `exact` and `f1` are that script's
    `exact_match` and `f1`.

    Usage example:
    ```python
    dataset = read_squad("dev-v2.0.json")
    result = evaluate(dataset, {example.id: "" for example in dataset.examples})  # "no answer" everywhere
    assert result["metrics"]["NoAns_exact"] == 100.0 and result["metrics"]["HasAns_f1"] == 0.0
    ```

    :param dataset: The questions with their gold answers.
    :param predictions: Predicted answer text by question id, `""` for "no answer"; ids not in the dataset are
        ignored, as in the official script.
    :param na_probs: No-answer probability by question id.
    :param na_prob_thresh: Questions whose no-answer probability exceeds this count as answered "no answer".
    :returns: `{"metrics": {...}, "exact": {id: score}, "f1": {id: score}}`: the per-question scores are those the
        metrics average (after the no-answer threshold), in dataset order.
    :raises ValueError: For unlabelled or empty data, duplicate ids, or predictions (or `na_probs`) that miss
        questions or are not strings (numbers), naming the ids.
    """
    if not dataset.has_gold:
        raise ValueError("The dataset has no gold answers (unlabelled data) to score predictions against.")
    if not dataset.examples:
        raise ValueError("The dataset has no questions to score.")
    gold_answers = {example.id: [answer.text for answer in example.answers] for example in dataset.examples}
    if len(gold_answers) < len(dataset.examples):
        counts = Counter(example.id for example in dataset.examples)
        raise ValueError(f"Duplicate question ids: {_listed([qid for qid, n in counts.items() if n > 1])}.")
    _check_covers(gold_answers, predictions, "predictions", str)
    if na_probs is None:
        na_probs = dict.fromkeys(predictions, 0.0)
    else:
        _check_covers(gold_answers, na_probs, "na_probs", numbers.Real)
    qid_to_has_ans = {qid: bool(answers) for qid, answers in gold_answers.items()}
    exact_raw, f1_raw = get_raw_scores(gold_answers, predictions, dataset.version)
    exact = apply_no_ans_threshold(exact_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    f1 = apply_no_ans_threshold(f1_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    metrics = make_eval_dict(exact, f1)
    for prefix, has_ans in (("HasAns", True), ("NoAns", False)):
        qids = [qid for qid, has in qid_to_has_ans.items() if has is has_ans]
        if qids:
            metrics.update({f"{prefix}_{key}": value for key, value in make_eval_dict(exact, f1, qids).items()})
    metrics.update(find_all_best_thresh(predictions, exact_raw, f1_raw, na_probs, qid_to_has_ans))
    return {"metrics": metrics, "exact": exact, "f1": f1}


def _check_covers(gold_answers: Mapping[str, Any], values: Mapping[str, Any], name: str, types: Any) -> None:
    missing = [qid for qid in gold_answers if qid not in values]
    if missing:
        raise ValueError(f"{name} miss {len(missing)} of {len(gold_answers)} questions: {_listed(missing)}.")
    wrong = [qid for qid in gold_answers if not isinstance(values[qid], types) or isinstance(values[qid], bool)]
    if wrong:
        raise ValueError(f"{name} has values of the wrong type for questions {_listed(wrong)}.")


def _listed(ids: list[str]) -> str:
    more = f" and {len(ids) - _LISTED_IDS} more" if len(ids) > _LISTED_IDS else ""
    return ", ".join(repr(qid) for qid in ids[:_LISTED_IDS]) + more


def expected_calibration_error(confidences: Sequence[float], correct: Sequence[bool], n_bins: int = 10) -> float:
    """
    Expected calibration error: the share-weighted mean, over equal-width confidence bins, of
    |accuracy - mean confidence|. Bin `k` holds confidences in `[k / n_bins, (k + 1) / n_bins)`, the last bin 1.0 too.

    :param confidences: Confidences in [0, 1].
    :param correct: Whether each answer is correct.
    :param n_bins: Number of bins.
    :returns: The error, in [0, 1].
    :raises ValueError: For empty or unequal inputs, confidences outside [0, 1], or `n_bins < 1`.
    """
    conf = np.asarray(confidences, dtype=np.float64)  # (n,)
    hits = np.asarray(correct, dtype=np.float64)  # (n,)
    if conf.ndim != 1 or conf.shape != hits.shape or conf.size == 0:
        raise ValueError(f"Need as many correctness labels as confidences (got {hits.shape} and {conf.shape}).")
    if np.any((conf < 0.0) | (conf > 1.0)) or np.any(np.isnan(conf)):
        raise ValueError("Confidences must lie in [0, 1].")
    if n_bins < 1:
        raise ValueError(f"n_bins must be at least 1, not {n_bins}.")
    bins = np.minimum((conf * n_bins).astype(np.int64), n_bins - 1)  # (n,)
    counts = np.bincount(bins, minlength=n_bins)  # (n_bins,)
    gaps = np.abs(np.bincount(bins, weights=hits - conf, minlength=n_bins))  # (n_bins,) |sum(correct - confidence)|
    return float(gaps[counts > 0].sum() / conf.size)


@dataclass(frozen=True)
class CalibrationFit:
    """
    The result of `fit_calibration_factor`.

    :param factor: The fitted calibration factor.
    :param ece_before: ECE of `sigmoid(current_factor * x)`.
    :param ece_after: ECE of `sigmoid(factor * x)`.
    """

    factor: float
    ece_before: float
    ece_after: float


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # no overflow for large |z|


def fit_calibration_factor(
    logit_sums: Sequence[float],
    correct: Sequence[bool],
    current_factor: float = 0.1,
    bounds: tuple[float, float] = (1e-6, 100.0),
    n_bins: int = 10,
) -> CalibrationFit:
    """
    Fits the reader's `calibration_factor` (its span score is `sigmoid(calibration_factor * (start_logit +
    end_logit))`), Haystack 1.x's `calibrate_confidence_scores` idea: the factor minimising the negative
    log-likelihood of the correctness labels under `sigmoid(factor * x)`.

    The negative log-likelihood is convex in the factor, so the factor is found by bisection on the sign of its
    derivative `mean((sigmoid(factor * x) - correct) * x)` within `bounds` (deterministic; a bound when the optimum
    lies beyond it).

    :param logit_sums: Per question, `start_logit + end_logit` of the best span.
    :param correct: Per question, whether that span is correct (exact match 1).
    :param current_factor: The factor in use, for `ece_before` (0.1 is the reader's default).
    :param bounds: The range searched, `0 < low < high`.
    :param n_bins: Bins for the ECE.
    :returns: The factor with the ECE before and after.
    :raises ValueError: For empty or unequal inputs, or bad bounds.
    """
    x = np.asarray(logit_sums, dtype=np.float64)  # (n,)
    y = np.asarray(correct, dtype=np.float64)  # (n,)
    if x.ndim != 1 or x.shape != y.shape or x.size == 0:
        raise ValueError(f"Need as many correctness labels as logit sums (got {y.shape} and {x.shape}).")
    low, high = bounds
    if not 0.0 < low < high:
        raise ValueError(f"bounds must satisfy 0 < low < high, not {bounds}.")

    def slope(factor: float) -> float:  # derivative of the mean negative log-likelihood
        return float(np.mean((_sigmoid(factor * x) - y) * x))

    if slope(low) >= 0.0:
        factor = low
    elif slope(high) <= 0.0:
        factor = high
    else:
        while high - low > 1e-12 * high:
            middle = 0.5 * (low + high)
            low, high = (middle, high) if slope(middle) < 0.0 else (low, middle)
        factor = 0.5 * (low + high)
    return CalibrationFit(
        factor=factor,
        ece_before=expected_calibration_error(_sigmoid(current_factor * x), correct, n_bins),
        ece_after=expected_calibration_error(_sigmoid(factor * x), correct, n_bins),
    )


__all__ = [
    "CalibrationFit",
    "apply_no_ans_threshold",
    "compute_exact",
    "compute_f1",
    "evaluate",
    "expected_calibration_error",
    "find_all_best_thresh",
    "find_best_thresh",
    "fit_calibration_factor",
    "get_raw_scores",
    "get_tokens",
    "make_eval_dict",
    "normalize_answer",
]
