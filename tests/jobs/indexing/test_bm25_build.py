"""
The index built by Ray Data (`jobs.indexing`): its passages are the driver's, in corpus order; its shards are
bit for bit the single-process build's; `python -m jobs.index` builds it with a shard size; unusable corpora exit 2.
"""

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from jobs import index as index_command
from jobs.indexing import memory
from jobs.indexing import passages as passages_module
from jobs.indexing.bm25 import ID_HASHES_FILE, id_hashes, read_doc_ids, shard_id_hashes
from jobs.indexing.build import build_index, build_index_with_ray, write_index
from jobs.indexing.check import check_given_index
from jobs.indexing.documents import indexed_texts
from jobs.indexing.grow import add_documents_with_ray
from jobs.indexing.passages import _counts_in_footers, indexed_passages, passage_shards, read_shard
from jobs.indexing.record import BUILD_FILE, shard_locations
from jobs.passages import PASSAGES_FILE, SOURCE_IDS_FILE, SOURCES_FILE, Passages, split_batch
from jobs.retrieval_settings import RetrievalSettings
from jobs.storage import InputError
from qa_core.retrieval import BM25Index, merge_top_k
from qa_core.retrieval.index_io import ARRAY_SHAPES
from qa_core.retrieval.store import STORE_FILE, PassageStore
from tests.jobs.conftest import TEXTS

QUERIES = ["What does the function return?", "the of and", "sorted list items", "module import", "zzzqqq"]


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A folder of 3 Parquet files, several row groups each, documents without content among them."""
    folder = tmp_path_factory.mktemp("documents")
    texts = [None if i % 11 == 5 else TEXTS[i % len(TEXTS)][: 150 + 37 * (i % 9)] for i in range(240)]
    ids = [f"d{i:03d}" for i in range(len(texts))]
    for part in range(3):
        rows = slice(part * 80, (part + 1) * 80)
        table = pa.table({"id": ids[rows], "content": pa.array(texts[rows], pa.string())})
        pq.write_table(table, folder / f"part-{part}.parquet", row_group_size=25)
    return str(folder)


def test_documents_with_content_are_counted_from_the_footers_or_not_at_all(tmp_path: Path) -> None:
    """Each row group's rows less its `content` nulls, from the statistics; None when a footer has none."""
    table = pa.table({"id": ["a", "b", "c", "d", "e"], "content": pa.array(["x", None, "y", None, None], pa.string())})
    for statistics in (True, False):
        pq.write_table(table, tmp_path / "documents.parquet", row_group_size=2, write_statistics=statistics)
        metadata = pq.ParquetFile(tmp_path / "documents.parquet").metadata
        groups = [metadata.row_group(group) for group in range(metadata.num_row_groups)]
        assert _counts_in_footers(groups) == ([1, 1, 0] if statistics else None)


@pytest.mark.parametrize("split_length", [None, 12])
def test_indexed_passages_are_the_drivers_in_corpus_order(local_ray, documents: str, split_length) -> None:
    settings = RetrievalSettings(split_length=split_length, split_overlap=3 if split_length else 0)
    rows = indexed_passages(documents, settings).take_all()
    table = pq.ParquetDataset(documents).read(columns=["id", "content"]).filter(pc.is_valid(pc.field("content")))
    ids, texts = table["id"].to_pylist(), table["content"].to_pylist()
    if split_length is None:  # a whole document is its own source, all of it
        expected = [(doc_id, text, doc_id, 0, len(text)) for doc_id, text in zip(ids, texts, strict=True)]
    else:
        passage_ids, passage_texts, where = split_batch(ids, texts, split_length, 3)
        sources = [ids[row] for row in where["source"].to_pylist()]
        expected = list(zip(passage_ids, passage_texts, sources, where["start"].to_pylist(), where["end"].to_pylist(),
                            strict=True))  # fmt: skip
    assert [row["position"] for row in rows] == list(range(len(expected)))
    assert [(row["id"], row["content"], row["source_id"], row["start"], row["end"]) for row in rows] == expected


