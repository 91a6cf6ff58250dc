"""
The converter process, seen from the process that uses it: files converted one at a time in a child process that
this one kills when a file runs past its time limit (a signal handler cannot stop a library's C code, such as
libxml2's XPath under trafilatura), and whose address space is capped (`RLIMIT_AS`), so that a memory blow-up is a
`MemoryError` there, not a swap here. One child serves every file of its parent (a process per file would cost a
Python start and the converters' imports each); a killed or crashed child is replaced for the next file. The child
runs `qa_core.ingest.worker`.

Usage example:
```python
converter = ConverterProcess()
result = converter.convert("corpus/", "page.html", options=ConversionOptions(timeout_s=10.0))
converter.close()
```
"""

import os
import subprocess
import sys
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from qa_core.ingest.convert import Converted, Utf8Document
from qa_core.ingest.limits import ConversionOptions
from qa_core.ingest.report import ReportRow

# Seconds a new converter process may take to start and import the converters' libraries (not counted in any file's
# time limit): far more than it takes, on a loaded machine too.
START_TIMEOUT_S = 120.0


class ConverterProcess:
    """A child process that converts files for this one (see the module's docstring); started on first use."""

    def __init__(self) -> None:
        self._process: subprocess.Popen | None = None
        self._requests: Connection | None = None
        self._results: Connection | None = None
        self._memory_bytes: int | None = None

    def convert(self, root: str, relative_path: str, options: ConversionOptions, **kwargs: Any) -> Converted:
        """
        `convert.convert_in_process(root, relative_path, options=..., **kwargs)` in the child, within
        `options.timeout_s` and `options.memory_bytes`; past either, or when the child dies, the file's one report
        row says which.

        :returns: The file's `convert.Converted`.
        :raises RuntimeError: For an error in the converter's own code (not the file's), with its traceback.
        """
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


__all__ = ["START_TIMEOUT_S", "ConverterProcess", "shared_converter"]
