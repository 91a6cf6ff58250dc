"""
The job's own progress: one plain line at most every 30 s without a terminal, the last shard always shown; a line
when no shard is committed for a while, and the end of a run that the cluster cannot run.
"""

import dataclasses
import io
import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from jobs.bulk_qa import driver
from jobs.bulk_qa.progress import Progress, RunStalled, StallWatch
from jobs.engines import RayEngine, waiting_actors
from tests.jobs.conftest import ROOT, run_job, run_process


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_at_most_every_30_seconds_and_at_the_end() -> None:
    clock, stream = Clock(), io.StringIO()
    progress = Progress(questions=600, shards=12, stream=stream, clock=clock)
    events = [(10, 50), (20, 50), (49, 150), (60, 50), (80, 100)] + [(85, 0)] * 6 + [(120, 200)]
    for second, questions in events:
        clock.now = second
        progress.shard_committed(questions)
    assert stream.getvalue().splitlines() == [
        "questions 50/600 (8%), shards 1/12, 5.0 questions/s, about 1m50s left",
        "questions 250/600 (42%), shards 3/12, 5.1 questions/s, about 1m09s left",  # 39 s after the first
        "questions 400/600 (67%), shards 5/12, 5.0 questions/s, about 40s left",  # 31 s after the second
        "questions 600/600 (100%), shards 12/12, 5.0 questions/s",  # the last shard, whenever it comes
    ]


def test_every_document_runs_count_pairs_and_documents() -> None:
    clock, stream = Clock(), io.StringIO()
    progress = Progress(questions=60, shards=2, stream=stream, clock=clock, questions_per_document=3)
    for second, pairs in ((10, 36), (20, 24)):
        clock.now = second
        progress.shard_committed(pairs)
    assert stream.getvalue().splitlines() == [
        "pairs 36/60 (60%), documents 12/20, shards 1/2, 3.6 pairs/s, about 7s left",
        "pairs 60/60 (100%), documents 20/20, shards 2/2, 3.0 pairs/s",
    ]


def test_quiet_prints_nothing() -> None:
    stream = io.StringIO()
    progress = Progress(questions=10, shards=1, enabled=False, stream=stream)
    progress.shard_committed(10)
    progress.close()
    assert stream.getvalue() == ""


def test_a_run_without_commits_says_what_it_waits_for_every_interval() -> None:
    clock, stream = Clock(), io.StringIO()
    watch = StallWatch(after_s=120, waiting=lambda: "waiting: 1 reader RESTARTING", stream=stream, clock=clock)
    said = []
    for second, commits in [(60, False), (119, False), (121, False), (200, False), (241, False), (250, True)]:
        clock.now = second
        if commits:
            watch.committed()
        said.append(watch.check())
    clock.now = 369  # 119 s after the last commit
    said.append(watch.check())
    clock.now = 371
    said.append(watch.check())
    assert said == [
        None, None, "bulk-qa: no shard committed for 2m01s: waiting: 1 reader RESTARTING", None,
        "bulk-qa: no shard committed for 4m01s: waiting: 1 reader RESTARTING", None, None,
        "bulk-qa: no shard committed for 2m01s: waiting: 1 reader RESTARTING",
    ]  # fmt: skip
    assert stream.getvalue().splitlines() == [line for line in said if line]


def test_a_run_ends_once_the_cluster_has_lacked_what_it_waits_for_for_the_exit_time() -> None:
    """Lacking at every check for `exit_after_s` with no commit meanwhile: a check that finds it fits (busy nodes
    included), or a commit, starts the time again."""
    clock, lacking, interrupted = Clock(), [], []
    watch = StallWatch(
        after_s=120, waiting=lambda: "waiting", exit_after_s=300, missing=lambda: lacking[-1], warn=False,
        enabled=False, stream=io.StringIO(), clock=clock, interrupt=lambda: interrupted.append(clock.now),
    )  # fmt: skip
    said = []
    events = [(0, "GPU", False), (250, "GPU", False), (299, None, False), (310, "GPU", False), (400, "GPU", True),
              (699, "GPU", False), (705, "1 Reader needs GPU 1", False), (710, "GPU", False)]  # fmt: skip
    with pytest.raises(RunStalled) as stalled, watch:
        for second, missing, commits in events:
            clock.now = second
            if commits:
                watch.committed()
            lacking.append(missing)
            said.append(watch.check())
        raise KeyboardInterrupt  # as the interrupt of the main thread lands there
    line = (
        "no shard committed for 5m05s, and for 5m05s the cluster has lacked what the run waits for: 1 Reader needs "
        "GPU 1. Shards committed so far are kept: run the same command once the cluster has it, and it resumes."
    )
    assert said == [None] * 6 + [line, None] and interrupted == [705] and str(stalled.value) == line