@pytest.mark.parametrize("split_length", [None, 12])
def test_each_shard_or_part_reads_its_passages_across_row_groups_and_files(
    local_ray, documents: str, split_length, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    Shards of 30 passages from position 7 (row groups of 25 documents, files of 80), then one shard cut into a
    part per CPU, none under `LEAST_PART` passages: the corpus's, renumbered.
    """
    monkeypatch.setattr(passages_module, "LEAST_PART", 70)
    options = {"split_length": split_length, "split_overlap": 3 if split_length else 0}
    everything = indexed_passages(documents, RetrievalSettings(**options)).take_all()
    renumbered = [{**passage, "position": passage["position"] + 7} for passage in everything]
    n = len(everything)
    for shard_size, cpus, parts in [(30, 3, 1), (n, 3, 3), (n, 8, min(8, n // 70))]:  # 218 passages, or 1,039
        settings = RetrievalSettings(**options, index_shard_size=shard_size)
        shards, n_passages = passage_shards(documents, settings, first_position=7, cpus=cpus)
        items = pa.Table.from_pylist(shards.take_all()).to_pylist()
        assert n_passages == len(everything)
        assert [(item["shard"], item["part"], item["parts"]) for item in items] == [
            (shard, part, parts) for shard in range(len(range(0, n_passages, shard_size))) for part in range(parts)
        ]
        read = []
        for item in items:  # a shard's split passages with their source documents, each once, in order
            passages, sources = read_shard(item)
            if split_length is not None:
                assert sources["id"].take(passages["source"]).equals(passages["source_id"])
                assert sources["id"].to_pylist() == list(dict.fromkeys(passages["source_id"].to_pylist()))
                passages = passages.drop_columns(["source"])
            read.append(passages.to_pylist())
        sizes = [len(passages) for passages in read]
        if parts == 1:
            assert [item["first"] for item in items] == list(range(7, 7 + n_passages, 30))
            assert sizes[:-1] == [30] * (len(items) - 1)
        else:
            assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 70
        assert [passage for passages in read for passage in passages] == renumbered


@pytest.mark.parametrize(
    ("algorithm", "shard_options", "split_length", "parts"),
    [
        ("BM25L", {"index_shards": 3}, None, 1),
        ("BM25Okapi", {"index_shard_size": 150}, 12, 1),
        ("BM25Plus", {"index_shards": 1}, 12, 2),  # one shard counted in a part per CPU
    ],
)
def test_ray_build_equals_the_single_process_build_bit_for_bit(
    local_ray,
    tmp_path: Path,
    documents: str,
    algorithm: str,
    shard_options: dict,
    split_length,
    parts: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(passages_module, "LEAST_PART", 100)
    settings = RetrievalSettings(
        bm25_algorithm=algorithm, split_length=split_length, split_overlap=3 if split_length else 0, **shard_options
    )
    assert {row["parts"] for row in passage_shards(documents, settings, cpus=2)[0].take_all()} == {parts}
    single = tmp_path / "single"
    built = build_index(settings, documents)
    write_index(built, str(single))
    record = build_index_with_ray(settings, documents, str(tmp_path / "ray"))
    single_record = json.loads((single / BUILD_FILE).read_text())
    assert {**record, "build_s": 0} == {**single_record, "build_s": 0}
    n_shards = record["shards"]
    assert n_shards == len(built.shards) and record["documents"] == sum(len(s.doc_ids) for s in built.shards)
    assert not list((tmp_path / "ray").rglob("part-*"))  # the parts put together and removed
    folders = [shard_locations(str(tmp_path / name), n_shards) for name in ("ray", "single")]
    for ours, theirs in zip(*folders, strict=True):
        for name in ["index.json", "vocabulary.json", "doc_ids.arrow"] + [f"{array}.npy" for array in ARRAY_SHAPES]:
            assert (Path(ours) / name).read_bytes() == (Path(theirs) / name).read_bytes(), name
        # The passages' stores (split: where the passages lie, and their source documents, each once), alike.
        stored = [PASSAGES_FILE, SOURCE_IDS_FILE, SOURCES_FILE] if split_length else [STORE_FILE]
        for name in stored:
            assert (Path(ours) / name).read_bytes() == (Path(theirs) / name).read_bytes(), name
        assert not {PASSAGES_FILE, STORE_FILE} <= {path.name for path in Path(ours).iterdir()}
        assert shard_id_hashes(ours).tobytes() == id_hashes(read_doc_ids(ours)).tobytes()  # kept for an addition
    # The same hits and scores as one index of the whole corpus, bit for bit.
    ids = [doc_id for shard in built.shards for doc_id in shard.doc_ids]
    texts = [text for _, batch_texts, _ in indexed_texts(documents, settings) for text in batch_texts]
    whole = BM25Index.build(ids, texts, algorithm=algorithm)
    shards = [BM25Index.load(location) for location in shard_locations(str(tmp_path / "ray"), n_shards)]
    for found, expected in zip(merge_top_k([shard.search(QUERIES, 7) for shard in shards], 7),
                               whole.search(QUERIES, 7), strict=True):  # fmt: skip
        np.testing.assert_array_equal(found, expected)


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (["d0", "d1", "d2", "d3", "d4", "d0"], "Document id 'd0' occurs more than once in the corpus."),  # shards apart
        (["d0", "d1", None, "d3", "d4", "d5"], "Document ids must be non-empty strings, not None."),
        (["d0", "d1", "d2", "", "d4", "d5"], "Document ids must be non-empty strings, not ''."),
    ],
)
def test_split_documents_whose_ids_are_null_empty_or_repeated_are_refused(
    local_ray, tmp_path: Path, ids: list, message: str
) -> None:
    """
    An index of split passages finds their documents by id: both builds refuse documents without an id or with one
    another document has (in shards of 5 passages: the repeat lies shards apart), and so does an addition of a
    document with an id the index holds.
    """
    documents = tmp_path / "documents.parquet"
    texts = [" ".join(TEXTS[i].split(" ")[:30]) for i in range(len(ids))]  # 3 passages each
    pq.write_table(pa.table({"id": pa.array(ids, pa.string()), "content": texts}), documents, row_group_size=2)
    settings = RetrievalSettings(index_shard_size=5, split_length=12)
    problem = f"{documents}: cannot build the BM25 index of the documents: {message}"
    with pytest.raises(InputError) as single:
        build_index(settings, str(documents))
    with pytest.raises(InputError) as ray:
        build_index_with_ray(settings, str(documents), str(tmp_path / "index"))
    assert str(single.value) == str(ray.value) == problem
    if ids.count("d0") == 2:  # the first five documents indexed, then the sixth added
        pq.write_table(pq.read_table(documents).slice(0, 5), tmp_path / "first.parquet")
        pq.write_table(pq.read_table(documents).slice(5), tmp_path / "added.parquet")
        build_index_with_ray(settings, str(tmp_path / "first.parquet"), str(tmp_path / "index"))
        with pytest.raises(InputError, match=f"cannot add the documents to the index: {message}"):
            add_documents_with_ray(str(tmp_path / "index"), str(tmp_path / "added.parquet"))


def test_index_command_builds_shards_of_a_size_and_refuses_a_corpus_without_terms(
    local_ray, tmp_path: Path, documents: str, capsys: pytest.CaptureFixture
) -> None:
    output = tmp_path / "index"
    assert index_command.main(["--documents", documents, "--output", str(output), "--index-shard-size", "100"]) == 0
    record = json.loads((output / BUILD_FILE).read_text())
    assert (record["shards"], record["shard_size"]) == (3, 100)  # 218 documents with content
    assert [json.loads((output / f"shard-{shard:05d}/index.json").read_text())["doc_offset"] for shard in range(3)] == [
        0,
        100,
        200,
    ]
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".")]  # no partial folder left
    for contents, ids, message in [
        (["!!! ...", "-- ?"], ["a", "b"], "The corpus of 2 documents has no terms"),
        ([None, None], ["a", "b"], "Cannot build a BM25 index from an empty corpus"),
        (["one", "two"], ["a", "a"], "Document id 'a' occurs more than once in the corpus."),  # in one shard
        (
            ["one", "two", "three"],
            ["a", "b", "a"],
            "Document id 'a' occurs more than once in the corpus (passages 0 and 2).",
        ),  # in two shards  # fmt: skip
    ]:
        bad = tmp_path / "bad.parquet"
        pq.write_table(pa.table({"id": ids, "content": pa.array(contents, pa.string())}), bad)
        command = ["--documents", str(bad), "--output", str(tmp_path / "none"), "--index-shard-size", "2"]
        assert index_command.main(command) == 2
        assert f"{bad}: cannot build the BM25 index of the documents: {message}" in capsys.readouterr().err
        assert not list(tmp_path.glob(".none.*")) and not (tmp_path / "none").exists()  # no partial folder left
    both = ["--index-shards", "2", "--index-shard-size", "5"]
    assert index_command.main(["--documents", documents, "--output", str(tmp_path / "both"), *both]) == 2
    assert "index_shards 2 and index_shard_size: set one of them, not both" in capsys.readouterr().err


def test_a_small_memory_budget_builds_shards_that_search_as_one_shard_bit_for_bit(
    local_ray, tmp_path: Path, documents: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """
    No shard setting: the shard size is the budget (less a base, none here) over the node's 2 CPUs (20 passages
    here), printed and recorded; the shards find the hits and scores of one shard bit for bit, and their stores hold
    the passages in order. `--add` under the budget makes shards of that size too.
    """
    monkeypatch.setattr(memory, "BYTES_PER_PASSAGE", memory.GIB // 40)
    monkeypatch.setattr(memory, "LEAST_SHARD_SIZE", 1)
    monkeypatch.setattr(memory, "BUILD_BASE_BYTES", 0)
    small, one = tmp_path / "small", tmp_path / "one"
    assert index_command.main(["--documents", documents, "--output", str(small), "--memory-budget", "1"]) == 0
    assert "218 documents (" in (printed := capsys.readouterr().out)
    assert "11 shards of up to 20 passages, sized for a memory budget of 1.0 GiB) in " in printed
    record = json.loads((small / BUILD_FILE).read_text())
    assert (record["shards"], record["shard_size"], record["memory_budget"], record["store"]) == (11, 20, 2**30, True)
    assert index_command.main(["--documents", documents, "--output", str(one), "--index-shards", "1"]) == 0
    assert json.loads((one / BUILD_FILE).read_text())["memory_budget"] is None
    found, expected = (
        merge_top_k([BM25Index.load(shard).search(QUERIES, 7) for shard in shard_locations(str(folder), count)], 7)
        for folder, count in ((small, 11), (one, 1))
    )
    for ours, theirs in zip(found, expected, strict=True):
        assert ours.tobytes() == theirs.tobytes()
    stores = [PassageStore(Path(shard), 20 * number) for number, shard in enumerate(shard_locations(str(small), 11))]
    stored = [row for store in stores for row in store.take(range(store.doc_offset, store.doc_offset + len(store)))
              .to_pylist()]  # fmt: skip
    indexed = [(doc_id, text) for ids, texts, _ in indexed_texts(documents, RetrievalSettings())
               for doc_id, text in zip(ids, texts, strict=True)]  # fmt: skip
    assert [(row["id"], row["content"]) for row in stored] == indexed
    assert PassageStore(one, 0).take([217, 3]).to_pylist() == [{"id": indexed[i][0], "content": indexed[i][1]}
                                                                for i in (217, 3)]  # fmt: skip
    # --add under the same budget: the new documents in shards of 20 after the index's one shard of 218.
    added = tmp_path / "added.parquet"
    pq.write_table(pa.table({"id": [f"new{i}" for i in range(45)], "content": ["fresh words"] * 45}), added)
    assert index_command.main(["--add", str(added), "--index", str(one), "--memory-budget", "1"]) == 0
    shards = shard_locations(str(one), json.loads((one / BUILD_FILE).read_text())["shards"])
    assert [BM25Index.load(shard).doc_offset for shard in shards] == [0, 218, 238, 258]


def test_documents_added_as_shards_give_the_index_of_all_the_documents(
    local_ray, tmp_path: Path, documents: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    `--add`: old shards weighed again from their term counts, only their idf, bounds and headers written again, their
    ids checked from their stored hashes; the added shard counted in a part per CPU; the hits, scores and
    statistics of a build of all.
    """
    monkeypatch.setattr(passages_module, "LEAST_PART", 100)
    old = tmp_path / "old"
    old.mkdir()
    for part in ("part-0.parquet", "part-1.parquet"):
        (old / part).write_bytes((Path(documents) / part).read_bytes())
    grown, whole = tmp_path / "grown", tmp_path / "whole"
    size = ["--index-shard-size", "400", "--split-length", "12"]  # 537 passages: the old last shard is not full
    settings = RetrievalSettings(index_shard_size=400, split_length=12)
    added = passage_shards(str(Path(documents) / "part-2.parquet"), settings, first_position=537, cpus=2)[0]
    assert [(row["shard"], row["part"], row["parts"]) for row in added.take_all()] == [(0, 0, 2), (0, 1, 2)]
    assert index_command.main(["--documents", str(old), "--output", str(grown), *size]) == 0
    first = Path(shard_locations(str(grown), json.loads((grown / BUILD_FILE).read_text())["shards"])[0])
    assert shard_id_hashes(str(first)).tobytes() == id_hashes(read_doc_ids(str(first))).tobytes()
    kept = ["vocabulary.json", "doc_ids.arrow", "starts.npy", "doc_indices.npy", "term_counts.npy", "doc_lengths.npy",
            ID_HASHES_FILE]  # fmt: skip
    for name in [*kept, "idf.npy", "bounds.npy"]:
        os.utime(first / name, ns=(0, 0))
    assert index_command.main(["--add", str(Path(documents) / "part-2.parquet"), "--index", str(grown)]) == 0
    assert [(first / name).stat().st_mtime_ns for name in kept] == [0] * len(kept)
    assert (first / "idf.npy").stat().st_mtime_ns != 0 and (first / "bounds.npy").stat().st_mtime_ns != 0
    assert index_command.main(["--documents", documents, "--output", str(whole), *size]) == 0
    record, expected = (json.loads((folder / BUILD_FILE).read_text()) for folder in (grown, whole))
    for key in ("documents", "source_documents", "vocabulary", "fingerprint", "split_length", "shard_size"):
        assert record[key] == expected[key], key
    offsets = [BM25Index.load(shard).doc_offset for shard in shard_locations(str(grown), record["shards"])]
    assert offsets == [0, 400, 537]  # the added documents' shard starts after a partial one
    assert not list(grown.rglob("part-*"))  # the added shard's parts put together and removed
    assert shard_id_hashes(shard_locations(str(grown), 3)[2]).tobytes() == id_hashes(read_doc_ids(
        shard_locations(str(grown), 3)[2])).tobytes()  # fmt: skip
    found, wanted = (
        merge_top_k(
            [BM25Index.load(location).search(QUERIES, 7) for location in shard_locations(str(folder), count)], 7
        )
        for folder, count in ((grown, record["shards"]), (whole, expected["shards"]))
    )
    for ours, theirs in zip(found, wanted, strict=True):
        assert ours.tobytes() == theirs.tobytes()
    # Its passages lie where the whole build's do, their texts read from the shards' stores of source documents.
    grown_passages = _split_passages(shard_locations(str(grown), record["shards"]))
    assert grown_passages == _split_passages(shard_locations(str(whole), expected["shards"]))
    assert len(grown_passages) == record["documents"]
    # The grown index is the index of the documents, old then new (checked by fingerprint: other files).
    settings = RetrievalSettings(index=str(grown), split_length=12)
    assert check_given_index(settings, documents)["documents"] == expected["documents"]


