"""
The reader pool: `--num-actors N` gives N actors work on a small input (its sequences cut into at least N actor
batches), and the manifest records the resources the actors used, not the settings meant for GPUs.
"""

import json
from pathlib import Path

import pytest

from jobs.bulk_qa import driver, report
from jobs.bulk_qa.config import RunSettings
from jobs.bulk_qa.waves import ActorResources, actor_resources, sequences_per_batch
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
    alone = actor_resources(RunSettings(), {"engine": "in-process", "gpus": 0, "cpus": 2.0})
    assert alone == ActorResources(1, 0.0, 2.0, 2)  # in-process: one reader with the machine's threads


@pytest.fixture
def data_context():
    """Ray Data's current settings, restored after the test."""
    import ray.data

    saved = ray.data.DataContext.get_current().copy()
    yield ray.data.DataContext.get_current()
    ray.data.DataContext._set_current(saved)


@pytest.mark.parametrize(("num_actors", "wait_s"), [(2, driver.ACTORS_START_TIMEOUT_S), (1, -1)])
def test_several_readers_have_all_started_before_the_pipeline_does(data_context, num_actors, wait_s) -> None:
    driver.configure_ray_data(RunSettings(), ActorResources(num_actors, 0.0, 0.5, 1))
    assert data_context.wait_for_min_actors_s == wait_s  # one reader: it loads its model while the inputs are read
    # Parquet footers read without FooterReader actors, whose worker processes cost seconds per read
    assert data_context.use_datasource_v2 is False


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
        "  readers     1 of 2 reader actors had work: this run's 3 sequences made fewer actor batches than there "
        "are actors"
    )
    assert report.idle_readers(manifest(2, 30)) == ""
    assert report.idle_readers(manifest(0, 0)) == ""  # a resumed run with nothing left to read
