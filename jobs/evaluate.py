"""
`python -m jobs.evaluate OUT --gold FILE`: scores a finished bulk-qa run against gold SQuAD answers and tunes the
next run's refusal and calibration on them.

Reads the run's `predictions.json` and `na_probs.json` and its committed tables (for each question's best span and
its score), and writes into OUT (or `--to DIR`):
- `evaluation.json`: the official SQuAD v2.0 script's metrics on `predictions.json` / `na_probs.json`
  (v1.1 gold is scored as v1.1), and under `no_answer_sources` how each no-answer source (haystack, model)
  refuses at its best threshold, and the run's own `retrieval` quality where it reported one;
- `refusal.yaml`: `refusal_threshold`, the threshold that maximises F1 when each question's best span is given
  unless its no-answer probability is above the official `best_f1_thresh` (the job refuses at no-answer >= its
  threshold, so the file holds the next float up). Pass it with `--config refusal.yaml`, or the printed
  `--refusal-threshold` flag;
- `calibration.json`: the `calibration_factor` fitted on gold (`qa_core.evaluation.fit_calibration_factor`) with
  the expected calibration error of the best spans' scores before and after. The span logit sums it fits on are
  recovered from the scores: score = sigmoid(c * logit_sum), so logit_sum = logit(score) / c, with c the run's
  calibration factor (scores are clipped to [1e-12, 1 - 1e-12] first).

Exit status: 0 when written, 2 for an unusable run folder or gold file.
"""

import argparse
import json
import math
import sys
from typing import Any

import numpy as np

from jobs.bulk_qa.output import OutputFolder
from jobs.bulk_qa.results import compare_no_answer_sources, read_predictions
from jobs.bulk_qa.squad_input import load_squad_input
from jobs.storage import InputError
from qa_core.annotation import Prediction, best_spans
from qa_core.evaluation import evaluate, fit_calibration_factor, get_raw_scores
from qa_core.squad import SquadDataset

SCORE_CLIP = 1e-12


def refusal_threshold_for(best_thresh: float) -> float:
    """
    The job's `refusal_threshold` (refused when no-answer >= it) that refuses exactly the questions the official
    script counts as "no answer" at `best_thresh` (no-answer > it): the next float up, at most 1.0.
    """
    return min(1.0, float(np.nextafter(best_thresh, math.inf)))


def tune(
    dataset: SquadDataset,
    predictions: dict[str, Prediction],
    answers: dict[str, str],
    na_probs: dict[str, float],
    calibration_factor: float,
    no_answer: dict[str, dict[str, float | None]],
) -> dict[str, Any]:
    """
    The run's official metrics (with `no_answer_sources`, as the job writes them), the refusal threshold
    maximising F1 and the fitted calibration factor.

    :param predictions: By question id, with their spans (for the best span and its score).
    :param answers: The run's `predictions.json`; `na_probs` its `na_probs.json`.
    :param calibration_factor: The factor the run's scores were made with.
    :param no_answer: Every no-answer source's scores by question id.
    :raises ValueError: When the run misses questions of the gold (naming them).
    """
    metrics = evaluate(dataset, answers, na_probs)["metrics"]
    metrics["no_answer_sources"] = compare_no_answer_sources(dataset, predictions, no_answer)
    spans = best_spans(dataset, predictions)
    sweep = evaluate(dataset, spans, na_probs)["metrics"]
    gold = {example.id: [answer.text for answer in example.answers] for example in dataset.examples}
    exact, _ = get_raw_scores(gold, spans, dataset.version)
    scored = [e.id for e in dataset.examples if predictions[e.id].spans]
    calibration: dict[str, Any] = {"questions": len(scored), "current_factor": calibration_factor}
    if scored:
        scores = np.clip([predictions[qid].spans[0].score for qid in scored], SCORE_CLIP, 1 - SCORE_CLIP)
        logit_sums = np.log(scores / (1 - scores)) / calibration_factor  # (questions,)
        fit = fit_calibration_factor(logit_sums, [exact[qid] == 1.0 for qid in scored], calibration_factor)
        calibration.update(calibration_factor=fit.factor, ece_before=fit.ece_before, ece_after=fit.ece_after)
    refusal = {
        "refusal_threshold": refusal_threshold_for(sweep["best_f1_thresh"]),
        "best_f1": sweep["best_f1"],
        "best_f1_thresh": sweep["best_f1_thresh"],
        "best_exact": sweep["best_exact"],
        "best_exact_thresh": sweep["best_exact_thresh"],
    }
    return {"metrics": metrics, "refusal": refusal, "calibration": calibration}


