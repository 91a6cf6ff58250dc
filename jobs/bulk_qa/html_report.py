"""
`report.html`, a finished run's report to look at: one static, self-contained HTML file (figures embedded as PNG
`data:` URIs; no script, no external reference), written from the output folder's files: the manifest, the
questions table, `annotated.squad.json`, and with gold `evaluation/` (and `calibration.json` once
`python -m jobs.evaluate` wrote it). It shows:
- the questions by status (the manifest's counts);
- histograms of each question's best-span score and no-answer probability, answered against refused, and with
  gold, correct (the best span matches a gold answer exactly) against wrong against impossible (no gold answer);
- with gold: the official metrics (`evaluation.json`); EM and F1 against the no-answer threshold when each
  question's best span is given unless its no-answer probability is above the threshold (the curve whose maximum
  `python -m jobs.evaluate` picks), with that best-F1 threshold and the run's `refusal_threshold` marked; and a
  reliability diagram of the best spans' scores;
- the worst questions: with gold the lowest F1 first (ties: the most confident best span first), else the lowest
  best-span score first (ties by id), each with its context, its gold spans and its best span highlighted.

A question's best span is its first span in the answers table, whichever document it was read in: the figures
score what the run answered. The highlighted span is the best of those in the question's context in
`annotated.squad.json`: the same span, except in a `--pool-contexts` run, where the best span may come from another
retrieved document; the worst questions then also give the rank at which their own context was retrieved.

The figures need matplotlib, the optional extra `report`; without it `write_report` writes nothing and says in
one line how to get it.
"""

import base64
import html
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from jobs.bulk_qa.output import OutputFolder
from jobs.bulk_qa.workers.tables import QUESTION_STATUSES
from qa_core.document import Document
from qa_core.evaluation import expected_calibration_error, find_all_best_thresh, get_raw_scores

