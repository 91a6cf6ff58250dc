"""
A shard's passage store (`store.arrow`, beside its index files): the ids and texts of its passages in corpus order
(and the documents' `page_number` and `file_path`, where the documents have them: `STORED_DOCUMENT_FIELDS`), in an
Arrow IPC file of zstd-compressed record batches of exactly `STORE_BATCH_ROWS` passages (the last one fewer).
Memory-mapped, a passage is read by its corpus position: the batch holding it follows from the position, and only
that batch is read and decompressed; passages are found by id in the index's own `doc_ids.arrow` beside it. A job
over a built index reads the passages it retrieved from here, and the contexts of its result files, instead of
reading (and joining) the whole documents table again.

Compressed, the store of 80-word passages takes 180 bytes a passage instead of 530, and a job reads 2,000 passages
from it in half a second (a shard of 1.5M such passages: zstd 180 bytes and 0.50 s; lz4 280 bytes and 0.17 s;
zstd in batches of 1,024, 133 bytes and 0.77 s).
"""

from collections.abc import Collection, Iterable, Iterator, Sequence
from itertools import chain
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qa_core.retrieval.index_io import DOC_IDS_FILE, read_doc_ids

STORE_FILE = "store.arrow"
STORE_SCHEMA = pa.schema([("id", pa.string()), ("content", pa.string())])  # what every store holds
# The documents' columns a store also keeps, in this order, where its passages have them (whole documents).
STORED_DOCUMENT_FIELDS = [pa.field("page_number", pa.int64()), pa.field("file_path", pa.string())]
# Passages per record batch: what reading one passage decompresses (about 46 KiB of 80-word passages).
STORE_BATCH_ROWS = 256
_COMPRESSION = pa.ipc.IpcWriteOptions(compression="zstd")
_BATCH_ROWS_KEY = b"batch_rows"  # the schema's metadata entry that holds the batch size the store was written with


def store_schema(names: Collection[str]) -> pa.Schema:
    """The schema of a store of passages with these columns: `STORE_SCHEMA` and the `STORED_DOCUMENT_FIELDS` named."""
    return pa.schema([*STORE_SCHEMA, *(field for field in STORED_DOCUMENT_FIELDS if field.name in names)])


def write_store(folder: Path, tables: Iterable[pa.Table], name: str = STORE_FILE) -> int:
    """
    Writes the store of a shard's passages into its folder (as `name`: a split index's shard also keeps its
    source documents in a store of their own, `jobs.passages`).

    :param tables: The passages' `id` and `content`, and the `STORED_DOCUMENT_FIELDS` the first table has (other
        columns ignored), in corpus order, in any number of tables of any sizes.
    :returns: How many passages it holds.
    """
    written, tables = 0, iter(tables)
    first = next(tables, None)
    schema = store_schema(first.column_names if first is not None else ())
    with_size = schema.with_metadata({_BATCH_ROWS_KEY: str(STORE_BATCH_ROWS).encode()})
    with (
        pa.OSFile(str(folder / name), "wb") as sink,
        pa.ipc.new_file(sink, with_size, options=_COMPRESSION) as writer,
    ):
        for batch in _exact_batches(chain([first], tables) if first is not None else (), schema):
            writer.write_batch(batch)
            written += batch.num_rows
    return written


