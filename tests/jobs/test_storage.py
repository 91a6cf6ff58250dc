"""`written_in_place`: the one way a local file or folder is written complete or not at all (object storage: the
cluster tests' `test_object_storage.py` writes indexes through it)."""

from pathlib import Path

import pytest

from jobs.storage import written_in_place


def _write_folder(path: str, text: str) -> None:
    Path(path).mkdir()
    (Path(path) / "part.txt").write_text(text)


def test_a_folder_replaces_the_one_there_with_its_last_file(tmp_path: Path) -> None:
    target = tmp_path / "index"
    _write_folder(str(target), "old")
    (target / "stale.txt").write_text("of the old folder")
    with written_in_place(str(target)) as staged:
        assert Path(staged.path).parent == tmp_path and Path(staged.path).name.startswith(".index.")
        _write_folder(staged.path, "new")
        staged.last["build.json"] = b"{}"
        assert not (Path(staged.path) / "build.json").exists()  # written last, once the block ends
    assert sorted(path.name for path in target.iterdir()) == ["build.json", "part.txt"]
    assert (target / "part.txt").read_text() == "new"
    assert [path.name for path in tmp_path.iterdir()] == ["index"]  # no partial folder left


def test_an_error_leaves_the_old_folder_and_no_partial_one(tmp_path: Path) -> None:
    target = tmp_path / "index"
    _write_folder(str(target), "old")
    with pytest.raises(RuntimeError, match="stopped"), written_in_place(str(target)) as staged:
        _write_folder(staged.path, "new")
        raise RuntimeError("stopped midway")
    assert (target / "part.txt").read_text() == "old"
    assert [path.name for path in tmp_path.iterdir()] == ["index"]


def test_without_replace_the_first_writer_wins(tmp_path: Path) -> None:
    target = tmp_path / "cache" / "copy"  # its parent is made
    with written_in_place(str(target), replace=False) as first, written_in_place(str(target), replace=False) as second:
        _write_folder(first.path, "first")
        _write_folder(second.path, "second")
    assert (target / "part.txt").read_text() == "second"  # the inner block ended first
    assert [path.name for path in target.parent.iterdir()] == ["copy"]


def test_a_file_replaces_the_file_there(tmp_path: Path) -> None:
    target = tmp_path / "graph.faiss"
    target.write_text("old")
    with written_in_place(str(target)) as staged:
        Path(staged.path).write_text("new")
    assert target.read_text() == "new"
    assert [path.name for path in tmp_path.iterdir()] == ["graph.faiss"]
