"""
An ingestion's documents table, written in the folder's order from where each file's rows are: the earlier
output's table (the files that did not change) and this run's parts (the files it converted). Each source lists
its files' rows in the folder's order, so the table is their merge by file: a source's rows are copied as they
are, a chunk (a Parquet row group) at a time, never the whole table in memory.
"""

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from jobs.ingest.stage import DOCUMENTS_SCHEMA, PARQUET_OPTIONS

PART_BYTES = 128 * 2**20  # bytes of rows (as Arrow holds them) in one file of the table before the next starts
ROW_GROUP_BYTES = 16 * 2**20  # bytes of rows gathered before they are written as one row group


@dataclass(frozen=True)
class RowSource:
    """
    Where some files' rows are.

    :param files: Parquet files holding them (in order), inside the filesystem.
    :param positions: The files whose rows are taken from them, by their position in the folder (rows of other
        files there are not taken).
    """

    files: list[str]
    positions: dict[str, int]


@dataclass(frozen=True)
class _Chunk:
    rows: pa.Table
    positions: np.ndarray  # (rows,) each row's file's position in the folder, non-decreasing


def write_merged(filesystem: pafs.FileSystem, sources: list[RowSource], folder: str) -> int:
    """
    The sources' rows merged in the folder's order, written as Parquet files `part-00000.parquet`, ... in
    `folder` (at least one file: an empty table for no rows).

    :returns: The rows written.
    """
    filesystem.create_dir(folder, recursive=True)
    streams = [_chunks(filesystem, source) for source in sources]
    heap = [(min(source.positions.values()), index, None) for index, source in enumerate(sources) if source.positions]
    heapq.heapify(heap)
    writer = _PartWriter(filesystem, folder)
    while heap:
        _, index, chunk = heapq.heappop(heap)
        if chunk is None:  # the source's next chunk, read only now: at most a chunk of each source started is held
            chunk = next(streams[index], None)
            if chunk is not None:
                heapq.heappush(heap, (int(chunk.positions[0]), index, chunk))
            continue
        bound = heap[0][0] if heap else np.iinfo(np.int64).max
        cut = int(np.searchsorted(chunk.positions, bound))  # the rows of files before the next source's first
        writer.add(chunk.rows.slice(0, cut))
        if cut < chunk.rows.num_rows:
            rest = _Chunk(chunk.rows.slice(cut), chunk.positions[cut:])
            heapq.heappush(heap, (int(rest.positions[0]), index, rest))
        else:  # its next chunk starts at this one's last file or later
            heapq.heappush(heap, (int(chunk.positions[-1]), index, None))
    return writer.close()


def _chunks(filesystem: pafs.FileSystem, source: RowSource) -> Iterator[_Chunk]:
    """The source's rows of its files, a row group at a time (groups left with none skipped)."""
    for path in source.files:
        with filesystem.open_input_file(path) as file:
            parquet = pq.ParquetFile(file)
            for group in range(parquet.num_row_groups):
                rows = parquet.read_row_group(group).replace_schema_metadata(None)
                encoded = pc.dictionary_encode(rows["file_path"]).combine_chunks()
                known = np.array([source.positions.get(path, -1) for path in encoded.dictionary.to_pylist()] + [-1])
                indices = encoded.indices.fill_null(len(encoded.dictionary)).to_numpy(zero_copy_only=False)
                positions = known[indices]
                kept = positions >= 0
                if kept.any():
                    yield _Chunk(rows.filter(pa.array(kept)), positions[kept])


class _PartWriter:
    """Rows written in order into numbered Parquet files of about `PART_BYTES` each, in row groups."""

    def __init__(self, filesystem: pafs.FileSystem, folder: str) -> None:
        self.filesystem, self.folder = filesystem, folder.rstrip("/")
        self.pending: list[pa.Table] = []
        self.pending_bytes = self.file_bytes = self.rows = self.files = 0
        self.writer: pq.ParquetWriter | None = None
        self.stream = None

    def add(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        self.pending.append(rows)
        self.pending_bytes += rows.nbytes
        if self.pending_bytes >= ROW_GROUP_BYTES:
            self._flush()

    def close(self) -> int:
        """Writes what is pending and closes the last file; returns the rows written."""
        self._flush()
        if self.writer is None:  # no rows at all: one empty file, so that the folder is a table all the same
            self._open()
        self._close_file()
        return self.rows

    def _flush(self) -> None:
        if not self.pending:
            return
        if self.writer is None:
            self._open()
        table = pa.concat_tables(self.pending)
        self.writer.write_table(table)
        self.rows += table.num_rows
        self.file_bytes += self.pending_bytes
        self.pending, self.pending_bytes = [], 0
        if self.file_bytes >= PART_BYTES:
            self._close_file()

    def _open(self) -> None:
        self.stream = self.filesystem.open_output_stream(f"{self.folder}/part-{self.files:05d}.parquet")
        self.writer = pq.ParquetWriter(self.stream, DOCUMENTS_SCHEMA, **PARQUET_OPTIONS)
        self.files += 1

    def _close_file(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.stream.close()
        self.writer, self.stream, self.file_bytes = None, None, 0


__all__ = ["PART_BYTES", "RowSource", "write_merged"]
