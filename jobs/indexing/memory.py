"""
The memory an index build may use on a node, and the shard size that keeps it there: a build holds
`BUILD_BASE_BYTES` whatever its shards (Ray's processes, its workers' libraries), and its count and weigh tasks
each hold one shard (or part of one) at a time, about `BYTES_PER_PASSAGE` per passage, a task per CPU at once.
Without a shard setting (`--index-shards`, `--index-shard-size`) the shard size is what the budget leaves over the
base, over the tasks a node runs at once, so the default build of any corpus stays within the budget.
"""

import os
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # its module imports torch, which the tasks here do without (seconds per worker)
    from jobs.retrieval_settings import RetrievalSettings

# Memory a count or weigh task holds per passage of its shard, at its peak: measured on 300,000 synthetic passages
# of 80 words (`jobs.bench.retrieval.synthetic_texts`, 53 postings a passage) as a process's peak resident memory
# above its level before the step, the shard counted (`counted.count_parts`: 1,410 bytes a passage, one part's
# tokens, then the shard's compact counts) and weighed (`sharding.weigh_counted_shard`: 1,387 in index format 4,
# postings, counts, float64 weights and their reordered copies; format 5 holds no weights). The larger, rounded up,
# with a margin for Arrow buffers around them.
BYTES_PER_PASSAGE = 2048
# Memory a build holds whatever its shards, machine-wide: Ray's processes, its workers with their libraries loaded,
# the driver. Measured (`jobs.bench.retrieval --build ray`) as the machine's peak above idle while building 100,000
# passages on 2 CPUs, 2.0 GiB, less its shard's 100,000 x `BYTES_PER_PASSAGE`.
BUILD_BASE_BYTES = int(1.8 * 2**30)
# The share of a node's memory a build uses without `--memory-budget`: room for the other processes of a node.
MEMORY_SHARE = 0.25
# The fewest passages a shard sized by the budget holds (a tiny budget would make a shard per passage).
LEAST_SHARD_SIZE = 10_000
GIB = 2**30


def node_memory() -> int:
    """This machine's memory in bytes (total, not what is free at this moment: the budget is stable)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def memory_budget(budget_gib: float | None) -> int:
    """The bytes a build may use on a node: `budget_gib` GiB, or `MEMORY_SHARE` of the node's memory."""
    return int(budget_gib * GIB) if budget_gib is not None else int(MEMORY_SHARE * node_memory())


def bounded_shard_size(budget: int, tasks_at_once: int) -> int:
    """
    Passages per shard so that the build's base and `tasks_at_once` tasks, each holding one shard, stay within
    `budget` bytes (at least `LEAST_SHARD_SIZE`).
    """
    return max(LEAST_SHARD_SIZE, (budget - BUILD_BASE_BYTES) // (max(1, tasks_at_once) * BYTES_PER_PASSAGE))


def bounded(settings: "RetrievalSettings", tasks_at_once: int) -> "RetrievalSettings":
    """
    The settings with the shard size set from their memory budget for a node that runs `tasks_at_once` build
    tasks at once, where they give no shard setting; else the settings as they are.
    """
    if not settings.sized_by_memory:
        return settings
    return replace(settings, index_shard_size=bounded_shard_size(memory_budget(settings.memory_budget), tasks_at_once))
