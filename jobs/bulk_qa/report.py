"""The run's manifest (configuration, counts in and out, reconciliation, timings, throughput) and its summary."""

import time
from typing import Any

from jobs.bulk_qa.config import JobConfig
from jobs.bulk_qa.output import OutputFolder
from jobs.bulk_qa.workers.read import worker_precision
from jobs.bulk_qa.workers.tables import QUESTION_STATUSES
from jobs.engines import IN_PROCESS_ENGINE


def manifest(
    config: JobConfig,
    identity: dict[str, Any],
    markers: dict[int, dict[str, Any]],
    n_questions: int,
    expected: dict[int, int],
    resumed: dict[int, dict[str, Any]],
    started: float,
    pipeline_s: float,
    cluster: dict[str, Any],
) -> dict[str, Any]:
    """
    The run's manifest: configuration, the model's fingerprint, counts in and out, reconciliation, the cluster and
    reader actors used (`cluster.reader_actors`, with how many of them read this run's sequences), timings, and
    the throughput of the work this run did (a resumed run's kept shards are not counted in it).
    """
    statuses = {status: sum(m["statuses"][status] for m in markers.values()) for status in QUESTION_STATUSES}
    written = sum(m["questions"] for m in markers.values())
    workers: dict[str, int] = {}
    for marker in markers.values():
        for worker, count in marker["workers"].items():
            workers[worker] = workers.get(worker, 0) + count
    sequences = sum(m["sequences"] for m in markers.values())
    computed = [marker for shard, marker in markers.items() if shard not in resumed]
    computed_questions = sum(marker["questions"] for marker in computed)
    computed_sequences = sum(marker["sequences"] for marker in computed)
    # The reader actors that read this run's sequences (a resumed run's kept shards were read by others).
    with_work = len({worker for marker in computed for worker in marker["workers"]})
    return {
        "config": config.to_dict(),
        "inputs": {"questions": n_questions, "files": identity["inputs"]},
        "model": identity["model"],
        # The precision asked for, and what the reader actors ran in (`auto` resolves on each actor's device).
        "precision": {"setting": config.model.precision, "used": sorted({worker_precision(w) for w in workers})},
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
        "cluster": {**cluster, "reader_actors": {**cluster["reader_actors"], "with_work": with_work}},
        "timings": {
            "total_s": round(time.time() - started, 3),
            "ray_start_s": cluster["start_s"],
            "pipeline_s": round(pipeline_s, 3),
        },
        "throughput": {
            "questions": computed_questions,
            "sequences": computed_sequences,
            "questions_per_s": round(computed_questions / pipeline_s, 3) if pipeline_s else None,
            "sequences_per_s": round(computed_sequences / pipeline_s, 3) if pipeline_s else None,
        },
    }


def idle_readers(manifest: dict[str, Any]) -> str:
    """A summary line when fewer reader actors read this run's sequences than were started, saying why; else ""."""
    readers, sequences = manifest["cluster"]["reader_actors"], manifest["throughput"]["sequences"]
    if not sequences or readers["with_work"] >= readers["num_actors"]:
        return ""
    return (
        f"  readers     {readers['with_work']} of {readers['num_actors']} reader actors had work: Ray Data hands "
        f"each batch of this run's {sequences} sequences to the actor with the fewest batches in flight, so a run "
        "of few batches can leave actors idle"
    )


def precision_line(manifest: dict[str, Any]) -> str:
    """The precision the readers ran in, and the setting when it was `auto`: `bf16 (auto)`, `fp32`."""
    precision = manifest["precision"]
    used = ", ".join(precision["used"]) or "none (no sequence read)"
    return f"{used} (auto)" if precision["setting"] == "auto" else used


def engine_line(manifest: dict[str, Any]) -> str:
    """Where the run ran, for the summary's throughput line."""
    if manifest["cluster"]["engine"] == IN_PROCESS_ENGINE:
        return "in-process, no Ray"
    return f"Ray start {manifest['timings']['ray_start_s']} s"


def corpus_line(ingestion: dict[str, Any] | None) -> str:
    """The summary's line on a --documents folder of files (empty without one): its files, documents, report."""
    if ingestion is None:
        return ""
    kept = " (kept from the run this one resumes)" if ingestion["source"] == "resumed" else ""
    return (
        f"  corpus      {ingestion['files']} files{kept}: {ingestion['files_converted']} converted into "
        f"{ingestion['documents']} documents, {ingestion['files_rejected']} rejected; {ingestion['report_rows']} "
        f"report rows in {ingestion['report']}"
    )


def pooled_line(manifest: dict[str, Any]) -> str:
    """The summary's line of a `--pool-contexts` run's corpus, or nothing."""
    pooled = manifest.get("pooled_contexts")
    if pooled is None:
        return ""
    return (
        f"  corpus      {pooled['documents']} distinct contexts of {pooled['questions_with_context']} questions "
        f"pooled, each question retrieved for by {manifest['config']['retrieval']}"
    )


def retrieval_line(quality: dict[str, Any] | None) -> str:
    """
    The summary's line of the retrieval's recall and MRR against its gold (`relevant_document_ids`, or with
    `--pool-contexts` each question's own context), or nothing.
    """
    if not quality or not quality.get("questions"):
        return ""
    recalls = ", ".join(f"{key} {value:.3f}" for key, value in quality.items() if key.startswith("recall@"))
    return f"  retrieval   {recalls}, mrr {quality['mrr']:.3f} over {quality['questions']} questions: evaluation.json"


def by_document_line(record: dict[str, Any] | None) -> str:
    """With `--every-document`: the documents and questions whose pairs the run answered; else ""."""
    if record is None:
        return ""
    return (
        f"  documents   {record['documents']} x {record['questions']} questions (--every-document): a row per "
        "document in by_document"
    )


def print_summary(manifest: dict[str, Any], output: OutputFolder) -> None:
    """Prints the run's summary (from its manifest) on stdout: the last thing the job prints there."""
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
        f"(pipeline {manifest['timings']['pipeline_s']} s, {engine_line(manifest)}, "
        f"precision {precision_line(manifest)})",
        idle_readers(manifest),
        by_document_line(manifest.get("by_document")),
        f"  shards      {manifest['shards']['committed']}/{manifest['shards']['total']} committed"
        f" ({manifest['shards']['resumed']} from an earlier run)",
        corpus_line(manifest.get("ingestion")),
        pooled_line(manifest),
        f"  tables      {output.table_path('answers')}, {output.table_path('questions')}"
        + (f", {output.table_path('generated_answers')}" if outputs["generated_answers"] else "")
        + (f", {manifest['by_document']['table']}" if "by_document" in manifest else ""),
        f"  manifest    {output.table_path('manifest.json')}" if manifest["reconciled"] else "",
        f"  results     {', '.join(manifest['result_files'])}" if manifest.get("result_files") else "",
        "  evaluation  exact {exact:.2f}, f1 {f1:.2f} over {total} questions (best_f1 {best_f1:.2f} at "
        "no-answer probability > {best_f1_thresh:.4g}): evaluation.json".format(**manifest["evaluation"])
        if manifest.get("evaluation")
        else "",
        retrieval_line(manifest.get("retrieval_quality")),
        f"  warning     replies for unknown question ids: {manifest['replies_without_question']}"
        if manifest["replies_without_question"]
        else "",
    ]
    print("\n".join(line for line in lines if line), flush=True)
