"""
The job's own progress, over questions and committed shards, across waves: a bar on a terminal (tqdm), else one
plain line at most every 30 seconds. Written to stderr, so that stdout holds only the summary.
"""

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

PLAIN_LINE_EVERY_S = 30.0


def _duration(seconds: float) -> str:
    """`70` -> `1m10s`."""
    minutes, seconds = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


class Progress:
    """
    Counts the questions of committed shards against the run's total.

    :param questions: Questions the run answers (those of the shards it computes).
    :param shards: Shards it computes.
    :param enabled: False prints nothing (`--quiet`).
    :param stream: Where to write (stderr by default); a terminal gets a bar.
    :param clock: Seconds since some start, for the rate and the plain lines' spacing.
    """

    def __init__(
        self,
        questions: int,
        shards: int,
        enabled: bool = True,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.questions, self.shards = questions, shards
        self.done_questions = self.done_shards = 0
        self.stream = stream or sys.stderr
        self.clock = clock
        self.started = clock()
        self.last_line: float | None = None
        self.enabled = enabled and shards > 0
        self.bar = None
        if self.enabled and self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=questions, unit="question", desc="bulk-qa", file=self.stream, dynamic_ncols=True)

    def shard_committed(self, questions: int) -> None:
        """One more shard committed, holding `questions` questions."""
        self.done_questions += questions
        self.done_shards += 1
        if self.bar is not None:
            self.bar.update(questions)
            self.bar.set_postfix_str(f"shards {self.done_shards}/{self.shards}")
        elif self.enabled:
            now = self.clock()
            if self.last_line is None or now - self.last_line >= PLAIN_LINE_EVERY_S or self.done_shards == self.shards:
                self.last_line = now
                print(self.line(now), file=self.stream, flush=True)

    def line(self, now: float) -> str:
        """`questions 250/600 (42%), shards 3/12, 5.1 questions/s, about 1m10s left`."""
        elapsed = max(now - self.started, 1e-9)
        rate = self.done_questions / elapsed
        share = self.done_questions / self.questions if self.questions else 1.0
        left = (self.questions - self.done_questions) / rate if rate else None
        text = (
            f"questions {self.done_questions}/{self.questions} ({share:.0%}), shards {self.done_shards}/{self.shards}, "
            f"{rate:.1f} questions/s"
        )
        return text + (f", about {_duration(left)} left" if left is not None and left > 0 else "")

    def close(self) -> None:
        """Ends the bar, if any."""
        if self.bar is not None:
            self.bar.close()


class StallWatch:
    """
    Watches a run's commits: once no shard has been committed for `after_s` seconds while shards are pending, it
    writes what the run waits for (`waiting()`, e.g. reader actors that have no node to run on, and the cluster's
    free resources), and again every `after_s` seconds while that lasts, so that a run that cannot go on says so
    long before Ray Data's own no-progress timeout (30 minutes) ends it.

    Usage: `with StallWatch(300, waiting) as watch: ... watch.committed() ...`; a thread checks every few seconds.

    :param after_s: Seconds without a commit before it speaks.
    :param waiting: What the run waits for, in words.
    :param enabled: False watches nothing (`--quiet`, or a run with nothing to wait for).
    :param stream: Where to write (stderr by default).
    :param clock: Seconds since some start.
    """

    def __init__(
        self,
        after_s: float,
        waiting: Callable[[], str],
        enabled: bool = True,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.after_s, self.waiting, self.enabled = after_s, waiting, enabled
        self.stream = stream or sys.stderr
        self.clock = clock
        self.last_commit = self.last_line = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def committed(self) -> None:
        """A shard was committed."""
        self.last_commit = self.clock()

    def check(self) -> str | None:
        """The line to write now, if any (written too): when `after_s` passed since the last commit and line."""
        now = self.clock()
        if now - self.last_commit < self.after_s or now - self.last_line < self.after_s:
            return None
        self.last_line = now
        line = f"bulk-qa: no shard committed for {_duration(now - self.last_commit)}: {self.waiting()}"
        print(line, file=self.stream, flush=True)
        return line

    def __enter__(self) -> "StallWatch":
        if self.enabled:
            self._thread = threading.Thread(target=self._watch, name="bulk-qa-stall-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(min(5.0, self.after_s)):
            self.check()