REPORT_FILE = "report.html"
WORST = 20  # questions in the worst-questions table
CONTEXT_MARGIN = 300  # characters of context shown either side of the highlighted spans
CALIBRATION_BINS = 10
MISSING_MATPLOTLIB = (
    "bulk-qa: report.html not written: it needs matplotlib, the optional extra: pip install '.[report]', "
    "then python -m jobs.report OUTPUT"
)
STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
td.count, td.number { text-align: right; font-variant-numeric: tabular-nums; }
table.worst tr.context td { font-size: 0.9em; line-height: 1.5; border-bottom: 2px solid #888; }
figure { margin: 1em 0 2em; }
figcaption { font-size: 0.9em; color: #555; max-width: 60em; }
mark.gold { background: #a5d6a7; }
mark.pred { background: #ffe082; }
mark.gold.pred { background: #80cbc4; }
.legend mark { padding: 0 0.3em; }
"""


@dataclass(frozen=True)
class AnnotatedQuestion:
    """One question of `annotated.squad.json`, as the report shows it."""

    question: str
    context: str
    gold: list[tuple[int, str]]  # (answer_start, text) of each gold answer; empty without gold
    best: tuple[int, str, float] | None  # the best span in the context: answer_start, text and score, refused or not


@dataclass(frozen=True)
class GoldScores:
    """Per gold question, in the `evaluation/` table's order, what the gold figures and the worst table use."""

    ids: list[str]
    spans: dict[str, str]  # each question's best span, refused or not ("" without one)
    has_answer: np.ndarray  # (n,) bool: the question has gold answers
    no_answer: np.ndarray  # (n,) its no-answer probability (na_probs.json)
    exact: np.ndarray  # (n,) the run's per-question exact match and F1 (evaluation/)
    f1: np.ndarray  # (n,)
    best_score: np.ndarray  # (n,) the best span's score, NaN without a span
    best_exact: np.ndarray  # (n,) the best span's exact match and F1
    best_f1: np.ndarray  # (n,)
    has_span: np.ndarray  # (n,) bool: the question has a non-empty best span


def plotting() -> ModuleType | None:
    """The figures module, or None when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401  (the optional extra `report`)
    except ImportError:
        return None
    from jobs.bulk_qa import report_plots

    return report_plots


def write_report(output: OutputFolder, manifest: dict[str, Any], worst: int = WORST) -> list[str]:
    """
    Writes `report.html` into a finished run's folder (see the module's documentation).

    :param manifest: The run's manifest (the job passes it before writing `manifest.json`).
    :param worst: How many questions the worst-questions table lists.
    :returns: `["report.html"]`, or `[]` when matplotlib is missing (said on stderr in one line).
    """
    plots = plotting()
    if plots is None:
        print(MISSING_MATPLOTLIB, file=sys.stderr, flush=True)
        return []
    output.write_file(render(output, manifest, plots, worst).encode("utf-8"), REPORT_FILE)
    return [REPORT_FILE]


def read_annotated(document: dict[str, Any], with_gold: bool) -> dict[str, AnnotatedQuestion]:
    """The questions of `annotated.squad.json` by id (gold answers only `with_gold`: else they are silver labels)."""
    found = {}
    for article in document["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                spans = qa["predicted_answers"]
                found[qa["id"]] = AnnotatedQuestion(
                    question=qa["question"],
                    context=paragraph["context"],
                    gold=[(a["answer_start"], a["text"]) for a in qa["answers"]] if with_gold else [],
                    best=(spans[0]["answer_start"], spans[0]["text"], spans[0]["score"]) if spans else None,
                )
    return found


def read_best_spans(output: OutputFolder, shards: list[int]) -> dict[str, tuple[str, float]]:
    """Each question's best span (its first answer that is not the no-answer one): its text and score."""
    answers = output.read_shards("answers", shards, ["question_id", "rank", "answer", "score", "is_no_answer"])
    columns = answers.to_pydict()
    best: dict[str, tuple[int, str, float]] = {}
    for qid, rank, text, score, no_answer in zip(*columns.values(), strict=True):
        if not no_answer and (qid not in best or rank < best[qid][0]):
            best[qid] = (rank, text, score)
    return {qid: (text, score) for qid, (_, text, score) in best.items()}


def own_context_ranks(
    output: OutputFolder, shards: list[int], annotated: dict[str, AnnotatedQuestion]
) -> dict[str, int | None]:
    """
    A `--pool-contexts` run's rank (from 1) of each question's own context among its retrieved documents (None
    when not retrieved), its id derived from its text as the run derives it.
    """
    questions = output.read_shards("questions", shards, ["question_id", "retrieved_document_ids"]).to_pydict()
    ranks = {}
    for qid, retrieved in zip(questions["question_id"], questions["retrieved_document_ids"], strict=True):
        if qid in annotated:
            own, found = Document(content=annotated[qid].context).id, retrieved or []
            ranks[qid] = found.index(own) + 1 if own in found else None
    return ranks


def gold_scores(
    evaluation: dict[str, list],
    annotated: dict[str, AnnotatedQuestion],
    version: str,
    best_spans: dict[str, tuple[str, float]],
) -> GoldScores:
    """
    The gold arrays from the `evaluation/` table's columns, the annotated questions and each question's best span
    (`read_best_spans`), in one pass.
    """
    ids = evaluation["question_id"]
    questions = [annotated[qid] for qid in ids]
    spans = {qid: best_spans[qid][0] if qid in best_spans else "" for qid in ids}
    gold = {qid: [text for _, text in q.gold] for qid, q in zip(ids, questions, strict=True)}
    exact_raw, f1_raw = get_raw_scores(gold, spans, version)
    return GoldScores(
        ids=ids,
        spans=spans,
        has_answer=np.array(evaluation["has_answer"], dtype=bool),
        no_answer=np.array(evaluation["no_answer_probability"], dtype=np.float64),
        exact=np.array(evaluation["exact"], dtype=np.float64),
        f1=np.array(evaluation["f1"], dtype=np.float64),
        best_score=np.array([best_spans[qid][1] if qid in best_spans else np.nan for qid in ids], dtype=np.float64),
        best_exact=np.array([exact_raw[qid] for qid in ids], dtype=np.float64),
        best_f1=np.array([f1_raw[qid] for qid in ids], dtype=np.float64),
        has_span=np.array([bool(spans[qid]) for qid in ids], dtype=bool),
    )


def threshold_curve(
    no_answer: np.ndarray, if_answered: np.ndarray, if_refused: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """
    A score against the no-answer threshold, as the official script sweeps it: at threshold `t` the questions
    whose no-answer probability is above `t` are refused.

    :param no_answer: (n,) each question's no-answer probability, in [0, 1].
    :param if_answered: (n,) its score when its best span is given; `if_refused` when it is refused.
    :returns: `(thresholds, percent)`: 0.0, every distinct no-answer probability and 1.0, ascending, and the mean
        score in percent at each (holding up to the next threshold).
    """
    order = np.argsort(no_answer, kind="stable")
    sorted_na = no_answer[order]  # (n,)
    gain = np.concatenate([[0.0], np.cumsum((if_answered - if_refused)[order])])  # (n + 1,)
    thresholds = np.unique(np.concatenate([[0.0, 1.0], sorted_na]))
    answered = np.searchsorted(sorted_na, thresholds, side="right")  # questions with no-answer <= threshold
    return thresholds, 100.0 * (if_refused.sum() + gain[answered]) / len(no_answer)


def worst_order(scores: GoldScores) -> np.ndarray:
    """Indices of the gold questions, lowest F1 first; ties: the highest best-span score first, then table order."""
    confidence = np.where(np.isnan(scores.best_score), np.inf, -scores.best_score)
    return np.lexsort((np.arange(len(scores.ids)), confidence, scores.f1))


def highlight(context: str, gold: list[tuple[int, str]], best: tuple[int, str, float] | None) -> str:
    """
    The context around its spans, HTML-escaped, gold spans in `<mark class="gold">`, the best span in
    `<mark class="pred">` (`<mark class="gold pred">` where they overlap), cut `CONTEXT_MARGIN` characters
    either side of the spans (marked with an ellipsis).
    """
    gold_spans = [(start, start + len(text)) for start, text in gold if text]
    pred_spans = [(best[0], best[0] + len(best[1]))] if best and best[1] else []
    spans = gold_spans + pred_spans
    low = max(0, min((s for s, _ in spans), default=0) - CONTEXT_MARGIN)
    high = min(len(context), max((e for _, e in spans), default=0) + CONTEXT_MARGIN)
    cuts = sorted({low, high, *(min(max(edge, low), high) for span in spans for edge in span)})
    pieces = ["…" if low > 0 else ""]
    for start, end in zip(cuts, cuts[1:], strict=False):
        text = html.escape(context[start:end])
        classes = [
            name
            for name, named in (("gold", gold_spans), ("pred", pred_spans))
            if any(s <= start and end <= e for s, e in named)
        ]
        pieces.append(f'<mark class="{" ".join(classes)}">{text}</mark>' if classes else text)
    pieces.append("…" if high < len(context) else "")
    return "".join(pieces)


def render(output: OutputFolder, manifest: dict[str, Any], plots: ModuleType, worst: int = WORST) -> str:
    """The report's HTML (see the module's documentation); `plots` is `jobs.bulk_qa.report_plots`."""
    metrics = manifest.get("evaluation")
    shards = sorted(output.committed_shards())
    questions = output.read_shards("questions", shards, ["question_id", "status", "best_answer"]).to_pydict()
    annotated = read_annotated(output.read_json("annotated.squad.json"), with_gold=metrics is not None)
    na_probs = output.read_json("na_probs.json")  # the run's no-answer source, 1.0 where nothing was read
    best_spans = read_best_spans(output, shards)
    best = {qid: score for qid, (_, score) in best_spans.items()}
    by_status: dict[str, tuple[list[float], list[float]]] = {"answered": ([], []), "refused": ([], [])}
    for qid, status in zip(questions["question_id"], questions["status"], strict=True):
        if status in by_status:
            by_status[status][0].extend([best[qid]] if qid in best else [])
            by_status[status][1].append(na_probs[qid])
    sections = [_statuses(manifest["outputs"]["statuses"])]
    if manifest.get("retrieval_quality", {}).get("questions"):
        sections.append(_retrieval_quality(manifest["retrieval_quality"]))
    figures = [
        (
            plots.histograms(
                [
                    ("best span's score", {name: np.array(v[0]) for name, v in by_status.items()}),
                    ("no-answer probability", {name: np.array(v[1]) for name, v in by_status.items()}),
                ]
            ),
            "Each question's best span score and no-answer probability, answered against refused.",
        )
    ]
    row_of = {qid: i for i, qid in enumerate(questions["question_id"])}
    # a --pool-contexts run: where each question's own context was retrieved
    ranks = own_context_ranks(output, shards, annotated) if manifest.get("pooled_contexts") else None
    if metrics is not None:
        evaluation = output.read_result_table("evaluation").to_pydict()
        scores = gold_scores(evaluation, annotated, manifest["gold"]["version"], best_spans)
        sections.append(_metrics(output.read_json("evaluation.json")))  # the official script's key order
        figures += _gold_figures(scores, manifest, output.read_json("calibration.json"), plots)
        order = worst_order(scores)[:worst]
        rows = [
            _worst_row(scores.ids[i], annotated, questions, row_of, na_probs, best, scores, i, context_ranks=ranks)
            for i in order
        ]
    else:
        ranked = sorted(
            (best[qid], qid) for qid in annotated if qid in best and qid in row_of
        )  # lowest score first, ties by id
        rows = [
            _worst_row(qid, annotated, questions, row_of, na_probs, best, context_ranks=ranks)
            for _, qid in ranked[:worst]
        ]
    sections.append("<h2>Scores</h2>\n" + "\n".join(_figure(png, caption) for png, caption in figures))
    sections.append(_worst_table(rows, metrics is not None, ranks is not None))
    title = f"bulk-qa report: {output.shown}"
    config = manifest["config"]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n"
        f"<p>{manifest['inputs']['questions']} questions from <code>{html.escape(str(config['questions']))}</code>, "
        f"model <code>{html.escape(str(config['model']))}</code>.</p>\n" + "\n".join(sections) + "\n</body>\n</html>\n"
    )


def _finite(values: np.ndarray) -> np.ndarray:
    return values[np.isfinite(values)]


def _gold_figures(
    scores: GoldScores, manifest: dict[str, Any], calibration: dict[str, Any] | None, plots: ModuleType
) -> list[tuple[bytes, str]]:
    correct = scores.has_answer & (scores.best_exact == 1.0)
    groups = {"correct": correct, "wrong": scores.has_answer & ~correct, "impossible": ~scores.has_answer}
    histograms = plots.histograms(
        [
            ("best span's score", {n: _finite(scores.best_score[m]) for n, m in groups.items()}),
            ("no-answer probability", {n: scores.no_answer[m] for n, m in groups.items()}),
        ]
    )
    # Given, an impossible question scores 1 only without a span (the official sweep's rule); refused, 1 if impossible.
    if_refused = (~scores.has_answer).astype(np.float64)
    answered_exact = np.where(scores.has_answer, scores.best_exact, ~scores.has_span)
    answered_f1 = np.where(scores.has_answer, scores.best_f1, ~scores.has_span)
    thresholds, exact_curve = threshold_curve(scores.no_answer, answered_exact, if_refused)
    _, f1_curve = threshold_curve(scores.no_answer, answered_f1, if_refused)
    best = _best_thresholds(scores)
    marks = [(f"best F1 {best['best_f1']:.2f} at threshold {best['best_f1_thresh']:.4g}", best["best_f1_thresh"])]
    refusal = manifest["config"].get("refusal_threshold")
    if refusal is not None:
        marks.append((f"this run's refusal_threshold {refusal:.4g}", refusal))
    x_max = min(1.0, 1.05 * max(scores.no_answer.max(), *(value for _, value in marks)) + 0.01)
    curves = plots.threshold_curves(thresholds, exact_curve, f1_curve, marks, manifest["evaluation"]["f1"], x_max)
    spanned = ~np.isnan(scores.best_score)
    confidence, hits = scores.best_score[spanned], scores.best_exact[spanned] == 1.0
    figures = [
        (histograms, "Best span score and no-answer probability, by whether the best span is exactly correct."),
        (
            curves,
            "EM and F1 when each question's best span is given unless its no-answer probability is above the "
            "threshold (python -m jobs.evaluate writes the best-F1 threshold as refusal.yaml). "
            + (
                f"This run refused at no-answer probability >= {refusal:.4g}."
                if refusal is not None
                else "This run refused where the no-answer score beat the best span (no refusal_threshold)."
            ),
        ),
    ]
    if confidence.size:
        ece = expected_calibration_error(confidence, hits, CALIBRATION_BINS)
        fitted = (
            f" python -m jobs.evaluate fitted calibration_factor {calibration['calibration_factor']:.4g} (expected "
            f"calibration error {calibration['ece_before']:.3f} before, {calibration['ece_after']:.3f} after)."
            if calibration and "calibration_factor" in calibration
            else ""
        )
        figures.append(
            (
                plots.reliability(confidence, hits, CALIBRATION_BINS, ece),
                f"Reliability of the best spans' scores: {confidence.size} questions with a span, "
                f"exactly correct or not.{fitted}",
            )
        )
    return figures


def _best_thresholds(scores: GoldScores) -> dict[str, float]:
    ids = scores.ids
    return find_all_best_thresh(
        scores.spans,
        dict(zip(ids, scores.best_exact.tolist(), strict=True)),
        dict(zip(ids, scores.best_f1.tolist(), strict=True)),
        dict(zip(ids, scores.no_answer.tolist(), strict=True)),
        dict(zip(ids, scores.has_answer.tolist(), strict=True)),
    )


def _statuses(statuses: dict[str, int]) -> str:
    rows = "".join(
        f'<tr data-status="{name}"><td>{name}</td><td class="count">{statuses[name]}</td></tr>\n'
        for name in QUESTION_STATUSES
    )
    heads = "<tr><th>status</th><th>questions</th></tr>"
    return f'<h2>Questions by status</h2>\n<table class="statuses">\n{heads}\n{rows}</table>'


def _metrics(metrics: dict[str, Any]) -> str:
    rows = "".join(
        f'<tr data-metric="{html.escape(key)}"><td>{html.escape(key)}</td>'
        f'<td class="number">{_number(value)}</td></tr>\n'
        for key, value in _flat({key: value for key, value in metrics.items() if key != "retrieval"})
    )
    return (
        "<h2>Evaluation</h2>\n<p>The official SQuAD script's metrics on predictions.json and na_probs.json "
        f'(evaluation.json).</p>\n<table class="metrics">\n<tr><th>metric</th><th>value</th></tr>\n{rows}</table>'
    )


def _retrieval_quality(quality: dict[str, Any]) -> str:
    rows = "".join(
        f'<tr data-metric="retrieval.{html.escape(key)}"><td>{html.escape(key)}</td>'
        f'<td class="number">{_number(value)}</td></tr>\n'
        for key, value in quality.items()
    )
    return (
        "<h2>Retrieval</h2>\n<p>Recall and MRR of the retrieved documents against the questions' relevant "
        "documents: their relevant_document_ids, or with --pool-contexts their own contexts (evaluation.json's "
        "retrieval).</p>\n"
        f'<table class="metrics">\n<tr><th>metric</th><th>value</th></tr>\n{rows}</table>'
    )


def _flat(metrics: dict[str, Any], prefix: str = "") -> list[tuple[str, float]]:
    """The numbers of a metrics dict, nested dicts' under dotted keys (`no_answer_sources.model.best_f1`)."""
    found = []
    for key, value in metrics.items():
        if isinstance(value, dict):
            found += _flat(value, f"{prefix}{key}.")
        elif isinstance(value, int | float):
            found.append((f"{prefix}{key}", value))
    return found


def _number(value: float) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _figure(png: bytes, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (
        f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def _worst_row(
    qid: str,
    annotated: dict[str, AnnotatedQuestion],
    questions: dict[str, list],
    row_of: dict[str, int],
    na_probs: dict[str, float],
    best_scores: dict[str, float],
    scores: GoldScores | None = None,
    index: int | None = None,
    context_ranks: dict[str, int | None] | None = None,
) -> str:
    question = annotated[qid]
    row = row_of[qid]
    answer = questions["best_answer"][row]
    cells = [
        f"<td>{html.escape(qid)}</td>",
        f"<td>{html.escape(question.question)}</td>",
        f"<td>{html.escape(questions['status'][row])}</td>",
    ]
    if scores is not None:
        cells += [
            f'<td class="number">{scores.f1[index]:.3f}</td>',
            f'<td class="number">{scores.exact[index]:.0f}</td>',
        ]
        golds = " | ".join(html.escape(text) for _, text in question.gold) or "<i>(no answer)</i>"
        cells.append(f"<td>{golds}</td>")
    best = f"{best_scores[qid]:.4f}" if qid in best_scores else ""
    cells += [
        f'<td class="number">{best}</td>',
        f'<td class="number">{na_probs[qid]:.4f}</td>',
        f"<td>{html.escape(answer) if answer is not None else '<i>(no answer)</i>'}</td>",
    ]
    if context_ranks is not None:
        rank = context_ranks.get(qid)
        cells.append(f'<td class="number">{rank if rank is not None else "not retrieved"}</td>')
    context = highlight(question.context, question.gold, question.best)
    return (
        f'<tr data-id="{html.escape(qid)}">{"".join(cells)}</tr>\n'
        f'<tr class="context"><td colspan="{len(cells)}">{context}</td></tr>'
    )


def _worst_table(rows: list[str], with_gold: bool, with_context_ranks: bool) -> str:
    gold_heads = "<th>F1</th><th>EM</th><th>gold</th>" if with_gold else ""
    rank_head = "<th>own context's retrieval rank</th>" if with_context_ranks else ""
    heads = (
        f"<tr><th>question id</th><th>question</th><th>status</th>{gold_heads}<th>best span score</th>"
        f"<th>no-answer probability</th><th>answer given</th>{rank_head}</tr>"
    )
    order = (
        "lowest F1 first (ties: the most confident best span first)" if with_gold else "lowest best-span score first"
    )
    legend = '<mark class="gold">gold</mark> <mark class="pred">best span</mark> <mark class="gold pred">both</mark>'
    return (
        f'<h2>Worst questions</h2>\n<p class="legend">{len(rows)} questions, {order}. {legend}</p>\n'
        f'<table class="worst">\n{heads}\n' + "\n".join(rows) + "\n</table>"
    )
