"""
The documents read from the index (a task after the retrieval stage, where the index keeps stores:
`qa_core.retrieval.store`): each retrieved question gets its hits' texts by their corpus positions, and each question
that names its `document_ids` those documents' by id, so that the pairs carry their texts and no documents table is
joined. An index of split passages keeps their source documents in a store instead (`jobs.passages`): a hit gets its
document's text, of which the reader reads the passage's range. Only named ids that no store holds (documents
without content, or split into no passage) are looked up in the documents table. The result files' contexts are
read from the same stores, by id (`read_contents`).
"""

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.bulk_qa.workers.explode import JOINED_DOCUMENT_COLUMNS
from jobs.passages import Passages
from jobs.storage import local_index_folder, parquet_dataset
from qa_core.retrieval.store import PassageStore

# The columns `fetch_passages` adds: each the list of the hits' values of a store's column, by name.
FETCHED_COLUMNS = {
    "passage_contents": ("content", pa.string()),
    "passage_page_numbers": ("page_number", pa.int64()),
    "passage_file_paths": ("file_path", pa.string()),
}
KNOWN_COLUMN = "passage_known"  # and whether each document is known (a named id may not be: null values)


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
    ids that no store holds, and documents of empty content, are left out (as the documents table's are).
    """
    found = _stored_documents(open_stores(locations), ids)
    return {key: row["content"] for key, row in found.items() if row["content"]}


def _stored_documents(stores: list[ShardDocuments], ids: Collection[str]) -> dict[str, dict[str, Any]]:
    """The documents with these ids that the stores hold (their columns, by id), each read once."""
    found: dict[str, dict[str, Any]] = {}
    for store in stores:
        missing = set(ids) - found.keys()
        positions = store.documents.positions_of(missing) if missing else {}
        if positions:
            found.update((row["id"], row) for row in store.documents.take(sorted(positions.values())).to_pylist())
    return found


def read_documents(stores: list[ShardDocuments], ids: Collection[str], documents: str) -> dict[str, dict[str, Any]]:
    """
    The documents with these ids, by id (`id`, `content` and the documents' columns the stores keep): from the
    stores, and those that no store holds from the documents table (`documents`: its rows with these ids only);
    ids found in neither are left out (unknown).
    """
    found = _stored_documents(stores, ids)
    missing = set(ids) - found.keys()
    for row in rows_with_ids(documents, missing) if missing else ():
        found.setdefault(row["id"], row)
    return found


def rows_with_ids(documents: str, ids: Collection[str]) -> list[dict[str, Any]]:
    """
    The rows of the documents table with these ids (`id`, `content` and those of its `page_number` and `file_path`
    it has), in table order: its `id` column read row group by row group, the other columns of only the row groups
    that hold one of them.
    """
    dataset = parquet_dataset(documents)
    columns = [name for name in JOINED_DOCUMENT_COLUMNS if name in dataset.schema.names]
    wanted = pa.array(sorted(ids), pa.string())
    rows: list[dict[str, Any]] = []
    for fragment in dataset.get_fragments():
        for row_group in fragment.split_by_row_group():
            inside = pc.is_in(row_group.to_table(columns=["id"])["id"].cast(pa.string()), value_set=wanted)
            if pc.any(inside).as_py():
                rows += row_group.to_table(columns=columns).filter(inside).to_pylist()
    return rows


def fetch_passages(batch: pa.Table, locations: list[str], documents: str) -> pa.Table:
    """
    Questions from the retrieval stage -> the same with each of their documents' text (`passage_contents`), page
    number and file (`passage_page_numbers`, `passage_file_paths`: null where the documents have none) and whether
    it is known (`passage_known`): a retrieved question's hits read from the index's stores by corpus position
    (`retrieved_positions`; a split passage's are its source document's), a question's named `document_ids` by id
    (`read_documents`); all null for the questions that have neither.

    :raises ValueError: If a store's passage is not the one the index retrieved (a store of other documents).
    """
    stores = open_stores(locations)
    positions = batch["retrieved_positions"].to_pylist()
    listed = batch["document_ids"].to_pylist()  # a retrieved question's hits' documents, or the ones it names
    wanted = sorted({position for row in positions if row for position in row})
    found = read_passages(stores, wanted) if wanted else {}
    named = {key for row, ids in zip(positions, listed, strict=True) if row is None for key in ids or () if key}
    by_id = read_documents(stores, named, documents) if named else {}
    columns: dict[str, list[list[Any] | None]] = {name: [] for name in [*FETCHED_COLUMNS, KNOWN_COLUMN]}
    for row, ids in zip(positions, listed, strict=True):
        if row is not None:
            rows = [found[position] for position in row]
            for position, document, document_id in zip(row, rows, ids, strict=True):
                if document["id"] != document_id:
                    raise ValueError(
                        f"The index's passage store holds {document['id']!r} at position {position}, where the "
                        f"index has {document_id!r}: rebuild the index with `python -m jobs.index`."
                    )
        else:
            rows = None if ids is None else [by_id.get(document_id) for document_id in ids]
        for name, (key, _) in FETCHED_COLUMNS.items():
            columns[name].append(None if rows is None else [(document or {}).get(key) for document in rows])
        columns[KNOWN_COLUMN].append(None if rows is None else [document is not None for document in rows])
    for name, (_, kind) in [*FETCHED_COLUMNS.items(), (KNOWN_COLUMN, (None, pa.bool_()))]:
        batch = batch.append_column(name, pa.array(columns[name], pa.list_(kind)))
    return batch
