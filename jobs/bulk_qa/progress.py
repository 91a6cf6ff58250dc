"""
The job's own progress, over questions and committed shards, across waves: a bar on a terminal (tqdm), else one
plain line at most every 30 seconds. Written to stderr, so that stdout holds only the summary.
"""

import _thread
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

PLAIN_LINE_EVERY_S = 30.0
# Seconds after which the stall watch interrupts the main thread again when the run has not ended: an interrupt that
# lands in a finalizer (a `__del__`, such as a collected Ray Data executor's, run in the main thread) is dropped by
# Python ("Exception ignored in ..."). Longer than the run takes to stop its wave once interrupted.
INTERRUPT_AGAIN_S = 30.0


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


class RunStalled(Exception):
    """The run committed nothing for `stall_exit_s` and the cluster cannot run what it waits for; its message is the
    line the user sees."""


class StallWatch:
    """
    Watches a run's commits: once no shard has been committed for `after_s` seconds while shards are pending, it
    writes what the run waits for (`waiting()`, e.g. reader actors that have no node to run on, and the cluster's
    free resources), and again every `after_s` seconds while that lasts, so that a run that cannot go on says so
    long before Ray Data's own no-progress timeout (30 minutes) ends it. Once `missing()` has named what the
    cluster lacks (work that fits on no node as the cluster is, not work waiting for a busy one) for `exit_after_s`
    seconds without a commit, the time an autoscaler or a replaced node has to bring it, it ends the run: it
    interrupts the main thread (again every `interrupt_again_s` until the watch is left, as Python drops an interrupt
    that lands in a finalizer), and leaving the watch raises `RunStalled` with the line to show. A check that fails
    (the cluster's state unreadable for a moment) is told on the stream, and the next one runs as usual.

    The interrupt is a simulated SIGINT, which Python drops in a process whose SIGINT is ignored or left to the
    system (`nohup ... &`, a background job of a script, a service manager that starts it so): while the watch runs,
    such a process gets a handler that raises for the watch's own interrupt and does for any other SIGINT what the
    process did (nothing, or end at once); leaving the watch restores the process's setting.

    Usage: `with StallWatch(300, waiting, 300, missing) as watch: ... watch.committed() ...`; a thread checks every
    few seconds.

    :param after_s: Seconds without a commit before it speaks.
    :param waiting: What the run waits for, in words.
    :param exit_after_s: Seconds of `missing()` naming something, without a commit, after which the run ends;
        0: never (nor is `missing()` called).
    :param missing: What the run waits for that the cluster as it is cannot hold, in words; None when it can.
    :param warn: False writes no stall line (`--quiet`); the run still ends as above.
    :param enabled: False watches nothing (a run with nothing to wait for).
    :param stream: Where to write (stderr by default).
    :param clock: Seconds since some start.
    :param interrupt: Interrupts the main thread (a KeyboardInterrupt there, as Ctrl-C).
    :param interrupt_again_s: Seconds after an interrupt that did not end the run before the next.
    """

    def __init__(
        self,
        after_s: float,
        waiting: Callable[[], str],
        exit_after_s: float = 0.0,
        missing: Callable[[], str | None] = lambda: None,
        warn: bool = True,
        enabled: bool = True,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        interrupt: Callable[[], None] = _thread.interrupt_main,
        interrupt_again_s: float = INTERRUPT_AGAIN_S,
    ) -> None:
        self.after_s, self.waiting, self.exit_after_s, self.missing = after_s, waiting, exit_after_s, missing
        self.warn, self.enabled, self.interrupt, self.interrupt_again_s = warn, enabled, interrupt, interrupt_again_s
        self.stream = stream or sys.stderr
        self.clock = clock
        self.last_commit = self.last_line = clock()
        self.lacking_since: float | None = None  # since when `missing()` names something, at every check
        self.failure: str | None = None  # the line of a run it ended
        self.interrupted_at: float | None = None  # when it last interrupted the main thread
        self._last_error: str | None = None  # the failed check's error, until a check succeeds
        self._lock = threading.Lock()  # no interrupt once the watch is left
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sigint: signal.Handlers | None = None  # SIGINT's setting, SIG_IGN or SIG_DFL, while replaced

    def committed(self) -> None:
        """A shard was committed."""
        self.last_commit = self.clock()

    def check(self) -> str | None:
        """
        The line to write now, if any (written too): when `after_s` passed since the last commit and line. Or the
        line of a run that ends, the main thread interrupted: when `missing()` has named what the cluster lacks at
        every check of the last `exit_after_s` seconds, with no commit meanwhile.
        """
        now = self.clock()
        stalled = now - self.last_commit
        if self.exit_after_s:
            lacking = self.missing()
            if lacking is None:
                self.lacking_since = None
            elif self.lacking_since is None:
                self.lacking_since = now
            lacking_for = 0.0 if lacking is None else now - max(self.lacking_since, self.last_commit)
            if lacking and lacking_for >= self.exit_after_s:
                return self._end(
                    f"no shard committed for {_duration(stalled)}, and for {_duration(lacking_for)} the cluster has "
                    f"lacked what the run waits for: {lacking}. Shards committed so far are kept: run the same "
                    "command once the cluster has it, and it resumes."
                )
        if not self.warn or stalled < self.after_s or now - self.last_line < self.after_s:
            return None
        self.last_line = now
        line = f"bulk-qa: no shard committed for {_duration(stalled)}: {self.waiting()}"
        print(line, file=self.stream, flush=True)
        return line

    def _end(self, failure: str) -> str | None:
        """Interrupts the main thread, which leaves the watch with `failure`, unless it left already."""
        with self._lock:
            if self._stop.is_set() or self.failure:
                return None
            self.failure = failure
            self._interrupt()
        return failure

    def _interrupt(self) -> None:
        """Interrupts the main thread (the caller holds the lock and found the watch not left)."""
        self.interrupted_at = self.clock()
        self.interrupt()

    def _interrupt_again(self) -> None:
        """The main thread interrupted again, `interrupt_again_s` after the last time, unless it left the watch."""
        with self._lock:
            if not self._stop.is_set() and self.clock() - self.interrupted_at >= self.interrupt_again_s:
                self._interrupt()

    def __enter__(self) -> "StallWatch":
        if self.enabled:
            self._let_its_interrupt_through()
            self._thread = threading.Thread(target=self._watch, name="bulk-qa-stall-watch", daemon=True)
            self._thread.start()
        return self

    def _let_its_interrupt_through(self) -> None:
        """
        In a process whose SIGINT is ignored or the system's default (where `_thread.interrupt_main` does nothing),
        `_on_sigint` handles SIGINT until the watch is left. Only the main thread may set a handler: elsewhere, and
        in a process with a handler of its own (Python's, which raises KeyboardInterrupt), nothing changes.
        """
        if threading.current_thread() is not threading.main_thread():
            return
        setting = signal.getsignal(signal.SIGINT)
        if setting in (signal.SIG_IGN, signal.SIG_DFL):
            self._sigint = setting
            signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: object) -> None:
        """The watch's interrupt (the run ended) raises KeyboardInterrupt; another SIGINT gets the process's own
        setting: ignored, or the system's default (the process ends)."""
        if self.failure:
            raise KeyboardInterrupt
        if self._sigint == signal.SIG_DFL:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.raise_signal(signal.SIGINT)

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        try:
            with self._lock:  # the watch interrupts nothing after this
                self._stop.set()
            if self._thread is not None:
                self._thread.join()
        except KeyboardInterrupt:  # its own interrupt may land here, the main thread already leaving
            if not self.failure:
                raise
            exc_type = KeyboardInterrupt
        finally:
            if self._sigint is not None:  # a pending interrupt of the watch is then dropped
                signal.signal(signal.SIGINT, self._sigint)
                self._sigint = None
        if self.failure and exc_type is not None:  # the interrupt, or what Ray made of it while stopping
            raise RunStalled(self.failure) from None

    def _watch(self) -> None:
        every = min(5.0, self.after_s, self.exit_after_s or self.after_s, self.interrupt_again_s)
        while not self._stop.wait(every):
            if self.failure:
                self._interrupt_again()
                continue
            try:
                self.check()
            except Exception as error:  # e.g. Ray's state API timed out on a loaded node: the next check retries
                if repr(error) != self._last_error:  # told once while it lasts, not at every check
                    print(f"bulk-qa: the stall watch could not read the cluster's state: {error!r}", file=self.stream)
                self._last_error = repr(error)
            else:
                self._last_error = None
