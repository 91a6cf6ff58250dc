"""
Ray's C++ log lines kept out of a driver's stderr. The core worker in a Ray driver writes its warnings and errors
straight to file descriptor 2, past Python's logging: Ray Data's actors make it log
`core_worker.cc:2465: Actor with class name: 'MapWorker(...)' ... has constructor arguments in the object store`
on every run (ray-project/ray#57733), a lost node `Attempting to recover N lost objects`. Ray has no setting that
drops those alone (`RAY_BACKEND_LOG_LEVEL` prints a line of its own), so `RayLogFilter` points fd 2 at a pipe
whose reader, a thread, passes every other byte on, in order, to what fd 2 was.
"""

import contextlib
import dataclasses
import fcntl
import logging
import os
import re
import select
import sys
import termios
import threading
import tty

# `[2026-12-04 09:47:55,652 E 7039 7039] core_worker.cc:2465: ...`: Ray's C++ log format (spdlog's time, level
# letter, process and thread ids, then the source file and line). Debug, info, warning and error lines match; a
# fatal one (`C`) does not: it says why the driver crashes.
RAY_LOG_LINE = re.compile(rb"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [DIWE] \d+ \d+\] [\w.-]+\.(?:cc|h):\d+: ")
# A line starting as Ray's do ('[') is judged once it ends, or once it is this long (the format's prefix is
# shorter), or after this long without more bytes: a progress bar's `\r` updates and prompts still show at once.
JUDGED_AFTER_BYTES = 160
PARTIAL_LINE_WAIT_MS = 50
PIPE_BYTES = 1 << 20  # on Linux, a pipe of 1 MiB (the default most may ask for), so writers rarely wait
DRAIN_TIMEOUT_S = 10.0  # `stop` waits this long for the rest (a child process that kept fd 2 keeps the pipe open)
# The logger of Ray's notice that it enabled token authentication for a Ray it started, as it should (on every run
# where RAY_AUTH_MODE is unset): shown with --verbose only.
RAY_AUTH_SETUP_LOGGER = "ray._private.authentication.authentication_token_setup"
# Ray Data's warning, when a dataset starts at an instant no CPU is free, that it "will hang": a Ray just started on
# a loaded machine reports its CPUs late, and a job's own actors hold them between its datasets; the job goes on.
NO_FREE_CPU_WARNING = "Warning: The Ray cluster currently does not have any available CPUs"


class _NoFreeCpuWarning(logging.Filter):
    """Drops Ray Data's no-free-CPU warning (`NO_FREE_CPU_WARNING`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(NO_FREE_CPU_WARNING)


_NO_FREE_CPU_FILTER = _NoFreeCpuWarning()


def is_ray_log_line(line: bytes) -> bool:
    """Whether `line` (or its start) is a line of Ray's C++ log, other than a fatal one."""
    return RAY_LOG_LINE.match(line) is not None


def quiet_ray_data(verbose: bool) -> None:
    """
    Ray Data's own output for the datasets this process makes from now on (each copies the current `DataContext`):
    its logs at INFO, its progress bars and operator tables, its issue detectors' warnings (advice such as
    requesting memory for an actor pool, every 30 s of a long run) and its no-free-CPU warning show only when
    `verbose`; otherwise its other warnings and errors alone. The entry points (`jobs.bulk_qa`, `jobs.index`,
    `jobs.ingest`) print their own progress.
    """
    import ray.data

    level = logging.INFO if verbose else logging.WARNING
    logging.getLogger("ray.data").setLevel(level)
    dataset_logger = logging.getLogger("ray.data.dataset")
    if verbose:
        dataset_logger.removeFilter(_NO_FREE_CPU_FILTER)
    else:
        dataset_logger.addFilter(_NO_FREE_CPU_FILTER)
    # Its one notice is that the bars it would show are off.
    logging.getLogger("ray.data._internal.progress").setLevel(level if verbose else logging.ERROR)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = verbose
    # A new configuration, Ray Data's defaults: the current one is shared with every dataset made so far.
    detectors = type(context.issue_detectors_config)()
    context.issue_detectors_config = detectors if verbose else dataclasses.replace(detectors, detectors=[])


