"""
The bulk job on a real Ray cluster: a head started with `ray start --head` on 127.0.0.1, jobs submitted with
`python -m jobs.submit` through the Job Submission API, as from a laptop to a remote cluster.

The head runs this virtual environment's Python, which has the project's dependencies: the jobs are submitted
with `--no-install` (installing them would need the network). The project's code still travels as the job's
uploaded working directory, and the sample job reads its configuration from that copy (a successful submitted
job, reading that copy and object storage, is in `test_object_storage.py`).
"""

import time

import pyarrow as pa
import pyarrow.parquet as pq

from tests.cluster.cluster_testing import (
    JOB_TIMEOUT_S,
    ROOT,
    SAMPLE,
    check_answer_tables,
    explain,
    input_ids,
    run_command,
    submission_id,
    submit,
)


def test_bad_input_fails_with_the_message_in_the_logs(ray_head, tiny_bert_model, tmp_path):
    questions = tmp_path / "questions.parquet"
    pq.write_table(pa.table({"id": ["q1"], "question": ["What is Ray?"], "document_ids": [["d1"]]}), questions)
    result = submit(
        ray_head,
        ["--questions", str(questions), "--documents", str(ROOT / "data/sample/documents.parquet"),
         "--output", str(tmp_path / "out"), "--model", str(tiny_bert_model)],
    )  # fmt: skip
    expected = f"{questions}: the questions table has no column 'query'"
    assert result.returncode == 2, explain(result)  # the driver's own status: unusable input
    assert expected in result.stdout  # streamed while it ran
    assert "FAILED" in result.stderr
    job_id = submission_id(result)
    assert ray_head.get(f"/api/jobs/{job_id}")["status"] == "FAILED"
    assert expected in ray_head.get(f"/api/jobs/{job_id}/logs")["logs"]
    assert not (tmp_path / "out").exists()


def test_no_wait_prints_the_id_and_sends_the_token_at_hand(ray_head, tmp_path):
    """Without RAY_AUTH_MODE, the token is still sent when one is at hand (as `ray.init` does)."""
    env = {"RAY_AUTH_MODE": None, "RAY_AUTH_TOKEN_PATH": ray_head.client_env["RAY_AUTH_TOKEN_PATH"]}
    result = run_command(
        ["-m", "jobs.submit", "--address", ray_head.dashboard_url, "--no-install", "--no-wait", "--",
         "--questions", str(tmp_path / "none.parquet"), "--output", str(tmp_path / "out")],
        env=env,
        timeout_s=120,
    )  # fmt: skip
    assert result.returncode == 0, explain(result)
    job_id = result.stdout.strip()
    assert job_id == submission_id(result)
    assert ray_head.get(f"/api/jobs/{job_id}")["submission_id"] == job_id  # the head took the job
    # Clean-up: the job ends, stopped or failing on its own (its questions file does not exist), whichever comes
    # first; the package's head is then free for the next test.
    ray_head.get(f"/api/jobs/{job_id}/stop", method="POST")
    status, deadline = None, time.monotonic() + JOB_TIMEOUT_S
    while status not in ("STOPPED", "FAILED") and time.monotonic() < deadline:
        time.sleep(1)
        status = ray_head.get(f"/api/jobs/{job_id}")["status"]
    assert status in ("STOPPED", "FAILED"), f"the job did not end: {status}"


def test_driver_joins_a_running_cluster_with_address(ray_head, tiny_bert_model, tmp_path):
    """`python -m jobs.bulk_qa --address HOST:PORT` runs its driver here, its work on the running cluster."""
    output = tmp_path / "driver-out"
    result = run_command(
        ["-m", "jobs.bulk_qa", "--config", "data/sample/job.yaml", "--model", str(tiny_bert_model),
         "--output", str(output), "--address", ray_head.gcs_address],
        env=ray_head.client_env,
        timeout_s=JOB_TIMEOUT_S,
    )  # fmt: skip
    assert result.returncode == 0, explain(result)
    check_answer_tables(str(output), input_ids(SAMPLE / "questions.parquet"))
    drivers = [job for job in ray_head.get("/api/jobs/") if job["type"] == "DRIVER"]
    assert any("jobs.bulk_qa" in (job.get("entrypoint") or "") for job in drivers), drivers
