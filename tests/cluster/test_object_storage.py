"""
The job reads and writes object storage: a real S3 API on loopback (moto), credentials and endpoint in the
cluster's environment (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, ...), as cloud nodes get theirs.
"""

import tempfile
from pathlib import Path

import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from jobs.engines import InProcessEngine
from jobs.indexing.build import build_index, write_index
from jobs.ingest.folder import list_folder
from jobs.ingest.run import ingest
from jobs.ingest.stage import IngestSettings, SplitSettings
from jobs.retrieval_settings import RetrievalSettings
from jobs.storage import local_index_folder, read_json, resolve_path, written_in_place
from qa_core.ingest import CleanerSettings
from tests.cluster.cluster_testing import ROOT, SAMPLE, check_answer_tables, explain, input_ids, submission_id, submit
from tests.jobs.conftest import TEXTS, write_corpus


def s3_filesystem(s3_server) -> pafs.S3FileSystem:
    """A client of the moto server, configured explicitly (not from this process's environment)."""
    return pafs.S3FileSystem(
        endpoint_override=s3_server.endpoint,
        scheme="http",
        access_key=s3_server.env["AWS_ACCESS_KEY_ID"],
        secret_key=s3_server.env["AWS_SECRET_ACCESS_KEY"],
        region=s3_server.env["AWS_DEFAULT_REGION"],
    )


def upload_sample(s3_server, prefix: str) -> dict[str, str]:
    """Copies the sample's tables to s3://BUCKET/PREFIX/; returns their URIs by table name."""
    filesystem = s3_filesystem(s3_server)
    uris = {}
    for name in ("questions", "documents", "replies"):
        key = f"{s3_server.bucket}/{prefix}/{name}.parquet"
        pq.write_table(pq.read_table(SAMPLE / f"{name}.parquet"), key, filesystem=filesystem)
        uris[name] = f"s3://{key}"
    return uris


def test_s3_uris_resolve_to_the_endpoint_and_credentials_of_the_environment(s3_server, monkeypatch):
    """What the job relies on: pyarrow builds its S3 client from the environment, endpoint included."""
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    uris = upload_sample(s3_server, "resolve")
    filesystem, path = resolve_path(uris["questions"])
    assert isinstance(filesystem, pafs.S3FileSystem)
    assert path == f"{s3_server.bucket}/resolve/questions.parquet"
    assert (
        pq.read_table(path, filesystem=filesystem).num_rows == pq.read_metadata(SAMPLE / "questions.parquet").num_rows
    )


