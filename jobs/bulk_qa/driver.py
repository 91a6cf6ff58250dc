"""
The bulk QA job's driver: `python -m jobs.bulk_qa --questions Q --documents D --output OUT [options]` (or `bulk-qa`).

Checks the inputs, the model and the ids (small id columns here, before Ray starts; large ones on the cluster),
chooses the engine (a small local job runs in this process, any other on Ray: `choose_engine`), converts a
`--documents` folder of files into the output folder (`jobs.bulk_qa.corpus`; its ids are checked once converted),
reads the tables, answers the pending shards in waves (see `jobs.bulk_qa.waves`), then writes the manifest and
prints the summary. On a Ray cluster of several nodes, the run's local paths are checked to be the same on every
node as soon as Ray runs, before any work (`jobs.shared_paths`), and a shard counts as committed only once the
driver has read it back (`jobs.storage.ShardStore.read_commit`). Exit status: 0 when every question is accounted
for, 2 for unusable input or configuration (a path some node does not share included), 1 for any other failure.
With `--every-document` the questions are asked of every document, in shards of documents
(`jobs.bulk_qa.every_document`).
"""

import dataclasses
import math
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from jobs.bulk_qa import report
from jobs.bulk_qa.config import JobConfig, load_config
from jobs.bulk_qa.corpus import CORPUS_FOLDER, convert_corpus
from jobs.bulk_qa.every_document import (
    BY_DOCUMENT,
    answer_documents_wave,
    check_every_document,
    document_shards,
    estimated_pairs,
    write_by_document,
)
from jobs.bulk_qa.every_document import read_inputs as read_every_document_inputs
from jobs.bulk_qa.filtering import RunFilters, check_run_filters, restrict_named_documents, run_filters
from jobs.bulk_qa.html_report import write_report
from jobs.bulk_qa.ids import DRIVER_CHECK_MAX_ROWS, check_ids, check_ids_in_driver
from jobs.bulk_qa.inputs import check_model, check_questions_schema, check_ranker, is_squad_style
from jobs.bulk_qa.output import OutputFolder
from jobs.bulk_qa.pooled_contexts import (
    PooledContexts,
    load_pooled_contexts,
    questions_schema,
    write_pooled_contexts,
)
from jobs.bulk_qa.progress import Progress, RunStalled, StallWatch
from jobs.bulk_qa.results import model_version, write_results
from jobs.bulk_qa.retrieval import needs_retrieval
from jobs.bulk_qa.squad_input import SquadInput, load_squad_input
from jobs.bulk_qa.waves import (
    MAX_SHUFFLE_PARTITIONS,
    ActorResources,
    Inputs,
    actor_resources,
    answer_wave,
    joins_by_broadcast,
    partition_documents,
    plan_documents_join,
    task_cpus,
)
from jobs.bulk_qa.workers.explode import JOINED_DOCUMENT_COLUMNS
from jobs.engines import (
    AUTO_ENGINE,
    IN_PROCESS_ENGINE,
    IN_PROCESS_MAX_QUESTIONS,
    RAY_ENGINE,
    Engine,
    InProcessEngine,
    RayEngine,
)
from jobs.indexing.plan import complete_index, given_store, prepare_index, reads_store, saved_index
from jobs.indexing.record import index_fingerprint
from jobs.ingest.folder import InputFolder, files_folder
from jobs.ingest.stage import DOCUMENTS_SCHEMA as INGESTED_DOCUMENTS_SCHEMA
from jobs.ray_logs import RayLogFilter
from jobs.ray_start import start_engine
from jobs.retrieval.retrieve import FILTERS
from jobs.retrieval_settings import RetrievalSettings
from jobs.shared_paths import SharedPath, check_shared, model_folder
from jobs.storage import InputError, redact
from jobs.tables import (
    DOCUMENTS,
    QUESTIONS,
    REPLIES,
    TableSpec,
    input_fingerprint,
    read_ids,
    table_bytes,
    table_rows,
    table_schema,
)
from qa_core.models import DEFAULT_TOKEN, ModelSettings, model_fingerprint, show_model_library_output


