"""
The bulk job's results benchmark (prints only; it lives with the job because it times the job's own end-of-run
step, while the benchmarks of `jobs.bench` use the job only through its command): on a synthetic SQuAD v2.0 run of N questions (contexts made from the
repository's local text, two thirds answerable, best spans exact, shifted or elsewhere, some refused), committed as
the job commits its shards, the time of the job's end-of-run results step (`jobs.bulk_qa.results.write_results`:
the prediction files, the evaluation and the annotated and Label Studio files, read from the shards), of
`qa_core.evaluation.evaluate` alone, and of the official SQuAD v2.0 script's implementation on the same
predictions side by side (vendored in tests/qa_core/reference: run this from the project root), with the ratio;
then `report.html` where matplotlib is installed. It checks that the three give the same metrics.

    .venv/bin/python -m jobs.bulk_qa.results_bench --questions 100000
"""

import argparse
import functools
import json
import tempfile
import time
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa

from jobs.bench.retrieval import synthetic_texts
from jobs.bulk_qa.config import WorkSettings
from jobs.bulk_qa.output import OutputFolder
from jobs.bulk_qa.results import write_results
from jobs.bulk_qa.squad_input import QUESTIONS_TABLE_SCHEMA, SquadInput
from jobs.bulk_qa.workers.tables import ANSWERS_SCHEMA, QUESTION_STATUSES, QUESTIONS_SCHEMA
from qa_core.evaluation import evaluate
from qa_core.squad import GoldAnswer, SquadDataset, SquadExample, squad_json

WORDS_PER_CONTEXT = 40
SHARD_SIZE = 1000


def synthetic_run(n: int, seed: int) -> tuple[SquadDataset, list[dict[str, list]]]:
    """
    `n` synthetic SQuAD v2.0 questions with gold, and the job's questions and answers tables for them, one pair of
    column dicts per shard of `SHARD_SIZE` questions (columns the job would also fill, such as `query`, partly null).
    """
    rng = np.random.default_rng(seed)
    contexts = synthetic_texts(n, WORDS_PER_CONTEXT, seed)
    answerable = rng.random(n) < 2 / 3
    kind = rng.random(n)  # the best span: < 0.4 the gold span, < 0.7 shifted by a word, else anywhere
    lengths = rng.integers(1, 5, n)
    starts = rng.integers(1, WORDS_PER_CONTEXT - 5, n)
    na_probs, scores = rng.random(n), rng.uniform(0.3, 1.0, n)
    examples, shards = [], []
    for i, context in enumerate(contexts):
        words = context.split(" ")
        offsets = np.cumsum([0] + [len(word) + 1 for word in words])  # (words + 1,) character offset of each word
        span = functools.partial(_span, words, offsets)
        qid = f"q{i:07d}"
        gold = [GoldAnswer(*reversed(span(starts[i], lengths[i])))] if answerable[i] else []
        if answerable[i] and kind[i] < 0.2:
            gold.append(GoldAnswer(*reversed(span(starts[i] - 1, lengths[i] + 1))))  # a second, longer gold span
        examples.append(SquadExample(qid, None, f"question {i}?", context, gold, is_impossible=not gold))
        if answerable[i] and kind[i] < 0.4:
            first = starts[i]
        elif answerable[i] and kind[i] < 0.7:
            first = starts[i] + 1
        else:
            first = int(rng.integers(0, WORDS_PER_CONTEXT - 4))
        start, text = span(first, lengths[i])
        refused = na_probs[i] > 0.5
        if i % SHARD_SIZE == 0:
            shards.append({"questions": {}, "answers": {}})
        _append(shards[-1]["questions"], question_id=qid, status="refused" if refused else "answered",
                best_answer=None if refused else text, best_score=None if refused else scores[i],
                no_answer_score=na_probs[i], model_no_answer_score=na_probs[i])  # fmt: skip
        _append(shards[-1]["answers"], question_id=qid, rank=1, answer=text, score=scores[i], is_no_answer=False,
                document_id=f"d{i}", document_start=start, document_end=start + len(text))  # fmt: skip
        _append(shards[-1]["answers"], question_id=qid, rank=2, answer=None, score=na_probs[i], is_no_answer=True,
                document_id=None, document_start=None, document_end=None)  # fmt: skip
    return SquadDataset(examples=examples, version="2.0", has_gold=True), shards


def _span(words: list[str], offsets: np.ndarray, first: int, length: int) -> tuple[int, str]:
    return int(offsets[first]), " ".join(words[first : first + length])


