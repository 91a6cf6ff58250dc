"""
Where a job runs, started: this process for the in-process engine, else a Ray started or joined (`start_ray`) with
Ray Data configured for the job (`configure_ray_data`), and on a cluster of several nodes the job's shared paths
checked. The bulk job and `python -m jobs.index` start their engine here.
"""

import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from jobs.engines import RAY_ENGINE, Engine, InProcessEngine, live_nodes
from jobs.ray_logs import RAY_AUTH_SETUP_LOGGER, RayLogFilter, quiet_ray_data
from jobs.run_settings import RunSettings
from jobs.shared_paths import SharedPath, check_shared


def start_engine(
    run: RunSettings,
    engine: Engine,
    ray_logs: RayLogFilter,
    shared: Sequence[SharedPath] = (),
    program: str = "bulk-qa",
    probed: set[str] | None = None,
) -> dict[str, Any]:
    """
    Where the run runs, started: this process for the in-process engine, else the Ray `start_ray` starts or joins,
    with Ray Data configured for the run (before any of its datasets is made: each copies these settings) and,
    without `run.verbose`, `ray_logs` started first (the driver's C++ log writes to stderr from Ray's start). On a
    cluster of several nodes, the `shared` paths are then checked to be the same on every node, before any work
    (`jobs.shared_paths.check_shared`, its message naming `program`; the seconds it took in `shared_paths_s`; the
    nodes checked added to `probed`).

    :raises NotShared: For a local path that some node does not see as the driver does.
    """
    if isinstance(engine, InProcessEngine):
        return engine.cluster()
    if not run.verbose:
        ray_logs.start()
    cluster = start_ray(run)
    configure_ray_data(run)
    return {**cluster, "shared_paths_s": check_shared(list(shared), program, probed)}


def start_ray(run: RunSettings) -> dict[str, Any]:
    """
    Joins the cluster at `run.address`, or at `RAY_ADDRESS` (as `ray job submit` sets it), or else starts a Ray of
    its own on this machine, even when another one runs here (`address="local"`: a cluster someone started with
    `ray start`, alive or dead, is never joined by accident). The Ray it starts gets `own_ray_config()`; a Ray
    already initialised in this process is used. Ray's own logs show only with `run.verbose`.

    :returns: The cluster the job runs on: its address, whether the job started it, nodes, CPUs, GPUs, and the
        seconds it took.
    """
    import ray

    started = time.time()
    target = run.address or os.environ.get("RAY_ADDRESS") or "local"
    joins = not ray.is_initialized()  # else this process's own Ray is used, as it is
    started_here = joins and target == "local"
    level = ray_log_level(run)
    if joins:
        # Its own Ray has no dashboard: nothing submits jobs to it, and its ten processes would start with the job.
        options = {"_system_config": own_ray_config(), "include_dashboard": False} if started_here else {}
        # With RAY_AUTH_MODE unset, Ray enables token authentication for a Ray it starts, as it should, and warns
        # that it did on every run: the notice shows with --verbose only.
        logging.getLogger(RAY_AUTH_SETUP_LOGGER).setLevel(level if run.verbose else logging.ERROR)
        # Workers' output (model loading, Ray's notices of restarts and lost nodes) reaches this output only with
        # --verbose, on a cluster joined too; an exception of the job's tasks or actors still ends the run with it.
        ray.init(address=target, log_to_driver=run.verbose, logging_level=level, **options)
        if not run.verbose:
            silence_ray_notices()
    resources = ray.cluster_resources()
    nodes = live_nodes()
    cluster = {
        "engine": RAY_ENGINE,
        "address": ray.get_runtime_context().gcs_address,
        "started_by_job": started_here,
        "nodes": len(nodes),
        "cpus": resources.get("CPU", 0),
        # the node with the fewest CPUs but some (a head of 0 CPUs runs nothing): one of them must run the job
        "smallest_node_cpus": min((cpus for node in nodes if (cpus := node.get("CPU", 0))), default=0),
        "gpus": resources.get("GPU", 0),
        "start_s": round(time.time() - started, 3),
    }
    if joins and not started_here and not run.quiet:
        print(f"bulk-qa: running on the Ray cluster at {cluster['address']}", file=sys.stderr, flush=True)
    return cluster


def silence_ray_notices() -> None:
    """
    Ray's notices to every driver of the cluster (a node marked dead after missed heartbeats, a task retried
    because its node died, a worker killed for memory) are printed by a thread of the driver on its stdout, which
    holds only the job's summary: without --verbose they are dropped, as the workers' logs are
    (`log_to_driver=False`). The job's own faults still end the run with their message: Ray raises them in the
    driver as exceptions. (Ray 2.60 has no setting for it: its listener prints through
    `ray._private.worker.print_to_stdstream`, replaced here; with log_to_driver off nothing else prints through it.)
    """
    import ray._private.worker

    ray._private.worker.print_to_stdstream = lambda data, ignore_prefix=False: None


def ray_log_level(run: RunSettings) -> int:
    """The level of Ray's and Ray Data's loggers: their information with `run.verbose`, else warnings only."""
    return logging.INFO if run.verbose else logging.WARNING


def configure_ray_data(run: RunSettings) -> None:
    """
    Ray Data's settings for this run, in this process's current `DataContext` (a dataset copies them when it is
    made). Its logs, progress bars, operator tables and issue detectors' advice (`jobs.ray_logs.quiet_ray_data`)
    show only with `run.verbose`: the job shows its own progress; the issue detectors' advice (a reader actor
    holding its model uses over a GiB and requests no memory) is for pools that grow, which the job's fixed pool
    makes moot.
    """
    import ray.data

    quiet_ray_data(run.verbose)
    context = ray.data.DataContext.get_current()
    # Sort-based shuffles run as tasks: no shuffle actors to start, which dominates on small inputs.
    context.shuffle_strategy = ray.data.context.ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
    # Parquet inputs are read by Ray Data's file reader, which reads their footers in the driver and in the read
    # tasks. Its DataSourceV2 reader starts FooterReader actors for every read, a new worker process each: on two
    # cores 5 to 8 s per read, and a wave reads its questions twice.
    context.use_datasource_v2 = False


def own_ray_config() -> dict[str, Any]:
    """
    Ray's settings for the Ray the job starts. The raylet prints a warning on the driver's stdout once it has
    started 4x `worker_maximum_startup_concurrency` Python workers (the CPU count by default): a normal run on 2
    cores starts about 10 (reader and retrieval actors, map and shuffle tasks). At least 8 keeps that harmless
    warning away on small machines; it also lets up to that many workers start at once, and leaves machines of
    8 CPUs or more as Ray sets them.
    """
    return {"worker_maximum_startup_concurrency": max(8, os.cpu_count() or 1)}