class SlowFinalizer:
    """An object whose finalizer takes a while: an interrupt landing in it is dropped by Python."""

    def __del__(self) -> None:
        for _ in range(20):  # Python code, which a pending interrupt interrupts
            time.sleep(0.01)


def test_an_interrupt_that_python_drops_is_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """
    The main thread spends its first second in finalizers (as when Ray Data's executors of earlier stages are
    collected): the first interrupt lands in one and Python drops it; the watch interrupts again and the run ends.
    """
    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: dropped.append(unraisable.exc_type))
    watch = StallWatch(60, lambda: "", exit_after_s=0.1, missing=lambda: "GPU 1", warn=False, interrupt_again_s=2.0)
    started = time.monotonic()
    with pytest.raises(RunStalled), watch:
        while time.monotonic() - started < 1:
            SlowFinalizer()  # collected at once: its finalizer runs here, in the main thread
        while time.monotonic() - started < 30:
            time.sleep(0.01)
    assert dropped == [KeyboardInterrupt] and time.monotonic() - started < 10


@pytest.mark.parametrize("setting", [signal.SIG_IGN, signal.SIG_DFL])
def test_a_process_that_ignores_sigint_still_has_its_run_ended(setting: signal.Handlers) -> None:
    """
    A job started with SIGINT ignored (`nohup ... &`, a script's background job, as the test suite run in the
    background was) or left to the system: Python drops the watch's interrupt there, so the run waited for ever. The watch lets its own
    interrupt through; a SIGINT from outside still does what the process's setting says (ignored here; the
    system's default below), and leaving the watch restores the setting.
    """
    previous = signal.signal(signal.SIGINT, setting)
    try:
        watch = StallWatch(60, lambda: "", exit_after_s=0.5, missing=lambda: "GPU 1", warn=False)
        started = time.monotonic()
        with pytest.raises(RunStalled), watch:
            if setting == signal.SIG_IGN:
                signal.raise_signal(signal.SIGINT)  # before the watch ends the run: ignored
            while time.monotonic() - started < 30:
                time.sleep(0.01)
        assert time.monotonic() - started < 10
        assert signal.getsignal(signal.SIGINT) == setting
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_sigint_from_outside_still_ends_a_process_that_left_it_to_the_system() -> None:
    script = (
        "import signal, time\n"
        "from jobs.bulk_qa.progress import StallWatch\n"
        "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
        "with StallWatch(60, lambda: '', exit_after_s=60, missing=lambda: None, warn=False):\n"
        "    signal.raise_signal(signal.SIGINT)\n"
        "    time.sleep(30)\n"
    )
    ended = run_process([sys.executable, "-c", script], 60, cwd=ROOT)
    assert ended.returncode == -signal.SIGINT, ended.stderr


def test_a_check_that_fails_is_told_once_and_the_watch_goes_on() -> None:
    answers = iter([RuntimeError("GCS timed out"), RuntimeError("GCS timed out"), None, "GPU 1"])

    def missing() -> str | None:
        answer = next(answers, "GPU 1")
        if isinstance(answer, Exception):
            raise answer
        return answer

    stream, interrupted = io.StringIO(), threading.Event()
    watch = StallWatch(60, lambda: "", 0.01, missing, warn=False, stream=stream, interrupt=interrupted.set)
    with pytest.raises(RunStalled), watch:
        assert interrupted.wait(30)
        raise KeyboardInterrupt  # as the interrupt of the main thread lands there
    said = "bulk-qa: the stall watch could not read the cluster's state: RuntimeError('GCS timed out')\n"
    assert stream.getvalue() == said


