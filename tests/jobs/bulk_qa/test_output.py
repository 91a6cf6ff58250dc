"""The output folder's identity check, on folders written here (no Ray, no run)."""

from pathlib import Path

import pytest

from jobs.bulk_qa.output import OutputFolder
from jobs.storage import InputError

IDENTITY = {"config": {"top_k": 3}, "inputs": [], "model": {}}


@pytest.mark.parametrize("record", ["{not json", "[1, 2]", "{}"])
def test_an_unreadable_run_record_is_named_and_replaced_only_with_overwrite(tmp_path: Path, record: str) -> None:
    (tmp_path / "_job.json").write_text(record)
    folder = OutputFolder(str(tmp_path))
    with pytest.raises(InputError) as raised:
        folder.check(IDENTITY, overwrite=False)
    assert str(raised.value) == (
        f"{tmp_path}: holds a _job.json that is not a bulk-qa run's record (unreadable JSON, or not an object), so "
        "no run can resume there. Pass --overwrite to replace the run, or choose another --output."
    )
    assert folder.check(IDENTITY, overwrite=True) == {}
    folder.claim(IDENTITY, overwrite=True)
    assert (tmp_path / "_job.json").read_text().startswith('{\n  "config"')
