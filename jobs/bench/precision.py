"""
The precision benchmark (prints only): a QA model read in fp32, bf16 and dynamic int8 by the in-process reader
(`ExtractiveReader.run_batch`) on labelled SQuAD questions, side by side: the share of questions whose best span
is the fp32 one, the official EM / F1 with each no-answer source refusing by its default rule (haystack:
`prod(1 - score)` above the best span's score; model: the null span beating the best span), what each loses against
fp32, and each source's `best_f1` and `NoAns_f1` at its best threshold.

The questions: by default the held-out cloze questions of the `minilm-squad` recipe (paragraphs it never trained
on, `qa_core.training.minilm_squad`), and with `--squad FILE` any SQuAD file (e.g. data/squad/transformers_sample.json).

    .venv/bin/python -m jobs.bench.precision --model models/minilm-squad
"""

import argparse
from dataclasses import dataclass, replace
from typing import Any

from qa_core.document import Document
from qa_core.evaluation import evaluate
from qa_core.reader import ExtractiveReader
from qa_core.refusal import RefusalSettings
from qa_core.selection import model_no_answer_score
from qa_core.squad import SquadDataset, SquadExample, read_squad
from qa_core.training.minilm_squad import CLOZE, RECIPE, TEXT_FILE

# Each precision: what the reader is built with.
PRECISIONS = {
    "fp32": {},
    "bf16": {"precision": "bf16"},
    "int8": {"quantization": "int8"},
}


@dataclass
class Read:
    """One precision's reading of the questions, by question id."""

    best: dict[str, tuple[str, int, float] | None]  # the best span: text, document offset, score
    haystack: dict[str, float]  # Haystack's no-answer score
    model: dict[str, float]  # the model's own (null span against best span)


def read_questions(reader: ExtractiveReader, examples: list[SquadExample]) -> Read:
    """The reader's best span and both no-answer scores of every question (its context as its one document)."""
    answers = reader.run_batch([e.question for e in examples], [[Document(content=e.context)] for e in examples])
    best, haystack = {}, {}
    for example, found in zip(examples, answers["answers"], strict=True):
        span = next((a for a in found if a.data is not None), None)
        best[example.id] = None if span is None else (span.data, span.document_offset.start, span.score)
        haystack[example.id] = next(a.score for a in found if a.data is None)
    sequences = reader.tokenize([e.question for e in examples], [e.context for e in examples])
    nulls: list[list[float]] = [[] for _ in examples]
    bests: list[list[float]] = [[] for _ in examples]
    for sequence, spans in zip(sequences, reader.predict(sequences), strict=True):
        nulls[sequence.pair_index].append(spans.null_logit)
        bests[sequence.pair_index].append(spans.best_logit)
    model = {e.id: model_no_answer_score(nulls[i], bests[i]) for i, e in enumerate(examples)}
    return Read(best, haystack, model)


def scores(dataset: SquadDataset, read: Read) -> dict[str, Any]:
    """The official metrics with each source refusing by its default rule, and each source's best thresholds."""
    spans = {qid: "" if span is None else span[0] for qid, span in read.best.items()}
    result: dict[str, Any] = {}
    for source, no_answer in (("haystack", read.haystack), ("model", read.model)):
        refusal = RefusalSettings(no_answer_source=source)  # the job's default rule for the source
        refused = {qid: read.best[qid] is None or refusal.refused(read.best[qid][2], no_answer[qid]) for qid in spans}
        given = {qid: "" if refused[qid] else text for qid, text in spans.items()}
        metrics = evaluate(dataset, given, no_answer)["metrics"]
        sweep = evaluate(dataset, spans, no_answer)["metrics"]
        at_best = evaluate(dataset, spans, no_answer, na_prob_thresh=sweep["best_f1_thresh"])["metrics"]
        result[source] = {
            "exact": metrics["exact"],
            "f1": metrics["f1"],
            "NoAns_f1": metrics.get("NoAns_f1"),
            "best_f1": sweep["best_f1"],
            "NoAns_f1_at_best": at_best.get("NoAns_f1"),
        }
    return result