def _append(columns: dict[str, list], **row: Any) -> None:
    for name, value in row.items():
        columns.setdefault(name, []).append(value)


def _table(columns: dict[str, list], schema: pa.Schema) -> pa.Table:
    rows = len(next(iter(columns.values())))
    return pa.table({name: columns.get(name, [None] * rows) for name in schema.names}, schema=schema)


def timed(function: Any, *args: Any) -> tuple[Any, float]:
    """`function(*args)` and the seconds it took."""
    start = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - start


def measure(n: int, folder: str, seed: int = 0) -> dict[str, Any]:
    """
    Commits a synthetic run of `n` questions into `folder` and times its results, our evaluation and the
    official script's (see the module's documentation).

    :returns: The seconds of each, the ratio official / ours, and the three metric dicts.
    """
    from tests.qa_core.reference.squad_v2_official import official_eval

    dataset, shards = synthetic_run(n, seed)
    output = OutputFolder(folder)
    for shard, tables in enumerate(shards):
        output.commit_shard(
            shard,
            {
                "questions": _table(tables["questions"], QUESTIONS_SCHEMA),
                "answers": _table(tables["answers"], ANSWERS_SCHEMA),
            },
            {"questions": len(tables["questions"]["question_id"])},
        )
    table = pa.table({"id": [e.id for e in dataset.examples]}).append_column("query", pa.nulls(n, pa.string()))
    squad = SquadInput(dataset, table.append_column("context", pa.nulls(n, pa.string())).cast(QUESTIONS_TABLE_SCHEMA))
    results, results_s = timed(write_results, output, list(range(len(shards))), squad, WorkSettings(), "haystack")
    answers, na_probs = output.read_json("predictions.json"), output.read_json("na_probs.json")
    ours, ours_s = timed(evaluate, dataset, answers, na_probs)
    raw = squad_json(dataset)["data"]  # the official script's input: the file's "data" list
    (official, _, _), official_s = timed(official_eval, raw, answers, na_probs)
    written = output.read_json("evaluation.json")
    measured = {
        "questions": n,
        "answerable": sum(1 for example in dataset.examples if example.answers),
        "statuses": dict(Counter(status for tables in shards for status in tables["questions"]["status"])),
        "write_results_s": results_s,
        "evaluate_s": ours_s,
        "official_s": official_s,
        "official_over_ours": official_s / ours_s,
        "metrics": {
            "ours": ours["metrics"],
            "evaluation_json": {key: written[key] for key in official},  # its official keys (no no_answer_sources)
            "official": dict(official),
        },
    }
    measured["report_s"] = _report_seconds(output, measured, results["evaluation"], squad)
    return measured


def _report_seconds(
    output: OutputFolder, measured: dict[str, Any], metrics: dict[str, Any], squad: SquadInput
) -> float | None:
    from jobs.bulk_qa.html_report import plotting, write_report

    if plotting() is None:
        return None
    manifest = {
        "config": {"questions": "synthetic", "model": "synthetic", "refusal_threshold": 0.5},
        "inputs": {"questions": measured["questions"]},
        "outputs": {"statuses": {status: measured["statuses"].get(status, 0) for status in QUESTION_STATUSES}},
        "evaluation": metrics,
        "gold": squad.gold_summary(),
    }
    return timed(write_report, output, manifest)[1]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Prints the measurements and returns them."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-evaluation-") as folder:
        measured = measure(args.questions, folder, args.seed)
    metrics = measured["metrics"]
    same = metrics["ours"] == metrics["official"] == metrics["evaluation_json"]
    same_order = list(metrics["ours"]) == list(metrics["official"])
    print(
        f"{measured['questions']:,} synthetic SQuAD v2.0 questions ({measured['answerable']:,} answerable), "
        f"{len(range(0, measured['questions'], SHARD_SIZE))} shards\n"
        f"  write_results (prediction, evaluation, annotated and Label Studio files from the shards): "
        f"{measured['write_results_s']:.2f} s\n"
        f"  qa_core.evaluation.evaluate: {measured['evaluate_s']:.2f} s\n"
        f"  the official evaluate-v2.0 (vendored): {measured['official_s']:.2f} s "
        f"({measured['official_over_ours']:.2f}x ours)\n"
        + (f"  report.html: {measured['report_s']:.2f} s\n" if measured["report_s"] is not None else "")
        + f"  metrics equal (ours, evaluation.json, official): {same}, same key order: {same_order}\n"
        f"  {json.dumps({key: round(value, 4) for key, value in metrics['ours'].items()})}"
    )
    return measured


if __name__ == "__main__":
    main()