def _split_passages(locations: list[str]) -> list[tuple[str, int, int, str]]:
    """Each passage of a split index's shards: its source document's id, its range there and its text."""
    found = []
    for location in locations:
        passages = Passages.load(Path(location))
        sources = passages.sources().take(passages.rows.tolist()).to_pylist()
        for index, source in enumerate(sources):
            source_id, start, end = passages.hit(index)
            assert source["id"] == source_id
            found.append((source_id, start, end, source["content"][start:end]))
    return found


def test_adding_refuses_ids_the_index_holds_and_dense_indexes_leaving_the_index_as_it_was(
    local_ray, tmp_path: Path, documents: str, capsys: pytest.CaptureFixture
) -> None:
    index = tmp_path / "index"
    assert index_command.main(["--documents", documents, "--output", str(index), "--index-shard-size", "100"]) == 0
    files = {path: path.read_bytes() for path in index.rglob("*") if path.is_file()}
    again = tmp_path / "again.parquet"  # a new document, then one whose id the index's second shard holds
    pq.write_table(pa.table({"id": ["new", "d150"], "content": ["fresh words", "old words"]}), again)
    assert index_command.main(["--add", str(again), "--index", str(index)]) == 2
    assert (
        f"{again}: cannot add the documents to the index: Document id 'd150' occurs more than once in the corpus "
        "(passages 136 and 219)." in capsys.readouterr().err
    )
    dense = ["--retrieval", "dense", "--embedding-model", "any-model"]
    assert index_command.main(["--add", str(again), "--index", str(index), *dense]) == 2
    assert "--add grows a BM25 index only: build a dense or hybrid index again with --output" in capsys.readouterr().err
    record = json.loads((index / BUILD_FILE).read_text())
    (index / BUILD_FILE).write_text(json.dumps({**record, "dense": {"model": "any-model"}}))  # as embedding leaves it
    assert index_command.main(["--add", str(again), "--index", str(index)]) == 2
    assert (
        "it holds the passages' vectors too (dense retrieval); --add grows a BM25 index only" in capsys.readouterr().err
    )
    (index / BUILD_FILE).write_bytes(files[index / BUILD_FILE])
    assert {path: path.read_bytes() for path in index.rglob("*") if path.is_file()} == files  # untouched
