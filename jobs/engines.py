"""
Where a run's pipelines execute. `RayEngine`: Ray Data datasets, read and mapped by the cluster's tasks, the reader
and retrieval stages in actor pools. `InProcessEngine`: the same pipelines on `InProcessDataset`, in the driver's
own process, for a small job on this machine, where Ray's start and its worker processes' imports would cost most
of a minute on two cores. Both run the same stage functions on the same tables: the outputs are the same.
"""

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from jobs.in_process import InProcessDataset
from jobs.storage import resolve_path

AUTO_ENGINE, RAY_ENGINE, IN_PROCESS_ENGINE = "auto", "ray", "in-process"
ENGINES = (AUTO_ENGINE, RAY_ENGINE, IN_PROCESS_ENGINE)  # the job's `engine` setting
# auto runs in-process a job of at most this many questions that joins no Ray cluster (see `driver.choose_engine`)
IN_PROCESS_MAX_QUESTIONS = 1_000
# How long a wave's reader actors may take to start (GPU nodes an autoscaler adds included): actors that
# cannot start in that time (a cluster without the resources they ask for) fail the run.
ACTORS_START_TIMEOUT_S = 3600
BROADCAST_READ_CPUS = 0.25  # the broadcast read's task: reserving a whole CPU would hold back the first wave's tasks


@dataclass(frozen=True)
class RayEngine:
    """
    The pipelines as Ray Data datasets, run by the Ray the driver started or joined.

    :param task_cpus: The CPUs each of the job's Ray Data tasks reserves (reads, joins, tokenize, aggregation),
        given once Ray runs: see `jobs.bulk_qa.waves.task_cpus`.
    """

    task_cpus: float = 1.0
    name = RAY_ENGINE

    def read_parquet(self, path: str, columns: list[str]) -> Any:
        """A Parquet input's `columns` as a Ray Data dataset (read lazily, by the cluster's tasks)."""
        import ray.data

        filesystem, inner = resolve_path(path)
        return ray.data.read_parquet(inner, filesystem=filesystem, num_cpus=self.task_cpus).select_columns(columns)

    def from_arrow(self, blocks: list[pa.Table], ordered: bool = False) -> Any:
        """
        Tables in the driver's memory as a Ray Data dataset, a block each. `ordered`: the dataset and those made
        from it keep the blocks' order through every stage (a write names its files in that order), at the cost
        of a stage's outputs waiting for the slower ones before them.
        """
        import ray.data

        dataset = ray.data.from_arrow(blocks)
        if ordered:
            dataset.context.execution_options.preserve_order = True  # the dataset's own context, not the global one
        return dataset

    def broadcast(self, read: Callable[[str], pa.Table], path: str) -> Any:
        """
        A reference to `read(path)` (the documents' columns the pairs join), which one task starts reading into
        the object store now: the driver holds only the reference, the tasks that join wait for it.
        """
        import ray

        return ray.remote(read).options(num_cpus=BROADCAST_READ_CPUS).remote(path)

    def actor_pool(self, size: int) -> Any:
        """The `compute` of a stage run by `size` actors."""
        import ray.data

        return ray.data.ActorPoolStrategy(size=size)

    def wait_for_actors(self, dataset: Any, wait: bool) -> None:
        """
        With `wait`, `dataset`'s pipeline starts once all its stages' actors have (Ray Data's
        `wait_for_min_actors_s`, in the dataset's own settings); else at once, the actors starting meanwhile.
        """
        dataset.context.wait_for_min_actors_s = ACTORS_START_TIMEOUT_S if wait else -1  # -1: Ray Data's default

    def reader_device(self) -> str | None:
        """None: a reader actor takes the GPU Ray assigned it, or the CPU."""
        return None

    def run_on_a_node(self, work: Callable[..., Any], *args: Any) -> Any:
        """
        `work(*args, cpus)` in one Ray task holding every CPU of the largest live node, `cpus` of them (for work
        that spreads over threads of its own, such as FAISS's build); its result.
        """
        import ray

        cpus = max(1, int(max(node.get("CPU", 0) for node in live_nodes())))
        task = ray.remote(work).options(num_cpus=cpus, name=getattr(work, "__name__", "work"))
        return ray.get(task.remote(*args, cpus))

    def waiting(self, reader_cpus: float, reader_gpus: float) -> str:
        """
        What a run that commits nothing waits for, in words: the job's actors that are not running (waiting for a
        node, or restarting after theirs was lost), what its reader actors and tasks each reserve, and what the
        cluster has free.
        """
        import ray

        waiting = Counter(f"{actor.name} {actor.state}" for actor in waiting_actors())
        actors = ", ".join(f"{count} {name}" for name, count in sorted(waiting.items())) or "no actor of the job"
        free, total = ray.available_resources(), ray.cluster_resources()
        nodes = len(live_nodes())
        return (
            f"waiting: {actors}; each reader actor needs CPU {reader_cpus:g}, GPU {reader_gpus:g}, each task CPU "
            f"{self.task_cpus:g}; the cluster has CPU {free.get('CPU', 0):g} free of {total.get('CPU', 0):g}, GPU "
            f"{free.get('GPU', 0):g} free of {total.get('GPU', 0):g}, on {nodes} node{'s' if nodes != 1 else ''}. "
            "If it lacks them for good, stop the run (Ctrl-C) and run the same command once it has: it resumes."
        )

    def missing_capacity(self) -> str | None:
        """
        What the run waits for that no live node of the cluster could run even idle, in words: its actors not
        running whose resources no node has (a reader asking for a GPU once the GPU nodes are lost), and its tasks
        if no node has the CPUs each reserves. None when every one would fit on some node (busy nodes included:
        the work waits for them to free up).
        """
        nodes = live_nodes()
        lacking = Counter(
            (actor.name, actor.resources)
            for actor in waiting_actors()
            if not actor.in_placement_group and not fits_a_node(actor.resources, nodes)
        )
        needs = [f"{count} {name} need{'s' if count == 1 else ''} {_amounts(dict(resources))}"
                 for (name, resources), count in sorted(lacking.items())]  # fmt: skip
        if not fits_a_node((("CPU", self.task_cpus),), nodes):
            needs.append(f"its tasks need CPU {self.task_cpus:g} each")
        if not needs:
            return None
        names = sorted({name for (_, resources) in lacking for name, _ in resources} | {"CPU"})
        largest = _amounts({name: max((node.get(name, 0) for node in nodes), default=0) for name in names})
        count = f"{len(nodes)} live node{'s' if len(nodes) != 1 else ''}"
        return f"{'; '.join(needs)}, more than any of its {count} has (at most {largest})"