def main(argv: list[str] | None = None) -> int:
    """
    Command-line entry point; returns the exit status: 2 for unusable input or settings, 1 when the run could not
    account for every question (a Ray actor of the job that died for good, e.g. a reader whose constructor failed,
    reader actors that could not start in time, or a cluster that cannot run what the run waits for).
    """
    try:
        return run(load_config(argv))
    except InputError as error:
        print(f"bulk-qa: error: {error}", file=sys.stderr)
        return 2
    except RunStalled as error:
        print(f"bulk-qa: error: {error}", file=sys.stderr)
        return 1
    except Exception as error:
        missed = missing_file_error(error)
        if missed is not None:
            print(
                f"bulk-qa: error: a task of the job could not find a file on its node: {actor_failure(missed)} A node "
                "that joined the cluster after the run's start (when every node was checked) may not hold a local "
                "path of the run: put it in object storage or on a shared mount. Shards committed so far are kept: "
                "run the same command again to resume.",
                file=sys.stderr,
            )
            return 1
        if not actor_failed(error):
            raise
        print(
            f"bulk-qa: error: a Ray actor of the job could not run: {actor_failure(error)} "
            "Shards committed so far are kept: fix the cause and run the same command again to resume.",
            file=sys.stderr,
        )
        return 1


def actor_failed(error: Exception) -> bool:
    """
    Whether a Ray actor of the job died for good (Ray Data restarts a dead actor, but not one that failed in its
    constructor), or reader actors did not start within `ACTORS_START_TIMEOUT_S`. Only a run on Ray has actors:
    an in-process run never imports Ray.
    """
    exceptions = sys.modules.get("ray.exceptions")
    return exceptions is not None and isinstance(error, exceptions.ActorDiedError | exceptions.GetTimeoutError)


