"""What the check of shared paths compares (no Ray: the probes themselves run in tests/cluster/test_local_disks.py)."""

import shutil
from pathlib import Path

from jobs.path_probe import fingerprint
from jobs.shared_paths import SharedPath, model_folder


def test_copies_of_the_same_files_have_one_fingerprint_and_others_differ(tmp_path: Path) -> None:
    folder = tmp_path / "a"
    folder.mkdir()
    (folder / "part-0.parquet").write_bytes(b"x" * 100_000)
    (folder / "sub").mkdir()
    copy = tmp_path / "b"
    shutil.copytree(folder, copy)
    assert fingerprint(str(folder)) == fingerprint(str(copy)) is not None
    assert fingerprint(str(folder / "part-0.parquet")) == fingerprint(str(copy / "part-0.parquet")) is not None
    (copy / "part-0.parquet").write_bytes(b"y" + b"x" * 99_999)  # same size, other first bytes
    assert fingerprint(str(folder)) != fingerprint(str(copy))
    (copy / "part-0.parquet").write_bytes(b"x" * 100_001)  # other size, same first bytes
    assert fingerprint(str(folder / "part-0.parquet")) != fingerprint(str(copy / "part-0.parquet"))
    (copy / "part-1.parquet").write_bytes(b"")  # one more file
    assert fingerprint(str(folder)) != fingerprint(str(copy))
    assert fingerprint(str(tmp_path / "missing")) is None
    assert fingerprint(str(tmp_path / "empty")) is None
    (tmp_path / "empty").mkdir()
    assert fingerprint(str(tmp_path / "empty")) not in (None, fingerprint(str(folder)))


def test_a_model_is_checked_when_it_names_a_local_folder_not_a_hub_id(tmp_path: Path) -> None:
    assert model_folder("--model", str(tmp_path)) == [SharedPath("--model", str(tmp_path))]
    assert model_folder("--model", f"file://{tmp_path}") == [SharedPath("--model", f"file://{tmp_path}")]
    assert model_folder("--model", "deepset/roberta-base-squad2-distilled") == []
    assert model_folder("--embedding-model", None) == []
