"""
The reader pool: `--num-actors N` gives N actors work on a small input (its sequences cut into at least N actor
batches), and the manifest records the resources the actors used, not the settings meant for GPUs.
"""

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobs import engines, ray_start
from jobs.bulk_qa import report
from jobs.bulk_qa.waves import ActorResources, actor_resources, sequences_per_batch, task_cpus
from jobs.engines import RayEngine
from jobs.run_settings import RunSettings
from tests.jobs.conftest import run_job


def test_a_small_wave_makes_at_least_one_batch_per_actor() -> None:
    run = RunSettings(sequences_per_actor_batch=1024)
    two, one = ActorResources(2, 0.0, 0.5, 1), ActorResources(1, 0.0, 0.5, 2)
    assert sequences_per_batch(run, two, wave_questions=12) == 6  # 12 questions make >= 12 sequences: >= 2 batches
    assert sequences_per_batch(run, two, wave_questions=10_000) == 1024
    assert sequences_per_batch(run, two, wave_questions=1) == 1
    assert sequences_per_batch(run, one, wave_questions=12) == 1024  # one actor: the batches as configured


def test_resources_are_those_of_the_cluster() -> None:
    cpu_only = actor_resources(RunSettings(num_actors=2), {"engine": "ray", "gpus": 0, "cpus": 4})
    assert (cpu_only.num_actors, cpu_only.gpus_per_actor, cpu_only.cpu_threads) == (2, 0.0, 2)
    gpus = actor_resources(RunSettings(), {"engine": "ray", "gpus": 4, "cpus": 16})
    assert (gpus.num_actors, gpus.gpus_per_actor) == (4, 1.0)  # gpus_per_actor unset: one GPU each
    halves = actor_resources(RunSettings(gpus_per_actor=0.5), {"engine": "ray", "gpus": 2, "cpus": 16})
    assert (halves.num_actors, halves.gpus_per_actor) == (4, 0.5)
    ranked = actor_resources(RunSettings(), {"engine": "ray", "gpus": 4, "cpus": 16}, ranks=True)
    assert (ranked.num_actors, ranked.gpus_per_actor, ranked.ranker_gpus) == (4, 0.75, 0.25)  # a ranker beside
    assert actor_resources(RunSettings(), {"engine": "ray", "gpus": 0, "cpus": 4}, ranks=True).ranker_gpus == 0.0
    alone = actor_resources(RunSettings(), {"engine": "in-process", "gpus": 0, "cpus": 2.0})
    assert alone == ActorResources(1, 0.0, 2.0, 2)  # in-process: one reader with the machine's threads


def test_tasks_fit_beside_an_actor_on_the_smallest_node() -> None:
    """On nodes of 1 CPU a task takes what a reader (or retrieval) actor of half a CPU leaves; on larger ones, 1."""
    half = ActorResources(1, 0.0, 0.5, 1)
    assert task_cpus({"cpus": 2, "smallest_node_cpus": 1}, half) == 0.5
    assert task_cpus({"cpus": 2, "smallest_node_cpus": 2}, half) == 1.0  # the local Ray of 2 CPUs: as before
    assert task_cpus({"cpus": 8, "smallest_node_cpus": 1}, ActorResources(1, 0.0, 1.0, 1)) == 0.25  # the floor


class Big:
    """An actor that asks for more CPUs than any node has (see below)."""


def test_a_stalled_run_names_the_actors_without_a_node_and_the_free_resources(local_ray) -> None:
    """An actor that asks for more CPUs than any node has waits for a node: the stall line says so."""
    actor = local_ray.remote(num_cpus=64)(Big).remote()
    engine, deadline = RayEngine(task_cpus=0.5), time.monotonic() + 60
    try:  # the actor is registered first (DEPENDENCIES_UNREADY), then waits for a node
        while "PENDING_CREATION" not in (text := engine.waiting(reader_cpus=0.5, reader_gpus=0.0)):
            assert time.monotonic() < deadline, text
            time.sleep(0.2)
    finally:
        local_ray.kill(actor)
    assert text.startswith("waiting: 1 Big PENDING_CREATION; each reader actor needs CPU 0.5, GPU 0, each task CPU 0.5")
    assert "; the cluster has CPU 2 free of 2, GPU 0 free of 0, on 1 node. " in text
    assert text.endswith("run the same command once it has: it resumes.")


