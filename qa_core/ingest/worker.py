"""
A converter process: files converted one at a time in a child process that the parent kills when a file runs past
its time limit (a signal handler cannot stop a library's C code, such as libxml2's XPath under trafilatura), and
whose address space is capped (`RLIMIT_AS`), so that a memory blow-up is a `MemoryError` there, not a swap here.
One child serves every file of its parent (a process per file would cost a Python start and the converters'
imports each); a killed or crashed child is replaced for the next file.

Usage example:
```python
worker = ConverterProcess()
result = worker.convert("corpus/", "page.html", options=ConversionOptions(timeout_s=10.0))
worker.close()
```
"""

import contextlib
import os
import resource
import signal
import subprocess
import sys
import traceback
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from qa_core.ingest.limits import ConversionOptions
from qa_core.ingest.report import ReportRow

# Seconds a new converter process may take to start and import the converters' libraries (not counted in any file's
# time limit): far more than it takes, on a loaded machine too.
START_TIMEOUT_S = 120.0
# A conversion that failed after its process's address space came this close to `memory_bytes` is taken to have run
# out of it (a library may report a failed allocation as its own error: lxml's "unknown error").
MEMORY_MARGIN = 64 * 2**20
# The converters' libraries (`convert.LIBRARIES` but the sentence splitter's), imported as the process starts.
PRELOADED = ("pypdf", "docx", "trafilatura", "lxml_html_clean", "markdown_it", "mdit_plain", "charset_normalizer")


class ConverterProcess:
    """A child process that converts files for this one (see the module's docstring); started on first use."""

    def __init__(self) -> None:
        self._process: subprocess.Popen | None = None
        self._requests: Connection | None = None
        self._results: Connection | None = None
        self._memory_bytes: int | None = None

    def convert(self, root: str, relative_path: str, options: ConversionOptions, **kwargs: Any):
        """
        `convert.convert_file(root, relative_path, options=..., **kwargs)` in the child, within `options.timeout_s`
        and `options.memory_bytes`; past either, or when the child dies, the file's one report row says which.

        :returns: The file's `convert.Converted`.
        :raises RuntimeError: For an error in the converter's own code (not the file's), with its traceback.
        """
        from qa_core.ingest.convert import Converted, Utf8Document

        self._start(options.memory_bytes)
        inner = replace(options, timeout_s=None, memory_bytes=None)
        try:
            self._requests.send((root, relative_path, inner, kwargs))
            ready = self._results.poll(options.timeout_s)
            outcome, value = self._results.recv() if ready else ("timeout", None)
        except (EOFError, OSError):  # the pipe closed: the process is gone
            outcome, value = "died", None
        if outcome == "converted":
            for doc in value.documents:
                if isinstance(doc, Utf8Document):  # its text came as bytes: a view of them, as the class holds
                    doc.content = memoryview(doc.content)
            return value
        if outcome == "error":
            raise RuntimeError(f"the converter failed on {relative_path}:\n{value}")
        code = self._stop()
        if outcome == "timeout":
            reason = f"conversion took longer than the limit of {options.timeout_s:g} s (--timeout-per-file): stopped"
        elif outcome == "memory":
            reason = (f"conversion needed more memory than the limit of {options.memory_bytes:,} bytes "
                      "(--memory-per-file): stopped")  # fmt: skip
        else:
            reason = f"the converter's process died converting it (exit status {code})"
        return Converted(report=[ReportRow(relative_path, None, reason)], files=[relative_path])

    @property
    def pid(self) -> int | None:
        """The child's process id, while it runs (`None` before its start and after its end)."""
        return None if self._process is None else self._process.pid

    def close(self) -> None:
        """Ends the child, if any."""
        self._stop()

    def _start(self, memory_bytes: int | None) -> None:
        if self._process is not None and self._process.poll() is None and memory_bytes == self._memory_bytes:
            return
        self._stop()
        request_read, request_write = os.pipe()
        result_read, result_write = os.pipe()
        arguments = [str(request_read), str(result_write), str(memory_bytes or 0)]
        self._process = subprocess.Popen(
            [sys.executable, "-m", "qa_core.ingest.worker", *arguments],
            pass_fds=(request_read, result_write),
            stdin=subprocess.DEVNULL,
        )
        os.close(request_read)
        os.close(result_write)
        self._requests, self._results = Connection(request_write), Connection(result_read)
        self._memory_bytes = memory_bytes
        try:  # the libraries imported before any file's time counts
            ready = self._results.poll(START_TIMEOUT_S) and self._results.recv() == "ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            code = self._stop()
            raise RuntimeError(f"the converter process did not start (exit status {code}); see its output above")

    def _stop(self) -> int | None:
        """Kills the child (if any) and returns its exit status."""
        if self._process is None:
            return None
        for connection in (self._requests, self._results):
            connection.close()
        if self._process.poll() is None:
            self._process.kill()
        code = self._process.wait()
        self._process = self._requests = self._results = None
        return code


_SHARED: ConverterProcess | None = None


def shared_converter() -> ConverterProcess:
    """This process's converter process (one per process: a Ray worker's serves each of its tasks in turn)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = ConverterProcess()
    return _SHARED


def _serve(requests: Connection, results: Connection, memory_bytes: int) -> None:
    """
    The child's loop: the converters' libraries imported, "ready" sent, then a request in, its outcome out, until
    the parent closes the pipe (or memory runs out).
    """
    from importlib import import_module

    from qa_core.ingest.convert import Utf8Document, convert_file

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it then closes the pipe

    for name in PRELOADED:
        with contextlib.suppress(ImportError):  # a converter without its library reports it
            import_module(name)
    if memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    results.send("ready")
    while True:
        try:
            root, relative_path, options, kwargs = requests.recv()
        except EOFError:
            return
        try:
            result = convert_file(root, relative_path, options=options, **kwargs)
            if memory_bytes and result.report and _peak_address_space() > memory_bytes - MEMORY_MARGIN:
                raise MemoryError  # a library's own error for a failed allocation (lxml's "unknown error")
            for doc in result.documents:
                if isinstance(doc, Utf8Document):  # a view of this process's memory: sent as its bytes
                    doc.content = bytes(doc.content)
            results.send(("converted", result))
        except MemoryError:
            results.send(("memory", None))
            return  # the heap may be in pieces: a fresh process for the next file
        except Exception:
            results.send(("error", traceback.format_exc()))


def _peak_address_space() -> int:
    """This process's peak address space in bytes (Linux's `VmPeak`; 0 where unknown)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])), Connection(int(sys.argv[2])), int(sys.argv[3]))
