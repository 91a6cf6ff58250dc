"""The corpus-at-scale benchmark's runs: one wave and N waves over the same shards (no run here: it is a command)."""

import argparse
from pathlib import Path

import pytest

from jobs.bench.corpus_waves import job_command
from jobs.bulk_qa.config import load_config


@pytest.mark.parametrize(("waves", "shards_per_wave"), [(1, 4), (4, 1)])
def test_both_runs_answer_the_same_four_shards_in_one_or_four_waves(waves: int, shards_per_wave: int) -> None:
    args = argparse.Namespace(questions=20_001, waves=4, model=Path("m"))
    command = job_command(args, (Path("d.parquet"), Path("q.parquet")), Path("index"), Path("out"), waves)
    assert command[1:3] == ["-m", "jobs.bulk_qa"]
    config = load_config(command[3:])
    assert (config.work.shard_size, config.run.shards_per_wave) == (5_001, shards_per_wave)  # 4 shards of 20,001
    assert (config.work.documents, config.retrieval.index, config.run.quiet) == ("d.parquet", "index", True)
