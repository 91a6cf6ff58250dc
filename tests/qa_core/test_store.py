"""A shard's passage store: passages read by corpus position, and found by id."""

from pathlib import Path

import pyarrow as pa
import pytest

from qa_core.retrieval import store as store_module
from qa_core.retrieval.store import PassageStore, write_store


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PassageStore:
    """10 passages written in two tables, in record batches of 3, as the shard at corpus positions 100 to 109."""
    monkeypatch.setattr(store_module, "STORE_BATCH_ROWS", 3)
    ids = [f"p{i}" for i in range(10)]
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
