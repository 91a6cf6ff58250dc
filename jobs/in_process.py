"""
The in-process engine's dataset: the part of Ray Data's `Dataset` API that the job's pipelines use, run in the
driver's own process, operator by operator, on pyarrow tables. The waves build the same pipeline on it as on Ray
Data, from the same stage functions; a small job pays no Ray start and no worker processes (see
`jobs.engines`).

An input table is read when first used; each operator then runs when it is called and holds its whole output, so
that a wave's memory is its tables. A callable class is instantiated once per `map_batches` call, as one actor of
a pool would be.
"""

from collections.abc import Callable, Iterator
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from jobs.storage import parquet_dataset


class InProcessDataset:
    """Blocks of rows (pyarrow tables) and the Ray Data operators the job uses, run eagerly in this process."""

    def __init__(self, blocks: list[pa.Table] | Callable[[], list[pa.Table]]) -> None:
        """:param blocks: The blocks, or what reads them when the dataset is first used."""
        self._source = blocks

    @property
    def _blocks(self) -> list[pa.Table]:
        if callable(self._source):
            self._source = self._source()
        return [block for block in self._source if block.num_rows]

    @classmethod
    def read_parquet(cls, path: str, columns: list[str]) -> "InProcessDataset":
        """A Parquet table's `columns` (a local path or URI), read whole with pyarrow when first used."""
        return cls(lambda: [parquet_dataset(path).to_table(columns=columns)])

    def map_batches(
        self,
        fn: Callable[..., pa.Table] | type,
        *,
        batch_format: str,
        batch_size: int | None = None,
        fn_kwargs: dict[str, Any] | None = None,
        fn_constructor_kwargs: dict[str, Any] | None = None,
        compute: Any = None,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
        runtime_env: dict[str, Any] | None = None,
    ) -> "InProcessDataset":
        """
        `fn` over batches of `batch_size` rows (None: block by block), as Ray Data's `map_batches`; the batches are
        cut from all rows in order (Ray Data cuts them from the blocks each of its tasks bundles, so that one may
        be shorter: the stages do not depend on it). A class is instantiated once, with `fn_constructor_kwargs`,
        when there is a batch to call it on (Ray starts its actors either way); `compute`, `num_cpus`, `num_gpus`
        and `runtime_env` place and set up Ray's workers and mean nothing here.
        """
        _check_format(batch_format)
        if fn_constructor_kwargs is not None and not isinstance(fn, type):
            raise ValueError("fn_constructor_kwargs is for a callable class, not a function.")
        batches = self._blocks if batch_size is None else self._rows_per_block(batch_size)
        if isinstance(fn, type) and batches:
            fn = fn(**(fn_constructor_kwargs or {}))
        return InProcessDataset([fn(batch, **(fn_kwargs or {})) for batch in batches])

    def repartition(self, *, target_num_rows_per_block: int) -> "InProcessDataset":
        """The same rows in blocks of `target_num_rows_per_block` (the last one smaller)."""
        return InProcessDataset(self._rows_per_block(target_num_rows_per_block))

    def union(self, *others: "InProcessDataset") -> "InProcessDataset":
        """This dataset's blocks, then the others'."""
        return InProcessDataset([*self._blocks, *(block for other in others for block in other._blocks)])

    def groupby(self, key: str, num_partitions: int | None = None) -> "InProcessGroups":
        """The rows grouped by the value of `key` (`num_partitions` sizes Ray's shuffle and means nothing here)."""
        return InProcessGroups(self, key)

    def materialize(self) -> "InProcessDataset":
        """The dataset itself: its blocks are already computed."""
        return self

    def write_parquet(self, path: str, *, filesystem: pafs.FileSystem, **parquet_options: Any) -> None:
        """
        The blocks as Parquet files in the folder `path` of `filesystem`, one file per block, as Ray Data writes
        (`parquet_options`: `pyarrow.parquet.write_table`'s).
        """
        filesystem.create_dir(path, recursive=True)
        for index, block in enumerate(self._blocks):
            with filesystem.open_output_stream(f"{path.rstrip('/')}/{index:06d}.parquet") as stream:
                pq.write_table(block, stream, **parquet_options)

    def iter_rows(self) -> Iterator[dict[str, Any]]:
        """The rows, block by block, as dicts."""
        for block in self._blocks:
            yield from block.to_pylist()

    def to_table(self) -> pa.Table:
        """Every row in one table (blocks whose columns differ are unified, missing columns null)."""
        if not self._blocks:
            return pa.table({})
        return pa.concat_tables(self._blocks, promote_options="default")

    def _rows_per_block(self, rows: int) -> list[pa.Table]:
        """The rows in slices of `rows`."""
        whole = self.to_table()
        return [whole.slice(start, rows) for start in range(0, whole.num_rows, rows)]


class InProcessGroups:
    """A dataset's rows grouped by one column's value, as Ray Data's `GroupedData`."""

    def __init__(self, dataset: InProcessDataset, key: str) -> None:
        self._dataset = dataset
        self._key = key

    def map_groups(
        self,
        fn: Callable[..., pa.Table],
        *,
        batch_format: str,
        fn_kwargs: dict[str, Any] | None = None,
        num_cpus: float | None = None,
    ) -> InProcessDataset:
        """
        `fn` over each group's rows (one table per value of the key, in the key's order), as `map_groups`
        (`num_cpus` places Ray's workers and means nothing here).
        """
        _check_format(batch_format)
        whole = self._dataset.to_table()
        if not whole.num_rows:
            return InProcessDataset([])
        ordered = whole.sort_by(self._key)  # stable: a group's rows keep their order
        keys = ordered[self._key].to_numpy(zero_copy_only=False)
        bounds = [0, *(np.flatnonzero(keys[1:] != keys[:-1]) + 1).tolist(), len(keys)]
        groups = [ordered.slice(start, end - start) for start, end in pairwise(bounds)]
        return InProcessDataset([fn(group, **(fn_kwargs or {})) for group in groups])


def _check_format(batch_format: str) -> None:
    """The in-process engine passes pyarrow tables only."""
    if batch_format != "pyarrow":
        raise ValueError(f"batch_format {batch_format!r}: the in-process engine passes pyarrow tables only.")
