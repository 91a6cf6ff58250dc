"""
The benchmark's "ray" row from the real Ray job: `measure_ray` starts a Ray of its own, runs its warm-up job and
the measured job as the job's command on it, and reads the answers back from the job's answers table; the row's
agreement is computed from those answers against run_batch's, as the benchmark computes it. Its Ray runs without
token authentication, as the job tests' Rays do (`tests/jobs/conftest.py::own_local_ray`): Ray keeps the mode it
first reads in a process, so one Ray of another mode breaks the modules that come after it.
"""

from dataclasses import replace
from pathlib import Path

import pytest

from jobs.bench import throughput as bench
from jobs.bench.data import agreement, answer_keys, make_workload
from qa_core.tokenization import TokenizationSettings


def test_the_ray_row_is_the_jobs_answers_and_agrees_with_run_batch(
    tiny_bert_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    workload = make_workload(6, docs_per_question=2)
    settings = replace(bench.Settings(), tokenization=TokenizationSettings(max_seq_length=128, stride=32))
    measurement, keys = bench.measure_ray(
        tiny_bert_model, workload, settings, tmp_path, ["--num-actors", "1"], bench.SCALE_MEMORY_EVERY_S
    )
    reader = settings.reader(tiny_bert_model)
    reader.warm_up()
    expected = answer_keys(reader.run_batch(workload.queries, workload.documents)["answers"])
    found = agreement(keys, expected, "run_batch", bench.TOLERANCE)
    assert (found.share, measurement.questions, measurement.details["memory_every_s"]) == (
        1.0, 6, bench.SCALE_MEMORY_EVERY_S
    )  # fmt: skip
    assert found.max_score_diff <= bench.TOLERANCE
    assert [len(answers) for answers in keys] == [len(answers) for answers in expected]
    pairs = [(query, document.content) for query, documents in zip(workload.queries, workload.documents, strict=True)
             for document in documents]  # fmt: skip
    assert measurement.sequences == len(reader.tokenize(*map(list, zip(*pairs, strict=True))))
