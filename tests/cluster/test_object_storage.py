"""
The job reads and writes object storage: a real S3 API on loopback (moto), credentials and endpoint in the
cluster's environment (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, ...), as cloud nodes get theirs.
"""

import pyarrow.fs as pafs
import pyarrow.parquet as pq
from cluster_testing import SAMPLE, check_answer_tables, explain, input_ids, submission_id, submit

from jobs.inputs import resolve_path


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


def test_job_reads_and_writes_s3(ray_head, s3_server, tiny_bert_model):
    uris = upload_sample(s3_server, "inputs")
    output = f"s3://{s3_server.bucket}/runs/run-1"
    result = submit(
        ray_head,
        # The sample's settings, with its inputs and output in the bucket (the command line wins over the file).
        ["--config", "data/sample/job.yaml", "--model", str(tiny_bert_model), "--questions", uris["questions"],
         "--documents", uris["documents"], "--replies", uris["replies"], "--output", output],
    )  # fmt: skip
    assert result.returncode == 0, explain(result)
    filesystem = s3_filesystem(s3_server)
    manifest = check_answer_tables(
        f"{s3_server.bucket}/runs/run-1", input_ids(SAMPLE / "questions.parquet"), filesystem
    )
    [[questions_read, *_]] = manifest["inputs"]["files"]["questions"]
    assert questions_read == f"{s3_server.bucket}/inputs/questions.parquet"
    assert pq.read_table(f"{s3_server.bucket}/runs/run-1/generated_answers", filesystem=filesystem).num_rows > 0
    # The credentials stayed in the cluster's environment: they did not travel with the job.
    job = ray_head.get(f"/api/jobs/{submission_id(result)}")
    assert s3_server.env["AWS_SECRET_ACCESS_KEY"] not in str(job["runtime_env"])
