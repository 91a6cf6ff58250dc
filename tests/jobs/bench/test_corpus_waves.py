"""The corpus-at-scale benchmark's runs: one wave and N waves over the same shards (no run here: it is a command)."""

import argparse
from pathlib import Path

import pytest

from jobs.bench.corpus_waves import Measured, describe_run, job_command
from jobs.bulk_qa.config import load_config


@pytest.mark.parametrize(("waves", "shards_per_wave"), [(1, 4), (4, 1)])
def test_both_runs_answer_the_same_four_shards_in_one_or_four_waves(waves: int, shards_per_wave: int) -> None:
    args = argparse.Namespace(questions=20_001, waves=4, model=Path("m"))
    command = job_command(args, (Path("d.parquet"), Path("q.parquet")), Path("index"), Path("out"), waves)
    assert command[1:3] == ["-m", "jobs.bulk_qa"]
    config = load_config(command[3:])
    assert (config.work.shard_size, config.run.shards_per_wave) == (5_001, shards_per_wave)  # 4 shards of 20,001
    assert (config.work.documents, config.retrieval.index, config.run.quiet) == ("d.parquet", "index", True)


def test_a_run_line_gives_its_parts_and_ray_start_or_says_there_were_none() -> None:
    manifest = {
        "timings": {"ray_start_s": 8.04, "document_parts_s": 12.5, "pipeline_s": 62.5},
        "throughput": {"questions": 20_000, "sequences": 31_000},
        "document_parts": 3,
        "documents_join": "partitioned",
    }
    assert describe_run(4, Measured(80.0, 1536.4), manifest) == (
        "4 wave(s): total 80.0 s (Ray start 8.0 s), documents into 3 parts 12.5 s, waves 50.0 s for 20,000 "
        "questions and 31,000 sequences, 3.1 ms per question, peak 1,536 MiB (partitioned join)"
    )
    manifest["timings"].update(ray_start_s=None, document_parts_s=None)
    manifest.update(document_parts=None, documents_join="broadcast")
    assert describe_run(1, Measured(70.0, 900.0), manifest) == (
        "1 wave(s): total 70.0 s (in-process, no Ray), no parts, waves 62.5 s for 20,000 questions and 31,000 "
        "sequences, 3.1 ms per question, peak 900 MiB (broadcast join)"
    )
