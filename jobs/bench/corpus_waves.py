"""
The corpus side of a retrieval run at scale (prints only): the bulk job on questions without `document_ids`
against synthetic passages too large to broadcast (so the documents are split into parts once per run), at one
wave and at `--waves` waves, side by side. For each: the index build (`python -m jobs.index`, once, shared by both
runs through `--index`), splitting the documents into parts, the waves (retrieval, reading and aggregation stream
together in them), the cost per question, and the machine's peak memory in use above its level before the run
(on an otherwise idle machine); and the BM25 search of the same queries in one process, for the retrieval's share.

    .venv/bin/python -m jobs.bench.corpus_waves --passages 1000000 --questions 20000
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.bench.data import Measured, run_measured
from jobs.bench.retrieval import synthetic_texts
from qa_core.retrieval.index import BM25Index

ROWS_PER_GROUP = 50_000  # Parquet row groups of the synthetic documents table


def write_inputs(folder: Path, passages: int, words: int, questions: int) -> tuple[Path, Path, list[str]]:
    """The documents table (`p0`, `p1`, ...) and a questions table without document_ids; returns the queries."""
    documents, questions_path = folder / "documents.parquet", folder / "questions.parquet"
    texts = synthetic_texts(passages, words, seed=0)
    table = pa.table({"id": [f"p{i}" for i in range(passages)], "content": texts})
    pq.write_table(table, documents, row_group_size=ROWS_PER_GROUP)
    queries = synthetic_texts(questions, 8, seed=1)  # 8-word queries, common words included
    pq.write_table(pa.table({"id": [f"q{i}" for i in range(questions)], "query": queries}), questions_path)
    return documents, questions_path, queries


def job_command(args: argparse.Namespace, inputs: tuple[Path, Path], index: Path, output: Path, waves: int) -> list:
    """The bulk job over all the questions in `waves` waves of equal shards."""
    documents, questions = inputs
    shard_size = -(-args.questions // args.waves)  # `--waves` shards: one wave each, or all in one
    return [
        sys.executable, "-m", "jobs.bulk_qa", "--questions", str(questions), "--documents", str(documents),
        "--index", str(index), "--model", str(args.model), "--output", str(output), "--quiet",
        "--shard-size", str(shard_size), "--shards-per-wave", str(args.waves if waves == 1 else 1),
    ]  # fmt: skip


def describe_run(waves: int, measured: Measured, manifest: dict) -> str:
    """One run's line: its times from its manifest (a broadcast join has no parts, an in-process run no Ray)."""
    timings, throughput = manifest["timings"], manifest["throughput"]
    ray_start_s, parts_s = timings["ray_start_s"], timings["document_parts_s"]
    ray = "in-process, no Ray" if ray_start_s is None else f"Ray start {ray_start_s:.1f} s"
    parts = "no parts" if parts_s is None else f"documents into {manifest['document_parts']} parts {parts_s:.1f} s"
    return (
        f"{waves} wave(s): total {measured.wall_s:.1f} s ({ray}), {parts}, "
        f"waves {timings['pipeline_s'] - (parts_s or 0):.1f} s for {throughput['questions']:,} questions and "
        f"{throughput['sequences']:,} sequences, {timings['pipeline_s'] / throughput['questions'] * 1e3:.1f} ms "
        f"per question, peak {measured.peak_mib:,.0f} MiB ({manifest['documents_join']} join)"
    )


def main() -> None:
    """Prints the measurements."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--words", type=int, default=100, help="words per passage")
    parser.add_argument("--questions", type=int, default=20_000)
    parser.add_argument("--waves", type=int, default=4, help="the run compared with one wave")
    parser.add_argument("--model", type=Path, help="QA model folder (default: a tiny BERT built here)")
    parser.add_argument("--work", type=Path, help="folder for the inputs, index and outputs (default: temporary)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as temporary:
        work = args.work or Path(temporary)
        work.mkdir(parents=True, exist_ok=True)
        if args.model is None:
            args.model = work / "tiny-bert"
            subprocess.run([sys.executable, "-m", "qa_core.local_models", "tiny-bert", str(args.model)], check=True)
        documents, questions, queries = write_inputs(work, args.passages, args.words, args.questions)
        print(
            f"{args.passages:,} passages of {args.words} words ({documents.stat().st_size / 2**20:,.0f} MiB "
            f"Parquet), {args.questions:,} questions without document_ids"
        )
        index = work / "index"
        built = run_measured(
            [sys.executable, "-m", "jobs.index", "--documents", str(documents), "--output", str(index)]
        )
        print(f"index: built in {built.wall_s:.1f} s, peak {built.peak_mib:,.0f} MiB")
        start = time.perf_counter()
        BM25Index.load(index).search(queries, 10)
        search_s = time.perf_counter() - start
        print(f"retrieval alone (one process, top 10): {search_s:.1f} s, {len(queries) / search_s:,.0f} queries/s")
        per_question = {}
        for waves in (1, args.waves):
            output = work / f"out-{waves}-waves"
            measured = run_measured(job_command(args, (documents, questions), index, output, waves))
            manifest = json.loads((output / "manifest.json").read_text())
            per_question[waves] = manifest["timings"]["pipeline_s"] / manifest["throughput"]["questions"]
            print(describe_run(waves, measured, manifest))
        ratio = per_question[args.waves] / per_question[1]
        print(f"cost per question, {args.waves} waves / 1 wave: {ratio:.3f} (target: within 10%)")


if __name__ == "__main__":
    main()
