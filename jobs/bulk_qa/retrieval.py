"""
Retrieval in the bulk job: which questions need it, and the wave's retrieval: the stages of the run's retrieval
method's retrievers over its index (`jobs.retrieval.stages`, `jobs.indexing.plan`), then with the index's stores the
documents' texts (`workers.fetch`).
"""

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.bulk_qa.workers.fetch import fetch_passages
from jobs.bulk_qa.workers.rows import wave_questions
from jobs.engines import Engine
from jobs.indexing.plan import IndexPlan
from jobs.retrieval.stages import RETRIEVER_STAGES
from jobs.retrieval_settings import RetrievalSettings
from jobs.storage import parquet_dataset


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
) -> Any:
    """
    The wave's questions, those without `document_ids` given their retrieved documents by the stages of the
    retrieval method's retrievers, in its order (`jobs.retrieval.stages.RETRIEVER_STAGES`: the index's shards
    memory-mapped by retrieval actors), and with `plan.store` each its documents' texts (`workers.fetch`),
    materialized: both the explode and the question stages read them.
    """
    locations = plan.shard_locations
    retrieved = questions.map_batches(wave_questions, batch_format="pyarrow", fn_kwargs=wave, num_cpus=engine.task_cpus)
    for retriever in settings.method.retrievers:  # the last one joins the earlier ones' hits (`dense_stage`)
        retrieved = RETRIEVER_STAGES[retriever](retrieved, settings, plan, cluster_cpus, engine)
    # A ranker, re-scoring the joined hits, is a stage here: after the retrievers, before the texts are fetched.
    if plan.store:
        retrieved = retrieved.map_batches(
            fetch_passages,
            batch_format="pyarrow",
            fn_kwargs={"locations": locations, "documents": plan.documents},
            num_cpus=engine.task_cpus,
        )
    return retrieved.materialize()
