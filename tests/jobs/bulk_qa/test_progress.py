"""The job's own progress: one plain line at most every 30 s without a terminal, the last shard always shown."""

import io

from jobs.bulk_qa.progress import Progress, StallWatch


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
