"""
The converter process's program (`python -m qa_core.ingest.worker REQUESTS RESULTS MEMORY_BYTES`, started by
`converter_process.ConverterProcess`, never imported): the converters' libraries imported, its address space capped
at MEMORY_BYTES (0: no cap), then files converted in turn, each request read from the REQUESTS pipe and its outcome
written to the RESULTS pipe, until the parent closes the pipe (or memory runs out).
"""

import contextlib
import resource
import signal
import sys
import traceback
from importlib import import_module
from multiprocessing.connection import Connection

from qa_core.ingest.convert import Utf8Document, convert_in_process

# A conversion that failed after its process's address space came this close to `memory_bytes` is taken to have run
# out of it (a library may report a failed allocation as its own error: lxml's "unknown error").
MEMORY_MARGIN = 64 * 2**20
# The converters' libraries (`convert.LIBRARIES` but the sentence splitter's), imported as the process starts.
PRELOADED = ("pypdf", "docx", "trafilatura", "lxml_html_clean", "markdown_it", "mdit_plain", "charset_normalizer")


def _serve(requests: Connection, results: Connection, memory_bytes: int) -> None:
    """
    The child's loop: the converters' libraries imported, "ready" sent, then a request in, its outcome out, until
    the parent closes the pipe (or memory runs out).
    """
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
            result = convert_in_process(root, relative_path, options=options, **kwargs)
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
