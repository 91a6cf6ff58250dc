"""
The bulk QA job: `python -m jobs.bulk_qa --questions Q --documents D --output OUT [options]` (or `bulk-qa`).

Reads the questions and documents with Ray Data, joins each question with its documents, tokenizes in CPU tasks,
reads the sequences in a pool of reader actors (one per GPU, or CPU actors), then aggregates each shard of
questions (exact, since scores are global) and commits its answer tables. Exit status: 0 when every question is
accounted for, 2 for unusable input or configuration, 1 for any other failure.
"""

import math
import sys
import time
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from jobs.aggregate import AggregationSettings, aggregate_shard
from jobs.config import InputError, JobConfig, build_parser, load_config, redact
from jobs.inputs import (
    DOCUMENTS,
    QUESTIONS,
    REPLIES,
    TableSpec,
    check_model,
    check_questions_schema,
    resolve_path,
    table_schema,
)
from jobs.output import OutputFolder
from jobs.rows import shard_of
from jobs.stages import ReadSequences, document_columns, explode_questions, replies_rows, tokenize
from qa_core.schemas import QUESTION_STATUSES

# Fields that change how the job runs, not what it writes: a resumed run may change them.
EXECUTION_FIELDS = (
    "output",
    "overwrite",
    "address",
    "num_actors",
    "gpus_per_actor",
    "cpus_per_actor",
    "sequences_per_actor_batch",
    "shards_per_wave",
)

# (question, document) pairs one tokenize call reads: a block holds a wave's pairs (the join's output), and whole
# blocks at once held every sequence of the wave in one worker.
PAIRS_PER_TOKENIZE_BATCH = 512

__all__ = ["build_parser", "main", "run"]


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    try:
        config = load_config(argv)
        return run(config)
    except InputError as error:
        print(f"bulk-qa: error: {error}", file=sys.stderr)
        return 2


def _input_fingerprint(path: str) -> list[list[Any]]:
    """Name, size and modification time of every file of an input, to recognise a changed input on resume."""
    filesystem, inner = resolve_path(path)
    info = filesystem.get_file_info(inner)
    infos = [info] if info.type == pafs.FileType.File else filesystem.get_file_info(pafs.FileSelector(inner, True))
    return sorted([i.path, i.size, i.mtime_ns] for i in infos if i.type == pafs.FileType.File)


def _read(path: str, columns: list[str] | None = None):
    import ray.data

    filesystem, inner = resolve_path(path)
    dataset = ray.data.read_parquet(inner, filesystem=filesystem)
    return dataset.select_columns(columns) if columns else dataset


# What the id check returns per batch of (table, id, count) groups: rows with a `shard` count the rows of `table`
# that hash to that shard; rows without one are problem ids (and, without a `table`, how many were left out).
_ID_SUMMARY_SCHEMA = pa.schema(
    [("table", pa.string()), ("id", pa.string()), ("rows", pa.int64()), ("shard", pa.int32())]
)
_PROBLEMS_SHOWN = 20


def _summarise_ids(counts: pa.Table, num_shards: int) -> pa.Table:
    """
    Of a batch of (table, id, rows) groups: one row per table and shard with how many of the table's ids hash to
    it (questions and replies), and the first ids that are null, empty or repeated, with a count of the problems
    left out as one more row.
    """
    shards: Counter[tuple[str, int]] = Counter()
    problems = []
    for table, id_, rows in zip(*(counts[name].to_pylist() for name in ("table", "id", "count()")), strict=True):
        if not id_ or rows > 1:  # null, empty (a Document would replace it with a hash) or repeated
            problems.append({"table": table, "id": id_, "rows": rows})
        elif table != "documents":
            shards[table, shard_of(id_, num_shards)] += 1
    summary = [{"table": table, "shard": shard, "rows": rows} for (table, shard), rows in shards.items()]
    summary += problems[:_PROBLEMS_SHOWN]
    if len(problems) > _PROBLEMS_SHOWN:
        summary.append({"rows": len(problems) - _PROBLEMS_SHOWN})
    return pa.Table.from_pylist(summary, schema=_ID_SUMMARY_SCHEMA)