def heldout_cloze(seed: int) -> SquadDataset:
    """The held-out cloze questions of the minilm-squad recipe with this seed."""
    from qa_core.training.cloze import generate_cloze, read_paragraphs

    split = generate_cloze(read_paragraphs(TEXT_FILE, CLOZE), replace(CLOZE, seed=seed))
    return SquadDataset(examples=split.heldout, version="2.0", has_gold=True)


def measure(
    model: str, dataset: SquadDataset, precisions: list[str], reader_args: dict[str, Any]
) -> tuple[list[dict], dict[str, Read]]:
    """One row per precision (agreement with the first, fp32, and both sources' scores), and what each read."""
    rows, reads = [], {}
    for name in precisions:
        reader = ExtractiveReader(model=model, device="cpu", **reader_args, **PRECISIONS[name])
        reader.warm_up()
        read = reads[name] = read_questions(reader, dataset.examples)
        reference = reads[precisions[0]]
        same = sum(read.best[qid] is not None and reference.best[qid] is not None
                   and read.best[qid][:2] == reference.best[qid][:2] for qid in read.best)  # fmt: skip
        rows.append({"precision": name, "best_unchanged": same / len(read.best), **scores(dataset, read)})
    return rows, reads


def table(rows: list[dict]) -> str:
    """The rows as a Markdown table, losses against the first row."""
    lines = [
        "| precision | best span = fp32's | EM / F1 (haystack refusal) | EM / F1 (model refusal) | F1 lost "
        "(haystack / model) | NoAns F1 (haystack / model) | best F1 (haystack / model) |",
        "|---|---|---|---|---|---|---|",
    ]
    first = rows[0]
    for row in rows:
        h, m = row["haystack"], row["model"]
        lines.append(
            f"| {row['precision']} | {100 * row['best_unchanged']:.1f}% | {h['exact']:.1f} / {h['f1']:.1f} | "
            f"{m['exact']:.1f} / {m['f1']:.1f} | {first['haystack']['f1'] - h['f1']:.2f} / "
            f"{first['model']['f1'] - m['f1']:.2f} | {_number(h['NoAns_f1'])} / {_number(m['NoAns_f1'])} | "
            f"{h['best_f1']:.1f} / {m['best_f1']:.1f} |"
        )
    return "\n".join(lines)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    """Prints each precision's answers and scores against fp32's; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m jobs.bench.precision", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a QA model folder (e.g. models/minilm-squad)")
    parser.add_argument("--squad", help="a labelled SQuAD file (default: the held-out cloze questions)")
    parser.add_argument("--seed", type=int, default=0, help="the cloze seed the model was built with")
    parser.add_argument("--precisions", default=",".join(PRECISIONS), help="comma-separated, fp32 first")
    parser.add_argument("--limit", type=int, help="only the first N questions")
    # The minilm-squad recipe's windows and longest answer (its held-out figures are measured with them).
    parser.add_argument("--max-seq-length", type=int, default=RECIPE.max_seq_length)
    parser.add_argument("--stride", type=int, default=RECIPE.stride)
    parser.add_argument("--max-answer-length", type=int, default=RECIPE.eval_max_answer_length)
    args = parser.parse_args(argv)
    dataset = read_squad(args.squad) if args.squad else heldout_cloze(args.seed)
    if args.limit:
        dataset = replace(dataset, examples=dataset.examples[: args.limit])
    reader_args = {"max_seq_length": args.max_seq_length, "stride": args.stride,
                   "max_answer_length": args.max_answer_length}  # fmt: skip
    rows, _ = measure(args.model, dataset, args.precisions.split(","), reader_args)
    impossible = sum(example.is_impossible for example in dataset.examples)
    print(f"{len(dataset.examples)} questions ({impossible} unanswerable), model {args.model}")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
