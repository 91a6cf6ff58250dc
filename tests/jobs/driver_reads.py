"""What reaches a job's driver process: the check that no step loads the documents table into the driver."""

import pytest


class DriverReads:
    """
    Records what reaches the driver process: the columns of every row or batch a Ray dataset hands it, and of
    every table it reads with pyarrow (the input checks read Parquet metadata only; the results read the shards).
    """

    def __init__(self) -> None:
        self.columns: list[tuple[str, frozenset]] = []

    def install(self, patch: pytest.MonkeyPatch) -> None:
        import pyarrow.parquet as pq
        import ray.data

        reads = self

        def rows_of(name):
            original = getattr(ray.data.Dataset, name)

            def wrapped(dataset, *args, **kwargs):
                result = original(dataset, *args, **kwargs)
                if name == "iter_rows":
                    return (reads._row(name, row) for row in result)
                if name == "to_pandas":
                    reads.columns.append((name, frozenset(result.columns)))
                    return result
                return [reads._row(name, row) for row in result]  # take, take_all

            patch.setattr(ray.data.Dataset, name, wrapped)

        for name in ("iter_rows", "take", "take_all", "to_pandas"):
            rows_of(name)
        original_batches = ray.data.Dataset.iter_batches

        def iter_batches(dataset, *args, **kwargs):
            for batch in original_batches(dataset, *args, **kwargs):
                names = batch.column_names if hasattr(batch, "column_names") else list(batch.keys())
                reads.columns.append(("iter_batches", frozenset(names)))
                yield batch

        patch.setattr(ray.data.Dataset, "iter_batches", iter_batches)
        original_read, original_file_read = pq.read_table, pq.ParquetFile.read
        patch.setattr(pq, "read_table", lambda *a, **k: reads._table("read_table", original_read(*a, **k)))
        patch.setattr(
            pq.ParquetFile, "read", lambda *a, **k: reads._table("ParquetFile.read", original_file_read(*a, **k))
        )

    def _row(self, name: str, row):
        self.columns.append((name, frozenset(row.keys())))
        return row

    def _table(self, name: str, table):
        self.columns.append((name, frozenset(table.column_names)))
        return table
