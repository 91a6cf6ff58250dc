"""
The retrieved passages read from the index (a task after the retrieval stage, where the index keeps a passage
store: `qa_core.retrieval.store`): each retrieved question gets its hits' texts by their corpus positions, so
that the pairs carry their passages and no documents table is read or joined. An index of split passages keeps
their source documents in a store instead (`jobs.passages`): a hit gets its document's text, of which the reader
reads the passage's range. The result files' contexts are read from the same stores, by id (`read_contents`).
"""

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from jobs.passages import Passages
from jobs.storage import local_index_folder
from qa_core.retrieval.store import PassageStore

# The columns `fetch_passages` adds: each the list of the hits' values of a store's column, by name.
FETCHED_COLUMNS = {
    "passage_contents": ("content", pa.string()),
    "passage_page_numbers": ("page_number", pa.int64()),
    "passage_file_paths": ("file_path", pa.string()),
}


@dataclass(frozen=True)
class ShardDocuments:
    """
    A shard's store of documents: its passages' (whole documents), or with `passages` (split) its source
    documents'.

    :param offset: The shard's first corpus position.
    :param size: Its passages.
    :param documents: The store; its `doc_offset` is `offset` for whole documents, else 0 (read by source row).
    :param passages: Split: where its passages lie (each one's source row in `documents`).
    """

    offset: int
    size: int
    documents: PassageStore
    passages: Passages | None

    def rows(self, positions: list[int]) -> list[int]:
        """What `documents.take` reads for passages at these corpus positions (of this shard)."""
        if self.passages is None:
            return positions
        return [int(self.passages.rows[position - self.offset]) for position in positions]


def open_stores(locations: list[str]) -> list[ShardDocuments]:
    """The stores of an index's shards, in corpus order (their first positions from their sizes)."""
    stores: list[ShardDocuments] = []
    for location in locations:
        folder, offset = local_index_folder(location), sum(store.size for store in stores)
        passages = Passages.load(folder)
        if passages is None:
            documents = PassageStore(folder, offset)
            stores.append(ShardDocuments(offset, len(documents), documents, None))
        else:
            stores.append(ShardDocuments(offset, len(passages), passages.sources(), passages))
    return stores


def read_passages(stores: list[ShardDocuments], positions: list[int]) -> dict[int, dict[str, Any]]:
    """
    The documents of the passages at these corpus positions (`id`, `content` and the documents' columns their store
    keeps: the passage itself, or split its source document), from the shards' stores, each document read once,
    nothing else read.
    """
    found: dict[int, dict[str, Any]] = {}
    for store in stores:
        inside = [position for position in positions if store.offset <= position < store.offset + store.size]
        rows = store.rows(inside)
        unique = sorted(set(rows))
        documents = dict(zip(unique, store.documents.take(unique).to_pylist(), strict=True)) if unique else {}
        found.update((position, documents[row]) for position, row in zip(inside, rows, strict=True))
    return found


def read_contents(locations: list[str], ids: Collection[str]) -> dict[str, str]:
    """
    The texts of the documents with these ids (whole-document passages, or split passages' source documents), by
    id, from the stores of the index's shards (`locations`), reading their id columns and those documents only;
    ids that no store holds are left out.
    """
    found: dict[str, str] = {}
    for store in open_stores(locations):
        positions = store.documents.positions_of(ids)
        if positions:
            table = store.documents.take(list(positions.values()))
            found.update(zip(table["id"].to_pylist(), table["content"].to_pylist(), strict=True))
    return found


def fetch_passages(batch: pa.Table, locations: list[str]) -> pa.Table:
    """
    Retrieved questions -> the same with each hit's text (`passage_contents`) and its document's page number and file
    (`passage_page_numbers`, `passage_file_paths`: null where the documents have none), all null for the questions not
    retrieved for, read from the index's stores by its corpus position (`retrieved_positions`); a split passage's
    are its source document's.

    :raises ValueError: If a store's passage is not the one the index retrieved (a store of other documents).
    """
    positions = batch["retrieved_positions"].to_pylist()
    wanted = sorted({position for row in positions if row for position in row})
    found = read_passages(open_stores(locations), wanted) if wanted else {}
    columns: dict[str, list[list[Any] | None]] = {name: [] for name in FETCHED_COLUMNS}
    for row, ids in zip(positions, batch["document_ids"].to_pylist(), strict=True):
        for position, document_id in zip(row, ids, strict=True) if row is not None else ():
            if found[position]["id"] != document_id:
                raise ValueError(
                    f"The index's passage store holds {found[position]['id']!r} at position {position}, where the "
                    f"index has {document_id!r}: rebuild the index with `python -m jobs.index`."
                )
        for name, (key, _) in FETCHED_COLUMNS.items():
            columns[name].append(None if row is None else [found[position].get(key) for position in row])
    for name, (_, kind) in FETCHED_COLUMNS.items():
        batch = batch.append_column(name, pa.array(columns[name], pa.list_(kind)))
    return batch