def test_submitted_job_reads_its_working_dir_and_s3_and_writes_s3(ray_head, s3_server, tiny_bert_model):
    """
    One submitted job (each costs a minute here) shows both halves: the sample's configuration, documents and
    replies are read from the job's uploaded working directory; its questions come from, and its tables go to,
    the bucket. Its questions' and output's URIs carry the credentials themselves (`s3://KEY:SECRET@bucket/...`):
    no file the job writes, and none of its output, shows the secret.
    """
    uris = upload_sample(s3_server, "inputs")
    secret = s3_server.env["AWS_SECRET_ACCESS_KEY"]
    credentials = f"{s3_server.env['AWS_ACCESS_KEY_ID']}:{secret}@"
    output = f"s3://{credentials}{s3_server.bucket}/runs/run-1"
    uris["questions"] = uris["questions"].replace("s3://", f"s3://{credentials}")
    result = submit(
        ray_head,
        # data/sample/job.yaml names the sample's tables; the command line wins over it for questions and output.
        ["--config", "data/sample/job.yaml", "--model", str(tiny_bert_model), "--questions", uris["questions"],
         "--output", output],
    )  # fmt: skip
    assert result.returncode == 0, explain(result)
    assert "bulk-qa: done" in result.stdout  # the job's own summary, streamed from the cluster
    job = ray_head.get(f"/api/jobs/{submission_id(result)}")
    assert job["status"] == "SUCCEEDED"
    assert job["entrypoint"].startswith("python -m jobs.bulk_qa --config data/sample/job.yaml")
    filesystem = s3_filesystem(s3_server)
    manifest = check_answer_tables(
        f"{s3_server.bucket}/runs/run-1", input_ids(SAMPLE / "questions.parquet"), filesystem
    )
    files = manifest["inputs"]["files"]
    assert [path for path, *_ in files["questions"]] == [f"{s3_server.bucket}/inputs/questions.parquet"]
    for table in ("documents", "replies"):  # read from the job's own copy of the working directory
        [[path, *_]] = files[table]
        assert path.endswith(f"data/sample/{table}.parquet") and not path.startswith(str(ROOT))
    generated = pq.read_table(f"{s3_server.bucket}/runs/run-1/generated_answers", filesystem=filesystem)
    assert generated.num_rows == 4  # the sample's four replies
    # The credentials in the URIs are masked in every file the job wrote (_job.json, manifest.json, results,
    # tables) and in all it printed (the summary included). Ray itself shows them once: its job log begins with the
    # entrypoint as submitted (docs/how-to/clusters.md says so). Those of the cluster's environment did not travel.
    written = filesystem.get_file_info(pafs.FileSelector(f"{s3_server.bucket}/runs/run-1", recursive=True))
    written = [info.path for info in written if info.type == pafs.FileType.File]
    assert {path.rsplit("/", 1)[-1] for path in written} >= {"_job.json", "manifest.json", "predictions.json"}
    with_secret = []
    for path in written:
        with filesystem.open_input_stream(path) as stream:
            if secret.encode() in stream.read():
                with_secret.append(path)
    assert with_secret == []
    shown = [line for line in (result.stdout + result.stderr).splitlines() if secret in line]
    assert len(shown) == 1 and shown[0].startswith(f"Running entrypoint for job {submission_id(result)}: "), shown
    assert manifest["config"]["output"] == f"s3://***@{s3_server.bucket}/runs/run-1"
    assert secret not in str(job["runtime_env"])


def test_an_index_of_one_shard_in_object_storage_is_copied_whole_to_a_node(s3_server, monkeypatch, tmp_path):
    """
    A retrieval actor's local copy of an `--index` in object storage (`local_index_folder`), for an index of one
    shard: all its files at the top, no folder among them for the copy to make first.
    """
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "node-tmp"))  # the node's temporary folder
    paths = write_corpus(tmp_path, {f"d{i}": TEXTS[i] for i in range(4)}, {"q": ("What is it?", None)})
    write_index(build_index(RetrievalSettings(), paths["documents"]), str(tmp_path / "index"))
    filesystem = s3_filesystem(s3_server)
    pafs.copy_files(str(tmp_path / "index"), f"{s3_server.bucket}/one-shard", destination_filesystem=filesystem)
    copy = local_index_folder(f"s3://{s3_server.bucket}/one-shard")
    assert copy.parent == tmp_path / "node-tmp" / "bulk-qa-index"
    assert sorted(path.name for path in copy.iterdir()) == sorted(path.name for path in (tmp_path / "index").iterdir())
    # The index rebuilt at the same location over other documents: a copy of its own, never the earlier one.
    again = write_corpus(tmp_path / "again", {f"e{i}": TEXTS[i + 1] for i in range(3)}, {"q": ("What is it?", None)})
    write_index(build_index(RetrievalSettings(), again["documents"]), str(tmp_path / "index-again"))
    pafs.copy_files(str(tmp_path / "index-again"), f"{s3_server.bucket}/one-shard", destination_filesystem=filesystem)
    fresh = local_index_folder(f"s3://{s3_server.bucket}/one-shard")
    assert fresh != copy
    assert (fresh / "index.json").read_bytes() == (tmp_path / "index-again" / "index.json").read_bytes()


