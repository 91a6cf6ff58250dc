"""
A shard's passage store (`store.arrow`, beside its index files): the ids and texts of its passages in corpus order
(and the documents' `page_number` and `file_path`, where the documents have them: `STORED_DOCUMENT_FIELDS`), in an
uncompressed Arrow IPC file of record batches of `STORE_BATCH_ROWS` passages. Memory-mapped, a passage is read
by its corpus position without reading any other: the batch holding it is found from the batch sizes, and only
its own offsets and bytes are touched; passages are found by id from the id column alone. A job over a built index
reads the passages it retrieved from here, and the contexts of its result files, instead of reading (and joining)
the whole documents table again.
"""

from collections.abc import Collection, Iterable, Sequence
from itertools import chain
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

STORE_FILE = "store.arrow"
STORE_SCHEMA = pa.schema([("id", pa.string()), ("content", pa.string())])  # what every store holds
# The documents' columns a store also keeps, in this order, where its passages have them (whole documents).
STORED_DOCUMENT_FIELDS = [pa.field("page_number", pa.int64()), pa.field("file_path", pa.string())]
# Passages per record batch: the batches' sizes are what a reader looks a position up in (a few KiB per shard).
STORE_BATCH_ROWS = 8192


def store_schema(names: Collection[str]) -> pa.Schema:
    """The schema of a store of passages with these columns: `STORE_SCHEMA` and the `STORED_DOCUMENT_FIELDS` named."""
    return pa.schema([*STORE_SCHEMA, *(field for field in STORED_DOCUMENT_FIELDS if field.name in names)])


def write_store(folder: Path, tables: Iterable[pa.Table]) -> int:
    """
    Writes the store of a shard's passages into its folder.

    :param tables: The passages' `id` and `content`, and the `STORED_DOCUMENT_FIELDS` the first table has (other
        columns ignored), in corpus order.
    :returns: How many passages it holds.
    """
    written, tables = 0, iter(tables)
    first = next(tables, None)
    schema = store_schema(first.column_names if first is not None else ())
    with pa.OSFile(str(folder / STORE_FILE), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for table in chain([first], tables) if first is not None else ():
            table = table.select(schema.names).cast(schema)
            writer.write_table(table, max_chunksize=STORE_BATCH_ROWS)
            written += table.num_rows
    return written


class PassageStore:
    """
    The store of a shard, memory-mapped read-only: `take` reads passages by corpus position, `positions_of` finds
    them by id.

    :param folder: The shard's folder.
    :param doc_offset: The corpus position of its first passage.
    :raises ValueError: If the folder has no store, or its file is not one.
    """

    def __init__(self, folder: Path, doc_offset: int) -> None:
        path = folder / STORE_FILE
        try:
            self._reader = pa.ipc.open_file(pa.memory_map(str(path), "r"))
        except (OSError, pa.ArrowInvalid) as error:
            raise ValueError(f"Cannot read the passage store {path}: {error}") from error
        if not self._reader.schema.equals(store_schema(self._reader.schema.names)):
            raise ValueError(f"{path} is not a passage store (its columns are {self._reader.schema.names}).")
        sizes = [self._reader.get_batch(batch).num_rows for batch in range(self._reader.num_record_batches)]
        self._starts = np.cumsum([doc_offset, *sizes])  # batch b holds positions starts[b]:starts[b + 1]
        self.doc_offset = doc_offset

    @property
    def schema(self) -> pa.Schema:
        """Its columns: `STORE_SCHEMA`'s and the `STORED_DOCUMENT_FIELDS` it keeps."""
        return self._reader.schema

    def __len__(self) -> int:
        return int(self._starts[-1] - self.doc_offset)

    def take(self, positions: Sequence[int]) -> pa.Table:
        """
        The passages at these corpus positions (its `schema`'s columns), in their order, reading nothing else.

        :raises IndexError: If a position lies outside the shard.
        """
        wanted = np.asarray(positions, np.int64)
        if wanted.size and (wanted.min() < self._starts[0] or wanted.max() >= self._starts[-1]):
            raise IndexError(f"Positions outside the store's {self._starts[0]} to {self._starts[-1] - 1}.")
        batches = np.searchsorted(self._starts, wanted, side="right") - 1
        rows = [self._reader.get_batch(int(batch)).slice(int(position - self._starts[batch]), 1)
                for batch, position in zip(batches, wanted, strict=True)]  # fmt: skip
        return pa.Table.from_batches(rows, self.schema)

    def positions_of(self, ids: Collection[str]) -> dict[str, int]:
        """
        The corpus positions of those of these ids that the store holds, by id, reading its id column alone (batch
        by batch, memory-mapped: no text is touched).
        """
        wanted = pc.SetLookupOptions(pa.array(sorted(set(ids)), pa.string()))
        found: dict[str, int] = {}
        for batch in range(self._reader.num_record_batches) if ids else ():
            column = self._reader.get_batch(batch).column(0)  # "id"
            for row in np.flatnonzero(pc.is_in(column, options=wanted).to_numpy(zero_copy_only=False)):
                found[column[int(row)].as_py()] = int(self._starts[batch] + row)
        return found
