"""
Reader actors on a cluster with GPUs: one actor per GPU, each with its own GPU id (logical GPUs on a CPU machine).
The run uses the sample job on 2 CPUs with default execution settings (but actor batches of 2, so that both
actors usually get work): two GPU actors once starved the join there.
"""

import json
from pathlib import Path

import pytest

from tests.jobs.conftest import own_local_ray, read_output, run_job


@pytest.fixture(scope="module")
def ray_with_two_gpus():
    with own_local_ray(num_cpus=2, num_gpus=2) as ray:
        yield ray


def test_each_actor_gets_a_distinct_gpu_and_the_job_completes_on_cpu(
    ray_with_two_gpus, tmp_path: Path, tiny_bert_model: Path
) -> None:
    output = tmp_path / "out"
    status = run_job(
        "--config", "data/sample/job.yaml", "--model", tiny_bert_model, "--output", output,
        "--sequences-per-actor-batch", "2",
    )  # fmt: skip
    assert status == 0
    manifest = json.loads((output / "manifest.json").read_text())
    workers = manifest["workers"]
    assert manifest["cluster"]["reader_actors"]["num_actors"] == 2
    # Ray Data hands each batch to the actor with the fewest in flight: when the tokenize tasks are the slower, one
    # actor may read every batch of a run this small. Each actor that read holds a GPU of its own.
    assert manifest["cluster"]["reader_actors"]["with_work"] == len(workers) >= 1, workers
    gpu_ids = [worker.split("gpus=")[1].split(" ")[0] for worker in workers]
    assert len(set(gpu_ids)) == len(gpu_ids) and set(gpu_ids) <= {"0", "1"}, workers
    assert all(worker.endswith(" cpu fp32") for worker in workers)  # no CUDA here: the readers run on the CPU
    assert all(count > 0 for count in workers.values())
    questions = read_output(output, "questions")
    assert len(questions) == 12
    statuses = {row["question_id"]: row["status"] for row in questions}
    assert [statuses[f"q{i:02d}"] for i in range(1, 9)] == ["answered"] * 8  # the seeded model answers each
    assert [statuses[key] for key in ("q09", "q10", "q11", "q12")] == ["error", "no_documents", "no_documents", "error"]
    assert len(read_output(output, "generated_answers")) == 4