@pytest.fixture
def data_context() -> Iterator[Any]:
    """Ray Data's current settings and the levels of its loggers, restored after the test."""
    import ray.data

    saved = ray.data.DataContext.get_current().copy()
    names = ["ray.data", *(name for name in logging.Logger.manager.loggerDict if name.startswith("ray.data."))]
    levels = {name: logging.getLogger(name).level for name in names}
    yield ray.data.DataContext.get_current()
    ray.data.DataContext._set_current(saved)
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def test_the_inputs_are_read_without_footer_reader_actors(local_ray, data_context) -> None:
    """Ray Data's DataSourceV2 Parquet reader starts actors for every read (seconds each on two cores): the job's
    reads take the file reader, in the settings each dataset copies when it is made."""
    ray_start.configure_ray_data(RunSettings())
    questions = RayEngine().read_parquet("data/sample/questions.parquet", ["id"])
    data_context.use_datasource_v2 = True  # a later change to the current settings is not the dataset's
    assert questions.context.use_datasource_v2 is False
    assert questions.count() == 12
    # Nor do Ray Data's issue detectors print their advice every 30 s, but with --verbose.
    assert questions.context.issue_detectors_config.detectors == []
    ray_start.configure_ray_data(RunSettings(verbose=True))
    assert RayEngine().read_parquet("data/sample/questions.parquet", ["id"]).context.issue_detectors_config.detectors


def test_two_actors_both_read_the_sample(local_ray, tmp_path: Path, tiny_bert_model: Path) -> None:
    output = tmp_path / "out"
    status = run_job("--config", "data/sample/job.yaml", "--model", tiny_bert_model, "--output", output,
                     "--num-actors", "2")  # fmt: skip
    assert status == 0
    manifest = json.loads((output / "manifest.json").read_text())
    assert len(manifest["workers"]) == 2, manifest["workers"]
    assert all(count > 0 for count in manifest["workers"].values())
    readers = manifest["cluster"]["reader_actors"]
    assert (readers["num_actors"], readers["with_work"], readers["gpus_per_actor"]) == (2, 2, 0.0)
    assert manifest["config"]["gpus_per_actor"] is None  # not set: no GPU claimed on a machine without one


def test_the_summary_says_when_fewer_actors_had_work() -> None:
    def manifest(with_work: int, sequences: int) -> dict:
        readers = {"num_actors": 2, "gpus_per_actor": 0.0, "cpus_per_actor": 0.5, "with_work": with_work}
        return {"cluster": {"reader_actors": readers}, "throughput": {"sequences": sequences}}

    assert report.idle_readers(manifest(1, 3)) == (
        "  readers     1 of 2 reader actors had work: Ray Data hands each batch of this run's 3 sequences to the "
        "actor with the fewest batches in flight, so a run of few batches can leave actors idle"
    )
    assert report.idle_readers(manifest(2, 30)) == ""
    assert report.idle_readers(manifest(0, 0)) == ""  # a resumed run with nothing left to read


def test_reader_actors_that_cannot_start_in_time_fail_the_run_with_one_line(
    local_ray, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_bert_model: Path
) -> None:
    """Two reader actors for a small wave, given no time to start (as on a cluster without the resources they ask
    for): exit status 1 and one line saying so, no traceback, nothing committed."""
    monkeypatch.setattr(engines, "ACTORS_START_TIMEOUT_S", 1e-3)
    output = tmp_path / "out"
    status = run_job("--config", "data/sample/job.yaml", "--model", tiny_bert_model, "--output", output,
                     "--num-actors", "2")  # fmt: skip
    err = capsys.readouterr().err
    assert status == 1 and "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("bulk-qa: error:")] == [
        "bulk-qa: error: a Ray actor of the job could not run: Timed out while starting actors. This may mean that "
        "the cluster does not have enough resources for the requested actor pool. Shards committed so far are "
        "kept: fix the cause and run the same command again to resume."
    ]
    assert list((output / "_shards").glob("*.json")) == []