def _files(filesystem: pafs.FileSystem, folder: str) -> dict[str, bytes]:
    """The files under a folder of object storage and their bytes, by path relative to it."""
    infos = filesystem.get_file_info(pafs.FileSelector(folder, recursive=True, allow_not_found=True))
    found = {}
    for info in infos:
        if info.type == pafs.FileType.File:
            with filesystem.open_input_stream(info.path) as stream:
                found[info.path[len(folder) + 1 :]] = stream.read()
    return found


def test_written_in_place_writes_object_storage_complete_or_not_at_all(s3_server, monkeypatch):
    """
    `written_in_place` on object storage: a folder staged locally and copied, its `last` files after it, what was
    there replaced; a write that stops leaves what was there; a single file; and, not staged, a folder that its
    writers fill in place (emptied first).
    """
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    filesystem, folder = s3_filesystem(s3_server), f"{s3_server.bucket}/in-place"
    location = f"s3://{folder}/index"

    def write(staged, files: dict[str, str]) -> None:
        Path(staged.path).mkdir()
        for name, text in files.items():
            (Path(staged.path) / name).write_text(text)

    with written_in_place(location) as staged:
        write(staged, {"a.txt": "1", "b.txt": "1"})
        staged.last["build.json"] = b"{}"
    assert _files(filesystem, folder) == {"index/a.txt": b"1", "index/b.txt": b"1", "index/build.json": b"{}"}
    with written_in_place(location) as staged:
        write(staged, {"a.txt": "2"})
    assert _files(filesystem, folder) == {"index/a.txt": b"2"}
    with pytest.raises(RuntimeError, match="stopped"), written_in_place(location) as staged:
        write(staged, {"c.txt": "3"})
        raise RuntimeError("stopped")
    assert _files(filesystem, folder) == {"index/a.txt": b"2"}
    for data in (b"x", b"y"):
        with written_in_place(f"s3://{folder}/graph.faiss") as staged:
            Path(staged.path).write_bytes(data)
    assert _files(filesystem, folder) == {"index/a.txt": b"2", "graph.faiss": b"y"}
    with written_in_place(location, staged=False) as staged:
        assert staged.path == location
        written, inner = resolve_path(f"{staged.path}/shard-00000/part.txt")
        with written.open_output_stream(inner) as stream:
            stream.write(b"4")
        staged.last["build.json"] = b"{}"
    assert _files(filesystem, folder) == {
        "index/shard-00000/part.txt": b"4", "index/build.json": b"{}", "graph.faiss": b"y"
    }  # fmt: skip


def test_an_ingestion_in_object_storage_is_updated_as_a_local_one(s3_server, monkeypatch, tmp_path):
    """
    `jobs.ingest`'s output at an s3:// URI, run again after the folder changed: the changed file alone converted,
    the published table the one a fresh local ingestion writes, nothing left staged.
    """
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    root = tmp_path / "in"
    root.mkdir()
    for name, text in zip(("a.txt", "b.txt", "c.txt"), TEXTS, strict=False):
        (root / name).write_text(text)
    settings = IngestSettings(timeout_per_file=0, memory_per_file=0, files_per_task=1)
    uri = f"s3://{s3_server.bucket}/ingested"

    def run(output: str) -> dict:
        folder = list_folder(str(root))
        return ingest(folder, output, settings, CleanerSettings(), SplitSettings(), InProcessEngine(), 1.0)

    run(uri)
    (root / "b.txt").write_text("Changed text of the second file.")
    (root / "c.txt").unlink()
    (root / "d.txt").write_text("A new file.")
    manifest = run(uri)
    assert [manifest[f"files_{change}"] for change in ("new", "changed", "unchanged", "deleted")] == [1, 1, 1, 1]
    run(str(tmp_path / "fresh"))
    filesystem = s3_filesystem(s3_server)
    published = pads.dataset(f"{s3_server.bucket}/ingested/documents", filesystem=filesystem, format="parquet")
    assert published.to_table().equals(pq.read_table(tmp_path / "fresh" / "documents"))
    assert filesystem.get_file_info(f"{s3_server.bucket}/ingested/_staging").type == pafs.FileType.NotFound


