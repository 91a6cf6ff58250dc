"""
The in-process engine's dataset runs the Ray Data operators the waves use with Ray Data's meaning: batches of
`batch_size` rows across blocks (or block by block), one instance of a class per stage, groups by key. The job's
own outputs on both engines are compared in test_bulk_qa.py, test_retrieval.py and test_annotation.py.
"""

from pathlib import Path

import pyarrow as pa
import pytest

from jobs.in_process import InProcessDataset
from tests.jobs.conftest import write_table


def numbers(*sizes: int) -> InProcessDataset:
    """Blocks of the given sizes holding 0, 1, 2, ... in column `n` and `n % 2` in `key`."""
    blocks, start = [], 0
    for size in sizes:
        values = list(range(start, start + size))
        blocks.append(pa.table({"n": values, "key": [value % 2 for value in values]}))
        start += size
    return InProcessDataset(blocks)


def sizes(batch: pa.Table) -> pa.Table:
    return pa.table({"rows": [batch.num_rows]})


def test_batches_are_cut_from_the_rows_in_order_or_block_by_block() -> None:
    dataset = numbers(3, 0, 4)
    assert [row["rows"] for row in dataset.map_batches(sizes, batch_format="pyarrow", batch_size=3).iter_rows()] == [
        3,
        3,
        1,
    ]
    assert [row["rows"] for row in dataset.map_batches(sizes, batch_format="pyarrow").iter_rows()] == [
        3,
        4,
    ]  # no batch_size: per block
    repartitioned = dataset.repartition(target_num_rows_per_block=5)
    assert [row["rows"] for row in repartitioned.map_batches(sizes, batch_format="pyarrow").iter_rows()] == [5, 2]
    assert [row["n"] for row in repartitioned.union(numbers(1)).iter_rows()] == [0, 1, 2, 3, 4, 5, 6, 0]


class Counter:
    """A stage class: how many instances were made, and the offset each was given."""

    made: list[int] = []

    def __init__(self, offset: int) -> None:
        Counter.made.append(offset)
        self.offset = offset

    def __call__(self, batch: pa.Table, scale: int) -> pa.Table:
        return pa.table({"n": [(value + self.offset) * scale for value in batch["n"].to_pylist()]})


def test_a_stage_class_is_made_once_and_only_when_there_are_rows() -> None:
    Counter.made = []
    out = numbers(2, 2).map_batches(
        Counter, batch_format="pyarrow", batch_size=1, fn_constructor_kwargs={"offset": 10}, fn_kwargs={"scale": 2}
    )
    assert [row["n"] for row in out.iter_rows()] == [20, 22, 24, 26]
    assert Counter.made == [10]
    assert list(numbers(0).map_batches(Counter, batch_format="pyarrow", fn_constructor_kwargs={"offset": 1},
                                       fn_kwargs={"scale": 1})
                .iter_rows()) == []  # fmt: skip
    assert Counter.made == [10]


def test_groups_hold_every_row_of_their_key_in_key_order() -> None:
    def summary(group: pa.Table, label: str) -> pa.Table:
        return pa.table({"label": [label], "key": [group["key"][0].as_py()], "n": [group["n"].to_pylist()]})

    grouped = (
        numbers(3, 4)
        .groupby("key", num_partitions=4)
        .map_groups(summary, batch_format="pyarrow", fn_kwargs={"label": "g"})
    )
    assert list(grouped.iter_rows()) == [
        {"label": "g", "key": 0, "n": [0, 2, 4, 6]},
        {"label": "g", "key": 1, "n": [1, 3, 5]},
    ]
    assert (
        list(
            numbers(0).groupby("key").map_groups(summary, batch_format="pyarrow", fn_kwargs={"label": "g"}).iter_rows()
        )
        == []
    )


def test_a_parquet_input_is_read_when_first_used(tmp_path: Path) -> None:
    path = tmp_path / "late.parquet"
    dataset = InProcessDataset.read_parquet(str(path), ["id"])  # nothing read yet: the file does not exist
    write_table(path, {"id": ["a", "b"], "content": ["x", "y"]})
    assert list(dataset.iter_rows()) == [{"id": "a"}, {"id": "b"}]


def test_string_keys_group_in_their_order() -> None:
    table = pa.table({"id": ["b", "a", "b", "c", "a"], "n": [0, 1, 2, 3, 4]})
    grouped = InProcessDataset([table]).groupby("id").map_groups(lambda group: group, batch_format="pyarrow")
    assert [(row["id"], row["n"]) for row in grouped.iter_rows()] == [("a", 1), ("a", 4), ("b", 0), ("b", 2), ("c", 3)]


def test_what_ray_data_would_do_otherwise_is_refused() -> None:
    with pytest.raises(ValueError, match="batch_format 'pandas': the in-process engine passes pyarrow tables only"):
        numbers(1).map_batches(sizes, batch_format="pandas")
    with pytest.raises(ValueError, match="fn_constructor_kwargs is for a callable class, not a function"):
        numbers(1).map_batches(sizes, batch_format="pyarrow", fn_constructor_kwargs={"offset": 1})
