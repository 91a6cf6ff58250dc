"""
What changed in an input folder since an ingestion's earlier output: each file listed is new, changed or unchanged
(the same size and modification time as recorded, or else the same bytes: touched, not changed), and each file
recorded but no longer listed is deleted. `settle` says, for each file, where its rows are: in the earlier output,
in a part this ingestion (or a killed attempt at it) converted, or nowhere yet (it is to be converted).
"""

from dataclasses import dataclass, field

import pyarrow as pa

from jobs.ingest.folder import InputFolder
from jobs.ingest.stage import RECORD_SCHEMA, Part

NEW, CHANGED, UNCHANGED, DELETED = "new", "changed", "unchanged", "deleted"


@dataclass(frozen=True)
class Record:
    """A file as converted: its size and modification time when listed, and the SHA-256 of its bytes (or None)."""

    size: int
    mtime_ns: int
    sha256: str | None


@dataclass
class Settled:
    """
    Where each file's rows are.

    :param earlier: The files whose rows (and report rows) are the earlier output's.
    :param parts: The parts whose rows are taken, each with the files taken from it.
    :param pending: The files not converted yet, by their position in the folder, with the hash of their earlier
        conversion (None: new, or unreadable then).
    :param records: The files' records once all are converted, in the folder's order (`RECORD_SCHEMA`).
    :param counts: Files new, changed, unchanged and deleted.
    """

    earlier: set[str] = field(default_factory=set)
    parts: dict[str, tuple[Part, set[str]]] = field(default_factory=dict)
    pending: list[tuple[int, str | None]] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys((NEW, CHANGED, UNCHANGED, DELETED), 0))

    def records_table(self) -> pa.Table:
        return pa.Table.from_pylist(self.records, schema=RECORD_SCHEMA)


def read_records(table: pa.Table) -> dict[str, Record]:
    """An output's `files.parquet`, by path."""
    return {
        row["path"]: Record(row["size"], row["mtime_ns"], row["sha256"]) for row in table.to_pylist()
    }


def settle(folder: InputFolder, earlier: dict[str, Record], parts: list[Part]) -> Settled:
    """
    Where each of `folder`'s files' rows are, given the `earlier` output's records and the `parts` converted since.

    A part's record of a file counts when its size and modification time are the file's as listed now and it was
    converted (or, not converted because its bytes were the earlier conversion's, when that conversion is still
    the earlier output's); else an earlier record counts when its size and modification time are the file's. A
    file with neither is pending, to be converted.
    """
    staged: dict[str, tuple[Part, dict]] = {}
    for part in parts:
        for record in part.files.to_pylist():
            previous = earlier.get(record["path"])
            if record["converted"] or (previous is not None and previous.sha256 == record["sha256"]):
                staged[record["path"]] = (part, record)
    settled = Settled()
    listed = zip(folder.paths, folder.sizes, folder.mtimes_ns, strict=True)
    for position, (path, size, mtime_ns) in enumerate(listed):
        previous = earlier.get(path)
        part, record = staged.get(path, (None, None))
        if record is not None and (record["size"], record["mtime_ns"]) == (size, mtime_ns):
            sha256 = record["sha256"]
            if record["converted"]:
                settled.parts.setdefault(part.path, (part, set()))[1].add(path)
                settled.counts[NEW if previous is None else CHANGED] += 1
            else:  # touched: its bytes are the earlier conversion's
                settled.earlier.add(path)
                settled.counts[UNCHANGED] += 1
        elif previous is not None and (previous.size, previous.mtime_ns) == (size, mtime_ns):
            sha256 = previous.sha256
            settled.earlier.add(path)
            settled.counts[UNCHANGED] += 1
        else:
            settled.pending.append((position, None if previous is None else previous.sha256))
            continue
        settled.records.append({"path": path, "size": size, "mtime_ns": mtime_ns, "sha256": sha256})
    settled.counts[DELETED] = len(earlier.keys() - set(folder.paths))
    return settled


__all__ = ["CHANGED", "DELETED", "NEW", "UNCHANGED", "Record", "Settled", "read_records", "settle"]