class RayLogFilter:
    """
    While started, the lines of Ray's C++ log (`is_ray_log_line`) written to file descriptor `fd` are dropped and
    every other byte goes on, in order, to what `fd` was at `start()` (a terminal, a file, pytest's capture). In
    place of a terminal, `fd` is a pseudo-terminal of the same size: a progress bar still shows as one.

    Usage (an entry point's `main`; the `with` block stops the filter, started or not, however the block ends):
        with RayLogFilter() as ray_logs:
            ray_logs.start()  # before `ray.init`: the driver's core worker logs from its start
            ...
        # `fd` as it was, every line written before passed on: a traceback printed after (the interpreter's, at
        # exit) goes straight to it

    :param fd: The file descriptor to filter (2, stderr).
    """

    def __init__(self, fd: int = 2) -> None:
        self.fd = fd
        self._original: int | None = None  # a duplicate of what `fd` was, which the thread writes to
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "RayLogFilter":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        """Points `fd` at a pipe (a pseudo-terminal in place of a terminal) that the filter reads; does nothing if
        started already."""
        if self._thread is not None:
            return
        read_end, write_end = _terminal(like=self.fd) if os.isatty(self.fd) else _pipe()
        self._original = os.dup(self.fd)
        self._flush()
        os.dup2(write_end, self.fd)  # `fd` is now the only write end: restoring it ends what the thread reads
        os.close(write_end)
        self._thread = threading.Thread(
            target=self._forward, args=(read_end, self._original), name="ray-log-filter", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Points `fd` back at what it was and waits until the thread has passed on every line written before."""
        if self._thread is None:
            return
        self._flush()
        os.dup2(self._original, self.fd)  # closes the write end: the thread reads to the end
        self._thread.join(DRAIN_TIMEOUT_S)
        if not self._thread.is_alive():  # else it still writes there, until the child process lets go
            os.close(self._original)
        self._thread = self._original = None

    def _flush(self) -> None:
        """Python's own buffered stderr, written before `fd` changes."""
        if self.fd == 2 and sys.stderr is not None:
            sys.stderr.flush()

    @staticmethod
    def _forward(read_end: int, out: int) -> None:
        """Reads the pipe to its end, writing to `out` all but Ray's log lines."""
        writer = _Writer(out)
        line = b""  # the start of a line not judged yet
        keep: bool | None = None  # the verdict on the line in progress, once judged before its end
        poller = select.poll()
        poller.register(read_end, select.POLLIN)
        while True:
            if line and not poller.poll(PARTIAL_LINE_WAIT_MS):  # nothing more for now: judge what there is
                keep = not is_ray_log_line(line)
                writer.write(line if keep else b"")
                line = b""
            try:
                data = os.read(read_end, 65536)
            except OSError:  # a pseudo-terminal whose other end closed (EIO), once read to its end
                data = b""
            if not data:
                break
            for piece in data.splitlines(keepends=True):
                ended = piece.endswith((b"\n", b"\r"))
                if keep is None:
                    line += piece
                    if ended or not line.startswith(b"[") or len(line) >= JUDGED_AFTER_BYTES:
                        keep = not is_ray_log_line(line)
                        writer.write(line if keep else b"")
                        line = b""
                elif keep:
                    writer.write(piece)
                if ended:
                    keep = None
        if line and not is_ray_log_line(line):
            writer.write(line)
        os.close(read_end)


def _pipe() -> tuple[int, int]:
    """A pipe's ends (read, write); on Linux of `PIPE_BYTES`."""
    read_end, write_end = os.pipe()
    if hasattr(fcntl, "F_SETPIPE_SZ"):
        with contextlib.suppress(OSError):  # a system limit below it: the default size
            fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    return read_end, write_end


def _terminal(like: int) -> tuple[int, int]:
    """
    A pseudo-terminal's ends (its master, read; its slave, written) of the size of the terminal `like`: in its
    place, what asks whether stderr is a terminal (tqdm's bar, and its width) still finds one. Raw: bytes pass as
    they are written. Where none can be opened (a container without /dev/ptmx), a pipe.
    """
    try:
        read_end, write_end = os.openpty()
    except OSError:
        return _pipe()
    tty.setraw(write_end)
    with contextlib.suppress(OSError):
        fcntl.ioctl(write_end, termios.TIOCSWINSZ, fcntl.ioctl(like, termios.TIOCGWINSZ, bytes(8)))
    return read_end, write_end


class _Writer:
    """Whole writes to a file descriptor; once it fails (closed, a broken pipe), the rest is dropped."""

    def __init__(self, fd: int) -> None:
        self.fd, self.broken = fd, False

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view and not self.broken:
            try:
                view = view[os.write(self.fd, view) :]
            except OSError:
                self.broken = True
