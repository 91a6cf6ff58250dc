"""
`--every-document` at scale (prints only), side by side in one run:

1. with a tiny model (the job's own overheads), `--questions` questions of each of `--documents` synthetic
   documents: the `--every-document` run, then the same pairs as a questions table of one row per pair naming its
   document (`document_ids`): wall time, pairs/s and the machine's peak memory above its level before each run;
   then a run killed once about half its shards are committed and resumed, its by_document table compared with
   the clean run's;
2. with MiniLM (`--minilm`), `--questions` questions of each of `--minilm-documents` documents: the job's pairs/s
   in-process against the reader's forward pass alone over the same sequences in its best batch shape
   (`jobs.bench.throughput.LimitRow`, the fastest of `LIMIT_SHAPES` on a sample of the pairs), timed before and
   after the job.

    .venv/bin/python -m jobs.bench.every_document --documents 100000 --questions 10 --minilm-documents 2000
"""

import argparse
import json
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.bench.data import Workload, run_measured
from jobs.bench.retrieval import synthetic_texts
from jobs.bench.throughput import LIMIT_SHAPES, LimitRow, Settings
from qa_core.document import Document
from qa_core.tokenization import TokenizationSettings

BY_DOCUMENT = "by_document"  # the job's table of one row per document, in its output folder
WORDS_PER_DOCUMENT = 60
WORDS_PER_QUERY = 6
SHAPE_SAMPLE = 2_000  # pairs (all questions of the first documents) the limit's batch shapes are compared on


def pair_id(question_id: str, document_id: str) -> str:
    """The id the job gives a (question, document) pair (`jobs.bulk_qa.every_document.pair_id`)."""
    return f"{question_id}/{document_id}"


def write_inputs(folder: Path, documents: int, questions: int) -> dict[str, Path]:
    """A documents table (`d0`, `d1`, ...), the questions (`q0`, ...) and the pairs as questions naming them."""
    folder.mkdir(parents=True, exist_ok=True)
    texts = synthetic_texts(documents, WORDS_PER_DOCUMENT, seed=0)
    document_ids = [f"d{index}" for index in range(documents)]
    queries = synthetic_texts(questions, WORDS_PER_QUERY, seed=1)
    question_ids = [f"q{index}" for index in range(questions)]
    paths = {name: folder / f"{name}.parquet" for name in ("documents", "questions", "named")}
    pq.write_table(pa.table({"id": document_ids, "content": texts}), paths["documents"])
    pq.write_table(pa.table({"id": question_ids, "query": queries}), paths["questions"])
    pairs = [(pair_id(q, d), query, d) for d in document_ids for q, query in zip(question_ids, queries, strict=True)]
    named = {"id": [p[0] for p in pairs], "query": [p[1] for p in pairs], "document_ids": [[p[2]] for p in pairs]}
    pq.write_table(pa.table(named), paths["named"])
    return paths


def job(paths: dict[str, Path], questions: str, model: Path, output: Path, args: argparse.Namespace) -> list[str]:
    """The bulk job over `paths[questions]` (`--every-document` for the questions table)."""
    every = ["--every-document"] if questions == "questions" else []
    return [
        sys.executable, "-m", "jobs.bulk_qa", "--questions", str(paths[questions]),
        "--documents", str(paths["documents"]), "--model", str(model), "--output", str(output), "--quiet",
        "--engine", args.engine, "--shard-size", str(args.shard_size), "--shards-per-wave", str(args.shards_per_wave),
        *every,
    ]  # fmt: skip


def describe(label: str, wall_s: float, peak_mib: float, manifest: dict) -> str:
    """A run's line from its manifest."""
    pairs, pipeline_s = manifest["outputs"]["questions"], manifest["timings"]["pipeline_s"]
    return (
        f"{label}: {pairs:,} pairs, wall {wall_s:.1f} s (pipeline {pipeline_s:.1f} s, "
        f"{manifest['cluster']['engine']}), {pairs / wall_s:,.1f} pairs/s, peak {peak_mib:,.0f} MiB above idle"
    )