def _check_ids(datasets: list[tuple[TableSpec, str, Any]], num_shards: int, partitions: int) -> dict[int, int]:
    """
    Fails when an id column holds nulls, empty strings or duplicates, else returns how many questions each shard
    holds. A shard that only replies hash to holds 0 questions: it is answered like the others, so that its
    replies are reported as replies without a question. Shards nothing hashes to are absent. One shuffle checks
    all the tables and counts the shards.

    :param datasets: (what the table holds, its path, its dataset) for each table.
    """
    from ray.data.expressions import lit

    tagged = [
        dataset.select_columns([spec.id_column])
        .rename_columns({spec.id_column: "id"})
        .with_column("table", lit(spec.name))
        for spec, _, dataset in datasets
    ]
    combined = tagged[0].union(*tagged[1:]) if len(tagged) > 1 else tagged[0]
    summary = (
        combined.groupby(["table", "id"], num_partitions=partitions)
        .count()
        .map_batches(_summarise_ids, batch_format="pyarrow", fn_kwargs={"num_shards": num_shards})
    )
    questions_per_shard: Counter[int] = Counter()
    problems, unshown = [], 0
    for row in summary.iter_rows():
        if row["shard"] is not None:
            questions_per_shard[row["shard"]] += row["rows"] if row["table"] == "questions" else 0
        elif row["table"] is None or len(problems) == _PROBLEMS_SHOWN:
            unshown += row["rows"] if row["table"] is None else 1
        else:
            problems.append(row)
    if not problems:
        return dict(questions_per_shard)
    where = {spec.name: (path, spec.id_column) for spec, path, _ in datasets}
    lines = []
    for row in problems:
        path, column = where[row["table"]]
        what = {None: "a null value", "": "an empty value"}.get(row["id"], f"duplicate value {row['id']!r}")
        lines.append(f"{redact(path)}: column '{column}' of the {row['table']} table has {what} ({row['rows']} rows)")
    if unshown:
        lines.append(f"... and {unshown} more null, empty or duplicate ids")
    raise InputError("Input ids must be unique, not null and not empty:\n  - " + "\n  - ".join(lines))


def _start_ray(address: str | None) -> float:
    import ray

    started = time.time()
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=True) if address else ray.init()
    return time.time() - started