@dataclass(frozen=True)
class WaitingActor:
    """An actor of the job that is not running: its class, its state in Ray's actor table, what it reserves."""

    name: str
    state: str  # DEPENDENCIES_UNREADY, PENDING_CREATION (waiting for a node) or RESTARTING
    resources: tuple[tuple[str, float], ...]  # (resource, amount), sorted
    # its resources are then a placement group's bundle's (`CPU_group_<id>`), which no node has until the group is
    # placed: whether it fits is the group's to say (the job makes none; a driver run inside one would)
    in_placement_group: bool = False


def waiting_actors() -> list[WaitingActor]:
    """The actors of this driver's job that are neither alive nor dead, from the GCS's actor table (no dashboard
    needed)."""
    import ray
    from ray._private import state
    from ray.core.generated.gcs_pb2 import ActorTableData

    job = ray.JobID.from_hex(ray.get_runtime_context().get_job_id())
    actors = [
        ActorTableData.FromString(row) for row in state.state._connect_and_get_accessor().get_actor_table(job, None)
    ]
    return [
        WaitingActor(
            actor.class_name,
            ActorTableData.ActorState.Name(actor.state),
            tuple(sorted((name, amount) for name, amount in actor.required_resources.items() if amount > 0)),
            bool(actor.placement_group_id),
        )
        for actor in actors
        if actor.state not in (ActorTableData.ALIVE, ActorTableData.DEAD)
    ]


def live_nodes() -> list[dict[str, float]]:
    """Each live node's total resources (`CPU`, `GPU`, `memory`, ...)."""
    import ray

    return [node["Resources"] for node in ray.nodes() if node["Alive"]]


def fits_a_node(resources: tuple[tuple[str, float], ...], nodes: list[dict[str, float]]) -> bool:
    """Whether some node's total resources hold every `(resource, amount)` (to Ray's precision, 1e-4)."""
    return any(all(node.get(name, 0) >= amount - 1e-4 for name, amount in resources) for node in nodes)


def _amounts(resources: dict[str, float]) -> str:
    """`CPU 0.5, GPU 1`."""
    return ", ".join(f"{name} {amount:g}" for name, amount in resources.items())


class InProcessEngine:
    """The pipelines as `InProcessDataset`s, run in this process: no Ray, the reader on this machine's GPU or CPU."""

    name = IN_PROCESS_ENGINE
    task_cpus = 1.0  # the stages run in this process: it places nothing

    def read_parquet(self, path: str, columns: list[str]) -> InProcessDataset:
        """A Parquet input's `columns`, read whole into this process."""
        return InProcessDataset.read_parquet(path, columns)

    def from_arrow(self, blocks: list[pa.Table], ordered: bool = False) -> InProcessDataset:
        """Tables in this process's memory as a dataset (in order, whatever `ordered` says)."""
        return InProcessDataset(blocks)

    def broadcast(self, read: Callable[[str], pa.Table], path: str) -> pa.Table:
        """`read(path)` (the documents' columns the pairs join), read now."""
        return read(path)

    def actor_pool(self, size: int) -> None:
        """Nothing: each stage runs in this process."""
        return None

    def wait_for_actors(self, dataset: InProcessDataset, wait: bool) -> None:
        """Nothing: no actors."""

    def run_on_a_node(self, work: Callable[..., Any], *args: Any) -> Any:
        """`work(*args, cpus)` in this process, with the CPUs it may run on; its result."""
        return work(*args, usable_cpus())

    def reader_device(self) -> str:
        """This machine's first GPU if torch sees one, else the CPU."""
        import torch

        return "cuda:0" if torch.cuda.is_available() else "cpu"

    def cluster(self) -> dict[str, Any]:
        """What the manifest records of where the run ran: this machine, no Ray."""
        return {
            "engine": self.name,
            "address": None,
            "started_by_job": False,
            "nodes": 1,
            "cpus": float(usable_cpus()),
            "gpus": 0 if self.reader_device() == "cpu" else 1,  # the reader's
            "start_s": None,  # no Ray started
        }


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, which a container's CPU set limits), else the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


Engine = RayEngine | InProcessEngine