def yaml_float(value: float) -> str:
    """`value` as a YAML float that reads back exactly (YAML 1.1 wants a dot: `5e-324` would read as a string)."""
    text = repr(float(value))
    mantissa, _, exponent = text.partition("e")
    return text if "." in mantissa or not exponent else f"{mantissa}.0e{exponent}"


def refusal_yaml(refusal: dict[str, Any], run: str, gold: str) -> str:
    """`refusal.yaml`: the tuned `refusal_threshold`, a bulk-qa `--config` file."""
    return (
        f"# python -m jobs.evaluate {run} --gold {gold}\n"
        f"# The refusal threshold that maximises F1 on the gold: best_f1 {refusal['best_f1']!r} when each question's\n"
        f"# best span is given unless its no-answer probability is > {refusal['best_f1_thresh']!r}.\n"
        "# Use: python -m jobs.bulk_qa --config refusal.yaml ... (or the flag --refusal-threshold).\n"
        f"refusal_threshold: {yaml_float(refusal['refusal_threshold'])}\n"
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m jobs.evaluate`."""
    parser = argparse.ArgumentParser(prog="python -m jobs.evaluate", description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("run", help="the output folder of a finished bulk-qa run")
    parser.add_argument(
        "--gold",
        required=True,
        help="SQuAD gold: official JSON, JSON Lines, HF Parquet, or a Label Studio export (JSON / JSON-MIN)",
    )
    parser.add_argument("--allow-misaligned-gold", action="store_true", help="leave misaligned gold answers out")
    parser.add_argument("--to", help="where to write the files (default: the run's folder)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: scores the run against the gold and writes its evaluation; returns the status."""
    args = build_parser().parse_args(argv)
    try:
        summary = evaluate_run(args.run, args.gold, args.allow_misaligned_gold, args.to or args.run)
    except (InputError, ValueError) as error:
        print(f"jobs.evaluate: error: {error}", file=sys.stderr)
        return 2
    metrics, refusal, calibration = summary["metrics"], summary["refusal"], summary["calibration"]
    print(f"evaluation  exact {metrics['exact']:.2f}, f1 {metrics['f1']:.2f} over {metrics['total']} questions")
    print(
        f"refusal     --refusal-threshold {yaml_float(refusal['refusal_threshold'])} (best_f1 {refusal['best_f1']:.2f})"
    )
    if "calibration_factor" in calibration:
        print(
            f"calibration --calibration-factor {calibration['calibration_factor']!r} "
            f"(ECE {calibration['ece_before']:.4f} -> {calibration['ece_after']:.4f})"
        )
    return 0


def evaluate_run(run: str, gold: str, allow_misaligned_gold: bool, to: str) -> dict[str, Any]:
    """
    Scores and tunes a finished run (see the module's documentation) and writes the files into `to`.

    :raises InputError: For a run folder without a manifest or result files, or unusable gold.
    :raises ValueError: When the run misses questions of the gold.
    """
    folder = OutputFolder(run)
    manifest = folder.read_json("manifest.json")
    answers, na_probs = folder.read_json("predictions.json"), folder.read_json("na_probs.json")
    if manifest is None or answers is None or na_probs is None:
        raise InputError(
            f"{folder.shown}: not a finished bulk-qa run (no manifest.json, predictions.json or na_probs.json)."
        )
    squad = load_squad_input(gold, allow_misaligned_gold)
    if squad is None:
        raise InputError(f"{gold}: not a SQuAD file (.json, .jsonl, or Parquet in Hugging Face's layout).")
    if not squad.dataset.has_gold:
        raise InputError(f"{gold}: the dataset has no gold answers.")
    source = manifest["config"]["no_answer_source"]
    predictions, _, no_answer = read_predictions(folder, sorted(folder.committed_shards()), source)
    missing = [example.id for example in squad.dataset.examples if example.id not in predictions]
    if missing:
        raise InputError(f"{gold}: {len(missing)} gold question(s) are not in the run: {missing[:20]}.")
    summary = tune(squad.dataset, predictions, answers, na_probs, manifest["config"]["calibration_factor"], no_answer)
    target = OutputFolder(to)
    # The run's retrieval quality (against relevant_document_ids, or with --pool-contexts the questions' own
    # contexts) is the run's, not the gold file's: kept as the run wrote it.
    retrieval = {"retrieval": manifest["retrieval_quality"]} if manifest.get("retrieval_quality") else {}
    target.write_file(json.dumps({**summary["metrics"], **retrieval}, indent=2).encode("utf-8"), "evaluation.json")
    target.write_file(refusal_yaml(summary["refusal"], run, gold).encode("utf-8"), "refusal.yaml")
    target.write_file(json.dumps(summary["calibration"], indent=2).encode("utf-8"), "calibration.json")
    return summary


if __name__ == "__main__":
    sys.exit(main())
