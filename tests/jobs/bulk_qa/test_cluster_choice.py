"""Which Ray the job runs on: its own local Ray unless told to join one (`--address`, or `RAY_ADDRESS`)."""

import logging

import pytest

from jobs.bulk_qa import driver
from jobs.bulk_qa.config import RunSettings


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
        driver.start_ray(RunSettings(address=address))
    own = {"_system_config": driver.own_ray_config()} if expected == "local" else {}  # settings only for its own
    assert init_calls == [
        {"address": expected, "log_to_driver": expected != "local", "logging_level": logging.WARNING, **own}
    ]


def test_its_own_ray_keeps_the_worker_count_warning_away_on_small_machines() -> None:
    assert driver.own_ray_config()["worker_maximum_startup_concurrency"] >= 8
