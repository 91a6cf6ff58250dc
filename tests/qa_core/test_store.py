"""A shard's passage store: compressed batches of a fixed size, passages read by corpus position, found by id."""

from pathlib import Path

import pyarrow as pa
import pytest

from qa_core.retrieval import store as store_module
from qa_core.retrieval.index_io import write_doc_ids
from qa_core.retrieval.store import STORE_FILE, STORE_SCHEMA, PassageStore, write_store


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PassageStore:
    """
    10 passages written in two tables, in record batches of 3, as the shard at corpus positions 100 to 109 (its
    index's ids beside it).
    """
    monkeypatch.setattr(store_module, "STORE_BATCH_ROWS", 3)
    ids = [f"p{i}" for i in range(10)]
    write_doc_ids(tmp_path / "doc_ids.arrow", ids)
    tables = [pa.table({"id": ids[:4], "content": [f"text {i}" for i in range(4)], "extra": list(range(4))})]
    tables.append(pa.table({"id": ids[4:], "content": [f"text {i}" for i in range(4, 10)]}))
    assert write_store(tmp_path, tables) == 10
    return PassageStore(tmp_path, doc_offset=100)


def test_passages_are_read_by_position_and_found_by_id(store: PassageStore) -> None:
    """Positions across batches, in the order asked; ids anywhere in the store, those it lacks left out."""
    assert len(store) == 10
    assert store.take([109, 100, 104]).to_pylist() == [
        {"id": "p9", "content": "text 9"},
        {"id": "p0", "content": "text 0"},
        {"id": "p4", "content": "text 4"},
    ]
    assert store.positions_of(["p9", "p3", "elsewhere", "p4", "p3"]) == {"p3": 103, "p4": 104, "p9": 109}
    assert store.positions_of([]) == {}
    with pytest.raises(IndexError, match="100 to 109"):
        store.take([110])


def test_a_folder_without_a_store_is_refused(tmp_path: Path) -> None:
    """A shard folder without `store.arrow`: a clear error naming the file."""
    with pytest.raises(ValueError, match="Cannot read the passage store"):
        PassageStore(tmp_path, 0)


def test_a_store_keeps_the_documents_page_numbers_and_files_they_have(tmp_path: Path) -> None:
    """`page_number` (as int64) and `file_path` kept where the first table has them, in that order; others ignored."""
    paged, plain = tmp_path / "paged", tmp_path / "plain"
    paged.mkdir()
    plain.mkdir()
    columns = {"file_path": ["a.pdf", None], "content": ["x", "y"], "id": ["p0", "p1"], "rank": [1, 2]}
    write_store(paged, [pa.table({**columns, "page_number": pa.array([3, None], pa.int32())})])
    write_store(plain, [pa.table(columns).drop_columns(["file_path"])])
    assert PassageStore(paged, 0).take([1, 0]).to_pylist() == [
        {"id": "p1", "content": "y", "page_number": None, "file_path": None},
        {"id": "p0", "content": "x", "page_number": 3, "file_path": "a.pdf"},
    ]
    assert PassageStore(paged, 0).schema.field("page_number").type == pa.int64()
    assert PassageStore(plain, 0).schema.names == ["id", "content"]


def _passages(first: int, n: int) -> pa.Table:
    return pa.table({"id": [f"p{i}" for i in range(first, first + n)],
                     "content": [f"passage {i} " + "words " * (i % 7) for i in range(first, first + n)],
                     "extra": list(range(n))})  # fmt: skip


def test_a_store_written_in_uneven_tables_has_batches_of_one_size_compressed(tmp_path: Path) -> None:
    """The batches' size is what a position is looked up with: exact, whatever the tables written; zstd."""
    sizes = [100, 3 * store_module.STORE_BATCH_ROWS, 5]  # batches straddle the tables
    tables = [_passages(sum(sizes[:at]), size) for at, size in enumerate(sizes)]
    assert write_store(tmp_path, tables) == sum(sizes)
    reader = pa.ipc.open_file(pa.memory_map(str(tmp_path / STORE_FILE)))
    batch_sizes = [reader.get_batch(batch).num_rows for batch in range(reader.num_record_batches)]
    assert batch_sizes == [store_module.STORE_BATCH_ROWS] * 3 + [sum(sizes) - 3 * store_module.STORE_BATCH_ROWS]
    everything = pa.concat_tables(tables).select(STORE_SCHEMA.names)
    assert (tmp_path / STORE_FILE).stat().st_size < everything.nbytes / 3
    store = PassageStore(tmp_path, doc_offset=1000)
    positions = [1000 + sum(sizes) - 1, 1000, 1000 + 300, 1000 + 255, 1000 + 256, 1000 + 300]  # any order, repeats
    assert store.take(positions).to_pylist() == [everything.slice(p - 1000, 1).to_pylist()[0] for p in positions]
    assert pa.concat_tables(store.tables()).equals(everything)


def test_a_store_of_an_earlier_version_asks_for_a_rebuild(tmp_path: Path) -> None:
    with pa.OSFile(str(tmp_path / STORE_FILE), "wb") as sink, pa.ipc.new_file(sink, STORE_SCHEMA) as writer:
        writer.write_table(_passages(0, 10).select(STORE_SCHEMA.names))  # uncompressed, batches of any size
    with pytest.raises(ValueError, match="not a passage store of this version .* rebuild the index"):
        PassageStore(tmp_path, 0)
