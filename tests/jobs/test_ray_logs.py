"""
Ray's C++ log lines dropped from stderr, everything else passed on as written, and Ray Data's own output quiet unless
verbose (`jobs.ray_logs`): no running Ray needed.
"""

import fcntl
import logging
import os
import struct
import subprocess
import sys
import termios
import time
import tty

import pytest

from jobs.ray_logs import RayLogFilter, is_ray_log_line, quiet_ray_data
from tests.jobs.conftest import ROOT

# Lines as Ray 2.60's driver writes them (the first is Ray Data's, on every cluster run).
RAY_ERROR = (
    b"[2026-12-04 09:47:55,652 E 7039 7039] core_worker.cc:2465: Actor with class name: "
    b"'MapWorker(MapBatches(ReadSequences))' and ID: 'adb9d8dc5a2a3d0ae8ae058e01000000' has constructor arguments "
    b"in the object store and max_restarts > 0.\n"
)
RAY_INFO = b"[2026-12-04 09:52:57,240 I 15997 15997] logging.cc:303: Set ray log level from environment variable\n"
RAY_WARNING = b"[2026-12-04 10:01:02,003 W 812 845] core_worker.cc:1234: Attempting to recover 3 lost objects\n"
RAY_FATAL = b"[2026-12-04 10:01:02,003 C 812 845] core_worker.cc:99: Check failed: ok\n"
OTHER = "line {} [2026-12-04 09:47:55,652 E 1 1] x.cc:1: Ray's format, not at the line's start\n"

# A child that writes Ray's lines and others to fd 2 (from os.write, print and a second thread), more than a pipe
# holds, then raises: the traceback, printed by the interpreter once the filter stopped, must show whole.
SCRIPT = """
import os, sys, threading
from jobs.ray_logs import RayLogFilter
RAY_ERROR, RAY_INFO, RAY_WARNING, RAY_FATAL, OTHER = {lines}
with RayLogFilter() as ray_logs:  # as the entry points' `main` use it
    ray_logs.start()
    os.write(2, RAY_ERROR)
    print(f"terminal {{os.isatty(2)}}, {{os.get_terminal_size(2).columns if os.isatty(2) else None}}", file=sys.stderr)
    writer = threading.Thread(target=os.write, args=(2, RAY_WARNING))
    writer.start()
    writer.join()
    for number in range(20_000):
        os.write(2, RAY_INFO if number % 2 else OTHER.format(number).encode())
    os.write(2, RAY_FATAL)
    sys.stderr.write("\\rquestions 6/12")
    raise ValueError("the job's own error")
"""


def test_ray_lines_are_recognised_by_their_format() -> None:
    assert is_ray_log_line(RAY_ERROR) and is_ray_log_line(RAY_INFO) and is_ray_log_line(RAY_WARNING)
    assert not is_ray_log_line(RAY_FATAL)  # a fatal line says why the driver crashes
    assert not is_ray_log_line(b"2026-12-04 09:48:08,388\tERROR actor_pool_map_operator.py:414 -- failing\n")
    assert not is_ray_log_line(b"[2026-12-04 09:47:55,652 E 7039 7039] not a source line\n")
    assert not is_ray_log_line(b"bulk-qa: error: [2026-12-04 09:47:55,652 E 1 1] core_worker.cc:1: quoted\n")


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
def test_a_process_stderr_keeps_all_but_rays_lines_in_order_and_its_final_traceback(terminal: bool) -> None:
    """On a pipe or a file; on a terminal too, which the process still sees as one, of its width."""
    script = SCRIPT.format(lines=repr((RAY_ERROR, RAY_INFO, RAY_WARNING, RAY_FATAL, OTHER)))
    status, stderr = (run_on_a_terminal if terminal else run_on_a_pipe)([sys.executable, "-c", script])
    assert status == 1
    expected = f"terminal {terminal}, {100 if terminal else None}\n".encode() + b"".join(
        OTHER.format(number).encode() for number in range(0, 20_000, 2)
    )
    expected += RAY_FATAL + b"\rquestions 6/12Traceback (most recent call last):\n"
    assert stderr.startswith(expected), stderr[:2000]
    assert stderr.endswith(b"\nValueError: the job's own error\n"), stderr[-2000:]
    assert b"core_worker.cc:2465" not in stderr and b"logging.cc" not in stderr


def run_on_a_pipe(command: list[str]) -> tuple[int, bytes]:
    """The command's exit status and stderr, a pipe."""
    child = subprocess.run(command, cwd=ROOT, stderr=subprocess.PIPE, timeout=60)
    return child.returncode, child.stderr


def run_on_a_terminal(command: list[str]) -> tuple[int, bytes]:
    """The command's exit status and stderr, a terminal of 100 columns (raw: bytes as written)."""
    reader, terminal = os.openpty()
    tty.setraw(terminal)
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    child = subprocess.Popen(command, cwd=ROOT, stderr=terminal)
    os.close(terminal)
    output = bytearray()
    while True:
        try:
            data = os.read(reader, 65536)
        except OSError:  # EIO: the child's end closed, all read
            break
        if not data:
            break
        output += data
    os.close(reader)
    return child.wait(timeout=60), bytes(output)


def test_a_line_not_ended_shows_at_once_on_the_stderr_of_the_moment(capfd: pytest.CaptureFixture) -> None:
    """Under pytest's fd-level capture too; a progress bar's updates do not wait for a line's end."""
    ray_logs = RayLogFilter()
    ray_logs.start()
    try:
        os.write(2, RAY_ERROR + b"[progress] 1/2")
        deadline = time.monotonic() + 10
        while not (err := capfd.readouterr().err) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        ray_logs.stop()
    assert err == "[progress] 1/2"
    os.write(2, b"unfiltered\n")
    assert capfd.readouterr().err == "unfiltered\n"


@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "verbose"])
def test_ray_datas_no_free_cpu_warning_shows_only_when_verbose(verbose: bool) -> None:
    """
    Ray Data's warning that a dataset started with no CPU free "will hang" (a Ray just started on a loaded machine,
    a job's actors between its datasets) is dropped unless verbose; its other warnings always show.
    """
    import ray.data  # the library only, as `quiet_ray_data` imports it: no Ray is started

    def shown(message: str) -> bool:
        record = logging.LogRecord("ray.data.dataset", logging.WARNING, "dataset.py", 8601, message, None, None)
        return bool(logging.getLogger("ray.data.dataset").filter(record))

    no_cpu = (
        "Warning: The Ray cluster currently does not have any available CPUs. The Dataset job will hang unless "
        "more CPUs are freed up."
    )
    loggers = [logging.getLogger(name) for name in ("ray.data", "ray.data._internal.progress", "ray.data.dataset")]
    context = ray.data.DataContext.get_current()
    before = [(logger.level, list(logger.filters)) for logger in loggers]
    before_context = (context.enable_progress_bars, context.issue_detectors_config)
    try:
        quiet_ray_data(False)
        quiet_ray_data(verbose)  # a second call, quiet or verbose, decides
        assert shown(no_cpu) is verbose
        assert shown("Warning: something else about the dataset") is True
    finally:  # this process's other tests find Ray Data as it was
        for logger, (level, filters) in zip(loggers, before, strict=True):
            logger.setLevel(level)
            logger.filters[:] = filters
        context.enable_progress_bars, context.issue_detectors_config = before_context
