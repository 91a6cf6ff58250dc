"""The shard size a build chooses from its memory budget (`jobs.indexing.memory`), without a shard setting."""

import pytest

from jobs.indexing import memory
from jobs.indexing.memory import (
    BUILD_BASE_BYTES,
    BYTES_PER_PASSAGE,
    GIB,
    LEAST_SHARD_SIZE,
    bounded,
    bounded_shard_size,
)
from jobs.retrieval_settings import RetrievalSettings


def test_the_shard_size_is_what_the_budget_leaves_over_the_base_over_the_tasks_at_once() -> None:
    assert (BYTES_PER_PASSAGE, BUILD_BASE_BYTES) == (2048, 1_932_735_283)  # 1.8 GiB
    assert bounded_shard_size(6 * GIB, 2) == 1_101_004  # (6 GiB - 1.8 GiB) over 2 tasks of 2,048 bytes a passage
    assert bounded_shard_size(6 * GIB, 16) == 137_625
    assert bounded_shard_size(3 * GIB, 1) == 629_145
    assert bounded_shard_size(3 * GIB, 0) == 629_145  # a node without CPUs counted as one task
    assert bounded_shard_size(GIB, 1) == LEAST_SHARD_SIZE == 10_000  # a budget below the base: the least shard
    assert bounded_shard_size(10**6, 2) == LEAST_SHARD_SIZE  # never a shard per passage


def test_settings_without_a_shard_setting_get_the_budgets_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "node_memory", lambda: 24 * GIB)  # a quarter: 6 GiB
    assert bounded(RetrievalSettings(), 2).index_shard_size == 1_101_004
    assert bounded(RetrievalSettings(memory_budget=2.5), 3).index_shard_size == 122_333
    for given in (RetrievalSettings(index_shards=1), RetrievalSettings(index_shard_size=70)):
        assert bounded(given, 2) is given
    assert RetrievalSettings(memory_budget=0).problems() == ["memory_budget must be >= 0.01, not 0"]
