"""
Where a job writes and how it executes on Ray (`RunSettings`): the bulk job's `run` phase, whose Ray options
`python -m jobs.index` shares.
"""

from dataclasses import dataclass

from jobs.engines import AUTO_ENGINE, ENGINES, IN_PROCESS_ENGINE
from jobs.storage import redact
from qa_core.settings import Settings, at_least, setting


@dataclass(frozen=True)
class RunSettings(Settings):
    """Where the run writes and how it executes: a resumed run may change any of these."""

    # On a cluster of several nodes: object storage or a folder every node mounts at this path (see CLUSTER_PATHS).
    output: str | None = setting(None, "folder that receives answers/, questions/, generated_answers/, manifest.json")
    overwrite: bool = setting(False, "replace the output of an earlier run made with other inputs or settings")
    address: str | None = setting(None, "Ray cluster to join (e.g. ray://head:10001 or auto); None: start a local Ray")
    engine: str = setting(
        AUTO_ENGINE, "ray; in-process: in this process, no Ray; auto: in-process for small local jobs"
    )
    num_actors: int | None = setting(None, "reader actors; None: one per GPU, or one on a CPU-only cluster")
    gpus_per_actor: float | None = setting(None, "GPUs each reader actor holds when the cluster has GPUs; None: 1")
    cpus_per_actor: float = setting(
        0.5, "logical CPUs each reader actor reserves; the pool takes at most 1/4 of the cluster"
    )
    sequences_per_actor_batch: int = setting(1024, "sequences handed to an actor at once (sorted by length inside)")
    shards_per_wave: int = setting(
        10, "shards answered by one pipeline run; bounds memory, as a wave is shuffled at once"
    )
    verbose: bool = setting(False, "also show Ray's own logs and Ray Data's progress bars and operator tables")
    stall_warning_s: float = setting(
        300.0,
        "seconds without a committed shard, while shards are pending, after which the progress says what the run "
        "waits for (on Ray: the actors that have no node, and the cluster's free resources), and again as often "
        "meanwhile",
    )
    stall_exit_s: float = setting(
        300.0,
        "seconds for which what a run on Ray waits for has fitted no node of the cluster (actors or tasks asking for "
        "more than any live node has), no shard committed meanwhile, after which it ends (exit 1, committed shards "
        "kept, the same command resumes): the time an autoscaler or a replaced node has to bring what is missing; "
        "0: never",
    )
    quiet: bool = setting(False, "print only the summary and errors (no progress)")
    # Least sure = lowest qa_core.annotation.review_score: the answer's score, a refusal's no-answer probability, 0 when
    # nothing was read. Tasks are written least sure first either way.
    review: int | None = setting(
        None, "label_studio.json keeps only the N questions the model is least sure of; None: all"
    )

    def problems(self) -> list[str]:
        problems = [] if self.output else ["--output is required"]
        if self.engine not in ENGINES:
            problems.append(f"engine must be one of {', '.join(ENGINES)}, not {self.engine!r}")
        if self.engine == IN_PROCESS_ENGINE and self.address:
            address = redact(self.address)
            problems.append(f"engine {IN_PROCESS_ENGINE} runs without Ray: it cannot join --address {address}")
        if self.engine == IN_PROCESS_ENGINE and (self.num_actors or 1) > 1:
            problems.append(
                f"engine {IN_PROCESS_ENGINE} reads with one reader: num_actors must be 1, not {self.num_actors}"
            )
        problems += at_least("num_actors", self.num_actors, 1, optional=True)
        if self.gpus_per_actor is not None and not self.gpus_per_actor > 0:
            problems.append(f"gpus_per_actor must be > 0, not {self.gpus_per_actor}")
        problems += at_least("cpus_per_actor", self.cpus_per_actor, 0)
        problems += at_least("sequences_per_actor_batch", self.sequences_per_actor_batch, 1)
        if not self.stall_warning_s > 0:
            problems.append(f"stall_warning_s must be > 0, not {self.stall_warning_s}")
        problems += at_least("stall_exit_s", self.stall_exit_s, 0)
        problems += at_least("review", self.review, 1, optional=True)
        return problems + at_least("shards_per_wave", self.shards_per_wave, 1)
