"""The index update benchmark's changed table: 1% deleted, 1% changed, 1% added, spread at random or in runs."""

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs.bench.index_update import RUN_LENGTH, changed_table
from jobs.bench.retrieval import write_synthetic_documents


@pytest.mark.parametrize("spread", ["random", "runs"])
def test_the_changed_table_deletes_changes_and_adds_one_percent_each(tmp_path: Path, spread: str) -> None:
    before, after = tmp_path / "before.parquet", tmp_path / "after.parquet"
    write_synthetic_documents(before, 3000, 20)
    assert changed_table(before, after, 20, spread) == {"deleted": 30, "changed": 30, "added": 30}
    old, new = (dict(zip(*(pq.read_table(path)[name].to_pylist() for name in ("id", "content")), strict=True))
                for path in (before, after))  # fmt: skip
    assert len(new) == 3000 and list(new)[-30:] == [f"added{i}" for i in range(30)]
    deleted = [key for key in old if key not in new]
    changed = [key for key in old if key in new and new[key] != old[key]]
    assert (len(deleted), len(changed)) == (30, 30)
    touched = {int(key[1:]) // RUN_LENGTH for key in deleted + changed}
    assert len(touched) == 1 if spread == "runs" else len(touched) == 3  # one run of 1,000, or all of them
    assert [key for key in new if key in old] == [key for key in old if key in new]  # the order kept
