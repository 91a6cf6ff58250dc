"""Which Ray the job runs on: its own local Ray unless told to join one (`--address`, or `RAY_ADDRESS`); or none."""

import logging

import pytest

from jobs import ray_start
from jobs.bulk_qa import driver, waves
from jobs.bulk_qa.squad_input import load_squad_input
from jobs.run_settings import RunSettings


class Joined(Exception):
    """Stops `start_ray` right after `ray.init`, whose arguments it records."""


@pytest.fixture
def init_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    import ray

    calls: list[dict] = []

    def init(**kwargs):
        calls.append(kwargs)
        raise Joined

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return calls


@pytest.mark.parametrize(
    ("address", "environment", "expected"),
    [
        (None, None, "local"),  # a cluster started here with `ray start` (or its stale address file) is not joined
        (None, "10.0.0.5:6379", "10.0.0.5:6379"),  # as `ray job submit` runs the driver
        ("auto", None, "auto"),
        ("ray://head:10001", "10.0.0.5:6379", "ray://head:10001"),  # --address wins
    ],
)
def test_the_job_starts_its_own_ray_unless_told_to_join_one(
    init_calls: list[dict], monkeypatch: pytest.MonkeyPatch, address, environment, expected
) -> None:
    if environment:
        monkeypatch.setenv("RAY_ADDRESS", environment)
    with pytest.raises(Joined):
        ray_start.start_ray(RunSettings(address=address))
    # settings only for its own; workers' logs are forwarded with --verbose only, on a cluster joined too
    own = {"_system_config": ray_start.own_ray_config(), "include_dashboard": False} if expected == "local" else {}
    assert init_calls == [{"address": expected, "log_to_driver": False, "logging_level": logging.WARNING, **own}]


def test_verbose_forwards_the_workers_logs_from_a_cluster_joined(init_calls: list[dict]) -> None:
    with pytest.raises(Joined):
        ray_start.start_ray(RunSettings(address="auto", verbose=True))
    assert init_calls == [{"address": "auto", "log_to_driver": True, "logging_level": logging.INFO}]


def test_its_own_ray_keeps_the_worker_count_warning_away_on_small_machines() -> None:
    assert ray_start.own_ray_config()["worker_maximum_startup_concurrency"] >= 8


SAMPLE = {"questions": "data/sample/questions.parquet", "documents": "data/sample/documents.parquet", "output": "o"}


@pytest.mark.parametrize(
    ("values", "patches", "expected"),
    [
        ({}, {}, "in-process"),  # the sample: 12 questions, a small documents table, no cluster named
        ({"address": "auto"}, {}, "ray"),
        ({}, {"RAY_ADDRESS": "10.0.0.5:6379"}, "ray"),  # as `ray job submit` runs the driver
        ({}, {"ray_initialized": True}, "ray"),  # a Ray this process already runs (the tests' own)
        ({"num_actors": 2}, {}, "ray"),
        ({}, {"IN_PROCESS_MAX_QUESTIONS": 11}, "ray"),
        ({}, {"BROADCAST_DOCUMENTS_MAX_BYTES": 0}, "ray"),  # documents too large to hold whole
        ({"engine": "ray"}, {}, "ray"),
        ({"engine": "in-process"}, {"IN_PROCESS_MAX_QUESTIONS": 11}, "in-process"),
        ({"questions": "data/sample/squad_sample.json"}, {}, "in-process"),  # 12 SQuAD questions, no documents
        ({"questions": "data/sample/squad_sample.json"}, {"IN_PROCESS_MAX_QUESTIONS": 11}, "ray"),
    ],
)
def test_auto_runs_small_local_jobs_in_process(
    monkeypatch: pytest.MonkeyPatch, values: dict, patches: dict, expected: str
) -> None:
    import ray

    from jobs.bulk_qa.config import JobConfig

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: patches.get("ray_initialized", False))
    for name, value in patches.items():
        if name == "RAY_ADDRESS":
            monkeypatch.setenv(name, value)
        elif name == "BROADCAST_DOCUMENTS_MAX_BYTES":
            monkeypatch.setattr(waves, name, value)
        elif name != "ray_initialized":
            monkeypatch.setattr(driver, name, value)
    config = JobConfig.from_values({**SAMPLE, **values})
    squad = load_squad_input(config.work.questions, False)  # None unless a SQuAD file
    assert driver.choose_engine(config, squad, driver.count_questions(config, squad)).name == expected


class Filter:
    """Records whether `start_engine` started the filter of Ray's log lines."""

    started = False

    def start(self) -> None:
        self.started = True


@pytest.mark.parametrize(("engine", "verbose", "filtered"), [("ray", False, True), ("ray", True, False),
                                                             ("in-process", False, False)])  # fmt: skip
def test_rays_log_lines_are_filtered_on_ray_without_verbose(
    monkeypatch: pytest.MonkeyPatch, engine: str, verbose: bool, filtered: bool
) -> None:
    """Before Ray starts: the driver's C++ log writes to stderr from `ray.init` on (see `jobs.ray_logs`)."""
    ray_logs = Filter()
    monkeypatch.setattr(ray_start, "start_ray", lambda run: {"started with the filter": ray_logs.started})
    monkeypatch.setattr(ray_start, "configure_ray_data", lambda run: None)
    engine = driver.RayEngine() if engine == "ray" else driver.InProcessEngine()
    cluster = ray_start.start_engine(RunSettings(verbose=verbose), engine, ray_logs)
    assert ray_logs.started is filtered
    assert cluster.get("started with the filter", False) is filtered
