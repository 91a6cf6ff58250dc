"""The benchmark's memory sampler: PSS of a process tree, or its CPU time only."""

import subprocess
import sys

from jobs.bench import data

BURN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass\n"


def burn_in_child(seconds: float) -> None:
    """Runs a child process that uses `seconds` of CPU time and exits."""
    subprocess.run([sys.executable, "-c", BURN.format(seconds=seconds)], check=True)


def test_a_tree_sampler_without_memory_reads_no_pss_and_counts_an_exited_childs_cpu_time(monkeypatch) -> None:
    def no_pss(pid: int) -> int:
        raise AssertionError(f"read the PSS of {pid}")

    monkeypatch.setattr(data, "_pss", no_pss)
    sampler = data.MemorySampler(tree=True, interval_s=None)
    with sampler.measure() as reading:
        burn_in_child(2.5)  # sampled each second: seen at least twice before it exits
    assert (reading.start, reading.peak, reading.growth) == (None, None, None)
    # At most one second of the child's CPU time goes uncounted (it exits between samples); the rest is counted.
    assert 1.4 <= reading.cpu_seconds <= 2.5 + 0.5


def test_a_tree_sampler_with_an_interval_reads_the_trees_pss(monkeypatch) -> None:
    read: list[int] = []

    def pss(pid: int) -> int:
        read.append(pid)
        return 2**20

    monkeypatch.setattr(data, "_pss", pss)
    with data.MemorySampler(tree=True, interval_s=0.1).measure() as reading:
        burn_in_child(0.5)
    assert reading.start is not None and reading.start >= 2**20
    assert reading.growth == reading.peak - reading.start >= 0
    assert len(read) >= 3  # start, samples, end
