"""
The figures of `report.html` (see `jobs.bulk_qa.html_report`), drawn with matplotlib, the optional extra `report`,
and returned as PNG bytes. Each figure is a `matplotlib.figure.Figure` of its own (no pyplot, no global state).
"""

import io
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

SCORE_BINS = np.linspace(0.0, 1.0, 21)  # histogram bins of scores and probabilities, all in [0, 1]
COLORS = {
    "answered": "#1f77b4",
    "refused": "#ff7f0e",
    "correct": "#2ca02c",
    "wrong": "#d62728",
    "impossible": "#7f7f7f",
}
DPI = 100


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def histograms(panels: Sequence[tuple[str, dict[str, np.ndarray]]]) -> bytes:
    """
    Side-by-side histograms over [0, 1], one panel per `(x label, {series label: values})`, the series overlaid
    (a series' colour from `COLORS` by its label).
    """
    figure = Figure(figsize=(4.2 * len(panels), 3.2), layout="constrained")
    for axes, (label, series) in zip(figure.subplots(1, len(panels), squeeze=False)[0], panels, strict=True):
        for name, values in series.items():
            axes.hist(values, bins=SCORE_BINS, alpha=0.6, color=COLORS[name], label=f"{name} ({len(values)})")
        axes.set_xlabel(label)
        axes.set_ylabel("questions")
        axes.set_xlim(0.0, 1.0)
        axes.legend(fontsize="small")
    return _png(figure)


def threshold_curves(
    thresholds: np.ndarray,
    exact: np.ndarray,
    f1: np.ndarray,
    marks: Sequence[tuple[str, float]],
    run_f1: float,
    x_max: float = 1.0,
) -> bytes:
    """
    EM and F1 (percent) against the no-answer threshold, as steps (`thresholds[i]` holds from there to the next),
    with each `(label, threshold)` of `marks` as a vertical line and the run's own F1 as a horizontal one, drawn
    over thresholds from 0 to `x_max`.
    """
    figure = Figure(figsize=(8.4, 3.6), layout="constrained")
    axes = figure.subplots()
    axes.step(thresholds, f1, where="post", color="#1f77b4", label="F1")
    axes.step(thresholds, exact, where="post", color="#9467bd", label="EM")
    for (label, value), style in zip(marks, ("--", ":"), strict=False):
        axes.axvline(value, color="black", linestyle=style, linewidth=1, label=label)
    axes.axhline(run_f1, color="#d62728", linestyle="-.", linewidth=1, label=f"this run's F1 {run_f1:.2f}")
    axes.set_xlabel("no-answer threshold: refused when the no-answer probability is above it")
    axes.set_ylabel("percent")
    axes.set_xlim(0.0, x_max)
    axes.set_ylim(-2.0, 102.0)
    axes.legend(fontsize="small", loc="best")
    return _png(figure)


def reliability(confidence: np.ndarray, correct: np.ndarray, n_bins: int, ece: float) -> bytes:
    """
    A reliability diagram: per equal-width confidence bin (as `qa_core.evaluation.expected_calibration_error`
    bins them), the share of correct answers against the diagonal, and below it how many answers each bin holds.
    """
    bins = np.minimum((confidence * n_bins).astype(np.int64), n_bins - 1)  # (n,)
    counts = np.bincount(bins, minlength=n_bins)  # (n_bins,)
    hits = np.bincount(bins, weights=correct.astype(np.float64), minlength=n_bins)  # (n_bins,)
    accuracy = np.divide(hits, counts, out=np.zeros(n_bins), where=counts > 0)  # (n_bins,)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    figure = Figure(figsize=(4.8, 4.8), layout="constrained")
    top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=[3, 1])
    top.bar(edges[:-1], accuracy, width=1.0 / n_bins, align="edge", color="#1f77b4", edgecolor="white")
    top.plot([0.0, 1.0], [0.0, 1.0], color="black", linestyle="--", linewidth=1, label="perfect calibration")
    top.set_ylabel("share exactly correct")
    top.set_ylim(0.0, 1.0)
    top.set_title(f"expected calibration error {ece:.3f}", fontsize="medium")
    top.legend(fontsize="small", loc="upper left")
    bottom.bar(edges[:-1], counts, width=1.0 / n_bins, align="edge", color="#7f7f7f", edgecolor="white")
    bottom.set_xlabel("best span's score")
    bottom.set_ylabel("answers")
    bottom.set_xlim(0.0, 1.0)
    return _png(figure)