def missing_file_error(error: BaseException) -> Exception | None:
    """
    The error of a Ray task of the job that failed for a file its node does not have: a `FileNotFoundError` raised
    in the task, as Ray raises it in the driver, the error itself or behind the one Ray Data raised for it.
    """
    exceptions = sys.modules.get("ray.exceptions")
    seen: BaseException | None = error
    while exceptions is not None and seen is not None:
        if isinstance(seen, exceptions.RayTaskError) and isinstance(seen, FileNotFoundError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def actor_failure(error: Exception) -> str:
    """
    Which actor died and why, from Ray's error text: the actor's task where Ray names it
    (`ray::MapWorker(MapBatches(ReadSequences)).__init__()`) and the exception (the text's last line).
    """
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return f"{type(error).__name__}."
    task = re.search(r"ray::\S+", text)
    return f"{task.group(0) + ': ' if task else ''}{lines[-1].rstrip('.')}."


def run(config: JobConfig) -> int:
    """
    Runs the job for a validated configuration.

    :returns: 0 when every input question is accounted for in the questions table, else 1.
    :raises InputError: For unusable input, before any worker starts.
    :raises RunStalled: When the cluster cannot run what the run waits for (see `answer_pending_shards`).
    """
    # Without --verbose, Ray's C++ log lines are dropped from stderr from the moment Ray starts (`start_engine`)
    # until the run ends: stderr is then as it was, every line before passed on, and a traceback of the run,
    # printed after, goes straight to it.
    show_model_library_output(config.run.verbose)  # no "Loading weights" bars from an in-process reader
    with RayLogFilter() as ray_logs:
        return run_with(config, ray_logs)


def run_with(config: JobConfig, ray_logs: RayLogFilter) -> int:
    """`run`, with the filter of Ray's log lines that `start_engine` starts."""
    started = time.time()
    squad = load_squad_input(config.work.questions, config.work.allow_misaligned_gold)  # None unless a SQuAD file
    documents, follow = config.work.documents, config.ingest.follow_symlinks
    corpus = files_folder(documents, follow) if documents else None  # None: a Parquet table
    pooled = load_pooled_contexts(config.work, squad)  # --pool-contexts: the questions' contexts as the corpus
    schemas = check_inputs(config, squad, corpus, pooled)
    filters = run_filters(config.work.questions, schemas.questions, schemas.squad, config.retrieval)
    # read once from the footers: every check before Ray uses it (--every-document: the pairs, estimated)
    n_questions = estimated_pairs(config, corpus) if config.work.every_document else count_questions(config, squad)
    engine = choose_engine(config, squad, n_questions, corpus)
    identity = run_identity(config, schemas, pooled)
    output = OutputFolder(config.run.output)
    existing = output.check(identity, config.run.overwrite)  # refused before reading any input if it would be
    resuming = existing == identity and not config.run.overwrite
    shared = shared_paths(config, squad, schemas)
    probed: set[str] = set()  # the nodes whose view of the shared paths was checked (on Ray)
    cluster, converted, tables = None, None, config  # tables: the run's settings with the documents table it reads
    if corpus is not None:  # converted into the claimed output folder first: the conversion makes the ids
        cluster = start_engine(config.run, engine, ray_logs, shared, probed=probed)
        output.claim(identity, config.run.overwrite, keep=(CORPUS_FOLDER,))  # an earlier conversion is updated
        converted = convert_corpus(
            corpus, output.uri, config.ingest, config.cleaning, engine, cluster["cpus"], resuming
        )
        tables = dataclasses.replace(config, work=dataclasses.replace(config.work, documents=converted.documents))
    elif pooled is not None:  # written into the claimed output folder, then read as any documents table
        output.claim(identity, config.run.overwrite)
        pooled_documents = write_pooled_contexts(output, pooled)
        tables = dataclasses.replace(config, work=dataclasses.replace(config.work, documents=pooled_documents))
    # before Ray starts, when the id columns are small (a folder of files: once converted)
    # A resumed run's saved index (not a pooled run's: its questions are SQuAD's, its corpus in the output folder)
    kept = saved_index(output.uri) if resuming and config.retrieval.index is None and squad is None else None
    unread = schemas.retrieval and given_store(config.retrieval, tables.work.documents, kept)
    # an index's passage stores serve the run: the documents' ids are the index's, checked when it was built
    if filters is not None:  # before any work (a folder corpus's fields: once converted)
        check_run_filters(filters, config.retrieval, tables.work.documents, schemas.retrieval, kept)
    if config.work.every_document:  # shards of documents, each with every question its filter asks
        ids = IdCheck(*document_shards(tables.work.questions, tables.work.documents, config.work.shard_size, filters))
    else:
        ids = check_small_ids(tables, dataclasses.replace(schemas, documents=None) if unread else schemas, squad,
                              engine, n_questions)  # fmt: skip
    n_questions = ids.n_questions
    index = None
    if schemas.retrieval:  # checked (in-process: built) before any question is read: an unusable index fails at once
        distributed = isinstance(engine, RayEngine)  # built by Ray Data once Ray runs
        index = prepare_index(config.retrieval, tables.work.documents, output.uri, resuming, distributed)
        index = reads_store(index, tables.work.documents, schemas.documents)
        if index.store:  # the documents are read from the index's stores: no documents table is joined
            schemas = dataclasses.replace(schemas, documents=None)
        elif config.ranking.ranker is not None:  # the ranker reads the retrieved texts from the stores
            raise InputError(
                f"--ranker {redact(config.ranking.ranker)} reads the retrieved documents' texts from the index's "
                f"stores, which --index {redact(config.retrieval.index or '')} lacks (or its stores lack the "
                "documents' page_number or file_path): rebuild it with `python -m jobs.index`."
            )
    if cluster is None:
        cluster = start_engine(config.run, engine, ray_logs, shared, probed=probed)
    pool = actor_resources(config.run, cluster, ranks=index is not None and config.ranking.ranker is not None)
    if isinstance(engine, RayEngine):  # before the inputs' datasets are made: tasks sized for the smallest node
        engine = RayEngine(task_cpus=task_cpus(cluster, pool))
    if config.work.every_document:
        inputs, expected = read_every_document_inputs(tables, engine, ids.num_shards, filters), ids.questions_per_shard
    else:
        inputs, expected = read_inputs(tables, schemas, squad, ids, engine, filters)
    if corpus is None and pooled is None:  # else claimed before the conversion or the pooled corpus
        output.claim(identity, config.run.overwrite)
    if index is not None:
        # into the claimed output folder, so that a resumed run keeps it; dense vectors embedded on the engine
        index = complete_index(index, config.retrieval, tables.work.documents, engine, cluster)
        inputs = dataclasses.replace(inputs, index=index, cluster_cpus=cluster["cpus"])
    tables_of_shard = shard_tables(schemas) + ((BY_DOCUMENT,) if inputs.every_document is not None else ())
    # Read by the driver: a shard counts only once this process has read its marker and its tables' footers.
    resumed = {
        shard: output.read_commit(shard, marker, tables_of_shard) for shard, marker in output.committed_shards().items()
    }
    pipeline_started = time.time()
    partitioned = inputs.document_parts is not None and len(resumed) < len(expected)
    if partitioned:  # once per run, before its first wave
        partition_documents(inputs, config.run.output)
    parts_s = time.time() - pipeline_started
    # a node that joined the cluster since the last check is checked before the next wave
    recheck = (lambda: check_shared(shared, "bulk-qa", probed)) if isinstance(engine, RayEngine) else None
    markers = {
        **resumed,
        **answer_pending_shards(config, inputs, expected, resumed, pool, output, tables_of_shard, recheck),
    }
    # Deleted once every wave has run (a run that fails leaves them: the next one deletes a wave's before it runs).
    output.delete_pair_notes()
    if partitioned:
        output.delete_document_parts()
    pipeline_s = time.time() - pipeline_started
    cluster = {**cluster, "reader_actors": dataclasses.asdict(pool)}
    manifest = report.manifest(config, identity, markers, n_questions, expected, resumed, started, pipeline_s, cluster)
    if index is not None:
        manifest["index"] = index.record
    if converted is not None:
        manifest["ingestion"] = converted.record
    if pooled is not None:
        manifest["pooled_contexts"] = pooled.record()
    if inputs.documents is not None:
        manifest["documents_join"] = "partitioned" if inputs.document_table is None else "broadcast"
        manifest["document_parts"] = inputs.document_parts
        manifest["timings"]["document_parts_s"] = round(parts_s, 3) if partitioned else None
    if manifest["reconciled"]:
        manifest.update(
            write_results(
                output,
                sorted(markers),
                squad,
                tables.work,
                config.refusal.no_answer_source,
                pooled,
                model_version(config.model.model, identity["model"]),
                config.run.review,
                index.shard_locations if index is not None and index.store else None,
            )
        )
        if inputs.every_document is not None:
            by_document = write_by_document(
                output, sorted(markers), inputs.every_document["id"].to_pylist(), config.run.by_document_csv
            )
            manifest["result_files"] += by_document.pop("result_files")
            manifest.update(by_document)
        manifest["result_files"] += write_report(output, manifest)  # report.html; none without matplotlib
        output.write_manifest(manifest)
    report.print_summary(manifest, output)
    return 0 if manifest["reconciled"] else 1


@dataclass(frozen=True)
class Schemas:
    """The input tables' schemas, checked (None for a table the run does not read)."""

    questions: pa.Schema
    documents: pa.Schema | None
    replies: pa.Schema | None
    retrieval: bool = False  # some questions have no document_ids: they are retrieved for in --documents

    @property
    def squad(self) -> bool:
        """
        SQuAD-style questions carry their document in `context` instead of naming `document_ids` (a
        `--pool-contexts` run reads them without it: they are retrieved for).
        """
        return is_squad_style(self.questions.names)


def check_inputs(
    config: JobConfig,
    squad_input: SquadInput | None,
    corpus: InputFolder | None = None,
    pooled: PooledContexts | None = None,
) -> Schemas:
    """
    Checks every input table's schema and the model, before Ray starts (a SQuAD input is checked when read; a
    `corpus`, the documents as a folder of files, is converted into the ingestion's documents table; `pooled`,
    the questions' contexts pooled by `--pool-contexts`, is the documents table, every question retrieved for).
    """
    work = config.work
    if squad_input is not None:
        questions = squad_input.table.schema
    else:
        questions = check_questions_schema(work.questions, bool(work.documents))
    if work.every_document:
        check_every_document(config, squad_input is not None, questions)
    if pooled is not None:
        check_model(config.model, DEFAULT_TOKEN)
        check_ranking(config)
        replies = table_schema(work.replies, REPLIES) if work.replies else None
        return Schemas(questions_schema(questions), pooled.documents.schema, replies, retrieval=True)
    squad = is_squad_style(questions.names)
    retrieval = config.retrieval
    if squad and (retrieval.retrieval != RetrievalSettings.retrieval or retrieval.index is not None):
        given = f"--index {redact(retrieval.index)}" if retrieval.index else f"--retrieval {retrieval.retrieval}"
        raise InputError(
            f"{redact(work.questions)}: the questions carry their document in 'context' (SQuAD-style), so nothing "
            f"is retrieved and {given} would not be used: add --pool-contexts to pool the contexts into the "
            "corpus and retrieve every question's documents from it (recall@k and MRR reported), or leave it out."
        )
    if squad and work.documents:
        raise InputError(
            f"{redact(work.questions)}: the questions carry their document in 'context' (SQuAD-style), so "
            f"--documents {redact(work.documents)} would not be read: leave it out, or name document_ids."
        )
    if squad:
        documents = None
    else:
        documents = INGESTED_DOCUMENTS_SCHEMA if corpus is not None else table_schema(work.documents, DOCUMENTS)
    replies = table_schema(work.replies, REPLIES) if work.replies else None
    retrieval = documents is not None and not work.every_document and needs_retrieval(work.questions, questions)
    check_model(config.model, DEFAULT_TOKEN)
    if retrieval:
        check_ranking(config)
    return Schemas(questions, documents, replies, retrieval)


def check_ranking(config: JobConfig) -> None:
    """Checks `--ranker`'s model, where the run retrieves (only retrieved documents are ranked)."""
    if config.ranking.ranker is not None:
        check_ranker(config.ranking.ranker, DEFAULT_TOKEN)


def run_identity(config: JobConfig, schemas: Schemas, pooled: PooledContexts | None = None) -> dict[str, Any]:
    """
    What the output folder records to recognise a resumable run: the settings, the input files, the given
    `--index`'s fingerprint (its build record: an index rebuilt or grown since the run started is another input),
    the model's files (see `qa_core.models.model_fingerprint`), a `--ranker`'s files and, for a `--pool-contexts`
    run, the fingerprint of the corpus it derives from its questions.
    """
    inputs = {
        "questions": config.work.questions,
        "replies": config.work.replies,
        "documents": None if schemas.squad else config.work.documents,
    }
    fingerprints: dict[str, Any] = {name: input_fingerprint(path) for name, path in inputs.items() if path}
    if config.retrieval.index is not None:
        fingerprints["index"] = index_fingerprint(config.retrieval.index)
    if pooled is not None:
        fingerprints["pooled_contexts"] = pooled.fingerprint()
    identity = {"config": config.identity(), "inputs": fingerprints, "model": model_fingerprint(config.model)}
    if config.ranking.ranker is not None and schemas.retrieval:
        identity["ranker"] = model_fingerprint(ModelSettings(model=config.ranking.ranker))
    return identity


def shared_paths(config: JobConfig, squad: SquadInput | None, schemas: Schemas) -> list[SharedPath]:
    """
    The paths of the run that the cluster's tasks and actors use, on whichever node runs them: the output folder
    (written), the Parquet inputs (read by Ray Data's tasks), an `--index` (memory-mapped by the retrieval actors)
    and a model folder (loaded by the tokenize tasks and the reader actors). A SQuAD file of questions is read by the
    driver alone and sent through the object store: it need not be shared. A model named by its hub id is not a
    path (each node loads it from its own cache).
    """
    work = config.work
    paths = [SharedPath("--output", config.run.output, written=True)]
    if squad is None:
        paths.append(SharedPath("--questions", work.questions))
    if schemas.documents is not None and work.documents:  # else the pooled contexts, in the output folder
        paths.append(SharedPath("--documents", work.documents))
    if work.replies:
        paths.append(SharedPath("--replies", work.replies))
    if config.retrieval.index:
        paths.append(SharedPath("--index", config.retrieval.index))
    return [
        *paths,
        *model_folder("--model", config.model.model),
        *model_folder("--embedding-model", config.retrieval.embedding_model if config.retrieval.dense else None),
        *model_folder("--ranker", config.ranking.ranker if schemas.retrieval else None),
    ]


@dataclass(frozen=True)
class IdCheck:
    """The id check's result: how many questions there are and how many each output shard holds."""

    n_questions: int
    num_shards: int
    questions_per_shard: dict[int, int] | None  # None until checked (on the cluster, for large id columns)


def input_tables(config: JobConfig, schemas: Schemas, squad: SquadInput | None) -> list[tuple[TableSpec, str]]:
    """The Parquet tables the run reads, with their paths (a SQuAD file's questions are not one)."""
    work = config.work
    tables = [] if squad is not None else [(QUESTIONS, work.questions)]
    if schemas.documents is not None:
        tables.append((DOCUMENTS, work.documents))
    if schemas.replies is not None:
        tables.append((REPLIES, work.replies))
    return tables


def count_questions(config: JobConfig, squad: SquadInput | None) -> int:
    """The questions of the run, from the Parquet footers (a SQuAD file's are in the driver)."""
    return squad.table.num_rows if squad is not None else table_rows(config.work.questions)


def choose_engine(
    config: JobConfig, squad: SquadInput | None, n_questions: int, corpus: InputFolder | None = None
) -> Engine:
    """
    The engine the run's `engine` setting names; for `auto`, in-process when the job joins no Ray (no `--address`,
    no `RAY_ADDRESS`, no Ray already running in this process), asks for one reader (`num_actors` unset or 1),
    its `n_questions` are at most `IN_PROCESS_MAX_QUESTIONS` and its documents can be joined by broadcast (a
    `corpus` of files to convert: by the files' bytes) or are not read (`retrieval.given_store`); else Ray.
    """
    run = config.run
    if run.engine != AUTO_ENGINE:
        return InProcessEngine() if run.engine == IN_PROCESS_ENGINE else RayEngine()
    ray_module = sys.modules.get("ray")  # imported by the job only to start or join a Ray
    running = ray_module is not None and ray_module.is_initialized()
    joins = bool(run.address or os.environ.get("RAY_ADDRESS")) or running
    documents = config.work.documents if squad is None else None
    if documents is not None and corpus is None and given_store(config.retrieval, documents):
        documents = None  # the documents are read from the index's stores, no documents table joined
    small = (
        n_questions <= IN_PROCESS_MAX_QUESTIONS
        and (run.num_actors or 1) == 1
        and (documents is None or joins_by_broadcast(corpus.size_bytes if corpus else table_bytes(documents)))
    )
    return InProcessEngine() if small and not joins else RayEngine()


def check_small_ids(
    config: JobConfig, schemas: Schemas, squad: SquadInput | None, engine: Engine, n_questions: int
) -> IdCheck:
    """
    The shards of the run's `n_questions` (`count_questions`) and, when the id columns hold at most
    `DRIVER_CHECK_MAX_ROWS` rows in all (or the run is in-process), checks them here with pyarrow, reading the id
    columns only (`check_ids_in_driver`); larger ones are checked on the cluster by `read_inputs`.

    :raises InputError: When a small id column holds nulls, empty strings or duplicates.
    """
    tables = input_tables(config, schemas, squad)
    num_shards = max(1, math.ceil(n_questions / config.work.shard_size))
    total = n_questions + sum(table_rows(path) for spec, path in tables if spec is not QUESTIONS)
    if engine.name == RAY_ENGINE and total > DRIVER_CHECK_MAX_ROWS:
        return IdCheck(n_questions, num_shards, None)
    ids = [(spec, path, read_ids(path, spec)) for spec, path in tables]
    if squad is not None:
        ids.insert(0, (QUESTIONS, config.work.questions, squad.table["id"]))
    return IdCheck(n_questions, num_shards, check_ids_in_driver(ids, num_shards))


def read_inputs(
    config: JobConfig,
    schemas: Schemas,
    squad: SquadInput | None,
    ids: IdCheck,
    engine: Engine,
    filters: RunFilters | None = None,
) -> tuple[Inputs, dict[int, int]]:
    """
    The input datasets (the engine's) and how many questions each shard holds (the id check run on the cluster if
    `check_small_ids` left it). With `filters`, the questions carry their own (`filters` column, for the retrieval
    stages), and those that name `document_ids` keep the ones that match (`restrict_named_documents`).

    :raises InputError: When an id column holds nulls, empty strings or duplicates.
    """
    work = config.work
    listed = [name for name in ("context" if schemas.squad else "document_ids", FILTERS)
              if name in schemas.questions.names]  # fmt: skip
    if squad is not None:
        questions = engine.from_arrow(squad.blocks(schemas.questions.names))
    else:
        questions = engine.read_parquet(work.questions, ["id", "query", *listed])
    checks = [(QUESTIONS, work.questions, questions)]
    documents = replies = None
    if schemas.documents is not None:
        columns = [name for name in JOINED_DOCUMENT_COLUMNS if name in schemas.documents.names]
        documents = engine.read_parquet(work.documents, columns)
        checks.append((DOCUMENTS, work.documents, documents))
    if schemas.replies is not None:
        meta = ["meta"] if "meta" in schemas.replies.names else []
        replies = engine.read_parquet(work.replies, ["question_id", "replies", *meta])
        checks.append((REPLIES, work.replies, replies))
    expected = ids.questions_per_shard
    if expected is None:  # the cluster's id check: one hash partition per 50,000 questions
        partitions = max(1, min(MAX_SHUFFLE_PARTITIONS, ids.n_questions // 50_000))
        expected = check_ids(checks, ids.num_shards, partitions)
    document_table, document_parts = (None, None) if documents is None else plan_documents_join(work.documents, engine)
    if filters is not None and "document_ids" in listed:
        restriction = {"documents": work.documents, "common": config.retrieval.filters, "fields": filters.fields}
        questions = questions.map_batches(
            restrict_named_documents, batch_format="pyarrow", fn_kwargs=restriction, num_cpus=engine.task_cpus
        )
    inputs = Inputs(
        engine, questions, documents, document_table, document_parts, replies, schemas.squad, ids.num_shards
    )
    return inputs, expected


def shard_tables(schemas: Schemas) -> tuple[str, ...]:
    """The tables each shard of the run commits (see `jobs.bulk_qa.workers.aggregate.aggregate_shard`)."""
    return ("questions", "answers", "generated_answers") if schemas.replies is not None else ("questions", "answers")


def answer_pending_shards(
    config: JobConfig,
    inputs: Inputs,
    expected: dict[int, int],
    resumed: dict[int, Any],
    pool: ActorResources,
    output: OutputFolder,
    tables: tuple[str, ...],
    before_wave: Callable[[], object] | None = None,
) -> dict[int, dict[str, Any]]:
    """
    Answers the shards not committed yet, `shards_per_wave` at a time; returns their markers by shard, each as the
    driver read it from `output` with the shard's `tables` once the shard's task reported it committed.
    `before_wave` runs before each wave but the first (the run's shared paths checked on nodes that joined since).

    :raises ShardNotVisible: For a shard whose task committed files that the driver cannot read.
    """
    pending = [shard for shard in sorted(expected) if shard not in resumed]
    every = inputs.every_document
    progress = Progress(
        sum(expected[shard] for shard in pending),
        len(pending),
        enabled=not config.run.quiet,
        questions_per_document=None if every is None else every.num_rows,
    )
    answer = answer_wave if every is None else answer_documents_wave
    markers: dict[int, dict[str, Any]] = {}
    # In-process, the run waits for nothing but its own reader. On Ray, the watch ends a run that cannot go on even
    # with --quiet, which only silences its stall lines.
    engine = inputs.engine
    watch = StallWatch(
        config.run.stall_warning_s,
        lambda: engine.waiting(pool.cpus_per_actor, pool.gpus_per_actor),
        config.run.stall_exit_s,
        lambda: engine.missing_capacity(),
        warn=not config.run.quiet,
        enabled=bool(pending) and isinstance(engine, RayEngine),
    )

    def committed(reported: dict[str, Any]) -> None:
        if reported["shard"] in markers:  # a retried aggregation task may report its shard twice
            return
        marker = output.read_commit(reported["shard"], reported, tables)
        progress.shard_committed(marker["questions"])
        watch.committed()
        markers[marker["shard"]] = marker

    with watch:
        for first in range(0, len(pending), config.run.shards_per_wave):
            shards = pending[first : first + config.run.shards_per_wave]
            if first and before_wave is not None:
                before_wave()
            answer(config, inputs, frozenset(shards), sum(expected[shard] for shard in shards), pool, committed)
    progress.close()
    return markers


if __name__ == "__main__":
    sys.exit(main())
