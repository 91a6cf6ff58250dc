"""
The job reads and writes object storage: a real S3 API on loopback (moto), credentials and endpoint in the
cluster's environment (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, ...), as cloud nodes get theirs.
"""

import tempfile

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from jobs.indexing.build import build_index, write_index
from jobs.retrieval_settings import RetrievalSettings
from jobs.storage import local_index_folder, resolve_path
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
