"""A time limit around one file's conversion, so that a pathological file becomes a report row, not a stuck task."""

import signal
import threading
from contextlib import contextmanager


class ConversionTimeout(BaseException):
    """
    Raised inside a conversion that ran past its limit. A `BaseException`, as `KeyboardInterrupt` is, so that the
    converters' `except Exception` around their libraries does not mistake it for a broken file.
    """


@contextmanager
def time_limit(seconds: float | None):
    """
    Raises `ConversionTimeout` in the block once it has run `seconds` (wall clock), by SIGALRM: in the main thread
    only (where Ray runs a task's function); elsewhere, or with `seconds` `None`, the block runs unlimited.
    """
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise ConversionTimeout(seconds)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


__all__ = ["ConversionTimeout", "time_limit"]
