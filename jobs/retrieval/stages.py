"""
Retrieval on Ray: each retriever of a method (`qa_core.retrieval.methods.RETRIEVERS`) as a stage of actors over
an index's shards (`RETRIEVER_STAGES`). BM25 runs as stages of consecutive shards, an actor each
(`retrieve.RetrieveDocuments`), each merging its hits into the earlier stages'; the embedding retriever as one actor
(`retrieve_dense.RetrieveDense`), which with a method that joins also joins the hits the earlier stages carried in
the rows. Like the reader actors, the actors reserve a fraction of a CPU, together at most a quarter of the
cluster's, so that the tasks around them always find CPUs.
"""

from typing import Any

from jobs.engines import Engine
from jobs.indexing.plan import IndexPlan
from jobs.retrieval.retrieve import RetrieveDocuments
from jobs.retrieval.retrieve_dense import RetrieveDense
from jobs.retrieval_settings import RetrievalSettings
from qa_core.retrieval.sharding import shard_bounds

# Questions one retrieval call searches for (one `BM25Index.search` call).
QUESTIONS_PER_RETRIEVAL_BATCH = 256
# BM25 retrieval stages chained per CPU of the cluster (`shard_stages`): each stage searches its shards one after
# the other; more stages than CPUs add hand-overs between actors (Arrow tables through the object store) without
# more cores to run them.
BM25_STAGES_PER_CPU = 1
# The CPUs a retrieval actor reserves at most (less on a small cluster, so that tasks always find some)
RETRIEVAL_ACTOR_MAX_CPUS = 0.5


def bm25_stage(
    questions: Any, settings: RetrievalSettings, plan: IndexPlan, cluster_cpus: float, engine: Engine
) -> Any:
    """The BM25 retriever's stages (`bm25_shard_stages`) over the plan's index."""
    return bm25_shard_stages(
        questions, plan.shard_locations, settings.retriever_top_k, cluster_cpus, engine, filters=settings.filters
    )


def dense_stage(
    questions: Any, settings: RetrievalSettings, plan: IndexPlan, cluster_cpus: float, engine: Engine
) -> Any:
    """
    The embedding retriever's stage (`retrieve_dense.RetrieveDense`, one actor), which with a method that
    joins also joins the hits the earlier retrievers' stages carried in the rows with its own.
    """
    return questions.map_batches(
        RetrieveDense,
        batch_format="pyarrow",
        batch_size=QUESTIONS_PER_RETRIEVAL_BATCH,
        compute=engine.actor_pool(1),
        fn_constructor_kwargs={
            "location": plan.location,
            "dense": plan.record["dense"],
            "bm25_shards": plan.shard_locations,
            "retriever_top_k": settings.retriever_top_k,
            "joins": settings.method.joins,
            "join_mode": settings.join_mode,
            "join_weights": settings.fusion_weights(),
            "cpu_threads": int(cluster_cpus or 1),
            "search_precision": settings.embedding_search_precision,
            "ann_search": settings.ann_search(),
            "device": engine.reader_device(),
            "filters": settings.filters,
        },
        num_cpus=min(RETRIEVAL_ACTOR_MAX_CPUS, (cluster_cpus or 1) / 4),
    )


def bm25_shard_stages(
    questions: Any,
    locations: list[str],
    top_k: int,
    cluster_cpus: float,
    engine: Engine,
    stages_per_cpu: float = BM25_STAGES_PER_CPU,
    filters: dict[str, Any] | None = None,
) -> Any:
    """
    `questions` (`id`, `query`, optional `document_ids` and `filters`) through the BM25 shards' retrieval stages,
    chained in corpus order (`shard_stages`): each stage's consecutive shards memory-mapped by an actor of its own
    (`retrieve.RetrieveDocuments`), which merges its hits into the earlier stages'; the actors together
    reserve at most a quarter of the cluster's CPUs. `filters`: the run's filter for every question, or None.
    """
    stages = shard_stages(locations, cluster_cpus, stages_per_cpu)
    for stage in stages:
        questions = questions.map_batches(
            RetrieveDocuments,
            batch_format="pyarrow",
            batch_size=QUESTIONS_PER_RETRIEVAL_BATCH,
            compute=engine.actor_pool(1),
            fn_constructor_kwargs={"locations": stage, "retriever_top_k": top_k, "filters": filters},
            num_cpus=min(RETRIEVAL_ACTOR_MAX_CPUS, (cluster_cpus or 1) / (4 * len(stages))),
        )
    return questions


def shard_stages(
    locations: list[str], cluster_cpus: float, stages_per_cpu: float = BM25_STAGES_PER_CPU
) -> list[list[str]]:
    """
    The shards split into consecutive runs, one retrieval stage each: `stages_per_cpu` per CPU of the cluster, at
    least one, at most one per shard, their sizes differing by at most one (the first stages the smaller: their
    shards are searched with lower floors, or none, so each costs more).
    """
    n_stages = max(1, min(len(locations), round((cluster_cpus or 1) * stages_per_cpu)))
    bounds = shard_bounds(len(locations), n_stages)
    return [locations[start:stop] for start, stop in zip(bounds[:-1], bounds[1:], strict=True)]


# Each retriever's stage (the retrievers of `qa_core.retrieval.methods.RETRIEVERS`), run in a method's order.
RETRIEVER_STAGES = {"bm25": bm25_stage, "dense": dense_stage}