def _exact_batches(tables: Iterable[pa.Table], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The tables' passages in batches of exactly `STORE_BATCH_ROWS` (the last one fewer), in order."""
    pending = schema.empty_table()
    for table in tables:
        pending = pa.concat_tables([pending, table.select(schema.names).cast(schema)])
        while pending.num_rows >= STORE_BATCH_ROWS:
            yield pending.slice(0, STORE_BATCH_ROWS).combine_chunks().to_batches()[0]
            pending = pending.slice(STORE_BATCH_ROWS)
    if pending.num_rows:
        yield pending.combine_chunks().to_batches()[0]


class PassageStore:
    """
    The store of a shard, memory-mapped read-only: `take` reads passages by corpus position (a store of source
    documents, `doc_offset` 0: by row), `positions_of` finds them by id.

    :param folder: The shard's folder.
    :param doc_offset: The corpus position of its first passage.
    :param name: The store's file (a split index's source documents: `jobs.passages.SOURCES_FILE`).
    :param ids: The file of its passages' ids, beside it (`index_io.write_doc_ids`'s).
    :raises ValueError: If the folder has no store, or its file is not one.
    """

    def __init__(self, folder: Path, doc_offset: int, name: str = STORE_FILE, ids: str = DOC_IDS_FILE) -> None:
        path = folder / name
        try:
            self._reader = pa.ipc.open_file(pa.memory_map(str(path), "r"))
        except (OSError, pa.ArrowInvalid) as error:
            raise ValueError(f"Cannot read the passage store {path}: {error}") from error
        schema, metadata = self._reader.schema, self._reader.schema.metadata or {}
        if not schema.remove_metadata().equals(store_schema(schema.names)) or _BATCH_ROWS_KEY not in metadata:
            raise ValueError(
                f"{path} is not a passage store of this version (columns {schema.names}): rebuild the index with "
                "`python -m jobs.index`."
            )
        self._folder, self._ids, self._batch_rows = folder, ids, int(metadata[_BATCH_ROWS_KEY])
        batches = self._reader.num_record_batches
        self._size = (batches - 1) * self._batch_rows + self._reader.get_batch(batches - 1).num_rows if batches else 0
        self.doc_offset = doc_offset

    @property
    def schema(self) -> pa.Schema:
        """Its columns: `STORE_SCHEMA`'s and the `STORED_DOCUMENT_FIELDS` it keeps."""
        return self._reader.schema.remove_metadata()

    def __len__(self) -> int:
        return self._size

    def take(self, positions: Sequence[int]) -> pa.Table:
        """
        The passages at these corpus positions (its `schema`'s columns), in their order, each batch holding one of
        them read and decompressed once.

        :raises IndexError: If a position lies outside the shard.
        """
        wanted = np.asarray(positions, np.int64) - self.doc_offset
        if wanted.size and (wanted.min() < 0 or wanted.max() >= self._size):
            raise IndexError(f"Positions outside the store's {self.doc_offset} to {self.doc_offset + self._size - 1}.")
        batches: dict[int, pa.RecordBatch] = {}
        rows = []
        for batch, row in zip(*np.divmod(wanted, self._batch_rows), strict=True):
            if int(batch) not in batches:
                batches[int(batch)] = self._reader.get_batch(int(batch))
            rows.append(batches[int(batch)].slice(int(row), 1))
        return pa.Table.from_batches(rows, self._reader.schema).replace_schema_metadata(None)

    def tables(self) -> Iterator[pa.Table]:
        """The store's passages in order, a batch at a time (one batch decompressed in memory at once)."""
        for batch in range(self._reader.num_record_batches):
            yield pa.Table.from_batches([self._reader.get_batch(batch)]).replace_schema_metadata(None)

    def positions_of(self, ids: Collection[str]) -> dict[str, int]:
        """
        The corpus positions of those of these ids that the store holds, by id, from its ids' file (the shard's
        `doc_ids.arrow`, memory-mapped: no text is read); an id the store holds twice, its first.

        :raises ValueError: If the ids are missing or not as many as its passages.
        """
        if not ids:
            return {}
        column = read_doc_ids(self._folder, name=self._ids).arrow()
        if len(column) != self._size:
            raise ValueError(f"{self._folder / self._ids} holds {len(column)} ids for {self._size} stored passages.")
        rows = np.flatnonzero(pc.is_in(column, value_set=pa.array(sorted(set(ids)), pa.string())).to_numpy(False))
        return {column[int(row)].as_py(): self.doc_offset + int(row) for row in reversed(rows)}