def test_an_index_in_object_storage_is_updated_as_a_local_one(s3_server, monkeypatch, tmp_path):
    """
    `jobs.index --update` of an index in object storage, by Ray tasks: an update stopped midway leaves every object
    of the index as it was and its pointer absent (a reader finds the old version); the next one writes the new
    version, switches the pointer and removes the old one; the new version searches as a fresh build.
    """
    from jobs import index as index_command
    from jobs.indexing import update as update_module
    from jobs.indexing.record import BUILD_FILE, shard_locations
    from jobs.indexing.versions import VERSION_FILE, current_version
    from qa_core.retrieval import BM25Index, merge_top_k
    from tests.jobs.conftest import own_local_ray
    from tests.jobs.indexing.test_update import QUERIES, _tables

    for name, value in s3_server.env.items():  # the Ray workers started below inherit them
        monkeypatch.setenv(name, value)
    (tmp_path / "node-tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "node-tmp"))
    before, after = _tables(tmp_path, 40)
    filesystem, prefix = s3_filesystem(s3_server), f"{s3_server.bucket}/updated"
    uri, fresh, size = f"s3://{prefix}", tmp_path / "fresh", ["--index-shard-size", "30"]
    with own_local_ray(num_cpus=2):
        assert index_command.main(["--documents", before, "--output", uri, *size]) == 0
        assert index_command.main(["--documents", after, "--output", str(fresh), *size]) == 0
        old = _files(filesystem, prefix)
        with monkeypatch.context() as patched:
            patched.setattr(update_module, "weigh_shards", lambda *args: 1 / 0)
            with pytest.raises(ZeroDivisionError):
                index_command.main(["--update", after, "--index", uri])
        assert {name: data for name, data in _files(filesystem, prefix).items() if name in old} == old
        assert current_version(uri) == uri
        assert index_command.main(["--update", after, "--index", uri]) == 0
    assert read_json(uri, VERSION_FILE) == {"version": "v-000001"}
    assert {name.split("/")[0] for name in _files(filesystem, prefix)} == {VERSION_FILE, "v-000001"}

    def searched(location: str) -> tuple:
        record = read_json(location, BUILD_FILE)
        folder = str(local_index_folder(location)) if "://" in location else location
        shards = [BM25Index.load(shard) for shard in shard_locations(folder, record["shards"])]
        return merge_top_k([shard.search(QUERIES, 7) for shard in shards], 7)

    for found, wanted in zip(searched(current_version(uri)), searched(str(fresh)), strict=True):
        assert found.tobytes() == wanted.tobytes()
    done = read_json(current_version(uri), BUILD_FILE)["update"]  # kept passages' counts read from the old objects
    assert 15 <= done["passages_tokenized"] < done["passages_counted"]


def test_an_update_reads_the_vectors_it_keeps_from_dense_shards_in_object_storage(s3_server, tmp_path):
    """What an update's embedding actors read of an old dense shard in object storage: its vectors, whole."""
    import numpy as np

    from jobs.indexing.embed import EarlierVectors
    from qa_core.retrieval.dense import DenseIndex

    vectors = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    DenseIndex(["a", "b", "c", "d", "e"], vectors, doc_offset=3).save(tmp_path / "shard")
    filesystem, prefix = s3_filesystem(s3_server), f"{s3_server.bucket}/old/dense/shard-3"
    pafs.copy_files(str(tmp_path / "shard"), prefix, source_filesystem=pafs.LocalFileSystem(),
                    destination_filesystem=filesystem)  # fmt: skip
    earlier = EarlierVectors([{"location": f"s3://{s3_server.bucket}/old", "folder": "dense/shard-3",
                               "doc_offset": 3, "n": 5}])  # fmt: skip
    with pytest.MonkeyPatch.context() as patched:
        for name, value in s3_server.env.items():
            patched.setenv(name, value)
        found = earlier(np.array([7, 3, 5]))
    assert found.tobytes() == vectors[[4, 0, 2]].tobytes()
