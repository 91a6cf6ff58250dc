"""
One wave of the bulk job: the questions of some shards answered by one Ray Data pipeline (explode, join, tokenize,
read, aggregate), each shard committed by its aggregation task; the run's engine (`jobs.engines`) runs it
on Ray or in this process. Waves bound memory: a wave's candidates are shuffled together, the next wave's later.
On Ray, Ray Data's defaults retry what fails: a map task whose worker dies
(`max_retries=-1`), a dead reader actor (restarted, its batch read again: `max_restarts=-1, max_task_retries=-1`).
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from jobs.bulk_qa.config import JobConfig, RunSettings
from jobs.bulk_qa.retrieval import RANKER_GPUS, retrieved_questions
from jobs.bulk_qa.workers.aggregate import aggregate_shard
from jobs.bulk_qa.workers.explode import (
    PART,
    document_columns,
    explode_pairs,
    join_document_part,
    join_documents,
    question_rows,
    read_document_columns,
    replies_rows,
    with_document_part,
    write_document_part,
)
from jobs.bulk_qa.workers.read import ReadSequences
from jobs.bulk_qa.workers.tokenize import tokenize
from jobs.engines import IN_PROCESS_ENGINE, Engine
from jobs.indexing.plan import IndexPlan
from jobs.retrieval.stages import RETRIEVAL_ACTOR_MAX_CPUS
from jobs.storage import ShardStore
from jobs.tables import table_bytes
from qa_core.models import DEFAULT_TOKEN

# (question, document) pairs one tokenize call reads: a block holds a wave's pairs (the join's output), and whole
# blocks at once held every sequence of the wave in one worker.
PAIRS_PER_TOKENIZE_BATCH = 512
# A documents table up to this size (uncompressed, from its Parquet footers) is joined by broadcast: its columns
# are read once per run into the object store and every pair batch is joined with them in its own task.
BROADCAST_DOCUMENTS_MAX_BYTES = 256 * 2**20
# A larger table is split by id into parts of about this size (uncompressed) in the run's folder, once per run
# (`partition_documents`); each wave shuffles only its pairs by part, and each part's pairs read that part's file.
DOCUMENT_PART_BYTES = 64 * 2**20
MAX_SHUFFLE_PARTITIONS = 32  # hash partitions of a shuffle (by document part, by shard, by id)
READER_RUNTIME_ENV = {"env_vars": {"HF_HUB_DISABLE_PROGRESS_BARS": "1"}}  # transformers' bars follow the hub's
# The fewest CPUs a task of the job reserves, on a cluster whose smallest node leaves less beside an actor.
MIN_TASK_CPUS = 0.25


@dataclass(frozen=True)
class Inputs:
    """The run's input datasets (the engine's: Ray Data's read lazily, or in-process tables), and what they hold."""

    engine: Engine
    questions: Any
    documents: Any | None  # None for SQuAD-style questions, which carry their document
    document_table: Any | None  # the documents' columns when joined by broadcast (on Ray, a reference to them)
    document_parts: int | None  # the parts the documents are split into, when too large to broadcast
    replies: Any | None
    squad: bool  # questions carry a `context` instead of `document_ids`
    num_shards: int
    index: IndexPlan | None = None  # the BM25 index, when some questions have no document_ids
    cluster_cpus: float = 1.0  # the cluster's CPUs (the retrieval actor reserves a fraction of one)
    # --every-document: the questions (id, query) asked of every document (`questions` is then the documents')
    every_document: pa.Table | None = None


@dataclass(frozen=True)
class ActorResources:
    """How many reader actors run, and what each reserves."""

    num_actors: int
    gpus_per_actor: float
    cpus_per_actor: float
    cpu_threads: int  # torch threads of a CPU actor
    ranker_gpus: float = 0.0  # the share of a GPU the ranker's actor holds (--ranker on a cluster with GPUs)


def plan_documents_join(path: str, engine: Engine) -> tuple[Any | None, int | None]:
    """
    How the waves join pairs with the documents table: up to `BROADCAST_DOCUMENTS_MAX_BYTES`, its columns
    (`read_document_columns`, through `Engine.broadcast`); a larger table, the number of parts
    `partition_documents` splits it into.

    :returns: `(columns, None)` for a broadcast join, `(None, parts)` for a partitioned one.
    """
    size = table_bytes(path)
    if not joins_by_broadcast(size):
        return None, math.ceil(size / DOCUMENT_PART_BYTES)
    return engine.broadcast(read_document_columns, path), None


def joins_by_broadcast(size: int) -> bool:
    """Whether a documents table of `size` bytes (uncompressed) is joined whole, by broadcast."""
    return size <= BROADCAST_DOCUMENTS_MAX_BYTES


