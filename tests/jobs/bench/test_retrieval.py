"""
The index build at scale (`python -m jobs.bench.retrieval --build both`) on 600 documents split into passages:
each build in a process of its own, measured from outside, the Ray build grown by 10%, their figures printed.
"""

import json
import re
import sys
from pathlib import Path

from jobs.indexing.record import BUILD_FILE
from tests.jobs.conftest import run_process


def test_both_builds_and_the_addition_are_measured_and_printed(tmp_path: Path) -> None:
    # Split into passages as long as the documents: one each, of the documents' ids, their sources kept.
    command = [sys.executable, "-m", "jobs.bench.retrieval", "--build", "both", "--passages", "600",
               "--shard-size", "200", "--add-share", "0.1", "--queries", "20", "--work", str(tmp_path),
               "--split-length", "100"]  # fmt: skip
    ran = run_process(command, 600)
    assert ran.returncode == 0, ran.stderr
    printed = ran.stdout
    lines = printed.splitlines()
    assert lines[0] == "600 documents of 100 words, split by 100 (overlap 0), shards of 200"
    number = r"[\d,]+(?:\.\d)?"
    search = rf"queries/s over the shards: every document {number}, pruned {number}, pruned, floors {number} "
    assert re.fullmatch(
        rf"ray: build {number} s \(4 shards; Ray Data started before it in {number} s\), driver peak RSS {number} "
        rf"MiB, machine peak {number} MiB above idle, command {number} s; {search}.*",
        lines[1],
    ), lines[1]
    assert re.fullmatch(rf"ray: 10% more passages added in {number} s, {number}% of the build .*", lines[2]), lines[2]
    assert re.fullmatch(
        rf"single: build {number} s \(3 shards\), driver peak RSS {number} MiB, machine peak {number} MiB above "
        rf"idle, command {number} s; {search}.*",
        lines[3],
    ), lines[3]
    grown, single = (json.loads((tmp_path / f"index-{kind}" / BUILD_FILE).read_text()) for kind in ("ray", "single"))
    assert (grown["documents"], grown["shards"], single["documents"], single["shards"]) == (660, 4, 600, 3)
    assert (grown["split_length"], grown["source_documents"], single["source_documents"]) == (100, 660, 600)
