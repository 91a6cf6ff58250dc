"""
Retrieval in the bulk job: which questions need it, and the wave's retrieval: the stages of the run's retrieval
method's retrievers over its index (`jobs.retrieval.stages`, `jobs.indexing.plan`), then with the index's stores the
documents' texts (`workers.fetch`), then with `--ranker` the ranking stage (`workers.rank`), which reads those texts.
"""

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.bulk_qa.workers.fetch import fetch_passages
from jobs.bulk_qa.workers.rank import RankDocuments
from jobs.bulk_qa.workers.rows import wave_questions
from jobs.engines import Engine
from jobs.indexing.plan import IndexPlan
from jobs.ranker_settings import RankingSettings
from jobs.retrieval.stages import RETRIEVAL_ACTOR_MAX_CPUS, RETRIEVER_STAGES
from jobs.retrieval_settings import RetrievalSettings
from jobs.storage import parquet_dataset
from qa_core.models import DEFAULT_TOKEN

# Questions one ranking call ranks together (their pairs share length-sorted forward passes): 64 x 10 hits.
QUESTIONS_PER_RANKER_BATCH = 64
# The share of a GPU the ranker's actor holds on a cluster with GPUs (the reader actors leave it: see
# `jobs.bulk_qa.waves.actor_resources`).
RANKER_GPUS = 0.25


def needs_retrieval(questions_path: str, schema: pa.Schema) -> bool:
    """
    Whether any question lacks `document_ids`: the table has no such column (and no SQuAD `context`), or some
    rows hold null. Reads only the `document_ids` column.
    """
    if "document_ids" not in schema.names:
        return "context" not in schema.names
    return parquet_dataset(questions_path).count_rows(filter=pc.field("document_ids").is_null()) > 0


def retrieved_questions(
    questions: Any,
    wave: dict[str, Any],
    settings: RetrievalSettings,
    plan: IndexPlan,
    cluster_cpus: float,
    engine: Engine,
    ranking: RankingSettings | None = None,
    ranker_gpus: float = 0.0,
) -> Any:
    """
    The wave's questions, those without `document_ids` given their retrieved documents by the stages of the
    retrieval method's retrievers, in its order (`jobs.retrieval.stages.RETRIEVER_STAGES`: the index's shards
    memory-mapped by retrieval actors), and with `plan.store` each its documents' texts (`workers.fetch`), then with
    `ranking.ranker` reranked (`ranked`), materialized: both the explode and the question stages read them.
    """
    locations = plan.shard_locations
    retrieved = questions.map_batches(wave_questions, batch_format="pyarrow", fn_kwargs=wave, num_cpus=engine.task_cpus)
    for retriever in settings.method.retrievers:  # the last one joins the earlier ones' hits (`dense_stage`)
        retrieved = RETRIEVER_STAGES[retriever](retrieved, settings, plan, cluster_cpus, engine)
    if plan.store:
        retrieved = retrieved.map_batches(
            fetch_passages,
            batch_format="pyarrow",
            fn_kwargs={"locations": locations, "documents": plan.documents},
            num_cpus=engine.task_cpus,
        )
    if ranking is not None and ranking.ranker is not None:  # the driver refuses a ranker without stores
        retrieved = ranked(retrieved, ranking, cluster_cpus, engine, ranker_gpus)
    return retrieved.materialize()


def ranked(questions: Any, ranking: RankingSettings, cluster_cpus: float, engine: Engine, gpus: float) -> Any:
    """
    The questions, with their fetched texts, through the ranking stage (`workers.rank.RankDocuments`): one actor,
    on `gpus` of a GPU where the cluster has some, else on the CPU with a fraction of a CPU reserved (as the
    retrieval actors) and the cluster's CPUs as torch threads.
    """
    return questions.map_batches(
        RankDocuments,
        batch_format="pyarrow",
        batch_size=QUESTIONS_PER_RANKER_BATCH,
        compute=engine.actor_pool(1),
        fn_constructor_kwargs={
            "ranking": ranking,
            "token": DEFAULT_TOKEN,
            "cpu_threads": int(cluster_cpus or 1),
            "device": engine.reader_device(),
        },
        num_cpus=min(RETRIEVAL_ACTOR_MAX_CPUS, (cluster_cpus or 1) / 4),
        num_gpus=gpus,
    )