def partition_documents(inputs: Inputs, output: str) -> None:
    """
    Writes the documents into the run's folder split by id into `inputs.document_parts` parts, in one pass (one
    shuffle of the corpus per run, whatever the number of waves); a part's file holds the documents of its ids.
    """
    ShardStore(output).delete_document_parts()  # a part another run left could hold other documents
    written = (
        inputs.documents.map_batches(document_columns, batch_format="pyarrow")
        .map_batches(
            with_document_part, batch_format="pyarrow", fn_kwargs={"column": "id", "n_parts": inputs.document_parts}
        )
        .groupby(PART, num_partitions=min(inputs.document_parts, MAX_SHUFFLE_PARTITIONS))
        .map_groups(write_document_part, batch_format="pyarrow", fn_kwargs={"output": output})
    )
    for _ in written.iter_rows():
        pass


def actor_resources(run: RunSettings, cluster: dict[str, Any], ranks: bool = False) -> ActorResources:
    """
    The reader pool for a cluster's resources. It never reserves more than a quarter of the cluster's CPUs, so
    that the read, join, tokenize and write tasks always find CPUs: a pool that claims them starves those tasks
    and the job hangs. In-process, the one reader has the machine's CPUs (or its GPU) while it reads. A run that
    `ranks` (`--ranker`) on GPUs runs its ranker actor on `RANKER_GPUS` of one: each reader then holds the rest of
    its GPU by default, one per GPU.
    """
    gpus = cluster["gpus"]
    cpus = cluster["cpus"] or 1
    if cluster["engine"] == IN_PROCESS_ENGINE:
        return ActorResources(1, float(gpus), cpus, 1 if gpus else int(cpus))
    if gpus:
        gpus_per_actor, threads = run.gpus_per_actor or 1.0, 1
        num_actors = run.num_actors or max(1, int(gpus // gpus_per_actor))
        if ranks:
            gpus_per_actor = run.gpus_per_actor or 1.0 - RANKER_GPUS
    else:
        num_actors = run.num_actors or 1
        gpus_per_actor, threads = 0.0, max(1, int(cpus // num_actors))
    cpus_per_actor = min(run.cpus_per_actor, cpus / (4 * num_actors))
    return ActorResources(num_actors, gpus_per_actor, cpus_per_actor, threads, RANKER_GPUS if ranks and gpus else 0.0)


def task_cpus(cluster: dict[str, Any], pool: ActorResources) -> float:
    """
    The CPUs each Ray task of the job reserves (reads, joins, tokenize, aggregation): one, or what the cluster's
    smallest node leaves beside the largest actor the job runs (a reader, or a retrieval actor), so that a node
    that holds an actor still runs tasks. A cluster that lost nodes then goes on with any one node left: on
    nodes of one CPU, a reader actor takes half of one and a task the other half (whole-CPU tasks would never fit
    beside it, and the run would wait for a node that may never come).
    """
    smallest = cluster.get("smallest_node_cpus") or cluster["cpus"] or 1
    actor = max(pool.cpus_per_actor, RETRIEVAL_ACTOR_MAX_CPUS)
    return max(MIN_TASK_CPUS, min(1.0, smallest - actor))


def sequences_per_batch(run: RunSettings, pool: ActorResources, wave_questions: int) -> int:
    """
    The sequences of one reader batch: `sequences_per_actor_batch`, or fewer when the wave is small, so that its
    sequences make at least one batch per reader actor. A question makes at least one sequence per document it
    reads, so batches of `wave_questions / num_actors` sequences give every actor work; only a wave of fewer
    sequences than that (most of its questions without documents) leaves an actor idle.
    """
    if pool.num_actors == 1:
        return run.sequences_per_actor_batch
    return max(1, min(run.sequences_per_actor_batch, math.ceil(wave_questions / pool.num_actors)))


def answer_wave(
    config: JobConfig,
    inputs: Inputs,
    shards: frozenset[int],
    wave_questions: int,
    pool: ActorResources,
    on_commit: Callable[[dict[str, Any]], None],
) -> None:
    """
    Answers the `wave_questions` questions of `shards` and commits each shard, passing its marker to `on_commit`
    when it is.
    """
    wave = {"num_shards": inputs.num_shards, "shards": shards}
    tasks = {"num_cpus": inputs.engine.task_cpus}  # see `task_cpus`
    ShardStore(config.run.output).delete_pair_notes(shards)  # those an earlier attempt at these shards left
    questions = inputs.questions
    if inputs.index is not None:  # questions without document_ids get them by BM25 first
        questions = retrieved_questions(
            questions,
            wave,
            config.retrieval,
            inputs.index,
            inputs.cluster_cpus,
            inputs.engine,
            config.ranking,
            pool.ranker_gpus,
        )
    stored = inputs.index is not None and inputs.index.store  # the documents' texts read from the index
    pairs = questions.map_batches(
        explode_pairs, batch_format="pyarrow", fn_kwargs={**wave, "squad": inputs.squad, "stored": stored}, **tasks
    )
    if inputs.document_table is not None:
        pairs = pairs.map_batches(
            join_documents, batch_format="pyarrow", fn_kwargs={"documents": inputs.document_table}, **tasks
        )
    elif inputs.documents is not None:  # each part's pairs meet in one task, which reads that part's documents
        pairs = (
            pairs.map_batches(
                with_document_part,
                batch_format="pyarrow",
                fn_kwargs={"column": "document_id", "n_parts": inputs.document_parts},
                **tasks,
            )
            .groupby(PART, num_partitions=min(inputs.document_parts, MAX_SHUFFLE_PARTITIONS))
            .map_groups(join_document_part, batch_format="pyarrow", fn_kwargs={"output": config.run.output}, **tasks)
        )
    questions = questions.map_batches(
        question_rows, batch_format="pyarrow", fn_kwargs={**wave, "squad": inputs.squad}, **tasks
    )
    work = [questions]
    if inputs.replies is not None:
        work.append(inputs.replies.map_batches(replies_rows, batch_format="pyarrow", fn_kwargs=wave, **tasks))
    aggregation = {
        "selection": config.selection,
        "refusal": config.refusal,
        "replies": config.replies if inputs.replies is not None else None,
        "output": config.run.output,
    }
    commit_pairs(
        config, inputs, pairs, work, len(shards), wave_questions, pool, aggregate_shard, aggregation, on_commit
    )


def commit_pairs(
    config: JobConfig,
    inputs: Inputs,
    pairs: Any,
    work: list[Any],
    wave_shards: int,
    wave_questions: int,
    pool: ActorResources,
    aggregate: Callable[..., Any],
    aggregation: dict[str, Any],
    on_commit: Callable[[dict[str, Any]], None],
) -> None:
    """
    The tail of a wave: its `pairs` (joined with their documents) tokenized and read by the reader pool; their
    candidates and read notes grouped by shard with the wave's other `work` rows (`question` rows, `replies` rows)
    and committed by `aggregate` (called with `aggregation`) for each of the wave's `wave_shards` shards, each
    marker passed to `on_commit`.
    """
    import json

    tasks = {"num_cpus": inputs.engine.task_cpus}  # see `task_cpus`
    sequences = pairs.map_batches(
        tokenize,
        batch_format="pyarrow",
        batch_size=PAIRS_PER_TOKENIZE_BATCH,
        fn_kwargs={
            "model": config.model,
            "token": DEFAULT_TOKEN,
            "tokenization": config.tokenization,
            "selection": config.selection,
            "output": config.run.output,
        },
        **tasks,
    )
    # One block per actor batch: a batch bundles blocks up to its size, so both must be the same. The cut runs in
    # the tokenize tasks (fused) where those reserve a whole CPU, as it would on its own; on a cluster of small
    # nodes (see `task_cpus`) it is left out, and several reader actors then share a small wave less evenly.
    batch_size = sequences_per_batch(config.run, pool, wave_questions)
    if tasks["num_cpus"] >= 1:
        sequences = sequences.repartition(target_num_rows_per_block=batch_size)
    candidates = sequences.map_batches(
        ReadSequences,
        batch_format="pyarrow",
        batch_size=batch_size,
        compute=inputs.engine.actor_pool(pool.num_actors),
        fn_constructor_kwargs={
            "model": config.model,
            "inference": config.inference,
            "selection": config.selection,
            "token": DEFAULT_TOKEN,
            "cpu_threads": pool.cpu_threads,
            "device": inputs.engine.reader_device(),
        },
        num_gpus=pool.gpus_per_actor,
        num_cpus=pool.cpus_per_actor,
        # No progress bar while a reader loads its model: its output is a worker's log, not the user's terminal.
        # An environment of their own also keeps the task stages before them, which may reserve as many CPUs as a
        # reader (see `task_cpus`), from being fused into the reader actors, to run there one batch at a time.
        runtime_env=READER_RUNTIME_ENV,
    )
    # With several reader actors the wave starts once all have: Ray Data hands an actor several batches at once,
    # and the one ready first would take every batch of a small wave.
    inputs.engine.wait_for_actors(candidates, pool.num_actors > 1)
    work = [candidates, *work]
    # The group by shard waits for all its input, so every tokenize task of the wave has written its pair notes
    # when the aggregation reads them.
    markers = (
        work[0]
        .union(*work[1:])
        .groupby("shard", num_partitions=max(1, min(wave_shards, MAX_SHUFFLE_PARTITIONS)))
        .map_groups(aggregate, batch_format="pyarrow", fn_kwargs=aggregation, **tasks)
    )
    rows = markers.iter_rows()
    try:
        for row in rows:
            on_commit(json.loads(row["marker"]))
    finally:
        # A run ended mid-wave (a stall, a shard the driver cannot read) stops the wave's execution and frees what it
        # holds now, not whenever the iterator is collected: a run started after it in this process would wait.
        close = getattr(rows, "close", None)
        if close is not None:
            close()