def killed_and_resumed(command: list[str], output: Path, shards: int) -> float:
    """Runs `command`, kills it once half its `shards` are committed, and runs it again: the resume's seconds."""
    process = subprocess.Popen(command)
    while process.poll() is None and len(list((output / "_shards").glob("*.json"))) < max(1, shards // 2):
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    committed = len(list((output / "_shards").glob("*.json")))
    resumed = run_measured(command)
    print(f"killed with {committed}/{shards} shards committed; the same command resumed in {resumed.wall_s:.1f} s")
    return resumed.wall_s


def same_table(first: Path, second: Path) -> bool:
    """Whether two by_document tables hold the same rows (floats within 1e-5: batches pad differently)."""
    tables = [pq.read_table(folder / BY_DOCUMENT).sort_by("document_id") for folder in (first, second)]
    if tables[0].schema != tables[1].schema or tables[0].num_rows != tables[1].num_rows:
        return False
    for name in tables[0].column_names:
        for a, b in zip(tables[0][name].to_pylist(), tables[1][name].to_pylist(), strict=True):
            if isinstance(a, float) and isinstance(b, float) and abs(a - b) <= 1e-5:
                continue
            if a != b:
                return False
    return True


def overheads(work: Path, args: argparse.Namespace) -> None:
    """Part 1: the tiny model's runs (see the module's documentation)."""
    model = work / "tiny-bert"
    if not model.exists():
        subprocess.run([sys.executable, "-m", "qa_core.local_models", "tiny-bert", str(model)], check=True)
    paths = write_inputs(work / "tiny", args.documents, args.questions)
    print(f"tiny model: {args.questions} questions x {args.documents:,} documents of {WORDS_PER_DOCUMENT} words")
    walls = {}
    for label, questions in (("every-document", "questions"), ("document_ids", "named")):
        output = work / f"out-{label}"
        measured = run_measured(job(paths, questions, model, output, args))
        walls[label] = measured.wall_s
        print(describe(label, measured.wall_s, measured.peak_mib, json.loads((output / "manifest.json").read_text())))
    ratio = walls["every-document"] / walls["document_ids"]
    print(f"every-document / document_ids wall time: {ratio:.2f} (target <= 1.5)")
    clean = work / "out-every-document"
    shards = json.loads((clean / "manifest.json").read_text())["shards"]["total"]
    resumed = work / "out-resumed"
    killed_and_resumed(job(paths, "questions", model, resumed, args), resumed, shards)
    print(f"resumed by_document equals the clean run's: {same_table(resumed, clean)}")


def limit_workload(paths: dict[str, Path], documents: int | None = None) -> Workload:
    """Each question of the first `documents` documents (None: all), as the reader's `run_batch` reads the pairs."""
    questions = pq.read_table(paths["questions"]).to_pylist()
    pairs = [(question, document) for document in pq.read_table(paths["documents"]).to_pylist()[:documents]
             for question in questions]  # fmt: skip
    return Workload(
        [pair_id(q["id"], d["id"]) for q, d in pairs],
        [q["query"] for q, _ in pairs],
        [[Document(content=d["content"], id=d["id"])] for _, d in pairs],
    )


def limit_rows(model: Path, workload: Workload, shapes: Sequence[tuple[str, int]]) -> list[tuple[LimitRow, Any]]:
    """The forward pass alone over the workload's sequences in each shape, each with its prepared batches."""
    settings = Settings(tokenization=TokenizationSettings())
    rows = []
    for shape in shapes:
        row = LimitRow(model, settings, shape)
        prepared, _ = row.prepare(workload)
        row.run(prepared[:2])  # warm-up
        rows.append((row, prepared))
    return rows


def timed(row: LimitRow, prepared: Any) -> tuple[float, float]:
    """One forward pass over the prepared batches: (wall seconds, CPU seconds of this process)."""
    wall, cpu = time.perf_counter(), time.process_time()
    row.run(prepared)
    return time.perf_counter() - wall, time.process_time() - cpu


def reader_speed(work: Path, args: argparse.Namespace) -> None:
    """
    Part 2: MiniLM's pairs/s in the job against the reader's forward-pass limit: the shapes compared on a sample of
    `SHAPE_SAMPLE` pairs, the fastest timed on all the pairs before the job and after it; the job is compared with
    the faster of the two (the limit at the machine's least loaded moment), by wall time (its pipeline) and by CPU
    time (the whole command's).
    """
    paths = write_inputs(work / "minilm", args.minilm_documents, args.questions)
    pairs = args.minilm_documents * args.questions
    sample = limit_rows(args.minilm, limit_workload(paths, -(-SHAPE_SAMPLE // args.questions)), LIMIT_SHAPES["cpu"])
    fastest = min(sample, key=lambda item: timed(*item)[0])[0].shape
    del sample  # its models and batches
    row, prepared = limit_rows(args.minilm, limit_workload(paths), [fastest])[0]
    before = timed(row, prepared)
    output = work / "out-minilm"
    command = job(paths, "questions", args.minilm, output, args)
    command[command.index("--engine") + 1] = "in-process"
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    run_measured(command)
    finished = resource.getrusage(resource.RUSAGE_CHILDREN)
    job_cpu = finished.ru_utime + finished.ru_stime - children.ru_utime - children.ru_stime
    job_wall = json.loads((output / "manifest.json").read_text())["timings"]["pipeline_s"]
    after = timed(row, prepared)
    limit_wall, limit_cpu = min(before[0], after[0]), min(before[1], after[1])
    print(
        f"MiniLM, {args.questions} questions x {args.minilm_documents:,} documents, in-process: the job "
        f"{pairs / job_wall:.2f} pairs/s (pipeline), the forward pass alone {pairs / before[0]:.2f} "
        f"before and {pairs / after[0]:.2f} after ({row.name}, the fastest shape): {limit_wall / job_wall:.2f} of "
        f"the faster (target >= 0.9); by CPU time {pairs / job_cpu:.2f} against {pairs / limit_cpu:.2f} pairs/s: "
        f"{limit_cpu / job_cpu:.2f} (the job's whole command, start-up included)"
    )


def main() -> None:
    """Prints the measurements."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=100_000, help="documents of the tiny model's runs")
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--minilm-documents", type=int, default=2_000)
    parser.add_argument("--minilm", type=Path, default=Path("models/minilm-qa"), help="MiniLM QA model folder")
    parser.add_argument("--shard-size", type=int, default=10_000, help="pairs per output shard")
    parser.add_argument(
        "--shards-per-wave", type=int, default=10, help="the job's; the resume needs a run of several waves to kill"
    )
    parser.add_argument("--engine", default="auto", help="the tiny model's runs' engine")
    parser.add_argument("--skip", default="", help="comma-separated parts to leave out: tiny, minilm")
    parser.add_argument("--work", type=Path, help="folder for the inputs and outputs (default: temporary)")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    with tempfile.TemporaryDirectory() as temporary:
        work = args.work or Path(temporary)
        if "tiny" not in skip:
            overheads(work, args)
        if "minilm" not in skip:
            reader_speed(work, args)


if __name__ == "__main__":
    main()