def test_ctrl_c_stays_ctrl_c() -> None:
    with pytest.raises(KeyboardInterrupt), StallWatch(1, lambda: "", 1, lambda: None, enabled=False):
        raise KeyboardInterrupt


def test_work_that_fits_no_node_is_told_from_work_waiting_for_a_busy_node(local_ray) -> None:
    """
    Two actors of 2 CPUs on a Ray of 2: one waits for the other (busy, it fits); a GPU actor fits none. An actor in
    a placement group is the group's to place: not judged.
    """
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    group = placement_group([{"CPU": 4}])
    in_group = PlacementGroupSchedulingStrategy(group)
    actors = [local_ray.remote(num_cpus=2)(Actor).remote() for _ in range(2)]
    actors.append(local_ray.remote(num_cpus=4)(Actor).options(scheduling_strategy=in_group).remote())
    engine = RayEngine(task_cpus=0.5)
    try:
        assert engine.missing_capacity() is None
        actors.append(local_ray.remote(num_cpus=0.5, num_gpus=1)(Actor).remote())
        deadline = time.monotonic() + 30
        while (lacking := engine.missing_capacity()) is None and time.monotonic() < deadline:
            time.sleep(0.1)  # until the actor is registered
        assert lacking == "1 Actor needs CPU 0.5, GPU 1, more than any of its 1 live node has (at most CPU 2, GPU 0)"
        assert [actor.resources for actor in waiting_actors() if actor.in_placement_group] == [
            ((f"CPU_group_{group.id.hex()}", 4.0), (f"bundle_group_{group.id.hex()}", 0.001))
        ]  # registered before the GPU actor, and left out
        assert (
            RayEngine(task_cpus=4)
            .missing_capacity()
            .endswith("; its tasks need CPU 4 each, more than any of its 1 live node has (at most CPU 2, GPU 0)")
        )
    finally:
        for actor in actors:
            local_ray.kill(actor)
        remove_placement_group(group)


class Actor:
    """An actor that does nothing: only what it reserves matters."""


@pytest.mark.timeout(300)  # about 25 s: a run the watch fails to end fails here, not at CI's limit
def test_a_run_whose_readers_fit_no_node_ends_with_one_line_and_the_same_command_resumes(
    local_ray, tiny_bert_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """
    The reader asks for a GPU, which the local Ray does not have (as when a cluster's GPU nodes are lost after the
    start): with --quiet too, the run ends with exit 1 and one line naming it, and the same command resumes on the
    Ray as it is.
    """
    output = tmp_path / "out"
    args = [
        "--questions", "data/sample/questions.parquet", "--documents", "data/sample/documents.parquet",
        "--model", tiny_bert_model, "--output", output, "--engine", "ray", "--shard-size", "6",
        "--stall-warning-s", "1", "--stall-exit-s", "2", "--quiet",
    ]  # fmt: skip
    with monkeypatch.context() as patch:
        pool = driver.actor_resources
        patch.setattr(
            driver, "actor_resources", lambda *a, **kw: dataclasses.replace(pool(*a, **kw), gpus_per_actor=1.0)
        )
        started = time.monotonic()
        assert run_job(*args) == 1
        assert time.monotonic() - started < 120
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("bulk-qa")]
    assert len(errors) == 1 and re.fullmatch(
        r"bulk-qa: error: no shard committed for \d+s, and for \d+s the cluster has lacked what the run waits for: "
        r"1 MapWorker\(MapBatches\(ReadSequences\)\) needs CPU 0\.5, GPU 1, more than any of its 1 live node has "
        r"\(at most CPU 2, GPU 0\)\. Shards committed so far are kept: run the same command once the cluster has "
        r"it, and it resumes\.",
        errors[0],
    ), errors
    # The same command again, as a user runs it: a new driver, joined to the same Ray.
    address = local_ray.get_runtime_context().gcs_address
    resumed = run_process(
        [sys.executable, "-m", "jobs.bulk_qa", *args, "--address", address], 300, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "2/2 committed (0 from an earlier run)" in resumed.stdout
    assert json.loads((output / "manifest.json").read_text())["reconciled"] is True