def _actor_resources(config: JobConfig) -> tuple[int, float, float, int]:
    """
    (number of actors, GPUs and CPUs each actor reserves, CPU threads per actor) for the cluster the driver is
    connected to. The pool never reserves more than a quarter of the cluster's CPUs, so that the read, join,
    tokenize and write tasks always find CPUs: an actor pool that claims them starves those tasks and the job hangs.
    """
    import ray

    resources = ray.cluster_resources()
    gpus = resources.get("GPU", 0)
    cpus = resources.get("CPU", 1)
    if gpus:
        num_actors = config.num_actors or max(1, int(gpus // config.gpus_per_actor))
        gpus_per_actor, threads = config.gpus_per_actor, 1
    else:
        num_actors = config.num_actors or 1
        gpus_per_actor, threads = 0.0, max(1, int(cpus // num_actors))
    cpus_per_actor = min(config.cpus_per_actor, cpus / (4 * num_actors))
    return num_actors, gpus_per_actor, cpus_per_actor, threads


def _answer_shards(
    config: JobConfig,
    shards: frozenset[int],
    num_shards: int,
    squad: bool,
    questions,
    documents,
    replies,
    partitions: int,
) -> None:
    """
    One wave: answers the questions of `shards` with one Ray Data pipeline (join, tokenize, read, aggregate) and
    commits each shard. Waves bound memory: a wave's candidates are shuffled together, the next wave's later.
    """
    import ray.data

    num_actors, gpus_per_actor, cpus_per_actor, cpu_threads = _actor_resources(config)
    work = questions.map_batches(
        explode_questions,
        batch_format="pyarrow",
        max_retries=-1,
        fn_kwargs={"num_shards": num_shards, "shards": shards, "squad": squad},
    )
    if documents is not None:
        work = work.join(
            documents.map_batches(document_columns, batch_format="pyarrow"),
            "left_outer",
            num_partitions=partitions,
            on=("document_id",),
            right_on=("id",),
        )
    work = work.map_batches(
        tokenize,
        batch_format="pyarrow",
        batch_size=PAIRS_PER_TOKENIZE_BATCH,
        max_retries=-1,
        fn_kwargs={
            "model": config.model,
            "max_seq_length": config.max_seq_length,
            "stride": config.stride,
            "context_window_size": config.context_window_size,
            "trust_remote_code": bool(config.model_kwargs.get("trust_remote_code", False)),
        },
    )
    work = work.repartition(target_num_rows_per_block=config.sequences_per_actor_batch)
    work = work.map_batches(
        ReadSequences,
        batch_format="pyarrow",
        batch_size=config.sequences_per_actor_batch,
        compute=ray.data.ActorPoolStrategy(size=num_actors),
        fn_constructor_kwargs={"reader_parameters": config.reader_parameters(), "cpu_threads": cpu_threads},
        num_gpus=gpus_per_actor,
        num_cpus=cpus_per_actor,
        max_restarts=-1,
        max_task_retries=-1,
    )
    if replies is not None:
        fn_kwargs = {"num_shards": num_shards, "shards": shards}
        work = work.union(replies.map_batches(replies_rows, batch_format="pyarrow", fn_kwargs=fn_kwargs))
    settings = AggregationSettings(
        top_k=config.top_k,
        overlap_threshold=config.overlap_threshold,
        no_answer=config.no_answer,
        score_threshold=config.score_threshold,
        refusal_threshold=config.refusal_threshold,
        answer_builder=config.answer_builder_parameters(),
        with_replies=replies is not None,
    )
    summaries = work.groupby("shard", num_partitions=max(1, min(len(shards), 32))).map_groups(
        aggregate_shard, batch_format="pyarrow", fn_kwargs={"settings": settings, "output": config.output}
    )
    for _ in summaries.iter_rows():
        pass


def run(config: JobConfig) -> int:
    """
    Runs the job for a validated configuration.

    :returns: 0 when every input question is accounted for in the questions table, else 1.
    :raises InputError: For unusable input, before any worker starts.
    """
    started = time.time()
    questions_schema = check_questions_schema(config.questions, bool(config.documents))
    squad = "document_ids" not in questions_schema.names
    documents_schema = table_schema(config.documents, DOCUMENTS) if not squad else None
    replies_schema = table_schema(config.replies, REPLIES) if config.replies else None
    check_model(config.model, trust_remote_code=bool(config.model_kwargs.get("trust_remote_code", False)))
    inputs = {
        "questions": config.questions,
        "replies": config.replies,
        "documents": None if squad else config.documents,
    }
    identity = {
        "config": {key: value for key, value in config.to_dict().items() if key not in EXECUTION_FIELDS},
        "inputs": {name: _input_fingerprint(path) for name, path in inputs.items() if path},
    }
    output = OutputFolder(config.output)
    output.check(identity, config.overwrite)  # a run that would be refused is refused before reading any input

    ray_start_s = _start_ray(config.address)
    import ray.data

    # Sort-based shuffles run as tasks: no shuffle actors to start, which dominates on small inputs.
    ray.data.DataContext.get_current().shuffle_strategy = ray.data.context.ShuffleStrategy.SORT_SHUFFLE_PULL_BASED

    questions = _read(config.questions, ["id", "query", "context" if squad else "document_ids"])
    n_questions = questions.count()
    checks = [(QUESTIONS, config.questions, questions)]
    documents = None
    if not squad:
        columns = ["id", "content"] + (["page_number"] if "page_number" in documents_schema.names else [])
        documents = _read(config.documents, columns)
        checks.append((DOCUMENTS, config.documents, documents))
    replies = None
    if config.replies:
        replies = _read(
            config.replies, ["question_id", "replies"] + (["meta"] if "meta" in replies_schema.names else [])
        )
        checks.append((REPLIES, config.replies, replies))
    partitions = max(1, min(32, n_questions // 50_000))
    num_shards = max(1, math.ceil(n_questions / config.shard_size))
    expected = _check_ids(checks, num_shards, partitions)

    output.claim(identity, config.overwrite)
    already_committed = output.committed_shards()

    pipeline_started = time.time()
    pending = [shard for shard in sorted(expected) if shard not in already_committed]
    for first in range(0, len(pending), config.shards_per_wave):
        wave = frozenset(pending[first : first + config.shards_per_wave])
        _answer_shards(config, wave, num_shards, squad, questions, documents, replies, partitions)
    pipeline_s = time.time() - pipeline_started

    markers = output.committed_shards()
    manifest = _manifest(
        config, identity, markers, n_questions, expected, already_committed, started, ray_start_s, pipeline_s
    )
    if manifest["reconciled"]:
        output.write_manifest(manifest)
    _print_summary(manifest, output)
    return 0 if manifest["reconciled"] else 1


def _manifest(
    config: JobConfig,
    identity: dict[str, Any],
    markers: dict[int, dict[str, Any]],
    n_questions: int,
    expected: dict[int, int],
    resumed: dict[int, dict[str, Any]],
    started: float,
    ray_start_s: float,
    pipeline_s: float,
) -> dict[str, Any]:
    """The run's manifest: configuration, counts in and out, reconciliation, timings and throughput."""
    statuses = {status: sum(m["statuses"][status] for m in markers.values()) for status in QUESTION_STATUSES}
    written = sum(m["questions"] for m in markers.values())
    workers: dict[str, int] = {}
    for marker in markers.values():
        for worker, count in marker["workers"].items():
            workers[worker] = workers.get(worker, 0) + count
    sequences = sum(m["sequences"] for m in markers.values())
    computed = sum(m["questions"] for shard, m in markers.items() if shard not in resumed)
    return {
        "config": config.to_dict(),
        "inputs": {"questions": n_questions, "files": identity["inputs"]},
        "outputs": {
            "questions": written,
            "statuses": statuses,
            "answers": sum(m["answers"] for m in markers.values()),
            "generated_answers": sum(m["generated_answers"] for m in markers.values()),
            "sequences": sequences,
        },
        "reconciled": written == n_questions and {shard: m["questions"] for shard, m in markers.items()} == expected,
        "shards": {"total": len(expected), "committed": len(markers), "resumed": len(resumed)},
        "replies_without_question": sorted(q for m in markers.values() for q in m["replies_without_question"]),
        "workers": workers,
        "timings": {
            "total_s": round(time.time() - started, 3),
            "ray_start_s": round(ray_start_s, 3),
            "pipeline_s": round(pipeline_s, 3),
        },
        "throughput": {
            "questions_per_s": round(computed / pipeline_s, 3) if pipeline_s else None,
            "sequences_per_s": round(sequences / pipeline_s, 3) if pipeline_s else None,
        },
    }


def _print_summary(manifest: dict[str, Any], output: OutputFolder) -> None:
    outputs, statuses = manifest["outputs"], manifest["outputs"]["statuses"]
    lines = [
        "",
        "bulk-qa: " + ("done" if manifest["reconciled"] else "INCOMPLETE: questions in and out differ"),
        f"  questions   {manifest['inputs']['questions']} in, {outputs['questions']} out: "
        + ", ".join(f"{count} {status}" for status, count in statuses.items()),
        f"  answers     {outputs['answers']} rows"
        + (f", {outputs['generated_answers']} generated answers" if outputs["generated_answers"] else ""),
        f"  throughput  {manifest['throughput']['questions_per_s']} questions/s, "
        f"{manifest['throughput']['sequences_per_s']} sequences/s "
        f"(pipeline {manifest['timings']['pipeline_s']} s, Ray start {manifest['timings']['ray_start_s']} s)",
        f"  shards      {manifest['shards']['committed']}/{manifest['shards']['total']} committed"
        f" ({manifest['shards']['resumed']} from an earlier run)",
        f"  tables      {output.table_path('answers')}, {output.table_path('questions')}"
        + (f", {output.table_path('generated_answers')}" if outputs["generated_answers"] else ""),
        f"  manifest    {output.table_path('manifest.json')}" if manifest["reconciled"] else "",
        f"  warning     replies for unknown question ids: {manifest['replies_without_question']}"
        if manifest["replies_without_question"]
        else "",
    ]
    print("\n".join(line for line in lines if line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
