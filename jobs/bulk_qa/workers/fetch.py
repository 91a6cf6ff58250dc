"""
The retrieved passages read from the index (a task after the retrieval stage, where the index keeps a passage
store: `qa_core.retrieval.store`): each retrieved question gets its hits' texts by their corpus positions, so
that the pairs carry their passages and no documents table is read or joined. The result files' contexts are read
from the same stores, by id (`read_contents`).
"""

from collections.abc import Collection

import pyarrow as pa

from jobs.storage import local_index_folder
from qa_core.retrieval.store import PassageStore


def open_stores(locations: list[str]) -> list[PassageStore]:
    """The passage stores of an index's shards, in corpus order (their first positions from their sizes)."""
    stores: list[PassageStore] = []
    for location in locations:
        stores.append(PassageStore(local_index_folder(location), sum(len(store) for store in stores)))
    return stores


def read_passages(stores: list[PassageStore], positions: list[int]) -> dict[int, tuple[str, str]]:
    """The `(id, content)` of the passages at these corpus positions, from the shards' stores, nothing else read."""
    found: dict[int, tuple[str, str]] = {}
    for store in stores:
        inside = [position for position in positions if store.doc_offset <= position < store.doc_offset + len(store)]
        if inside:
            table = store.take(inside)
            texts = zip(table["id"].to_pylist(), table["content"].to_pylist(), strict=True)
            found.update(zip(inside, texts, strict=True))
    return found


def read_contents(locations: list[str], ids: Collection[str]) -> dict[str, str]:
    """
    The texts of the passages with these ids, by id, from the passage stores of the index's shards (`locations`),
    reading their id columns and those passages only; ids that no store holds are left out.
    """
    found: dict[str, str] = {}
    for store in open_stores(locations):
        positions = store.positions_of(ids)
        if positions:
            table = store.take(list(positions.values()))
            found.update(zip(table["id"].to_pylist(), table["content"].to_pylist(), strict=True))
    return found


def fetch_passages(batch: pa.Table, locations: list[str]) -> pa.Table:
    """
    Retrieved questions -> the same with `passage_contents`: each hit's text (null for the questions not retrieved
    for), read from the index's passage stores by its corpus position (`retrieved_positions`).

    :raises ValueError: If a store's passage is not the one the index retrieved (a store of other documents).
    """
    positions = batch["retrieved_positions"].to_pylist()
    wanted = sorted({position for row in positions if row for position in row})
    found = read_passages(open_stores(locations), wanted) if wanted else {}
    contents = []
    for row, ids in zip(positions, batch["document_ids"].to_pylist(), strict=True):
        if row is None:
            contents.append(None)
            continue
        for position, document_id in zip(row, ids, strict=True):
            if found[position][0] != document_id:
                raise ValueError(
                    f"The index's passage store holds {found[position][0]!r} at position {position}, where the index "
                    f"has {document_id!r}: rebuild the index with `python -m jobs.index`."
                )
        contents.append([found[position][1] for position in row])
    return batch.append_column("passage_contents", pa.array(contents, pa.list_(pa.string())))
